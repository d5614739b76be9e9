package proxy

import (
	"context"

	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/panjf2000/gnet/v2"
)

// The settle pass: one Fences.Unapplied for a poll's hits.
//
// A hit may be answered only once no keyspace notification of its key is
// waiting unapplied in Cicada's socket (mayAnswer, condition 5), which
// costs a recv(MSG_PEEK) per batch of requests read from a connection.
// Under load one epoll_wait hands a loop many connections with one request
// each, so that is a system call per hit. A hit that ends its batch
// (nothing behind it in the connection's input) is held instead
// (pauseSettle): its request stays unconsumed in the client's buffer, and
// the loop queues one task (gnet runs queued tasks after the events of the
// epoll_wait that returns its wakeup) that asks once for every hit held
// until then. Each was read before that ask, which is all the check needs.
// A hit the ask finds settled and still current (Cache.Current) is
// answered then, its request consumed without being parsed again; any
// other is parsed again and decided at once, asking for itself
// (settleAgain). A client whose EOF is read while its hit is held has it
// settled then (settleNow, from halfClose): its request must not count as
// work left for Redis, which would give the client a connection of its
// own just to pass the EOF on.
//
// The pass pays off only when it gathers hits: it costs a wakeup of the
// loop (gnet's eventfd written, read back, one more epoll_wait) and makes
// a held hit wait for the next poll's events, where a hit that asks for
// itself costs one recv(MSG_PEEK) and is answered at once. Under light
// load a pass holds one or two hits (1.4 per pass at scenario 5's 20,000
// requests/s over 50 connections, measured 2026-12-06; 40 to 60 with 200
// connections in a closed loop), so a loop holds hits only while its
// passes have been gathering enough of them (settleMode).

// settleMode decides whether a loop's hits that end their batch are held
// for the settle pass or ask for themselves. Owned by the loop's
// goroutine (part of loopState).
type settleMode struct {
	// perPass is the moving average of the hits a pass held (each pass
	// weighs 1/passWeight); hold: the loop holds hits (perPass reached
	// holdFrom and has not fallen below askBelow since).
	perPass float64
	hold    bool
	// ends counts the batch ends seen while not holding; every probeEvery
	// of them the loop holds again until a pass runs, which measures
	// what one pass would gather now.
	ends int
}

// The settle mode's constants. A pass costs three system calls beyond the
// ask itself (the eventfd's write and read and an epoll_wait), so holding
// saves CPU from about four hits per pass; under two it saves nothing and
// adds a poll's wait to every hit. Between the two the mode stays as it
// is, so that a load near one bound does not make it flap.
const (
	holdFrom   = 3.0
	askBelow   = 2.0
	passWeight = 8
	probeEvery = 16
)

// holding reports whether the request about to be decided, the last of
// its batch, may have its hit held for the settle pass: while the loop
// holds hits, while a pass is queued anyway (joining it is free), and
// from a probe's batch end until the next pass.
func (l *loopState) holding() bool {
	if l.hold || l.settleQueued {
		return true
	}
	l.ends++
	return l.ends > probeEvery
}

// passed records that a pass held n hits and sets the mode from it.
func (l *loopState) passed(n int) {
	m := &l.settleMode
	m.ends = 0
	m.perPass += (float64(n) - m.perPass) / passWeight
	switch {
	case m.perPass >= holdFrom:
		m.hold = true
	case m.perPass < askBelow:
		m.hold = false
	}
}

// holdHit holds the hit the conversation just decided (answerSettle) for
// the loop's settle pass; n is its request's length in bytes, left in the
// client's buffer until the pass.
func (s *session) holdHit(n int) {
	l := s.el
	s.settleN = n
	l.stats.inflight.Add(1) // Shutdown waits for its reply as for a forwarded one
	l.settling = append(l.settling, s)
	if l.settleQueued {
		return
	}
	if l.settleTask == nil {
		srv := s.srv
		l.settleTask = gnet.RunnableFunc(func(context.Context) error {
			l.settlePass(&srv.convEnv)
			return nil
		})
	}
	if err := l.evl.Execute(context.Background(), l.settleTask); err != nil {
		// The engine is stopping: its connections close with it.
		l.stats.inflight.Add(-int64(len(l.settling)))
		clear(l.settling)
		l.settling = l.settling[:0]
		return
	}
	l.settleQueued = true
}

// settlePass asks Fences.Unapplied once for the hits held since the last
// pass, then answers or decides again each of them, in the order they
// were held. The loop's task.
func (l *loopState) settlePass(env *convEnv) {
	l.settleQueued = false
	held := l.settling
	l.passed(len(held))
	l.settling, l.settlingSpare = l.settlingSpare[:0], nil
	l.unappliedAsked = false // everything held was read before this ask
	for _, s := range held {
		s.settleOK = s.pause == pauseSettle && l.settled(env.fences, s.settleHash) && env.cache.Current(&s.settleFound)
	}
	for i, s := range held {
		held[i] = nil
		l.stats.inflight.Add(-1)
		s.settle()
	}
	l.settlingSpare = held[:0]
}

// settle ends s's pauseSettle from the settle pass: the held hit is
// answered if the pass found it settled and current, and what waited
// behind it is parsed next; otherwise its request is parsed again and
// decided at once.
func (s *session) settle() {
	if s.pause != pauseSettle {
		return // settled at the client's EOF (settleNow)
	}
	if s.closing() || s.released() {
		s.pause, s.settleFound = pauseNone, hotcache.Found{}
		return
	}
	if s.answerHeld() {
		if !s.closing() && s.client.InboundBuffered() > 0 {
			s.processClient()
		}
		return
	}
	s.settleAgain = true
	s.processClient()
	s.settleAgain = false
}

// settleNow settles s's held hit at once, asking Fences.Unapplied for
// itself: the client's EOF was just read (halfClose), and what is left
// pending for Redis is decided next. Answered, the request is gone, as it
// would have been had the hit been answered when it was read; otherwise
// it is parsed again with the rest (halfConn.progress).
func (s *session) settleNow() {
	if s.pause != pauseSettle {
		return
	}
	l := s.el
	l.unappliedAsked = false
	s.settleOK = l.settled(s.srv.fences, s.settleHash) && s.srv.cache.Current(&s.settleFound)
	s.answerHeld()
}

// answerHeld ends s's pauseSettle and, if its verdict (settleOK) allows,
// answers the held hit: its request consumed, the cached reply written.
// It reports whether it answered.
func (s *session) answerHeld() bool {
	s.pause = pauseNone
	f := s.settleFound
	s.settleFound = hotcache.Found{}
	if !s.settleOK {
		return false
	}
	s.pauseCounted = false
	s.el.stats.hits.Add(1) // before the reply: a client that got it sees it counted
	_, _ = s.client.Discard(s.settleN)
	s.writeOut(f.Reply)
	return true
}
