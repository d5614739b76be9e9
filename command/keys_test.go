package command

import (
	"bytes"
	"slices"
	"testing"
)

// k is a KeyRef in the current database.
func k(arg int) KeyRef { return KeyRef{Arg: arg, DB: CurrentDB} }

func TestWrittenKeys(t *testing.T) {
	tests := []struct {
		cmd  string
		want []KeyRef
	}{
		{"SET k v EX 10", []KeyRef{k(1)}},
		{"set", nil}, // clipped: wrong arity, no key present
		{"DEL a b c", []KeyRef{k(1), k(2), k(3)}},
		{"MSET a 1 b 2", []KeyRef{k(1), k(3)}},
		{"MSET a 1 b", []KeyRef{k(1), k(3)}},
		{"BLPOP a b 0", []KeyRef{k(1), k(2)}},
		{"RENAME a ''", []KeyRef{k(1), k(2)}},
		{"XGROUP CREATE s g $", []KeyRef{k(2)}},
		{"PFCOUNT a b", []KeyRef{k(1), k(2)}},
		{"MOVE k 3", []KeyRef{k(1), {Arg: 1, DB: 3}}},
		{"MOVE k 0", []KeyRef{k(1), {Arg: 1, DB: 0}}},
		{"COPY a b DB 3 REPLACE", []KeyRef{k(1), {Arg: 2, DB: 3}}},
		{"copy a b replace", []KeyRef{k(1), k(2)}},
		{"COPY a b db 1 DB 2", []KeyRef{k(1), {Arg: 2, DB: 2}}},
		{"SORT k", []KeyRef{k(1)}},
		{"SORT k BY w_* LIMIT 0 10 GET # STORE dst", []KeyRef{k(1), k(10)}},
		{"sort k store store get store", []KeyRef{k(1), k(3)}},
		{"SORT k BY store STORE d1 STORE d2", []KeyRef{k(1), k(5), k(7)}},
		{"GEORADIUS k 15 37 200 km", []KeyRef{k(1)}},
		{"GEORADIUS k 15 37 200 km COUNT 1 ANY STORE d STOREDIST d2", []KeyRef{k(1), k(10), k(12)}},
		{"georadius k 15 37 200 km count store storedist d", []KeyRef{k(1), k(9)}},
		{"GEORADIUSBYMEMBER k m 200 km STOREDIST d WITHHASH", []KeyRef{k(1), k(6)}},
		{"ZUNIONSTORE d 2 a b WEIGHTS 1 2", []KeyRef{k(1), k(3), k(4)}},
		{"ZINTERSTORE d 1 a", []KeyRef{k(1), k(3)}},
		{"ZDIFFSTORE d 2 a b", []KeyRef{k(1), k(3), k(4)}},
		{"LMPOP 2 a b LEFT COUNT 2", []KeyRef{k(2), k(3)}},
		{"ZMPOP 1 z MIN", []KeyRef{k(2)}},
		{"BLMPOP 0 2 a b LEFT", []KeyRef{k(3), k(4)}},
		{"BZMPOP 0.5 1 z MAX", []KeyRef{k(3)}},
		{"XREADGROUP GROUP g c COUNT 1 STREAMS s1 s2 > >", []KeyRef{k(7), k(8)}},
		{"xreadgroup group streams streams block 0 noack streams s >", []KeyRef{k(8)}},
		{"XREADGROUP GROUP g c STREAMS streams >", []KeyRef{k(5)}},
	}
	for _, tt := range tests {
		args := argv(tt.cmd)
		s := Resolve(args)
		if s == nil {
			t.Fatalf("Resolve(%q): got nil, want a spec", tt.cmd)
		}
		got, ok := s.WrittenKeys(args, nil)
		if !ok || !slices.Equal(got, tt.want) {
			t.Errorf("%q: WrittenKeys: got %v, %v, want %v, true", tt.cmd, got, ok, tt.want)
		}
	}
}

// TestWrittenKeysNotOK covers inputs whose keys cannot be determined: nil
// arguments where keys or keywords are, malformed counts and databases, and
// commands that are not EffectKeys.
func TestWrittenKeysNotOK(t *testing.T) {
	tests := []string{
		// Not EffectKeys.
		"GET k", "FLUSHALL", "EVAL s 1 k", "FCALL f 1 k", "MIGRATE h 1 k 0 10", "DEBUG RELOAD", "PUBLISH c m",
		// nil at a key position.
		"SET <nil> v", "DEL a <nil>", "MSET a 1 <nil> 2", "RENAME a <nil>", "XGROUP CREATE <nil> g $",
		"PFCOUNT a <nil>",
		// numkeys: nil, non-numeric, zero, negative, huge, beyond len(args), not canonical.
		"ZUNIONSTORE d <nil> a", "ZUNIONSTORE d abc a", "ZUNIONSTORE d 0 a", "ZUNIONSTORE d -1 a",
		"ZUNIONSTORE d 99999999999999999999 a", "ZUNIONSTORE d 9223372036854775807 a", "ZUNIONSTORE d 3 a b",
		"ZUNIONSTORE d 01 a", "ZUNIONSTORE d +1 a", "ZUNIONSTORE d '' a", "ZUNIONSTORE d 1", "ZUNIONSTORE d",
		"ZUNIONSTORE <nil> 1 a", "ZUNIONSTORE d 2 a <nil>", "ZINTERSTORE d -9223372036854775808 a",
		"LMPOP 0 a LEFT", "LMPOP -1 a LEFT", "LMPOP 3 a LEFT", "LMPOP 9223372036854775808 a LEFT", "LMPOP",
		"ZMPOP 1 <nil> MIN", "BLMPOP 0 x a LEFT", "BLMPOP 0 2 a", "BZMPOP 0", "BZMPOP 0 1 <nil> MIN",
		// MOVE / COPY databases.
		"MOVE k -1", "MOVE k abc", "MOVE k <nil>", "MOVE <nil> 1", "MOVE k 2147483648", "MOVE k", "MOVE k 1.0",
		"COPY a b DB", "COPY a b DB x", "COPY a b DB -1", "COPY a b DB <nil>", "COPY a b BOGUS", "COPY a <nil>",
		"COPY <nil> b", "COPY a b <nil>", "COPY a",
		// SORT / GEORADIUS options.
		"SORT k STORE", "SORT k STORE <nil>", "SORT k BOGUS", "SORT <nil>", "SORT k LIMIT 0", "SORT k <nil>",
		"GEORADIUS k 0 0 1 km STORE", "GEORADIUS k 0 0 1 km STORE <nil>", "GEORADIUS k 0 0 1 km BOGUS",
		"GEORADIUS <nil> 0 0 1 km", "GEORADIUS k 0 0 1 km <nil>", "GEORADIUSBYMEMBER k m 1 km FROMMEMBER m",
		// XREADGROUP.
		"XREADGROUP GROUP g c STREAMS s1 s2 >", "XREADGROUP GROUP g c COUNT 1", "XREADGROUP GROUP g c STREAMS",
		"XREADGROUP GROUP g c STREAMS <nil> >", "XREADGROUP <nil> g c STREAMS s >", "XREADGROUP GROUP g c BOGUS STREAMS s >",
		"XREADGROUP",
	}
	for _, cmd := range tests {
		args := argv(cmd)
		s := Resolve(args)
		dst := make([]KeyRef, 1, 8)
		dst[0] = KeyRef{Arg: 42, DB: 7}
		got, ok := s.WrittenKeys(args, dst)
		if ok || !slices.Equal(got, dst[:1]) {
			t.Errorf("%q: WrittenKeys: got %v, %v, want %v, false", cmd, got, ok, dst[:1])
		}
	}
}

func TestWrittenKeysAppends(t *testing.T) {
	args := argv("DEL a b")
	dst := []KeyRef{{Arg: 9, DB: 1}}
	got, ok := Resolve(args).WrittenKeys(args, dst)
	want := []KeyRef{{Arg: 9, DB: 1}, k(1), k(2)}
	if !ok || !slices.Equal(got, want) {
		t.Errorf("WrittenKeys with a non-empty dst: got %v, %v, want %v, true", got, ok, want)
	}
}

func TestWrittenKeysAllocs(t *testing.T) {
	cmds := []string{
		"SET k v EX 10", "MSET a 1 b 2 c 3", "MOVE k 3", "COPY a b DB 3 REPLACE", "SORT k STORE d",
		"GEORADIUS k 0 0 1 km STORE d", "ZUNIONSTORE d 2 a b", "BLMPOP 0 2 a b LEFT",
		"XREADGROUP GROUP g c STREAMS s1 s2 > >", "GET k",
	}
	dst := make([]KeyRef, 0, 16)
	for _, cmd := range cmds {
		args := argv(cmd)
		s := Resolve(args)
		if got := testing.AllocsPerRun(100, func() { s.WrittenKeys(args, dst[:0]) }); got != 0 {
			t.Errorf("%q: WrittenKeys allocs: got %v, want 0", cmd, got)
		}
	}
}

// FuzzWrittenKeys splits the input on spaces into arguments ("\x00" alone is
// a nil argument) and checks, for the resolved spec and for a spec picked by
// the first byte, that WrittenKeys does not panic, returns in-range non-nil
// arguments, keeps dst's prefix, and leaves dst alone when not ok.
func FuzzWrittenKeys(f *testing.F) {
	for _, s := range writeSamples {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		"ZUNIONSTORE d -1 a", "ZUNIONSTORE d 9223372036854775807 a", "LMPOP 99999999999999999999 a",
		"XREADGROUP GROUP g c STREAMS \x00 >", "SORT k STORE \x00", "MOVE k \x00", "COPY a b DB 4294967296",
		"CLIENT REPLY ON", "GET", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fields := bytes.Split(data, []byte(" "))
		args := make([][]byte, len(fields))
		for i, fl := range fields {
			if len(fl) == 1 && fl[0] == 0 {
				continue // nil argument
			}
			args[i] = fl
		}
		prefix := KeyRef{Arg: -5, DB: -5}
		check := func(s *Spec) {
			dst := append(make([]KeyRef, 0, 4), prefix)
			got, ok := s.WrittenKeys(args, dst)
			if len(got) == 0 || got[0] != prefix {
				t.Fatalf("%s %q: dst prefix lost: got %v", name(s), data, got)
			}
			if !ok {
				if len(got) != 1 {
					t.Fatalf("%s %q: not ok but dst grew: got %v", name(s), data, got)
				}
				return
			}
			for _, r := range got[1:] {
				if r.Arg < 0 || r.Arg >= len(args) || args[r.Arg] == nil || r.DB < CurrentDB {
					t.Fatalf("%s %q: bad KeyRef %v for %d args", name(s), data, r, len(args))
				}
			}
		}
		check(Resolve(args))
		if len(data) > 0 {
			check(&specs[int(data[0])%len(specs)])
		}
	})
}
