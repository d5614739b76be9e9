package proxy

import (
	"time"

	"github.com/panjf2000/gnet/v2"
)

// loopState is an event loop's state: what its conversations share
// (loopEnv) and what its sessions do I/O with. Owned by the loop's
// goroutine (stats are atomics read by metrics).
type loopState struct {
	loopEnv
	evl gnet.EventLoop // for dials and timers
	upv [][]byte       // bytes to forward upstream
	// upvBytes is the bytes of upv's complete slices, for a lane's bound
	// on requests in flight (processClient).
	upvBytes int64
	downv    [][]byte // reply bytes to pass to the client
	outv     [][]byte // the pieces of a large answer of Cicada's (writeOut)
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
	// hkFree are spare hot-key records of forwarded requests (hotkeys.go),
	// reused so that a HOTKEYS session does not allocate per request.
	hkFree []*hkReq
	// lanes are the loop's shared upstream connections by state (lane.go);
	// denied are the rules generations under which Redis does not
	// authenticate a fresh connection, for which no lane is dialed.
	lanes  map[shareKey]*lane
	denied map[uint64]bool
	// spare is the loop's spare upstream connection, dialing or open
	// (spare.go); nil: none.
	spare *spare
	// settling are the sessions whose hits wait for the settle pass, in
	// the order they were held; settlingSpare is the other buffer, which
	// the pass swaps in. settleQueued: the pass's task (settleTask) is
	// queued on the loop (settle.go).
	settling, settlingSpare []*session
	settleQueued            bool
	settleTask              gnet.Runnable
	// settleMode is whether hits that end their batch wait for the settle
	// pass or ask for themselves (settle.go, holding).
	settleMode
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
// before now - shrinkIdleAfter (coarse clock), closes the clients on
// lanes that sent nothing for longer than Redis's timeout (0: none), as
// Redis would have closed their own connections (their lanes keep none),
// keeps the own connections of clients on lanes from Redis's timeout
// (keepOwn), and closes the lanes that carried nothing for a while
// (closeIdle). On the loop.
func (l *loopState) shrinkIdle(now int64, timeout time.Duration) {
	for _, s := range l.sessions {
		if now-s.lastForward >= int64(shrinkIdleAfter) {
			s.shrink()
		}
		if timeout > 0 && s.shared && s.sent.len() == 0 && s.life == clientOpen && now-s.lastRead > int64(timeout) {
			s.closeWhenFlushed() // Redis frees an idle client without a word
		}
		s.keepOwn(now, timeout)
	}
	l.closeIdle(now, timeout)
}

// addHeld changes what the loop's heavy clients hold by d bytes, in the
// loop's count and in the server's total over all loops.
func (l *loopState) addHeld(srv *Server, d int64) {
	l.held += d
	srv.clientHeld.Add(d)
}
