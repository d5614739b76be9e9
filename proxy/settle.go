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
// (settleAgain).

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

// settle ends s's pauseSettle: the held hit is answered if its pass found
// it settled and current; otherwise its request is parsed again and
// decided at once. What waited behind it is parsed next. A client that
// half-closed meanwhile (half.go) is answered the same way, then goes on
// toward its EOF; if halfConn.progress ran first, it sent the request to
// Redis unframed and ended the pause, and nothing is left to do here.
func (s *session) settle() {
	if s.pause != pauseSettle {
		return
	}
	s.pause = pauseNone
	f := s.settleFound
	s.settleFound = hotcache.Found{}
	if s.closing() || s.released() {
		return
	}
	if !s.settleOK {
		s.settleAgain = true
		s.parseOn()
		s.settleAgain = false
		return
	}
	s.pauseCounted = false
	s.el.stats.hits.Add(1) // before the reply: a client that got it sees it counted
	_, _ = s.client.Discard(s.settleN)
	_, _ = s.client.Write(f.Reply)
	s.checkOutput()
	if _, half := s.client.(*halfConn); half || (!s.closing() && s.client.InboundBuffered() > 0) {
		s.parseOn() // a half-closed client's goes on even with nothing left: its EOF
	}
}
