package upstream

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/detector"
	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/proxy"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// hookedFencer is the real Subscriber, with a hook run at the start of
// Unapplied: it stands for the subscriber goroutine being scheduled at that
// instant, just after the event loop's first cache.Lookup.
type hookedFencer struct {
	*Subscriber
	hook   atomic.Pointer[func()]
	called atomic.Int64
}

func (f *hookedFencer) Unapplied(dst []uint64, scratch []byte) ([]uint64, bool) {
	f.called.Add(1)
	if h := f.hook.Swap(nil); h != nil {
		(*h)()
	}
	return f.Subscriber.Unapplied(dst, scratch)
}

// TestUnappliedAskedBeforeServing: a write sent directly to Redis is
// acknowledged while its notification sits in Cicada's socket, unapplied;
// then a client sends GET k through Cicada, and the subscriber applies the
// notification just as the event loop asks Unapplied (the hook). The GET
// must return the new value: an event loop that had looked k up before
// asking served the old one (found by an attack on the change; the fix
// looks up again after the first ask of a batch).
func TestUnappliedAskedBeforeServing(t *testing.T) {
	for _, applyBetween := range []bool{false, true} {
		t.Run("applyBetweenLookupAndUnapplied="+strconv.FormatBool(applyBetween), func(t *testing.T) {
			attackLookupBeforeUnapplied(t, applyBetween)
		})
	}
}

func attackLookupBeforeUnapplied(t *testing.T, applyBetween bool) {
	r := redistest.Start(t)
	cache, err := hotcache.New(hotcache.Config{Capacity: 100, MaxBytes: 1 << 20, MaxValue: 100, StrictHolds: true})
	if err != nil {
		t.Fatal(err)
	}
	det, err := detector.New(detector.Config{Threshold: 1, Loops: 1}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Addr: r.Addr, Configure: true, CheckInterval: time.Hour}, cache)
	var armed atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	s.onPong = func() {
		if armed.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-release
		}
	}
	f := &hookedFencer{Subscriber: s}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(redistest.FreePort(t)))
	srv, err := proxy.New(proxy.Config{Listen: addr, Upstream: r.Addr, Loops: 1}, cache, detector.NewAdmission(det, 100, time.Now()), f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	subDone := make(chan struct{})
	go func() { defer close(subDone); _ = s.Run(ctx) }()
	runErr := make(chan error, 1)
	go func() { runErr <- srv.Run() }()
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
		<-runErr
		cancel()
		<-subDone
	}()
	// Runs before the shutdown above: a failed check must not leave the
	// subscriber held, or the test would wait for it until its timeout.
	var freeOnce sync.Once
	free := func() { freeOnce.Do(func() { close(release) }) }
	defer free()
	<-srv.Booted()
	waitFor(t, "ready", s.Ready)

	direct := redis.NewClient(&redis.Options{Addr: r.Addr, DisableIdentity: true})
	defer direct.Close()
	viaCicada := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, PoolSize: 1})
	defer viaCicada.Close()
	if err := direct.Set(ctx, "k", "old", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Fill k, then read it back from the cache once.
	waitFor(t, "k cached", func() bool {
		if v, err := viaCicada.Get(ctx, "k").Result(); err != nil || v != "old" {
			t.Fatalf("GET k = %q, %v", v, err)
		}
		return cache.Stats().Replies == 1
	})
	before := f.called.Load()
	if v, _ := viaCicada.Get(ctx, "k").Result(); v != "old" || f.called.Load() == before {
		t.Fatalf("GET k was not a cache hit (value %q)", v)
	}

	// Hold the subscriber goroutine (in a fence's pong) with the cache
	// live: the fence is handed a hold of another cache.
	armed.Store(true)
	s.Fence(otherHold(t))
	<-entered

	// The bypass write is acknowledged; its notification reaches the socket.
	if err := direct.Set(ctx, "k", "new", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Unapplied would apply it: look at the socket without taking.
	w := s.watch.Load()
	peeked := make([]byte, 16<<10)
	waitFor(t, "k's notification in the socket", func() bool {
		n, _ := peek(w.fd, peeked)
		var f frame
		if n <= 0 {
			return false
		}
		m, err := scanFrame(peeked[:n], &f)
		db, key, isKey, _ := f.notification()
		return m > 0 && err == nil && isKey && db == 0 && string(key) == "k"
	})

	if applyBetween {
		// The subscriber goroutine runs right after the event loop's
		// Lookup, before its Unapplied.
		h := func() {
			free()
			waitFor(t, "k's notification applied", func() bool { return cache.Stats().Replies == 0 })
		}
		f.hook.Store(&h)
	}
	v, err := viaCicada.Get(ctx, "k").Result()
	free()
	if err != nil {
		t.Fatal(err)
	}
	if v != "new" {
		t.Errorf("GET k sent after SET k new was acknowledged returned %q (stale, from the cache)", v)
	}
}

// TestNoRedialUnderneath: when the notification connection dies, go-redis
// dials a new one at once, before the session sees the error and suspends
// the cache; Unapplied must not report that fresh, empty socket as "nothing
// unapplied" while writes made in between were never notified (a
// regression: it did for 0.35-4 ms; dialWatched now dials once).
func TestNoRedialUnderneath(t *testing.T) {
	r := redistest.Start(t)
	cache, err := hotcache.New(hotcache.Config{Capacity: 100, MaxBytes: 1 << 20, MaxValue: 100, StrictHolds: true})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{Addr: r.Addr, Configure: true, CheckInterval: time.Hour}, cache)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "ready", s.Ready)

	key := hotcache.KeyOf(0, []byte("k"))
	tk, ok := cache.BeginFill(&key)
	if !ok || !cache.Fill(tk, hotcache.FillRequest{Key: key, Reply: []byte("$3\r\nold\r\n"), ValueLen: 3}) {
		t.Fatal("fill refused")
	}
	direct := redis.NewClient(&redis.Options{Addr: r.Addr, DisableIdentity: true})
	defer direct.Close()
	old := s.watch.Load()
	// Kill the notification connection, and write k while nobody listens.
	pipe := direct.Pipeline()
	pipe.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
	pipe.Set(ctx, "k", "new", 0)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	scratch := make([]byte, 16<<10)
	seen := 0
	var first, last time.Time
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		if cache.Suspended() {
			break
		}
		w := s.watch.Load()
		if w == nil || w == old {
			continue
		}
		h, all := s.Unapplied(nil, scratch)
		var f hotcache.Found
		cache.Lookup(&key, 0, 2, &f)
		st := f.Status
		if !all && len(h) == 0 && st == hotcache.Hit {
			seen++
			if first.IsZero() {
				first = time.Now()
			}
			last = time.Now()
		}
		if cache.Suspended() {
			break
		}
	}
	if seen > 0 {
		t.Errorf("for %v, %d times after the subscription died, k's stale reply was a Hit and Unapplied said nothing was unapplied (all=false)", last.Sub(first), seen)
	}
}

// otherHold returns a hold of a cache of its own, for a fence that must
// stop the subscriber goroutine without suspending the cache under test.
func otherHold(t *testing.T) *hotcache.Hold {
	t.Helper()
	c, err := hotcache.New(hotcache.Config{Capacity: 1, MaxBytes: 1 << 10, MaxValue: 1, StrictHolds: true})
	if err != nil {
		t.Fatal(err)
	}
	return c.Hold()
}
