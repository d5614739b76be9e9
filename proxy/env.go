package proxy

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/command"
	"github.com/cicada-proxy/cicada/detector"
	"github.com/cicada-proxy/cicada/hotcache"
)

// What conversations depend on, below them in the package's layers (doc.go):
// the control plane's roles, what every conversation shares (convEnv) and
// what the conversations of one event loop share (loopEnv).

// Upstream is what the proxy needs from Cicada's control plane toward
// Redis (upstream.Subscriber implements it), by role: the fences that keep
// local answers fresh, the server settings that shape connections, the
// cluster topology, and counters for metrics. All methods are safe from
// any goroutine and never block.
type Upstream interface {
	Fences
	Settings
	Topology
	Counters
}

// Fences tells whether the cache may answer and releases the cache
// suspensions of writes whose keys Cicada cannot name.
type Fences interface {
	// Fence takes over h and releases it once every notification of
	// writes already answered by Redis has been applied.
	Fence(h *hotcache.Hold)
	// VerifyFence is Fence after notify-keyspace-events was checked again.
	VerifyFence(h *hotcache.Hold)
	// Ready reports whether notifications are flowing (the cache may answer).
	Ready() bool
	// Unapplied appends to dst the hotcache.Hash of each key whose
	// notification has reached Cicada but is not applied yet, or reports
	// all=true when it cannot tell which; any other key's cached reply is
	// no older than a write Redis acknowledged before the call. scratch
	// bounds what it looks at. One system call.
	Unapplied(dst []uint64, scratch []byte) (hashes []uint64, all bool)
}

// Settings is what the live server says about itself and its clients.
type Settings interface {
	// IdleTimeout is Redis's timeout setting: how long a client may send
	// nothing before Redis closes it; 0 for none.
	IdleTimeout() time.Duration
	// OutputLimit is Redis's client-output-buffer-limit for a normal or a
	// subscribed client: hard and soft bytes, and how long the soft limit
	// may be exceeded; zeros mean none.
	OutputLimit(pubsub bool) (hard, soft int64, softFor time.Duration)
	// Commands is what the server's COMMAND reply adds to the built-in
	// command table (nil: the built-in table alone).
	Commands() *command.Learned
}

// Topology is the Redis Cluster view of the node behind Cicada.
type Topology interface {
	// Cluster is the view of the Redis Cluster slots the node answers
	// for (Enabled false outside cluster mode).
	Cluster() *cluster.Topology
}

// Counters are the control plane's figures exported as metrics.
type Counters interface {
	// Events is the count of keyspace notifications received.
	Events() uint64
	// Reconnects is how many times the subscription was (re)established.
	Reconnects() uint64
	// Flushes is how many FLUSHALL/FLUSHDB Redis reported, from any client.
	Flushes() uint64
}

// convEnv is what every conversation shares, set up by New: the cache, the
// detector and the admission, the control plane's fences and settings, the cluster view,
// the identities, the address map, and the coarse clock. The fields are
// set before the engine starts and not changed after; what they point to
// is safe for concurrent use.
type convEnv struct {
	cache    *hotcache.Cache
	det      *detector.Detector // adm.Reads(): the loops count reads in it
	adm      *detector.Admission
	fences   Fences
	settings Settings
	topo     *cluster.Topology // Topology.Cluster()
	ids      *identities
	addrMap  *cluster.AddrMap // Config.AddrMap
	// multiplex is Config.Multiplex: clients may move to lanes.
	multiplex bool
	// throughs are the write-throughs in flight, for reads of their keys
	// to wait for (through.go).
	throughs throughWaits
	// clock is a coarse monotonic clock (ns since start) advanced by the
	// janitor every sub-window, read on the hit path instead of the time.
	clock atomic.Int64
	// idleRefresh is half Redis's idle timeout in ns (0: none): a
	// connection whose requests were all answered locally for that long has
	// its next GET forwarded, so Redis does not close it as idle.
	idleRefresh atomic.Int64
}

// suspendFor flushes the cache and suspends it for d.
func (e *convEnv) suspendFor(d time.Duration) {
	held := e.cache.Hold()
	e.cache.Flush()
	time.AfterFunc(d, func() {
		e.cache.Flush()
		held.Release()
	})
}

// opaqueHold is how long the cache answers nothing after a write whose
// completion Cicada cannot observe (opaque connections, protocol errors).
const opaqueHold = time.Second

// loopEnv is what the conversations of one event loop share: its index,
// the batch's scratch buffers, the notifications asked of the fences for
// the batch, and the loop's counters. Owned by the loop's goroutine; stats
// are atomics read by metrics.
type loopEnv struct {
	idx int
	out []byte // local answers of the current batch
	// inject holds Cicada's PTTLs (and HPTTLs) for the batch's fills, one
	// after the other; injected is the last fill's part of it.
	inject, injected []byte
	// Fences.Unapplied for the connection being processed, asked at
	// its first cache hit (see settled).
	unappliedAsked bool
	// mayDefer: the request being decided is the last one its batch holds,
	// so a hit may wait for the loop's settle pass (settle.go) instead of
	// asking Fences.Unapplied for itself. Set by processClient around
	// each decision.
	mayDefer     bool
	unappliedAll bool
	unapplied    []uint64
	peek         []byte // Unapplied's scratch
	refs         []command.KeyRef
	stats        *loopStats
	// fills are the loop's fills in flight and its keys in fill backoff,
	// by hotcache.Key.ReadHash (fillOf). nil until the first fill.
	fills map[uint64]*fillState
}

// fillState is one key's fill on an event loop: in flight, with the
// connections of the loop waiting for it, or, after a fill that failed
// for what the key holds, the coarse clock reading before which no fill
// of it is tried.
type fillState struct {
	inFlight bool
	waitable bool // its reply comes as soon as Redis serves it (startFill)
	waiters  []func()
	retryAt  int64
}

// fill is fillOf's verdict on a key.
type fill uint8

const (
	fillNone          fill = iota // no fill in flight: one may start
	fillRunning                   // a fill of the key is in flight on this loop
	fillRunningBehind             // ... behind a request of its connection that is not a plain read: not worth a wait
	fillBackoff                   // its last fill failed for what the key holds: no fill now
)

// fillBackoffFor is how long, in ns of the coarse clock, no fill of a key
// is tried on a loop after one failed for what the key holds (a value over
// cache-max-value, a HyperLogLog, a reply that is not a string): such a
// fill fails again, and each costs Redis a PTTL. One detector sub-window.
const fillBackoffFor = int64(100 * time.Millisecond)

// fillsSweepAt is the number of fill states from which endFill drops the
// backoffs that are over.
const fillsSweepAt = 256

// fillOf says whether a fill of the key with ReadHash h may start on this
// loop now (clock: the coarse clock).
func (l *loopEnv) fillOf(h uint64, clock int64) fill {
	f := l.fills[h]
	switch {
	case f == nil:
		return fillNone
	case f.inFlight && f.waitable:
		return fillRunning
	case f.inFlight:
		return fillRunningBehind
	case clock < f.retryAt:
		return fillBackoff
	}
	delete(l.fills, h)
	return fillNone
}

// fillWaitAhead is the most requests a fill may have ahead of it on its
// connection for other connections to wait for it: their replies come
// first.
const fillWaitAhead = 128

// startFill records a fill of h sent; waitable: other connections may
// wait for it.
func (l *loopEnv) startFill(h uint64, waitable bool) {
	if l.fills == nil {
		l.fills = map[uint64]*fillState{}
	}
	l.fills[h] = &fillState{inFlight: true, waitable: waitable}
}

// waitFill makes wake run when the fill of h in flight ends.
func (l *loopEnv) waitFill(h uint64, wake func()) {
	f := l.fills[h]
	f.waiters = append(f.waiters, wake)
}

// endFill records the end of the fill of h (kept in the cache or not;
// backoff: it failed for what the key holds) and wakes the connections
// waiting for it. Two fills of one hash never overlap on a loop (mayAnswer
// starts one only when fillOf says fillNone), so the state is this fill's.
func (l *loopEnv) endFill(h uint64, backoff bool, clock int64) {
	f := l.fills[h]
	if f == nil || !f.inFlight {
		return
	}
	waiters := f.waiters
	if backoff {
		*f = fillState{retryAt: clock + fillBackoffFor}
		if len(l.fills) >= fillsSweepAt {
			for k, o := range l.fills {
				if !o.inFlight && clock >= o.retryAt {
					delete(l.fills, k)
				}
			}
		}
	} else {
		delete(l.fills, h)
	}
	for _, wake := range waiters {
		wake()
	}
}

// unappliedPeek is how many bytes of unapplied notifications an event loop
// looks at (about 250 notifications) before it stops serving any hit.
const unappliedPeek = 16 << 10

// loopStats are counters owned by one loop (the only writer), padded so
// loops do not share cache lines.
type loopStats struct {
	_          [64]byte
	hits       atomic.Uint64 // GET/HGET answered locally
	misses     atomic.Uint64 // GET/HGET forwarded
	forwarded  atomic.Uint64 // requests forwarded
	fillsTried atomic.Uint64 // fills started (PTTL sent)
	fills      atomic.Uint64 // fills kept
	unsettled  atomic.Uint64 // hits forwarded: a notification was not yet applied
	inflight   atomic.Int64  // requests awaiting a reply
	lanes      atomic.Int64  // lanes enrolled and not closed (lane.go)
	own        atomic.Int64  // sessions' own upstream connections open
	spares     atomic.Int64  // spare upstream connections open (spare.go)
	pins       atomic.Uint64 // clients moved from lanes to a connection of their own
	returns    atomic.Uint64 // clients moved from a connection of their own back to lanes
	upstream   latencyHist   // forwarded request to its reply, one per round trip per connection
	_          [64]byte
}

// shrinkSlack is the capacity, in elements, up to which the per-session
// slices (keys of a write, transaction bookkeeping) are kept.
const shrinkSlack = 16

// settled reports whether a cached reply of the key with hash h may be
// served: no keyspace notification for it (or a flush) has reached Cicada
// without being applied. Fences are asked once per processClient call,
// at its first cache hit or fill (askUnapplied). Once is enough: every
// request in the batch was sent before Cicada read it, so a write
// acknowledged before any of them was sent has its notification in
// Cicada's socket by then (or applied), and a write acknowledged later is
// concurrent with the reads still unanswered.
func (l *loopEnv) settled(fences Fences, h uint64) bool {
	l.askUnapplied(fences)
	return !l.unappliedAll && !slices.Contains(l.unapplied, h)
}

// notified reports whether a keyspace notification of the key with hash h
// is known to have reached Cicada without being applied (unlike settled,
// false when Fences cannot tell which keys are concerned).
func (l *loopEnv) notified(fences Fences, h uint64) bool {
	l.askUnapplied(fences)
	return slices.Contains(l.unapplied, h)
}

// askUnapplied asks fences which notifications are unapplied, once per
// processClient call.
func (l *loopEnv) askUnapplied(fences Fences) {
	if !l.unappliedAsked {
		l.unappliedAsked = true
		l.unapplied, l.unappliedAll = fences.Unapplied(l.unapplied[:0], l.peek)
	}
}
