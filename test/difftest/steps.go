package difftest

import (
	"strings"
	"testing"
	"time"
)

// Send is a step that writes s as it is.
func Send(s string) Step { return Step{Raw: []byte(s)} }

// SideCmd is a step that runs one command on a separate connection to the
// same endpoint, 50 ms after the step before it (a PUBLISH, another
// client's write).
func SideCmd(args ...string) Step { return Step{Side: args, Wait: 50 * time.Millisecond} }

// Pause is a step that only waits.
func Pause(d time.Duration) Step { return Step{Wait: d} }

// Command returns args as one RESP array of bulk strings.
func Command(args ...string) string { return string(AppendCommand(nil, args...)) }

// Commands returns each line as a RESP command, concatenated (a pipeline).
func Commands(lines ...[]string) string {
	var b []byte
	for _, l := range lines {
		b = AppendCommand(b, l...)
	}
	return string(b)
}

// Compare runs steps on one connection directly and through Cicada, waits
// until both have been quiet for 250 ms, and fails the test unless the
// bytes (connection IDs aside) and the close are identical. It returns
// what the client received through Cicada.
func (p *Pair) Compare(t testing.TB, steps ...Step) []byte {
	t.Helper()
	want, got := p.Run(t, Conversation{Steps: steps, Quiet: 250 * time.Millisecond})
	if d := Diff(want, got); d != "" {
		t.Fatalf("through Cicada, %s", d)
	}
	if len(got.Clients) == 0 {
		return nil
	}
	return got.Clients[0].Bytes
}

// Warm reads a key (GET key) or a field (HGET key field) through Cicada
// until Cicada answers it from its cache, running the same reads on the
// direct Redis; it fails the test after 5 s.
func (p *Pair) Warm(t testing.TB, args ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		before := p.Proxy.Server.Hits()
		for _, addr := range []string{p.Proxy.Addr, p.Direct.Addr} {
			if err := sideRun(addr, args); err != nil {
				t.Fatal(err)
			}
		}
		if p.Proxy.Server.Hits() > before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q never answered from the cache", strings.Join(args, " "))
		}
	}
}

// SideRun runs one command on its own connection to addr and fails the
// test if the connection fails (a Redis error reply is not a failure).
func SideRun(t testing.TB, addr string, args ...string) {
	t.Helper()
	if err := sideRun(addr, args); err != nil {
		t.Fatal(err)
	}
}

// LoadSample writes the same data of every type on both sides and makes
// "hot", "hot2" (binary), "absent" (no such key) and hash h field f
// cached in Cicada (WarmSample).
func (p *Pair) LoadSample(t testing.TB) {
	t.Helper()
	p.Both(t, []string{"SET", "hot", "hot-value"}, []string{"SET", "absent-not", "x"},
		[]string{"SET", "hot2", "\x00\r\nbinary\xff"}, []string{"HSET", "h", "f", "field-value", "g", "other"},
		[]string{"RPUSH", "list", "a", "b", "c"}, []string{"SADD", "set", "x"},
		[]string{"ZADD", "zset", "1", "one", "2", "two"}, []string{"XADD", "stream", "1-1", "k", "v"},
		[]string{"PFADD", "hll", "a", "b"}, []string{"GEOADD", "geo", "13.361389", "38.115556", "Palermo"},
		[]string{"SETBIT", "bits", "7", "1"}, []string{"SET", "counter", "10"})
	p.WarmSample(t)
}

// WarmSample makes LoadSample's hot keys cached again.
func (p *Pair) WarmSample(t testing.TB) {
	t.Helper()
	p.Warm(t, "GET", "hot")
	p.Warm(t, "GET", "hot2")
	p.Warm(t, "GET", "absent")
	p.Warm(t, "HGET", "h", "f")
}
