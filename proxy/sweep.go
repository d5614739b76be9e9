package proxy

import (
	"context"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// Idle connections give back what a burst grew, as Redis shrinks the
// query buffers of idle clients (clientsCronResizeQueryBuffer): one
// command of 1,000 arguments left about 105 KB allocated on its
// connection (the parser's argument copies, the keys of its writes),
// 3,000 such connections 381 MB of live heap, and a long pipeline left
// its slot ring at its peak. Once a second the janitor asks each event
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

// shrink frees the buffers of s grown past their initial size, if
// nothing is in flight: no request unanswered, no command half parsed
// (streamed), no reply being captured.
func (s *session) shrink() {
	if s.closed || s.slots.len() > 0 || s.reply == replyCapture || s.pendingFill != nil {
		return
	}
	// keysBuf's storage holds slices of the parser's buffer: a parser
	// buffer let go must not stay reachable through it.
	if s.parser.Shrink() || cap(s.keysBuf) > shrinkSlack {
		s.keysBuf = nil
	}
	// A request in progress kept in partial keeps its bytes, not the room
	// a large pipeline once needed.
	if s.partial != nil && cap(s.partial) > shrinkSlack<<10 && cap(s.partial) > 4*len(s.partial) {
		s.partial = append(make([]byte, 0, len(s.partial)), s.partial...)
	}
	s.slots.shrink()
	s.writes.shrink()
	if cap(s.capture) > shrinkSlack<<10 {
		s.capture = nil
	}
	if len(s.txEffects) == 0 && cap(s.txEffects) > shrinkSlack {
		s.txEffects = nil
	}
	if len(s.multiActs) == 0 && cap(s.multiActs) > shrinkSlack {
		s.multiActs = nil
	}
	if len(s.multiStripes) == 0 && cap(s.multiStripes) > shrinkSlack {
		s.multiStripes = nil
	}
	if len(s.multiHolds) == 0 && cap(s.multiHolds) > shrinkSlack {
		s.multiHolds = nil
	}
}

// sweepLoops has every event loop shrink its idle sessions. From the
// janitor.
func (srv *Server) sweepLoops() {
	srv.loopsMu.Lock()
	loops := make(map[gnet.EventLoop]*loopState, len(srv.loops))
	for el, l := range srv.loops {
		loops[el] = l
	}
	srv.loopsMu.Unlock()
	now := srv.clock.Load()
	for el, l := range loops {
		// Fails only once the engine is stopping: nothing to shrink then.
		_ = el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			l.shrinkIdle(now)
			return nil
		}))
	}
}
