package proxy

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// dial connects session s's own upstream connection and enrolls it on
// its loop (session.onUpstreamOpen takes it from there), in its turn
// (dialInTurn). A client that left while its dial waited its turn gets
// none (a storm of clients connecting and closing at once would otherwise
// queue dials, goroutines and memory without bound, and delay every new
// client behind them). A failed dial closes the client (dialFailureReply).
func (s *session) dial() {
	dialed, err := dialInTurn(s.srv, s.upLink, s.el, true, s.left.Load)
	if !dialed || err == nil {
		return
	}
	// On the loop: the client may have shut down its side meanwhile (half.go).
	if s.el.evl.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		s.dialFailed(err)
		return nil
	})) != nil {
		_ = s.client.Close() // the engine is stopping
	}
}

// dialInTurn dials Redis and enrolls the connection on event loop l with
// gnet context ctx (enroll), as one of at most DialsInFlight dials at once
// (srv.dials), so that their descriptors fit in what MaxClientsFor
// reserves. It waits for a turn, or with wait false gives up at once when
// none is free. It makes no dial (dialed false) without a turn, once the
// engine is stopping (its loop may not run the enrollment), or when gone
// (nil: never) reports, once the turn has come, that the dial is no
// longer wanted; err is the dial's or the enrollment's. Runs on its
// caller's own goroutine: never dial on a loop.
func dialInTurn(srv *Server, ctx any, l *loopState, wait bool, gone func() bool) (dialed bool, err error) {
	if wait {
		srv.dials <- struct{}{}
	} else {
		select {
		case srv.dials <- struct{}{}:
		default:
			return false, nil
		}
	}
	defer func() { <-srv.dials }()
	if srv.draining.Load() || (gone != nil && gone()) {
		return false, nil
	}
	return true, enroll(srv, ctx, l.evl)
}

// dialFailed closes the client of session s, whose upstream connection
// (its own, or the lane it waited for) could not be dialed: err. Counted
// as an upstream error per client, logged once per burst. On the loop.
func (s *session) dialFailed(err error) {
	srv := s.srv
	srv.upstreamErrors.Add(1)
	srv.dialFailures.note(srv.log, err, time.Now())
	if !s.closing() {
		s.life = clientClosing
		if reply := dialFailureReply(err); reply != nil {
			_, _ = s.client.Write(reply)
		}
		_ = s.client.Close()
	}
}

// dial connects the lane and enrolls it on its loop (lane.onOpen takes it
// from there), in its turn (dialInTurn); a failed dial ends the lane
// (lane.fail) on the loop.
func (ln *lane) dial() {
	dialed, err := dialInTurn(ln.srv, ln, ln.l, true, nil)
	if !dialed || err == nil {
		return
	}
	// Fails only once the engine is stopping: nothing waits then.
	_ = ln.l.evl.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		ln.fail(err)
		return nil
	}))
}

// dialFailureReply is what a client whose upstream dial failed with err
// gets before its connection is closed. Out of descriptors, Cicada is out
// of room for clients: Redis's reply to a client over its maxclients
// (which clients retry). Otherwise Redis is down or unreachable: nothing,
// as a connection to a Redis that went away gets nothing (a client of a
// Redis that is down has its connection refused, which Cicada, having
// accepted it, cannot do; an error reply would reach the application as
// Redis's answer to its command).
func dialFailureReply(err error) []byte {
	if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
		return maxClientsReply
	}
	return nil
}

// maxClientsReply is Redis's reply to a connection over maxclients.
var maxClientsReply = []byte("-ERR max number of clients reached\r\n")

// enroll dials Redis and enrolls the connection on loop el with gnet
// context ctx (a session's upstreamLink, a lane). It returns once gnet has
// closed the dialed socket, keeping only its duplicate (gnet's Enroll
// closes it after the result is sent, and closes the channel after that).
func enroll(srv *Server, ctx any, el gnet.EventLoop) error {
	nc, err := srv.dialer.Dial("tcp", srv.cfg.Upstream)
	if err != nil {
		return err
	}
	ch, err := el.Enroll(gnet.NewContext(context.Background(), ctx), nc)
	if err != nil {
		_ = nc.Close()
		return err
	}
	r := <-ch
	for range ch { // closed once the dialed socket is
	}
	return r.Err
}

// burstEvery is how often, at most, a burst of failures is logged.
const burstEvery = 10 * time.Second

// burstLog logs failures that come in bursts (a pool of clients
// connecting while Redis is down) once per burst: the first at once,
// then at most one line per burstEvery, each with the number of failures
// since the line before. Safe from any goroutine.
type burstLog struct {
	mu       sync.Mutex // guards the following
	last     time.Time  // when the last line was written; zero before the first
	unlogged int        // failures since then
}

// note counts one failure at now and logs it if no line was written for
// burstEvery.
func (b *burstLog) note(log *zap.Logger, err error, now time.Time) {
	b.mu.Lock()
	b.unlogged++
	if !b.last.IsZero() && now.Sub(b.last) < burstEvery {
		b.mu.Unlock()
		return
	}
	n := b.unlogged
	b.last, b.unlogged = now, 0
	b.mu.Unlock()
	log.Warn("upstream connection failed; client closed", zap.Error(err), zap.Int("clients", n),
		zap.Duration("next_report_after", burstEvery))
}
