package command

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cicada-proxy/cicada/command/internal/cmdinfo"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// entry builds one RESP2 COMMAND entry as go-redis decodes it.
func entry(name string, arity int64, flags []string, first, last, step int64, keySpecs []any, subs ...any) []any {
	fl := make([]any, len(flags))
	for i, f := range flags {
		fl[i] = f
	}
	if keySpecs == nil {
		keySpecs = []any{}
	}
	return []any{name, arity, fl, first, last, step, []any{}, []any{}, keySpecs, append([]any{}, subs...)}
}

// spec builds one key specification: flags, then begin_search and
// find_keys as (type, spec fields...).
func spec(flags string, begin []any, find []any) []any {
	var fl []any
	for _, f := range strings.Fields(flags) {
		fl = append(fl, f)
	}
	return []any{"flags", fl,
		"begin_search", []any{"type", begin[0], "spec", begin[1:]},
		"find_keys", []any{"type", find[0], "spec", find[1:]}}
}

func idx(i int64) []any { return []any{"index", "index", i} }
func kw(k string, from int64) []any {
	return []any{"keyword", "keyword", k, "startfrom", from}
}
func rng(last, step, limit int64) []any {
	return []any{"range", "lastkey", last, "keystep", step, "limit", limit}
}
func keynum(at, first, step int64) []any {
	return []any{"keynum", "keynumidx", at, "firstkey", first, "keystep", step}
}

// TestLearn derives effects and key finders from COMMAND entries of
// commands the built-in table lacks, and leaves built-in entries alone.
func TestLearn(t *testing.T) {
	reply := []any{
		// Built in and unchanged: the built-in entry stands.
		entry("get", 2, []string{"readonly", "fast"}, 1, 1, 1, nil),
		entry("hsetex", -6, []string{"write", "denyoom", "fast"}, 1, 1, 1,
			[]any{spec("RW update", idx(1), rng(0, 1, 0))}),
		entry("VADD", -1, []string{"write", "denyoom", "module"}, 1, 1, 1,
			[]any{spec("RW access update", idx(1), rng(0, 1, 0))}),
		entry("vsim", -4, []string{"readonly", "module"}, 1, 1, 1,
			[]any{spec("RO access", idx(1), rng(0, 1, 0))}),
		entry("waitaof", 4, []string{"blocking"}, 0, 0, 0, nil),
		// A copy-like command: only the destination is written.
		entry("xcopy", 3, []string{"write"}, 1, 2, 1,
			[]any{spec("RO access", idx(1), rng(0, 1, 0)), spec("OW update", idx(2), rng(0, 1, 0))}),
		entry("xmset", -3, []string{"write"}, 1, -1, 2,
			[]any{spec("OW update", idx(1), rng(-1, 2, 0))}),
		entry("xmpop", -3, []string{"write", "movablekeys"}, 0, 0, 0,
			[]any{spec("RW access delete", idx(1), keynum(0, 1, 1))}),
		entry("xreadx", -4, []string{"write", "movablekeys"}, 0, 0, 0,
			[]any{spec("RW", kw("STREAMS", 1), rng(-1, 1, 2))}),
		entry("xlast", -3, []string{"write", "movablekeys"}, 0, 0, 0,
			[]any{spec("RW", kw("KEY", -2), rng(0, 1, 0))}),
		entry("xmod", -2, []string{"write", "module", "movablekeys"}, 0, 0, 0,
			[]any{spec("RW incomplete", idx(1), rng(0, 1, 0))}),
		entry("xnokeys", 1, []string{"write", "module"}, 0, 0, 0, nil),
		entry("xunknown", -2, []string{"write", "module"}, 0, 0, 0,
			[]any{spec("RW", []any{"unknown"}, []any{"unknown"})}),
		entry("xscript", -3, []string{"may_replicate", "movablekeys"}, 0, 0, 0,
			[]any{spec("RW access update", idx(2), keynum(0, 1, 1))}),
		entry("xlegacy", 3, []string{"write"}, 1, 1, 1, nil),
		entry("client", -2, nil, 0, 0, 0, nil,
			entry("client|setinfo", 4, []string{"noscript", "loading", "stale"}, 0, 0, 0, nil),
			entry("client|id", 2, []string{"noscript"}, 0, 0, 0, nil)),
		entry("xgrp", -2, nil, 0, 0, 0, nil,
			entry("xgrp|del", 3, []string{"write"}, 2, 2, 1, []any{spec("RW", idx(2), rng(0, 1, 0))})),
		entry("hpttl", -5, []string{"readonly", "fast"}, 1, 1, 1, []any{spec("RO access", idx(1), rng(0, 1, 0))}),
		// Built in, changed by this server: an arity, a write flag.
		entry("zrank", -3, []string{"readonly", "fast"}, 1, 1, 1, nil),
		entry("object", -2, nil, 0, 0, 0, nil,
			entry("object|freq", 3, []string{"write"}, 2, 2, 1, []any{spec("RW", idx(2), rng(0, 1, 0))})),
	}
	l, err := Learn(reply, "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.1\r\n")
	if err != nil {
		t.Fatalf("Learn: %v", err)
	}
	if name, v := l.Server(); name != "valkey" || v != "8.1.1" || !l.AuthErrorsDropped() {
		t.Errorf("Server: got %s %s (auth errors dropped %v), want valkey 8.1.1 (true)", name, v, l.AuthErrorsDropped())
	}
	for info, want := range map[string]bool{"redis_version:7.0.15\r\n": false, "redis_version:7.2.0\r\n": true,
		"redis_version:8.0.2\r\n": true, "": false, "redis_version:6.2.1": false} {
		if l2, _ := Learn([]any{}, info); l2.AuthErrorsDropped() != want {
			t.Errorf("AuthErrorsDropped for %q: got %v, want %v", info, !want, want)
		}
	}
	if !l.FieldTTL() {
		t.Errorf("FieldTTL: got false, want true (HPTTL listed)")
	}
	var names []string
	for _, s := range l.Added() {
		names = append(names, s.Name)
	}
	want := []string{"client|setinfo", "hpttl", "hsetex", "vadd", "vsim", "waitaof", "xcopy", "xgrp", "xgrp|del",
		"xlast", "xlegacy", "xmod", "xmpop", "xmset", "xnokeys", "xreadx", "xscript", "xunknown"}
	if !slices.Equal(names, want) {
		t.Errorf("Added: got %v, want %v", names, want)
	}
	tests := []struct {
		args   string
		effect Effect
		keys   string // written keys, space separated; "-" for ok=false
	}{
		{"GET k", EffectNone, "-"}, // built in
		{"HSETEX h EX 10 FIELDS 1 f v", EffectKeys, "h"},
		{"vadd vs VALUES 2 1 2 e", EffectKeys, "vs"},
		{"VSIM vs ELE e", EffectNone, "-"},
		{"WAITAOF 1 0 0", EffectNone, "-"},
		{"XCOPY src dst", EffectKeys, "dst"},
		{"XMSET a 1 b 2 c 3", EffectKeys, "a b c"},
		{"XMSET a 1 b", EffectKeys, "a b"},
		{"XMPOP 2 a b LEFT", EffectKeys, "a b"},
		{"XMPOP 3 a b", EffectKeys, "a b"}, // clipped: Redis refuses it
		{"XMPOP x a", EffectKeys, "-"},
		{"XMPOP -1 a", EffectKeys, "-"},
		{"XREADX COUNT 2 STREAMS s1 s2 0 0", EffectKeys, "s1 s2"},
		{"XREADX COUNT 2 BLOCK 0", EffectKeys, ""}, // no keyword: no keys
		{"XLAST x KEY k", EffectKeys, "k"},
		{"XLAST KEY a b", EffectKeys, ""}, // the search stops before argument 1
		{"XMOD k", EffectUnknown, "-"},
		{"XNOKEYS", EffectFlush, "-"},
		{"XUNKNOWN k", EffectUnknown, "-"},
		{"XSCRIPT body 1 k", EffectUnknown, "-"},
		{"XLEGACY k v", EffectKeys, "k"},
		{"CLIENT SETINFO lib-name x", EffectNone, "-"},
		{"client ID", EffectNone, "-"}, // built in
		{"XGRP DEL k", EffectKeys, "k"},
		{"HPTTL h FIELDS 1 f", EffectNone, "-"},
		{"OBJECT FREQ k", EffectKeys, "k"},
	}
	for _, tt := range tests {
		args := argv(tt.args)
		s := l.Resolve(args)
		if s == nil {
			t.Errorf("%q: Resolve: got nil", tt.args)
			continue
		}
		if s.Effect != tt.effect {
			t.Errorf("%q: effect: got %v, want %v", tt.args, s.Effect, tt.effect)
		}
		refs, ok := s.WrittenKeys(args, nil)
		got := "-"
		if ok {
			got = strings.Join(refNames(args, refs), " ")
		}
		if got != tt.keys {
			t.Errorf("%q: WrittenKeys: got %q, want %q", tt.args, got, tt.keys)
		}
	}
	for args, want := range map[string]ConnEffect{"CLIENT SETINFO lib-name x": ConnSetInfo, "WAITAOF 1 0 0": ConnNone} {
		if s := l.Resolve(argv(args)); s.Conn != want {
			t.Errorf("%q: learned Conn %d, want %d (connEffects names it)", args, s.Conn, want)
		}
	}
	if got := l.Overridden(); !slices.Equal(got, []string{"object|freq", "zrank"}) && !slices.Equal(got, []string{"zrank", "object|freq"}) {
		t.Errorf("Overridden: got %v, want object|freq and zrank", got)
	}
	if s := l.Resolve(argv("ZRANK z m WITHSCORE")); s == nil || !s.ArityOK(4) || Resolve(argv("ZRANK z m WITHSCORE")).ArityOK(4) {
		t.Errorf("ZRANK with WITHSCORE: the learned arity must accept it, the built-in one refuse it")
	}
	for _, bad := range []string{"nosuch", "CLIENT NOSUCH", "XGRP", "client|setinfo x"} {
		if s := l.Resolve(argv(bad)); s != nil && bad != "XGRP" {
			t.Errorf("%q: Resolve: got %s, want nil", bad, s.Name)
		}
	}
	if s := (*Learned)(nil).Resolve(argv("HSETEX h")); s != nil {
		t.Errorf("nil Learned: Resolve(HSETEX): got %s, want nil", s.Name)
	}
	if s := (*Learned)(nil).Resolve(argv("GET k")); s == nil || s.Name != "get" {
		t.Errorf("nil Learned: Resolve(GET): got %v, want get", s)
	}
	if _, err := Learn("x", ""); err == nil {
		t.Errorf("Learn(\"x\"): got nil error, want one")
	}
}

// TestLearnedFromServer learns the command table of the redis-server in
// PATH (any version of the matrix) and checks every learned command that
// names keys against the server's own COMMAND GETKEYSANDFLAGS on a sample
// invocation: the keys WrittenKeys finds are exactly those the server
// flags as written (not RO). With -v it lists what the server adds to the
// built-in table and how each is treated.
func TestLearnedFromServer(t *testing.T) {
	c := dialLive(t)
	v, err := c.Do("COMMAND")
	if err != nil {
		t.Fatalf("COMMAND: %v", err)
	}
	info, _ := c.Do("INFO", "server")
	text, _ := info.(string)
	l, err := Learn(v, text)
	if err != nil {
		t.Fatalf("Learn: %v", err)
	}
	version := redistest.BinaryVersion(t).String()
	if name, v := l.Server(); name+" "+v != version {
		t.Errorf("Server: got %s %s, want %s", name, v, version)
	}
	t.Logf("%s: %d commands learned beyond the built-in table (Redis %s)", version, len(l.Added()), tableRedisVersion)
	for _, s := range l.Added() {
		t.Logf("  %-28s %-7v flags %v", s.Name, s.Effect, s.Flags)
	}
	for _, name := range l.Overridden() {
		s := l.Resolve(argv(strings.ReplaceAll(name, "|", " ")))
		t.Logf("  built in, changed here: %-12s arity %d, effect %v", name, s.Arity, s.Effect)
	}
	for _, sample := range learnedSamples {
		args := argv(sample)
		s := l.Resolve(args)
		if s == nil {
			continue // not on this server
		}
		if index[s.Name] != nil {
			t.Errorf("%q: built in; the sample belongs in writeSamples", sample)
			continue
		}
		want, err := writtenByServer(c, args)
		if err != nil {
			t.Errorf("%q: COMMAND GETKEYSANDFLAGS: %v", sample, err)
			continue
		}
		refs, ok := s.WrittenKeys(args, nil)
		got := refNames(args, refs)
		switch {
		case s.Effect == EffectKeys && !ok:
			t.Errorf("%q: WrittenKeys ok: got false, want true", sample)
		case s.Effect == EffectKeys && !slices.Equal(got, want):
			t.Errorf("%q: WrittenKeys: got %q, want %q (the server's written keys)", sample, got, want)
		case s.Effect == EffectNone && !s.Flags.Has(FlagReadonly) && len(want) > 0:
			// (A module command declared with legacy key positions gets
			// a generic "RW access update" key spec even when it is
			// readonly: its readonly flag decides.)
			t.Errorf("%q: effect none, but the server flags %q as written", sample, want)
		}
	}
	for _, s := range l.Added() {
		if s.Effect != EffectKeys {
			continue
		}
		found := false
		for _, sample := range learnedSamples {
			if l.Resolve(argv(sample)) == s {
				found = true
			}
		}
		if !found {
			t.Errorf("%s (flags %v) learned as a keyed write: no sample in learnedSamples", s.Name, s.Flags)
		}
	}
}

// learnedSamples are invocations of commands newer than the built-in
// table's Redis, checked by TestLearnedFromServer on each server that has
// them.
var learnedSamples = []string{
	"HEXPIRE h 10 FIELDS 2 f g", "HPEXPIRE h 100 NX FIELDS 1 f", "HEXPIREAT h 1 FIELDS 1 f",
	"HPEXPIREAT h 1 FIELDS 1 f", "HPERSIST h FIELDS 1 f", "HTTL h FIELDS 1 f", "HPTTL h FIELDS 1 f",
	"HEXPIRETIME h FIELDS 1 f", "HPEXPIRETIME h FIELDS 1 f",
	"HGETEX h PX 10 FIELDS 1 f", "HSETEX h FNX EX 10 FIELDS 1 f v", "HGETDEL h FIELDS 2 f g",
	"VADD vs VALUES 2 1 2 e", "VREM vs e", "VSETATTR vs e {}", "VSIM vs ELE e", "VCARD vs",
	"VDIM vs", "VEMB vs e", "VGETATTR vs e", "VINFO vs", "VLINKS vs e", "VRANDMEMBER vs",
	"WAITAOF 0 0 0", "CLIENT SETINFO LIB-NAME x", "CLIENT NO-TOUCH ON",
	"COMMANDLOG GET 1 slow", "DELIFEQ k v", "MSETEX 2 a 1 b 2 EX 10", "CLUSTER FLUSHSLOT 0",
}

// writtenByServer returns the keys COMMAND GETKEYSANDFLAGS flags as written
// (any flag but RO alone), in argument order.
func writtenByServer(c *cmdinfo.Conn, args [][]byte) ([]string, error) {
	v, err := commandOf(c, "GETKEYSANDFLAGS", args)
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case cmdinfo.Error:
		if strings.Contains(string(v), "no key arguments") || strings.Contains(string(v), "Invalid arguments") {
			return nil, nil
		}
		return nil, v
	case []any:
		var keys []string
		for _, e := range v {
			pair, _ := e.([]any)
			if len(pair) != 2 {
				return nil, fmt.Errorf("entry %v: want [key, flags]", e)
			}
			name, _ := pair[0].(string)
			flags, _ := pair[1].([]any)
			ro, rw := false, false
			for _, f := range flags {
				switch f {
				case "RO":
					ro = true
				case "RW", "OW", "RM":
					rw = true
				}
			}
			if rw || !ro {
				keys = append(keys, name)
			}
		}
		return keys, nil
	}
	return nil, fmt.Errorf("reply %T", v)
}

// BenchmarkResolve: the lookup every forwarded request makes, with the
// built-in table alone and with a Learned that overrides some built-in
// entries (Redis 8's ZRANK), for a built-in and a learned command.
func BenchmarkResolve(b *testing.B) {
	l, err := Learn([]any{
		entry("zrank", -3, []string{"readonly", "fast"}, 1, 1, 1, nil),
		entry("hsetex", -6, []string{"write", "denyoom", "fast"}, 1, 1, 1,
			[]any{spec("RW update", idx(1), rng(0, 1, 0))}),
	}, "redis_version:8.0.2\r\n")
	if err != nil {
		b.Fatal(err)
	}
	set, hsetex := argv("SET key value"), argv("HSETEX h FIELDS 1 f v")
	for _, bc := range []struct {
		name string
		l    *Learned
		args [][]byte
	}{{"builtin/SET", nil, set}, {"learned/SET", l, set}, {"learned/HSETEX", l, hsetex}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if bc.l.Resolve(bc.args) == nil {
					b.Fatal("nil")
				}
			}
		})
	}
}
