package command

import (
	"sort"
	"strings"
	"testing"
)

// name returns s.Name, or "<nil>" for a nil spec.
func name(s *Spec) string {
	if s == nil {
		return "<nil>"
	}
	return s.Name
}

func TestResolve(t *testing.T) {
	long := strings.Repeat("x", maxNameLen+1)
	tests := []struct {
		args [][]byte
		want string // "<nil>" for nil
	}{
		{argv("gEt k"), "get"},
		{argv("GET k"), "get"},
		{argv("get"), "get"},
		{argv("get <nil>"), "get"},
		{argv("CLIENT reply ON"), "client|reply"},
		{argv("client REPLY"), "client|reply"},
		{argv("Config Set maxmemory 1"), "config|set"},
		{argv("XGROUP create s g $"), "xgroup|create"},
		{argv("object encoding k"), "object|encoding"},
		{argv("command getkeys get k"), "command|getkeys"},
		{argv("cluster count-failure-reports id"), "cluster|count-failure-reports"},
		{argv("client"), "client"},   // bare container: Redis looks up the parent
		{argv("COMMAND"), "command"}, // valid in Redis (arity -1)
		{argv("DEBUG RELOAD"), "debug"},
		{argv("restore-asking k 0 v"), "restore-asking"},
		{argv("client nosuch"), "<nil>"},
		{argv("client ''"), "<nil>"},
		{argv("client <nil>"), "<nil>"},
		{argv("client id|x"), "<nil>"},
		{argv("client|id"), "<nil>"},
		{argv("nosuch k"), "<nil>"},
		{argv("''"), "<nil>"},
		{argv("<nil> k"), "<nil>"},
		{[][]byte{[]byte(long)}, "<nil>"},
		{[][]byte{[]byte("client"), []byte(long)}, "<nil>"},
		{nil, "<nil>"},
		{[][]byte{}, "<nil>"},
	}
	for _, tt := range tests {
		if got := name(Resolve(tt.args)); got != tt.want {
			t.Errorf("Resolve(%q): got %v, want %v", tt.args, got, tt.want)
		}
	}
}

func TestArityOK(t *testing.T) {
	tests := []struct {
		cmd  string
		n    int
		want bool
	}{
		{"get", 2, true},
		{"get", 1, false},
		{"get", 3, false},
		{"set", 2, false},
		{"set", 3, true},
		{"set", 7, true},
		{"command", 1, true},
		{"client", 1, false},
		{"client|list", 2, true},
		{"client|list", 4, true},
		{"client|reply", 3, true},
		{"client|reply", 2, false},
		{"xgroup|create", 4, false},
		{"xgroup|create", 5, true},
		{"ping", 0, false},
		{"get", -2, false},
		{"set", -3, false},
	}
	for _, tt := range tests {
		s := index[tt.cmd]
		if s == nil {
			t.Fatalf("index[%q]: got nil, want a spec", tt.cmd)
		}
		if got := s.ArityOK(tt.n); got != tt.want {
			t.Errorf("%s.ArityOK(%d) (arity %d): got %v, want %v", tt.cmd, tt.n, s.Arity, got, tt.want)
		}
	}
	var nilSpec *Spec
	if got := nilSpec.ArityOK(2); got {
		t.Errorf("nil.ArityOK(2): got %v, want false", got)
	}
}

func TestEffects(t *testing.T) {
	tests := []struct {
		cmd  string
		want Effect
	}{
		{"get", EffectNone},
		{"hget", EffectNone},
		{"set", EffectKeys},
		{"del", EffectKeys},
		{"xgroup|create", EffectKeys},
		{"pfcount", EffectKeys},
		{"sort", EffectKeys},
		{"sort_ro", EffectNone},
		{"georadius", EffectKeys},
		{"georadius_ro", EffectNone},
		{"xreadgroup", EffectKeys},
		{"xread", EffectNone},
		{"eval", EffectUnknown},
		{"evalsha", EffectUnknown},
		{"fcall", EffectUnknown},
		{"eval_ro", EffectNone},
		{"evalsha_ro", EffectNone},
		{"fcall_ro", EffectNone},
		{"migrate", EffectUnknown},
		{"module|load", EffectUnknown},
		{"flushall", EffectFlush},
		{"flushdb", EffectFlush},
		{"swapdb", EffectFlush},
		{"replicaof", EffectFlush},
		{"slaveof", EffectFlush},
		{"debug", EffectFlush},
		{"publish", EffectNone},
		{"spublish", EffectNone},
		{"wait", EffectNone},
		{"watch", EffectNone},
		{"exec", EffectNone},
		{"config|set", EffectNone},
		{"script|load", EffectNone},
		{"function|load", EffectNone},
		{"client|reply", EffectNone},
		{"select", EffectNone},
		{"touch", EffectNone},
		{"object|freq", EffectNone},
	}
	for _, tt := range tests {
		s := index[tt.cmd]
		if s == nil {
			t.Fatalf("index[%q]: got nil, want a spec", tt.cmd)
		}
		if s.Effect != tt.want {
			t.Errorf("%s: effect: got %v, want %v", tt.cmd, s.Effect, tt.want)
		}
	}
}

// TestDecisionsCoverTable checks the hand-written decisions against the
// table: every name exists, nothing is decided twice, and every command the
// flags do not settle has been reviewed.
func TestDecisionsCoverTable(t *testing.T) {
	for n := range effectOverrides {
		if index[n] == nil {
			t.Errorf("effectOverrides[%q]: no such command in the table", n)
		}
		if _, dup := keyFinders[n]; dup {
			t.Errorf("%q: in both effectOverrides and keyFinders", n)
		}
	}
	for n := range keyFinders {
		if s := index[n]; s == nil || !s.Flags.Has(FlagWrite) {
			t.Errorf("keyFinders[%q]: got spec %v, want a write command", n, name(s))
		}
	}
	for i := range specs {
		s := &specs[i]
		_, decided := effectOverrides[s.Name]
		_, found := keyFinders[s.Name]
		switch {
		case !s.Flags.Has(FlagWrite) && !s.Flags.Has(FlagReadonly) && !decided:
			t.Errorf("%s (flags %v): neither write nor readonly and not reviewed in effectOverrides", s.Name, s.Flags)
		case s.Flags.Has(FlagWrite) && (s.Flags.Has(FlagMovableKeys) || s.First <= 0) && !decided && !found:
			t.Errorf("%s (flags %v): write with movable or no keys, needs a key finder or a decision", s.Name, s.Flags)
		}
		if s.Effect == EffectUnknown && !decided {
			t.Errorf("%s: effect unknown by default; decide it in effectOverrides", s.Name)
		}
	}
}

func TestTableShape(t *testing.T) {
	if !sort.SliceIsSorted(specs[:], func(i, j int) bool { return specs[i].Name < specs[j].Name }) {
		t.Errorf("specs: not sorted by Name")
	}
	if len(index) != len(specs) {
		t.Errorf("index size: got %d, want %d (duplicate names?)", len(index), len(specs))
	}
	var containers []string
	for i := range specs {
		s := &specs[i]
		if s.Name != strings.ToLower(s.Name) || len(s.Name) > maxNameLen-2 {
			t.Errorf("%q: name not lower case or too long", s.Name)
		}
		if s.container {
			containers = append(containers, s.Name)
		}
	}
	want := "acl client cluster command config function latency memory module object pubsub script slowlog xgroup xinfo"
	if got := strings.Join(containers, " "); got != want {
		t.Errorf("containers: got %v, want %v", got, want)
	}
}

func TestFlagsString(t *testing.T) {
	tests := []struct {
		f    Flags
		want string
	}{
		{0, ""},
		{FlagWrite, "write"},
		{FlagWrite | FlagDenyOOM, "write|denyoom"},
		{FlagNoMandatoryKeys << 1, "?"},
		{FlagFast | FlagNoMandatoryKeys<<1, "fast|?"},
	}
	for _, tt := range tests {
		if got := tt.f.String(); got != tt.want {
			t.Errorf("Flags(%d).String(): got %v, want %v", uint32(tt.f), got, tt.want)
		}
	}
	for _, fn := range flagNames {
		if got, ok := flagByName(fn.name); !ok || got != fn.flag {
			t.Errorf("flagByName(%q): got %v, %v, want %v, true", fn.name, got, ok, fn.flag)
		}
	}
	if _, ok := flagByName("nosuch"); ok {
		t.Errorf("flagByName(nosuch): got ok, want false")
	}
}

func TestEffectString(t *testing.T) {
	tests := []struct {
		e    Effect
		want string
	}{
		{EffectNone, "none"}, {EffectKeys, "keys"}, {EffectUnknown, "unknown"}, {EffectFlush, "flush"}, {Effect(9), "Effect(?)"},
	}
	for _, tt := range tests {
		if got := tt.e.String(); got != tt.want {
			t.Errorf("Effect(%d).String(): got %v, want %v", uint8(tt.e), got, tt.want)
		}
	}
}

func TestResolveAllocs(t *testing.T) {
	for _, cmd := range []string{"get k", "gEt k", "CLIENT reply on", "nosuch", "client nosuch"} {
		args := argv(cmd)
		if got := testing.AllocsPerRun(100, func() { Resolve(args) }); got != 0 {
			t.Errorf("Resolve(%q) allocs: got %v, want 0", cmd, got)
		}
	}
}

func BenchmarkResolveGet(b *testing.B) {
	args := argv("get k")
	b.ReportAllocs()
	for b.Loop() {
		if Resolve(args) == nil {
			b.Fatal("Resolve(get k): got nil, want get")
		}
	}
}

func BenchmarkResolveSubcommand(b *testing.B) {
	args := argv("CLIENT REPLY ON")
	b.ReportAllocs()
	for b.Loop() {
		if Resolve(args) == nil {
			b.Fatal("Resolve(CLIENT REPLY ON): got nil, want client|reply")
		}
	}
}

func BenchmarkResolveGetParallel(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		args := argv("get k")
		for pb.Next() {
			if Resolve(args) == nil {
				b.Error("Resolve(get k): got nil, want get")
				return
			}
		}
	})
}

// TestConnEffects: every command named in connEffects exists in the
// table with that effect (but those newer than the table, which a server's
// COMMAND reply teaches), and subscribe commands and their confirmations
// share one family table.
func TestConnEffects(t *testing.T) {
	for name, want := range connEffects {
		s := index[name]
		if s == nil && name == "client|setinfo" {
			continue // Redis 7.2+: learned (TestLearn)
		}
		if s == nil {
			t.Errorf("connEffects names %q, which the table lacks", name)
			continue
		}
		if s.Conn != want {
			t.Errorf("%s: Conn %d, want %d", name, s.Conn, want)
		}
		if want == ConnSubscribe {
			k, ok := Confirmation([]byte(name))
			if !ok || k != s.ConnSub {
				t.Errorf("Confirmation(%q): got %d, %v, want %d, true", name, k, ok, s.ConnSub)
			}
		}
	}
	for _, tt := range []struct {
		args []string
		conn ConnEffect
		sub  SubKind
		on   bool
	}{
		{[]string{"SELECT", "1"}, ConnSelect, 0, false},
		{[]string{"client", "TRACKING", "on"}, ConnTracking, 0, false},
		{[]string{"PSUBSCRIBE", "a*"}, ConnSubscribe, SubPattern, false},
		{[]string{"sunsubscribe"}, ConnSubscribe, SubShard, false},
		{[]string{"READONLY"}, ConnReadonly, 0, true},
		{[]string{"READWRITE"}, ConnReadonly, 0, false},
		{[]string{"CLIENT", "SETNAME", "x"}, ConnSetName, 0, false},
		{[]string{"CLIENT", "GETNAME"}, ConnNone, 0, false},
		{[]string{"GET", "k"}, ConnNone, 0, false},
	} {
		var args [][]byte
		for _, a := range tt.args {
			args = append(args, []byte(a))
		}
		s := Resolve(args)
		if s == nil || s.Conn != tt.conn || s.ConnSub != tt.sub || s.ConnOn != tt.on {
			t.Errorf("Resolve(%q): got %+v, want Conn %d ConnSub %d ConnOn %v", tt.args, s, tt.conn, tt.sub, tt.on)
		}
	}
	if _, ok := Confirmation([]byte("message")); ok {
		t.Error(`Confirmation("message"): ok, want false`)
	}
}
