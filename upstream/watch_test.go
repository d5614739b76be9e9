package upstream

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// TestUnapplied holds the subscriber still (in a pong) while writes from
// another client reach its socket, and checks that Unapplied applies their
// notifications itself (the cache evicts, the events are counted) and
// names none, then reports everything once a flush is queued, and nothing
// once the subscriber has applied it. TestUnappliedCases covers the keys
// it names: those queued behind a reply for go-redis.
func TestUnapplied(t *testing.T) {
	r := redistest.Start(t)
	cache, err := hotcache.New(hotcache.Config{Capacity: 100, MaxBytes: 1 << 20, MaxValue: 100, StrictHolds: true})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Addr: r.Addr, Configure: true, CheckInterval: time.Hour}, cache)
	var armed atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	s.onPong = func() {
		if armed.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-release
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// Runs first: a failed check must not leave the subscriber held, or
	// the wait for Run above would last until the test binary's timeout.
	defer releaseOnce.Do(func() { close(release) })
	waitFor(t, "ready", s.Ready)

	scratch := make([]byte, 16<<10)
	unapplied := func() ([]uint64, bool) { return s.Unapplied(nil, scratch) }
	// Nothing sent: none, once the subscriber is not mid-read (a read in
	// progress makes Unapplied report all, which is right but says
	// nothing here).
	waitFor(t, "nothing unapplied", func() bool { h, all := unapplied(); return len(h) == 0 && !all })
	// It runs on the hit path.
	dst := make([]uint64, 0, 8)
	if a := testing.AllocsPerRun(100, func() { s.Unapplied(dst, scratch) }); a != 0 {
		t.Errorf("Unapplied allocates %v times per call", a)
	}

	// Fill "a" so its eviction shows.
	a := hotcache.KeyOf(0, []byte("a"))
	tk, ok := cache.BeginFill(&a)
	if !ok || !cache.Fill(tk, hotcache.FillRequest{Key: a, Reply: []byte("$1\r\n0\r\n"), ValueLen: 1}) {
		t.Fatal("fill of a refused")
	}

	// A fence's pong stops the subscriber until release.
	armed.Store(true)
	s.Fence(cache.Hold())
	<-entered
	direct := redis.NewClient(&redis.Options{Addr: r.Addr, DisableIdentity: true})
	defer direct.Close()
	for _, c := range [][]any{{"SET", "a", "1"}, {"SET", "b", "2"}, {"SELECT", "1"}, {"SET", "c", "3"}} {
		if err := direct.Do(ctx, c...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// The notifications are at the head of the queue: the event loop that
	// asks applies them, with the subscriber still held.
	waitFor(t, "three notifications applied by Unapplied", func() bool {
		if h, all := unapplied(); len(h) != 0 || all {
			t.Fatalf("Unapplied = %x, %v with only notifications queued; want none, false (applied)", h, all)
		}
		return s.Events() == 3
	})
	if n := cache.Stats().Replies; n != 0 {
		t.Fatalf("%d replies cached after a's notification was applied; want 0", n)
	}
	if err := direct.Do(ctx, "FLUSHALL").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a flush to make every key unapplied", func() bool { _, all := unapplied(); return all })

	releaseOnce.Do(func() { close(release) })
	waitFor(t, "everything applied", func() bool { h, all := unapplied(); return len(h) == 0 && !all })
	if s.Events() != 3 || s.Flushes() != 1 {
		t.Errorf("events %d, flushes %d; want 3, 1", s.Events(), s.Flushes())
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
