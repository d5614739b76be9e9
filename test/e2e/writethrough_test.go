package e2e

import (
	"context"
	"strconv"
	"testing"

	"github.com/cicada-proxy/cicada/test/cicadatest"
)

// waitEvents waits until Cicada has applied at least n keyspace
// notifications since start.
func waitEvents(t *testing.T, p *cicadatest.Proxy, start, n uint64) {
	t.Helper()
	waitFor(t, func() bool { return p.Sub.Events()-start >= n })
}

// TestWriteThrough: a SET key value of a cached key through Cicada puts
// the value in the cache at Redis's +OK. Once its own keyspace
// notification is applied the next GETs are hits with the new value, and
// Redis gets no PTTL to fill the key again. (A GET while the subscriber
// is reading goes to Redis, cache or not: it cannot know yet what the
// read brings.)
func TestWriteThrough(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	rc := client(t, p.Addr, 2)
	ctx := context.Background()
	mustDo(t, rc, "SET", "k", "v0")
	warmKey(t, p, rc, "GET", "k")
	pttls := commandCalls(t, r.Addr, "pttl")
	const n = 200
	for i := 1; i <= n; i++ {
		want := "v" + strconv.Itoa(i)
		events := p.Sub.Events()
		mustDo(t, rc, "SET", "k", want)
		waitEvents(t, p, events, 1) // its own notification
		waitFor(t, func() bool {
			before := hits(p)
			if got, err := rc.Get(ctx, "k").Result(); err != nil || got != want {
				t.Fatalf("GET after SET %s: %q %v", want, got, err)
			}
			return hits(p) > before
		})
	}
	// A notification that Cicada applies while WriteThrough publishes
	// (the subscriber's goroutine on the other core) makes it give the
	// reply up: 1-4 of 200 here.
	if d := commandCalls(t, r.Addr, "pttl") - pttls; d > n/10 {
		t.Errorf("Redis got %d PTTLs in %d writes and reads: the key was filled again", d, n)
	}
	if got := metric(t, p, "cicada_cache_write_throughs_total", ""); got < 0.9*n {
		t.Errorf("cicada_cache_write_throughs_total = %v, want at least %v", got, 0.9*n)
	}
}

// TestWriteThroughThenDirectWrite: a write sent to Redis directly right
// after a SET through Cicada is what Cicada serves once both keyspace
// notifications are applied. The first notification after the SET's +OK
// is taken as the SET's own; if the direct write's were taken instead,
// Cicada would serve the SET's value until the key's next write.
func TestWriteThroughThenDirectWrite(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	direct := client(t, r.Addr, 2)
	rc := client(t, p.Addr, 2)
	ctx := context.Background()
	mustDo(t, rc, "SET", "k", "v0")
	warmKey(t, p, rc, "GET", "k")
	for i := 1; i <= 200; i++ {
		via, bypass := "via"+strconv.Itoa(i), "direct"+strconv.Itoa(i)
		events := p.Sub.Events()
		mustDo(t, rc, "SET", "k", via)
		mustDo(t, direct, "SET", "k", bypass)
		waitEvents(t, p, events, 2)
		for range 2 { // the first may fill the key again; the second reads the cache
			if got, err := rc.Get(ctx, "k").Result(); err != nil || got != bypass {
				t.Fatalf("round %d: GET through Cicada = %q %v, want %q (Redis has it)", i, got, err, bypass)
			}
		}
		events = p.Sub.Events()
		mustDo(t, direct, "SET", "k", bypass+"-again")
		mustDo(t, rc, "SET", "k", via+"-again")
		waitEvents(t, p, events, 2)
		for range 2 {
			if got, err := rc.Get(ctx, "k").Result(); err != nil || got != via+"-again" {
				t.Fatalf("round %d: GET through Cicada = %q %v, want %q", i, got, err, via+"-again")
			}
		}
	}
}

// TestWriteThroughOnlyPlainSet: a SET with options, a SET queued in a
// transaction and a SET Redis refuses put nothing in the cache: their
// reply does not say what the key holds (a TTL, a condition, a later
// EXEC), and the next read goes to Redis.
func TestWriteThroughOnlyPlainSet(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	direct := client(t, r.Addr, 2)
	rc := client(t, p.Addr, 2)
	ctx := context.Background()
	writes := [][]any{
		{"SET", "k", "ex", "EX", "100"},
		{"SET", "k", "xx", "XX"},
		{"SET", "k", "get", "GET"},
	}
	for _, w := range writes {
		mustDo(t, direct, "SET", "k", "v0")
		warmKey(t, p, rc, "GET", "k")
		events := p.Sub.Events()
		mustDo(t, rc, w...)
		waitEvents(t, p, events, 1)
		before := hits(p)
		if got := rc.Get(ctx, "k").Val(); got != w[2] {
			t.Fatalf("%v then GET = %q", w, got)
		}
		if hits(p) != before {
			t.Errorf("%v: the next GET was answered from the cache", w)
		}
	}
	mustDo(t, direct, "SET", "k", "v0")
	warmKey(t, p, rc, "GET", "k")
	pipe := rc.TxPipeline()
	pipe.Set(ctx, "k", "tx", 0)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Do(ctx, "SET", "k").Result(); err == nil {
		t.Fatal("SET k: no error")
	}
	if got := metric(t, p, "cicada_cache_write_throughs_total", ""); got != 0 {
		t.Errorf("cicada_cache_write_throughs_total = %v, want 0", got)
	}
}
