package command

import (
	"testing"
	"time"

	"github.com/cicada-proxy/cicada/command/internal/cmdinfo"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// dialLive starts a redis-server for t and connects to it.
func dialLive(t *testing.T) *cmdinfo.Conn {
	t.Helper()
	srv := redistest.Start(t)
	c, err := cmdinfo.Dial(srv.Addr, 10*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", srv.Addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// liveCommands returns the flattened COMMAND reply of a fresh server.
func liveCommands(t *testing.T, c *cmdinfo.Conn) []cmdinfo.Command {
	t.Helper()
	cmds, err := cmdinfo.Commands(c)
	if err != nil {
		t.Fatalf("COMMAND: %v", err)
	}
	return cmdinfo.Flatten(cmds)
}

// TestTableMatchesServer checks that the generated table equals the live
// COMMAND reply: same command and subcommand set, arity, flags and legacy
// key positions.
//
// On another version (the version matrix) it is skipped: what that server
// adds is TestLearnedFromServer's.
func TestTableMatchesServer(t *testing.T) {
	c := dialLive(t)
	if v := redistest.BinaryVersion(t).String(); v != "redis "+tableRedisVersion {
		t.Skipf("runs against Redis %s, the table's server (make test's first run); this is %s, whose commands TestLearnedFromServer checks (make test's matrix)",
			tableRedisVersion, v)
	}
	live := liveCommands(t, c)
	seen := make(map[string]bool, len(live))
	for _, lc := range live {
		seen[lc.Name] = true
		s := index[lc.Name]
		if s == nil {
			t.Errorf("%s: in COMMAND, missing from the table (regenerate: go generate)", lc.Name)
			continue
		}
		var flags Flags
		for _, f := range lc.Flags {
			bit, ok := flagByName(f)
			if !ok {
				t.Errorf("%s: flag %q has no Flag constant", lc.Name, f)
			}
			flags |= bit
		}
		got := [...]int{s.Arity, s.First, s.Last, s.Step}
		want := [...]int{lc.Arity, lc.First, lc.Last, lc.Step}
		if got != want {
			t.Errorf("%s: arity, first, last, step: got %v, want %v", lc.Name, got, want)
		}
		if s.Flags != flags {
			t.Errorf("%s: flags: got %v, want %v", lc.Name, s.Flags, flags)
		}
	}
	for i := range specs {
		if !seen[specs[i].Name] {
			t.Errorf("%s: in the table, not in COMMAND", specs[i].Name)
		}
	}
	if len(live) != len(specs) {
		t.Errorf("command count: got %d, want %d", len(specs), len(live))
	}
}

// TestKeySpecsAgreeWithEffects checks that no command whose key specs say it
// writes a key (RW, OW or RM) is classified EffectNone: PFCOUNT is readonly
// by flags but its key spec is RW, and a future command like it must not
// slip through as harmless.
func TestKeySpecsAgreeWithEffects(t *testing.T) {
	c := dialLive(t)
	for _, lc := range liveCommands(t, c) {
		s := index[lc.Name]
		if s == nil {
			continue // reported by TestTableMatchesServer
		}
		for _, ks := range lc.KeySpecs {
			for _, f := range ks.Flags {
				if (f == "RW" || f == "OW" || f == "RM") && s.Effect == EffectNone {
					t.Errorf("%s: key spec %v writes, effect: got %v, want not none", lc.Name, ks.Flags, s.Effect)
				}
			}
		}
	}
}

// TestWriteSamples checks that every write or EffectKeys command has a
// sample invocation, and that for each sample WrittenKeys returns a superset
// of the keys COMMAND GETKEYS names (or ok=false for commands whose Effect
// is not EffectKeys).
func TestWriteSamples(t *testing.T) {
	c := dialLive(t)
	covered := make(map[string]bool)
	for _, sample := range writeSamples {
		args := argv(sample)
		s := Resolve(args)
		if s == nil {
			t.Errorf("%q: Resolve: got nil, want a spec", sample)
			continue
		}
		covered[s.Name] = true
		if !s.ArityOK(len(args)) {
			t.Errorf("%q: ArityOK(%d): got false, want true (arity %d)", sample, len(args), s.Arity)
		}
		refs, ok := s.WrittenKeys(args, nil)
		if s.Effect != EffectKeys {
			if ok {
				t.Errorf("%q: effect %v: WrittenKeys ok: got true, want false", sample, s.Effect)
			}
			continue
		}
		if !ok {
			t.Errorf("%q: WrittenKeys ok: got false, want true", sample)
			continue
		}
		want, err := getKeys(c, args)
		if err != nil {
			t.Errorf("%q: COMMAND GETKEYS: %v", sample, err)
			continue
		}
		got := make(map[string]bool, len(refs))
		for _, r := range refs {
			got[string(args[r.Arg])] = true
		}
		for _, k := range want {
			if !got[k] {
				t.Errorf("%q: WrittenKeys misses %q: got %v, want a superset of %q", sample, k, refNames(args, refs), want)
			}
		}
	}
	for i := range specs {
		s := &specs[i]
		if (s.Flags.Has(FlagWrite) || s.Effect == EffectKeys) && !covered[s.Name] {
			t.Errorf("%s (flags %v, effect %v): no sample in writeSamples", s.Name, s.Flags, s.Effect)
		}
	}
}

// commandOf runs COMMAND sub args... (GETKEYS, GETKEYSANDFLAGS) and
// returns the reply.
func commandOf(c *cmdinfo.Conn, sub string, args [][]byte) (any, error) {
	cmd := []string{"COMMAND", sub}
	for _, a := range args {
		cmd = append(cmd, string(a))
	}
	return c.Do(cmd...)
}

// getKeys runs COMMAND GETKEYS args... and returns the key names.
func getKeys(c *cmdinfo.Conn, args [][]byte) ([]string, error) {
	v, err := commandOf(c, "GETKEYS", args)
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case cmdinfo.Error:
		return nil, v
	case []any:
		keys := make([]string, 0, len(v))
		for _, k := range v {
			s, _ := k.(string)
			keys = append(keys, s)
		}
		return keys, nil
	}
	return nil, nil
}

// refNames renders refs as key names for messages.
func refNames(args [][]byte, refs []KeyRef) []string {
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		out = append(out, string(args[r.Arg]))
	}
	return out
}
