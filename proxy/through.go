package proxy

import (
	"sync"
	"time"

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
// A read waits at most throughWaitFor from the SET's send (from its own
// arrival when the wall clock, hotcache.Cache.Now, stepped back between
// the two): Redis may hold writes while it serves reads (CLIENT PAUSE
// WRITE, FAILOVER, a cluster failover), and a read must not wait for
// those as long as they last.
//
// Safe for concurrent use: mu guards m; a waiter's wake (session.fillWake)
// is safe from any goroutine and is called without mu held. m holds
// values, not pointers: a SET of a cached key allocates nothing here
// unless a read waits for it.
type throughWaits struct {
	mu sync.Mutex
	m  map[uint64]throughWait
}

// throughWait is one write-through in flight and the reads waiting for it.
type throughWait struct {
	w      *hotcache.WriteThrough
	sentAt int64 // the SET's send, hotcache.Cache.Now reading (ns)
	// waitable: its reply comes as soon as Redis serves it (only plain
	// reads, and few, ahead of it on its connection) and no other write
	// of the key was sent since.
	waitable bool
	waiters  []func()
}

// start records w, sent at now (hotcache.Cache.Now); waitable as in
// throughWait. A write-through of the key already recorded is kept (this
// one's write released it, wrote).
func (t *throughWaits) start(w *hotcache.WriteThrough, waitable bool, now int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[uint64]throughWait{}
	}
	if _, ok := t.m[w.Hash()]; !ok {
		t.m[w.Hash()] = throughWait{w: w, sentAt: now, waitable: waitable}
	}
}

// end forgets w, whose reply has been applied (or will not be followed),
// and wakes the reads waiting for it.
func (t *throughWaits) end(w *hotcache.WriteThrough) {
	t.mu.Lock()
	tw, ok := t.m[w.Hash()]
	if !ok || tw.w != w {
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
	tw, ok := t.m[h]
	if !ok || !tw.waitable {
		t.mu.Unlock()
		return
	}
	t.m[h] = throughWait{w: tw.w, sentAt: tw.sentAt} // no more waitable, no waiters
	t.mu.Unlock()
	for _, wake := range tw.waiters {
		wake()
	}
}

// wait makes wake run when the waitable write-through of the key with
// Hash h ends, if one is in flight and was sent less than limit ns before
// now (hotcache.Cache.Now readings), and returns the ns left of limit;
// ok=false: no wait. With wake nil it only reports whether there would be
// one. The caller wakes itself once the time left has passed. A reading
// before the send (the wall clock stepped back) is no wait either: the
// time waited so far is unknown.
func (t *throughWaits) wait(h uint64, wake func(), now, limit int64) (left int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tw, ok := t.m[h]
	if elapsed := now - tw.sentAt; !ok || !tw.waitable || elapsed < 0 || elapsed >= limit {
		return 0, false
	}
	if wake != nil {
		tw.waiters = append(tw.waiters, wake)
		t.m[h] = tw
	}
	return limit - (now - tw.sentAt), true
}

// throughWaitFor is how long a read may wait for a write-through, in ns
// from the SET's send, given the fills' round trip
// (detector.Admission.FillRTT): four round trips, within
// [minThroughWait, maxThroughWait]. A SET that takes longer than that is
// likely held by Redis while it serves reads.
func throughWaitFor(rtt time.Duration) int64 {
	return int64(min(max(4*rtt, minThroughWait), maxThroughWait))
}

// minThroughWait and maxThroughWait bound throughWaitFor: a loaded
// machine's round trips vary more than their average says, and a read
// held for a SET that Redis holds must not wait long.
const (
	minThroughWait = 10 * time.Millisecond
	maxThroughWait = 100 * time.Millisecond
)
