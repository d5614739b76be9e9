package proxy

import (
	"sync/atomic"
	"time"

	"github.com/cicada-proxy/cicada/command"
)

// loopState is per-event-loop scratch and statistics. Scratch fields are
// used only by the loop's goroutine; stats are atomics read by metrics.
type loopState struct {
	idx    int
	out    []byte   // local answers of the current batch
	upv    [][]byte // bytes to forward upstream
	downv  [][]byte // reply bytes to pass to the client
	inject []byte   // Cicada's PTTL for a fill
	// heavy are this loop's sessions that held at least heavyBytes at a
	// check, until their client connection's OnClose; grown counts bytes
	// their buffers grew by since they were last summed into held, the
	// loop's share of srv.clientHeld (see chargeMemory).
	heavy map[*session]struct{}
	grown int64
	held  int64
	// sessions are the loop's open client sessions (half-closed ones
	// included), for the idle sweep (shrinkIdle); session.loopIdx is each
	// one's index. Owned by the loop, like the scratch fields.
	sessions []*session
	// Fences.Unapplied for the connection being processed, asked at
	// its first cache hit (see settled).
	unappliedAsked bool
	unappliedAll   bool
	unapplied      []uint64
	peek           []byte // Unapplied's scratch
	refs           []command.KeyRef
	stats          *loopStats
	// hkFree are spare hot-key records of forwarded requests (hotkeys.go),
	// reused so that a HOTKEYS session does not allocate per request.
	hkFree []*hkReq
}

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
	upstream   latencyHist   // forwarded request to its reply, one per round trip per connection
	_          [64]byte
}

// Idle connections give back what a burst grew, as Redis shrinks the
// query buffers of idle clients (clientsCronResizeQueryBuffer): one
// command of 1,000 arguments left about 105 KB allocated on its
// connection (the parser's argument copies, the keys of its writes),
// 3,000 such connections 381 MB of live heap, and a long pipeline left
// its request ring at its peak. Once a second the janitor asks each event
// loop to sweep its sessions (shrinkIdle); a session that forwarded
// nothing for shrinkIdleAfter and has nothing in flight lets go of
// everything grown past its initial size. The hot path pays nothing: the
// idle test reads lastForward, which forwarding already sets.
const (
	shrinkEvery     = time.Second
	shrinkIdleAfter = 2 * time.Second
)

// shrinkSlack is the capacity, in elements, up to which the per-session
// slices (keys of a write, transaction bookkeeping) are kept.
const shrinkSlack = 16

// register adds s to the loop's sessions, for the idle sweep. On the
// loop.
func (l *loopState) register(s *session) {
	s.loopIdx = len(l.sessions)
	l.sessions = append(l.sessions, s)
}

// unregister removes s from the loop's sessions. On the loop; at most
// once per session.
func (l *loopState) unregister(s *session) {
	last := l.sessions[len(l.sessions)-1]
	l.sessions[s.loopIdx] = last
	last.loopIdx = s.loopIdx
	l.sessions[len(l.sessions)-1] = nil
	l.sessions = l.sessions[:len(l.sessions)-1]
	if cap(l.sessions) > 64 && len(l.sessions) < cap(l.sessions)/4 {
		l.sessions = append([]*session(nil), l.sessions...)
	}
}

// shrinkIdle shrinks the sessions of the loop that have been idle since
// before now - shrinkIdleAfter (coarse clock). On the loop.
func (l *loopState) shrinkIdle(now int64) {
	for _, s := range l.sessions {
		if now-s.lastForward >= int64(shrinkIdleAfter) {
			s.shrink()
		}
	}
}

// addHeld changes what the loop's heavy clients hold by d bytes, in the
// loop's count and in the server's total over all loops.
func (l *loopState) addHeld(srv *Server, d int64) {
	l.held += d
	srv.clientHeld.Add(d)
}

// settled reports whether a cached reply of the key with hash h may be
// served: no keyspace notification for it (or a flush) has reached Cicada
// without being applied. Fences are asked once per processClient call,
// at its first cache hit. Once is enough: every request in the batch was
// sent before Cicada read it, so a write acknowledged before any of them
// was sent has its notification in Cicada's socket by then (or applied),
// and a write acknowledged later is concurrent with the reads still
// unanswered.
func (l *loopState) settled(fences Fences, h uint64) bool {
	if !l.unappliedAsked {
		l.unappliedAsked = true
		l.unapplied, l.unappliedAll = fences.Unapplied(l.unapplied[:0], l.peek)
	}
	if l.unappliedAll {
		return false
	}
	for _, u := range l.unapplied {
		if u == h {
			return false
		}
	}
	return true
}
