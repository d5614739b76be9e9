package proxy

import (
	"sync"

	"github.com/cicada-proxy/cicada/hotcache"
)

// throughWaits are the write-throughs in flight (a SET of a cached key
// whose +OK puts its value back in the cache, hotcache.WriteThrough), by
// the key's hotcache.Key.Hash, for reads of the key on any event loop to
// wait for instead of each going to Redis while the SET is in flight:
// under bench scenario 4 the most-read keys are written every few
// milliseconds, about as long as a write's round trip. Woken at the
// SET's reply, a read is decided again, and is a hit if the value went
// back. At most one write-through per key is recorded: a second write of
// the key while one is in flight (the first then caches nothing,
// hotcache.Cache.WriteThrough) releases its readers at once.
//
// Safe for concurrent use: mu guards m; a waiter's wake (the session's
// gnet Wake) is safe from any goroutine and is called without mu held.
type throughWaits struct {
	mu sync.Mutex
	m  map[uint64]*throughWait
}

// throughWait is one write-through in flight and the reads waiting for it.
type throughWait struct {
	w *hotcache.WriteThrough
	// waitable: its reply comes as soon as Redis serves it (only plain
	// reads, and few, ahead of it on its connection) and no other write
	// of the key was sent since.
	waitable bool
	waiters  []func()
}

// start records w, sent now; waitable as in throughWait. A write-through
// of the key already recorded is kept (this one's write released it,
// wrote).
func (t *throughWaits) start(w *hotcache.WriteThrough, waitable bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[uint64]*throughWait{}
	}
	if _, ok := t.m[w.Hash()]; !ok {
		t.m[w.Hash()] = &throughWait{w: w, waitable: waitable}
	}
}

// end forgets w, whose reply has been applied (or will not be followed),
// and wakes the reads waiting for it.
func (t *throughWaits) end(w *hotcache.WriteThrough) {
	t.mu.Lock()
	tw := t.m[w.Hash()]
	if tw == nil || tw.w != w {
		t.mu.Unlock()
		return
	}
	delete(t.m, w.Hash())
	t.mu.Unlock()
	for _, wake := range tw.waiters {
		wake()
	}
}

// wrote records a write of the key with Hash h about to be sent: the
// write-through of the key in flight, if any, will cache nothing, so its
// waiting reads are woken now (to go to Redis) and no more wait for it.
func (t *throughWaits) wrote(h uint64) {
	t.mu.Lock()
	tw := t.m[h]
	if tw == nil || !tw.waitable {
		t.mu.Unlock()
		return
	}
	tw.waitable = false
	waiters := tw.waiters
	tw.waiters = nil
	t.mu.Unlock()
	for _, wake := range waiters {
		wake()
	}
}

// wait makes wake run when the waitable write-through of the key with
// Hash h ends, if one is in flight, and reports whether it will; with
// wake nil it only reports whether one is.
func (t *throughWaits) wait(h uint64, wake func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	tw := t.m[h]
	if tw == nil || !tw.waitable {
		return false
	}
	if wake != nil {
		tw.waiters = append(tw.waiters, wake)
	}
	return true
}
