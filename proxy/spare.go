package proxy

import (
	"context"
	"time"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Spares: upstream connections dialed before a client needs one.
//
// A client on a lane that needs a connection of its own (lane.go's pin:
// MULTI, WATCH, a blocking command, SUBSCRIBE) would wait for a dial: on
// loopback its first MULTI took 398-495 µs, 177-187 µs with a spare, and
// the next one 70-75 µs (medians of 300 clients, one loop,
// docs/how-it-works.md). So
// once an event loop has pinned a client it keeps one spare: a connection
// to Redis dialed ahead and left untouched, in the state of a fresh
// connection. The next client pinned on the loop takes it instead of
// dialing, and a new spare is dialed behind it. A loop whose clients
// never leave lanes dials no spare.
//
// A spare is what a connection dialed at that moment would be, or it is
// not used: it is closed, and the client dials as before, when the rules
// changed since it was dialed (identities.generation: a requirepass set
// since may or may not apply to it; a change made on Redis directly
// counts once Cicada has seen it, within --commandstats-interval, as for
// lanes), when it is older than half Redis's
// timeout (Redis may be closing it as idle), or when Redis has written
// on it or closed it (an error on connect, such as maxclients, may no
// longer hold; CLIENT KILL). Redis sees one idle connection per loop
// more, in CLIENT LIST and against maxclients (docs/limits.md).
//
// Nor is a spare given to a client that has had no reply from Redis on a
// lane (session.accepted): one Redis may not authenticate (requirepass),
// whose own connection may then never authenticate. Redis closes such a
// connection once the replies it holds outside its reply buffer pass
// 1 KB (CVE-2025-21605's fix), and shrinks the reply buffer of an idle
// connection from 16 KB to 1 KB within about a second
// (clientsCronResizeOutputBuffer): a pipeline of 100 refused GETs, which
// a new connection holds, closed the client on a spare
// (TestSpareNotForUnauthenticated). An authenticated connection has no
// such limit; the smaller buffer only counts up to 15 KB more against
// client-output-buffer-limit.

// spare is an event loop's spare upstream connection, from the start of
// its dial to its close. Owned by the loop, except gen, which the dialing
// goroutine sets before enrolling the connection on the loop.
type spare struct {
	l    *loopState
	conn gnet.Conn // nil until enrolled
	gen  uint64    // the rules generation when it was dialed
	at   int64     // the coarse clock when it was enrolled
}

// takeSpare returns the loop's spare, as a connection for a client the
// loop is pinning, or nil when it has none fit to be one; either way it
// starts dialing the next spare. The spare's gnet context is still the
// spare: the caller gives it its own. On the loop.
func (l *loopState) takeSpare(srv *Server) gnet.Conn {
	sp := l.spare
	if sp != nil && sp.conn == nil {
		return nil // still dialing
	}
	l.spare = nil
	l.dialSpare(srv)
	if sp == nil {
		return nil
	}
	l.stats.spares.Add(-1)
	c := sp.conn
	timeout := srv.settings.IdleTimeout()
	if sp.gen != srv.ids.generation() || (timeout > 0 && srv.clock.Load()-sp.at >= int64(timeout/2)) || !untouched(c) {
		_ = c.Close() // no longer the loop's spare: its OnClose does nothing
		return nil
	}
	return c
}

// untouched reports whether Redis has neither written on c nor closed it:
// a non-blocking peek at its socket finds nothing. gnet has read nothing
// from it either, or the spare would have been closed (onTraffic).
func untouched(c gnet.Conn) bool {
	var b [1]byte
	n, _, err := unix.Recvfrom(c.Fd(), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	return n < 0 && err == unix.EAGAIN
}

// spareAfter is how long after a spare is taken (or found missing) the
// next one is dialed: Redis accepting a connection while the client that
// took the spare makes its first request slowed that request (on
// loopback, the first MULTI of a client took 265-308 µs with the next
// spare dialed at once, 177-187 µs with it dialed 5 ms later, 398-495 µs
// with no spare; medians of 300 clients, one loop).
const spareAfter = 5 * time.Millisecond

// dialSpare has the loop's spare dialed in spareAfter if it has none
// (meanwhile its pins dial). On the loop.
func (l *loopState) dialSpare(srv *Server) {
	if l.spare != nil {
		return
	}
	sp := &spare{l: l}
	l.spare = sp
	time.AfterFunc(spareAfter, func() { sp.dial(srv) })
}

// dial connects the spare and enrolls it on its loop (dialInTurn) without
// waiting for a turn: while clients' dials use every one (a pool
// connecting at once), or when the dial fails, the loop's place is freed
// for a spare dialed at its next pin.
func (sp *spare) dial(srv *Server) {
	sp.gen = srv.ids.generation() // before the dial: a change during it makes the spare unfit
	dialed, err := dialInTurn(srv, sp, sp.l, false, nil)
	if dialed && err == nil {
		return
	}
	if err != nil {
		srv.log.Debug("spare upstream dial failed", zap.Error(err))
	}
	sp.forget()
}

// forget frees the loop's place of the spare whose dial was not made or
// failed. From the dialing goroutine: on the loop through Execute (which
// fails once the engine is stopping: nothing dials a spare then).
func (sp *spare) forget() {
	_ = sp.l.evl.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		if sp.l.spare == sp {
			sp.l.spare = nil
		}
		return nil
	}))
}

// onOpen keeps the enrolled connection c as the loop's spare, or closes
// it if the loop no longer expects it (the engine is stopping).
func (sp *spare) onOpen(c gnet.Conn, srv *Server) gnet.Action {
	if sp.l.spare != sp || srv.draining.Load() {
		return gnet.Close
	}
	sp.conn, sp.at = c, srv.clock.Load()
	sp.l.stats.spares.Add(1)
	return gnet.None
}

// onTraffic closes the spare: Redis wrote on a connection nothing was
// sent on (an error on connect), which a client dialing later may not get.
func (sp *spare) onTraffic() gnet.Action {
	sp.drop()
	return gnet.Close
}

// onClose forgets the spare if it is still the loop's (Redis closed it:
// its timeout, CLIENT KILL, a restart).
func (sp *spare) onClose() { sp.drop() }

// drop makes the spare no longer the loop's.
func (sp *spare) drop() {
	if sp.l.spare == sp && sp.conn != nil {
		sp.l.spare = nil
		sp.l.stats.spares.Add(-1)
	}
}

// giveSpare makes c, the loop's spare just taken, the own connection of
// session s, which waits for it as for a dial (upDialing, pauseRoute):
// session.onUpstreamOpen runs once the loop is done with what it is
// handling (pin is called in the middle of s's requests). Until then c's
// context is a handover, not the session's: gnet may run c's events
// first, and a spare Redis writes on or closes meanwhile (maxclients
// reached as it accepted it) is not given: the session dials instead, as
// it would have without a spare. On the loop.
func (l *loopState) giveSpare(s *session, c gnet.Conn) {
	h := &handover{}
	c.SetContext(h)
	err := l.evl.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		switch {
		case h.lost:
			_ = c.Close()
			if s.upLife == upDialing && !s.closing() {
				go s.dial()
			}
		default:
			c.SetContext(s.upLink)
			if s.onUpstreamOpen(c) == gnet.Close {
				_ = c.Close()
			}
		}
		return nil
	}))
	if err != nil {
		_ = c.Close() // the engine is stopping
	}
}

// handover is the gnet context of a spare between giveSpare and the
// session's onUpstreamOpen. Owned by the loop.
type handover struct {
	lost bool // Redis wrote on the spare or closed it: not to be given
}

// onTraffic closes the spare Redis wrote on before it was given.
func (h *handover) onTraffic() gnet.Action {
	h.lost = true
	return gnet.Close
}

// onClose notes that Redis closed the spare before it was given.
func (h *handover) onClose() { h.lost = true }
