package proxy

import (
	"context"
	"math/bits"
	"net"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"

	"github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/hotkeys"
	"github.com/cicada-proxy/cicada/resp"
)

// clientConn is what a session uses of its client connection: the gnet
// connection, or once the client has shut down its sending side, the
// halfConn standing in for it (half.go).
type clientConn interface {
	Peek(n int) ([]byte, error)
	Discard(n int) (int, error)
	InboundBuffered() int
	Write(p []byte) (int, error)
	Writev(bs [][]byte) (int, error)
	OutboundBuffered() int
	SetLinger(sec int) error
	Close() error
	Wake(callback gnet.AsyncCallback) error
	RemoteAddr() net.Addr
}

// session is one client connection and its upstream connection: the gnet
// adapter around the connection's conversation. It does the I/O of both
// connections (reads, writes, closes, the half-closed client of half.go),
// the limits (limits.go) and the timers, and hands each complete request
// and each reply to the conversation, which decides. Where each of its
// two connections is in its life is life and upLife; it releases what it
// holds once, when the first of them ends. Owned by the event loop of both
// connections.
type session struct {
	conversation

	srv     *Server
	el      *loopState // the event loop's state; the conversation sees its loopEnv
	loopIdx int        // in el.sessions
	client  clientConn
	up      gnet.Conn // its own upstream connection; nil until one is enrolled
	life    clientLife
	upLife  upLife
	// lane is the lane its requests go on while the conversation is
	// shared (lane.go): the one they are in flight on, if any.
	lane *lane
	// laneSent is how many bytes of requests the session wrote on its lane
	// since the lane last owed it nothing: what Redis has not answered, in
	// its socket or query buffer, or in the lane's buffer in Cicada
	// (counted as its own connection's would be, see backlog).
	laneSent int64
	// upUsed is the coarse clock when a request last went on its own
	// connection (keepOwn).
	upUsed int64
	// lastRead is the coarse clock when the client last sent bytes: Cicada
	// applies Redis's timeout to a client on a lane (shrinkIdle).
	lastRead   int64
	drainWait  time.Duration // closeWhenFlushed's current poll interval
	drainArmed bool          // its timer is pending
	upLink     *upstreamLink
	// settleN is the length in bytes of the request of the hit held for
	// the settle pass (pauseSettle, settle.go); settleOK is that pass's
	// verdict on it.
	settleN  int
	settleOK bool
	// left is set on the loop once the client connection is gone
	// (finishClose) and read by the dial goroutine, so that a dial
	// waiting its turn is not made for a client that left.
	left atomic.Bool

	// partial holds client bytes taken out of gnet (processClient, on the
	// session's loop): a request in progress of at least partialMin bytes
	// and whatever followed it. gnet's Peek copies all the bytes it holds
	// into one buffer at every read, which made a big request sent in many
	// small reads cost quadratic time; here each read's bytes are appended
	// once. nil when empty.
	partial []byte

	// Limits (limits.go).
	softSince int64 // clock+1 when unread replies reached the soft limit, 0 if below
	held      int64 // bytes held for the client at its last charge
	evicted   bool  // closed for max-client-memory (closeFor)
	unchecked int   // requests parsed since the input limits were last checked in processClient
}

// clientLife is where the client connection of a session is in its life.
// It only moves forward, one way or another through the list:
//
//	clientOpen ─► clientHalf ─► clientClosing ─► clientGone
//	     └──────────────┴──────────────┴─────────────┘
//
// A session releases what it holds in shared state (release) once, when
// the first of its two connections ends: the client's reaches clientGone
// or the upstream's upClosed.
type clientLife uint8

const (
	// clientOpen: the gnet connection; requests are read, replies written.
	clientOpen clientLife = iota
	// clientHalf: the client ended its side with work left for Redis;
	// session.client is a halfConn (half.go) until Redis closes.
	clientHalf
	// clientClosing: Close was called (a limit, Redis's close, a failed
	// dial); nothing more is read or written; the close is still to be
	// handled.
	clientClosing
	// clientGone: its close was handled (finishClose): the session is
	// unregistered and released.
	clientGone
)

// upLife is where the session's own upstream connection is in its life.
// It only moves forward:
//
//	upNone ─► upDialing ─► upOpen ─► upShut ─► upInvalid ─► upClosed
//
// skipping any state but the last.
type upLife uint8

const (
	// upNone: no connection of its own yet: its requests go on lanes
	// (lane.go).
	upNone upLife = iota
	// upDialing: session.up is nil; the dial waits its turn or runs.
	upDialing
	// upOpen: enrolled; requests written, replies framed.
	upOpen
	// upShut: shut down for writing once the half-closed client's last
	// bytes were sent (half.go); replies still come.
	upShut
	// upInvalid: Redis sent bytes that are not RESP; nothing more is
	// framed and the connection is being closed.
	upInvalid
	// upClosed: closed, by Redis or by Cicada.
	upClosed
)

// closing reports whether the client connection is closed or being
// closed: nothing more is read from it or written to it.
func (s *session) closing() bool { return s.life >= clientClosing }

// released reports whether the session has given back what it held in
// shared state: one of its connections has ended.
func (s *session) released() bool { return s.life == clientGone || s.upLife == upClosed }

// end records the end of the client connection (client) or of the
// upstream one; the first of the two releases the session.
func (s *session) end(client bool) {
	first := !s.released()
	if client {
		s.life = clientGone
	} else {
		s.upLife = upClosed
	}
	if first {
		s.release()
	}
}

// newSession returns the session of client connection c on the event loop
// whose state is l, its upstream connection not dialed yet.
func newSession(srv *Server, l *loopState, c clientConn) *session {
	s := &session{conversation: newConversation(&srv.convEnv, &l.loopEnv), el: l, srv: srv, client: c}
	s.wakeFill = s.fillWake
	return s
}

// upstreamLink is the gnet context of an upstream connection.
type upstreamLink struct{ s *session }

// onClientTraffic parses what the client sent and answers or forwards it.
func (s *session) onClientTraffic() gnet.Action {
	if s.closing() {
		return gnet.Close
	}
	if s.upLife == upClosed {
		// Redis closed the connection: it reads nothing more.
		if n := s.client.InboundBuffered(); n > 0 {
			_, _ = s.client.Discard(n)
		}
		s.partial = nil
		s.closeWhenFlushed()
		return gnet.None
	}
	s.lastRead = s.srv.clock.Load()
	if s.overInputLimits() {
		return gnet.None
	}
	if (!s.shared && s.up == nil) || s.pause != pauseNone || s.srv.draining.Load() {
		return gnet.None // bytes stay buffered in gnet until we can use them
	}
	s.processClient()
	if s.closing() {
		return gnet.Close
	}
	return gnet.None
}

// inbound is how many bytes the client sent that are not parsed yet (or
// wait behind a paused request).
func (s *session) inbound() int { return s.client.InboundBuffered() + len(s.partial) }

// overInputLimits closes the client and reports true if what it sent and
// Redis has not processed (unparsed, in gnet or in partial, or parsed and
// waiting to go to Redis or for its answer) is over the query-buffer
// limit, or over the client-memory budget (chargeMemory).
func (s *session) overInputLimits() bool {
	if q := int64(s.inbound()) + s.backlog(); q > s.srv.cfg.QueryBufferLimit {
		s.closeFor(closeQueryBuffer, q) // Redis: "closing client that reached max query buffer length"
		return true
	} else if q >= heavyBytes && s.chargeMemory() {
		return true
	}
	return false
}

// inputCheckEvery is how many requests processClient parses between two
// checks of the input limits: 4096 requests in flight are 288 KB of
// bookkeeping.
const inputCheckEvery = 4096

// partialMin is the size from which a request in progress is moved out of
// gnet into session.partial.
const partialMin = 4 << 10

// processClient handles every complete request in the client's buffer
// until it is empty, a request is incomplete, or parsing pauses.
func (s *session) processClient() {
	c := s.client
	_, half := c.(*halfConn)
	buf, _ := c.Peek(-1)
	held := s.partial != nil
	if held {
		s.partial = append(s.partial, buf...)
		if len(buf) > 0 { // gnet's Discard(0) discards everything
			_, _ = c.Discard(len(buf))
		}
		buf = s.partial
	}
	if len(buf) == 0 {
		return
	}
	l := s.el
	if s.shared && s.lane != nil && s.lane.life == laneClosed {
		s.setLane(nil) // it died with nothing of ours in flight: take another
		s.on = shareKey{}
	}
	if s.shared && s.sent.len() == 0 && s.on != s.shareKey() && !l.switchLane(s, s.shareKey()) && s.pause != pauseNone {
		// Nothing is parsed before the client has the lane of its state
		// (its first request included: a fresh connection's requests are
		// served, refused or closed as Redis would, see
		// lane.setupReplied), or has been given its own connection.
		return
	}
	if s.shared && s.lane != nil && s.lane.full(0) {
		s.pause = pauseRoute // Redis is behind on the lane: wait for its replies (lane.onTraffic)
		s.lane.wait(s)
		return
	}
	l.out = l.out[:0]
	l.upv, l.upvBytes = l.upv[:0], 0
	l.inject = l.inject[:0]  // upv holds parts of it until the Writev below
	l.unappliedAsked = false // these requests were sent before this read: ask again
	off, fwd := 0, 0         // bytes [fwd, off) are to be forwarded
	queued := s.queuedN      // the batch's replies to come are the requests it queues
	if s.input != inputOpen {
		// Redis reads nothing after a protocol error or QUIT.
		if held {
			s.partial = nil
		} else {
			_, _ = c.Discard(len(buf))
		}
		return
	}
	for off < len(buf) && s.pause == pauseNone && s.input == inputOpen && !s.closing() && !s.released() {
		if s.shared && off > fwd && s.lane.full(l.upvBytes+int64(off-fwd)) {
			// What the batch adds to the lane's requests in flight
			// reaches laneInflight: it goes now (forward, below), and the
			// rest waits for replies.
			s.pause = pauseRoute
			s.lane.wait(s)
			break
		}
		n, r := s.parser.Parse(buf[off:])
		switch r {
		case resp.NeedMore:
			off += n // a streamed command's bytes: forwarded
		case resp.Empty:
			if fwd == off {
				fwd += n // nothing pending: drop the no-op bytes
			}
			off += n
			continue
		case resp.Oversize:
			if s.shared {
				// Too large for a lane: it goes on the client's own
				// connection, parsed again there (unheld).
				s.route(decideOwn)
			}
			continue // a command held before its client left its lane: parsed again unheld
		case resp.ProtocolError:
			if s.shared {
				// Redis closes the connection that sends it: the client's
				// own, where it is parsed again.
				s.route(decideOwn)
				continue
			}
			// Redis gets the bytes it needs to see the same error, replies
			// and closes. Sending more would make it reset the connection
			// with unread input, and its reply could be lost.
			s.protocolError()
			off = min(off+s.parser.ErrEnd(), len(buf))
			if off > fwd {
				l.upv = append(l.upv, buf[fwd:off])
			}
			fwd, off = len(buf), len(buf)
		case resp.Complete:
			var d decision
			if s.srv.hk.On() { // the only cost of HOTKEYS while no session runs
				d = s.onRequestCounted(n)
			} else {
				// A hit that ends the batch may wait for the settle pass
				// (settle.go): nothing behind it waits with it.
				l.mayDefer = !held && off+n == len(buf) && !half && l.holding()
				d = s.onRequest(n)
				l.mayDefer = false
			}
			// Requests held back by a pause are parsed at once when it ends:
			// their bookkeeping counts against the limits every
			// inputCheckEvery requests, not only when the client is read.
			if s.unchecked++; s.unchecked >= inputCheckEvery {
				if s.unchecked = 0; s.overInputLimits() {
					return
				}
			}
			switch d {
			case decidePause:
				switch s.pause {
				case pauseNone:
					s.pause = pauseReplies
				case pauseSettle:
					s.holdHit(n)
				}
				continue
			case decideOwn, decideSwitch:
				s.route(d) // parsed again on the connection it needs, or paused
				continue
			case decideLocal:
				off += n
				fwd = off
				if len(l.out) >= localFlush {
					// Write as Redis adds replies, so output limits
					// apply within a long pipeline of hits too.
					s.flushOut() // may close the client: the loop ends
				}
				continue
			case decideInject, decidePrefix:
				if d == decideInject {
					off += n
				}
				l.upv = append(l.upv, buf[fwd:off], l.injected)
				l.upvBytes += int64(off - fwd + len(l.injected))
				fwd = off
				if d == decidePrefix {
					off += n // forwarded with what follows
				}
				if len(l.upv) >= maxUpv {
					s.forward(&queued)
				}
				continue
			}
			off += n
			continue
		}
		break
	}
	if off > fwd {
		l.upv = append(l.upv, buf[fwd:off])
	}
	if s.input == inputQuit {
		off = len(buf) // dropped, as Redis does
	}
	s.flushOut()
	s.forward(&queued)
	switch {
	case s.closing():
	case held:
		// Keep what is left (Writev copied what it did not send).
		s.partial = s.partial[:copy(s.partial, s.partial[off:])]
		if len(s.partial) == 0 {
			s.partial = nil
		}
	case len(buf)-off >= partialMin && s.parser.InProgress():
		s.partial = append(make([]byte, 0, 2*(len(buf)-off)), buf[off:]...)
		_, _ = c.Discard(len(buf))
	case off > 0: // gnet's Discard(0) discards everything
		_, _ = c.Discard(off)
	}
}

// maxUpv bounds the slices gathered for one Writev upstream, as maxDownv
// does toward the client: a pipeline that fills many keys adds two per
// fill (its GET, then Cicada's PTTL).
const maxUpv = 512

// forward writes the bytes the batch gathered for Redis: on the session's
// lane, which then owes it a reply for each request queued since queued
// (the queuedN of the last forward), or on its own connection.
func (s *session) forward(queued *uint64) {
	l := s.el
	if len(l.upv) > 0 && !s.released() {
		s.lastForward = s.srv.clock.Load()
		if s.shared {
			for _, b := range l.upv {
				s.laneSent += int64(len(b))
			}
			s.lane.send(s, l.upv, int(s.queuedN-*queued))
		} else {
			s.upUsed = s.lastForward
			if _, err := s.up.Writev(l.upv); err != nil {
				s.srv.log.Debug("upstream write failed", zap.Error(err))
			}
		}
	}
	*queued = s.queuedN
	l.upv, l.upvBytes = l.upv[:0], 0
	l.inject = l.inject[:0] // written: Writev copied what the socket did not take
}

// route handles a request the conversation could not decide where it is
// (decideOwn, decideSwitch): with replies in flight it waits for them
// (they are on the lane it is on); then it moves to the lane it asked for
// and is parsed again at once if that lane is open, or waits
// (pauseRoute) for the lane or for a connection of its own.
func (s *session) route(d decision) {
	switch {
	case s.sent.len() > 0:
		s.pause = pauseReplies
	case d == decideSwitch:
		s.el.switchLane(s, s.want)
	default:
		s.el.pin(s)
	}
}

// repliesIn runs when a lane has delivered every reply it owed s: s
// parses what waited for them, or, half-closed, goes on toward its own
// connection (halfConn.progress).
func (s *session) repliesIn() {
	if h, half := s.client.(*halfConn); half && s.shared {
		h.progress()
		return
	}
	s.resume(pauseReplies)
}

// localFlush is how many bytes of local answers a batch collects before
// writing them to the client (and checking its output limits).
const localFlush = 64 << 10

// flushOut writes the loop's pending local answers to the client.
func (s *session) flushOut() {
	l := s.el
	if len(l.out) > 0 && !s.closing() {
		s.writeOut(l.out)
	}
	l.out = l.out[:0]
}

// writeOut writes b, answers Cicada made, to the client, cut into pieces
// (see piece), and checks its output limits. Not through downv: it runs
// while fromUpstream gathers another session's replies there (a fill's
// reply wakes the reads that waited for it).
func (s *session) writeOut(b []byte) {
	if len(b) <= pieceMin {
		_, _ = s.client.Write(b)
	} else {
		l := s.el
		v := l.outv[:0]
		for len(b) > 0 {
			if len(v) == maxDownv {
				_, _ = s.client.Writev(v)
				v = v[:0]
			}
			n := piece(len(b))
			v = append(v, b[:n])
			b = b[n:]
		}
		_, _ = s.client.Writev(v)
		clear(v)
		l.outv = v[:0]
	}
	s.checkOutput()
}

// onUpstreamOpen links the session's own enrolled upstream connection to
// it. A client that was on lanes first has the connection given its
// state (conversation.setup) before anything else goes on it.
func (s *session) onUpstreamOpen(c gnet.Conn) gnet.Action {
	if s.closing() || s.upLife == upClosed {
		return gnet.Close
	}
	s.up, s.upLife = c, upOpen
	s.el.stats.own.Add(1)
	if s.pause == pauseRoute {
		if s.setupOwn(); s.pause != pauseNone {
			return gnet.None
		}
	}
	if h, half := s.client.(*halfConn); half {
		h.progress()
	} else {
		s.processClient()
	}
	return gnet.None
}

// setupOwn gives the session's own connection the client's state, as it
// comes back from lanes (conversation.setup), before anything else goes
// on it: the session waits for Redis's answers (pauseSetup) if there was
// anything to give.
func (s *session) setupOwn() {
	s.pause = pauseNone
	if b := s.setup(nil); len(b) > 0 {
		s.pause = pauseSetup
		s.upUsed = s.srv.clock.Load()
		_, _ = s.up.Write(b) // a failure closes it: onUpstreamClose
	}
}

// keepOwn sends a PING, whose reply is dropped, on the own connection of
// a client that is on lanes, when the connection has carried nothing for
// half Redis's timeout: Redis would close it as idle, and with it the
// client (docs/limits.md). Parsing waits for the reply (nothing may be in
// flight on two connections). On the loop, from its sweep.
func (s *session) keepOwn(now int64, timeout time.Duration) {
	if timeout <= 0 || !s.shared || s.upLife != upOpen || s.sent.len() > 0 || s.pause != pauseNone ||
		s.closing() || now-s.upUsed < int64(timeout/2) {
		return
	}
	s.upUsed = now
	s.queue(request{kind: expectDrop})
	s.pause = pauseReplies
	_, _ = s.up.Write(pingCmd)
}

// pingCmd is the PING of keepOwn.
var pingCmd = resp.AppendCommand(nil, []byte("PING"))

// onClientClose handles the end of the gnet client connection c: if the
// client ended it with work left for Redis, the session goes on without
// it (halfClose); otherwise it is torn down.
func (s *session) onClientClose(c gnet.Conn, err error) {
	if err != nil && halfClose(s, c, err) {
		return
	}
	s.finishClose()
}

// finishClose tears the session down once its client connection is gone.
// Its lane no longer counts it (a lane no client has is closed once
// idle, closeIdle); replies the lane still owes it are framed and dropped.
func (s *session) finishClose() {
	s.left.Store(true)
	s.srv.conns.Add(-1)
	s.untrack()
	s.el.unregister(s)
	s.setLane(nil)
	if s.up != nil && s.upLife != upClosed {
		_ = s.up.Close()
	}
	s.end(true)
}

// onUpstreamClose tears the session down after Redis closed the connection
// (QUIT, CLIENT KILL, a restart, a protocol error): the client sees the
// replies Redis sent before (salvage) and the same close. A half-closed
// client is closed at once: Redis read its EOF and freed it, dropping any
// reply not yet written, and so does Cicada.
func (s *session) onUpstreamClose(c gnet.Conn) {
	if s.upLife >= upOpen {
		s.el.stats.own.Add(-1)
	}
	s.salvage(c)
	s.upstreamEnded()
}

// laneLost ends the session whose replies in flight a lane lost (lane.go):
// its own connection would have died with them.
func (s *session) laneLost() {
	if !s.released() {
		s.upstreamEnded()
	}
}

// upstreamEnded ends the session once Redis closed its connection, after
// the replies Redis sent before.
func (s *session) upstreamEnded() {
	s.end(false)
	if s.life == clientHalf {
		s.life = clientClosing
		_ = s.client.Close()
		return
	}
	s.closeWhenFlushed()
}

// closeWhenFlushed closes the client once gnet has written every reply
// still pending for it (gnet's Close would make only one attempt): Redis
// too writes everything before it closes a connection. It polls with Wake,
// gnet having no "drained" callback; a client that never reads stays until
// it goes away.
func (s *session) closeWhenFlushed() {
	if s.closing() {
		return
	}
	if s.client.OutboundBuffered() == 0 {
		s.life = clientClosing
		_ = s.client.Close()
		return
	}
	if s.drainArmed {
		return // one wake-up chain per connection, whatever the client sends
	}
	s.drainArmed = true
	s.drainWait = min(max(2*s.drainWait, time.Millisecond), 100*time.Millisecond)
	c := s.client
	time.AfterFunc(s.drainWait, func() { _ = c.Wake(s.drainWoken) })
}

// drainWoken runs on the loop when closeWhenFlushed's timer fires.
func (s *session) drainWoken(gnet.Conn, error) error {
	s.drainArmed = false
	s.closeWhenFlushed()
	return nil
}

// release gives back everything the session holds in shared state: write
// stripes, cache suspensions. A write still in flight may yet execute; its
// keyspace notification then evicts like any write from outside Cicada.
// Called once, by end.
func (s *session) release() {
	s.dropSent()
	s.abandonTx()
}

// onUpstreamTraffic frames Redis's replies, settles the requests they answer,
// and passes every byte except Cicada's own PTTL replies to the client.
func (s *session) onUpstreamTraffic() gnet.Action {
	if s.released() {
		return gnet.Close
	}
	buf, _ := s.up.Peek(-1)
	off, _, ok := s.fromUpstream(buf, 0)
	if !ok {
		s.upLife = upInvalid
		return gnet.Close
	}
	if off > 0 { // gnet's Discard(0) discards everything
		_, _ = s.up.Discard(off)
	}
	if s.setupFailed && !s.closing() {
		// Redis refused the client's state on its own connection (its db,
		// protocol, name): nothing can be sent on it for the client.
		s.srv.log.Warn("a client's own connection could not be given the state it had on a lane; client closed",
			zap.String("client", s.client.RemoteAddr().String()))
		s.closeWhenFlushed()
		return gnet.None
	}
	s.resume(pauseReplies)
	s.resume(pauseSetup)
	return gnet.None
}

// resume ends s's pause if it is for reason p and nothing holds it any
// more (no reply outstanding, both connections open, no drain), and parses
// what waited, starting with the request that paused.
func (s *session) resume(p pause) {
	// A client waiting for a lane's backlog to fall may have requests in
	// flight on it; every other pause is left with none. (pauseNone:
	// what a pause left waiting goes on, the pause ended by its caller.)
	if s.pause != p || (s.sent.len() > 0 && p != pauseRoute) || s.closing() || s.released() || s.srv.draining.Load() {
		return
	}
	s.pause = pauseNone
	s.fillWaited = p == pauseFill
	if h, half := s.client.(*halfConn); half {
		h.progress()
	} else {
		s.processClient()
	}
}

// fillWake asks s's loop to resume s, which waits for another
// connection's fill or write-through (pauseFill), once the callback that
// ended it returns: it must not run inside that connection's processing.
// Safe from any goroutine (a write-through ends on its writer's loop, a
// wait's time limit on a timer's goroutine): it reads only s.el, set at
// creation.
func (s *session) fillWake() {
	_ = s.el.evl.Execute(context.Background(), gnet.RunnableFunc(s.fillWoken))
}

// fillWoken runs on s's loop after the fill or write-through s waited for
// ended, or the wait's time ran out; a no-op if s is no longer waiting.
func (s *session) fillWoken(context.Context) error {
	s.resume(pauseFill)
	return nil
}

// fromUpstream frames buf, every byte Redis sent for the session that the
// last call did not consume, writes the client's part of it to the
// client, and returns how many bytes it consumed (all but a partial
// header line at the end) and how many frames it completed, at most
// limit when limit > 0 (a lane's bytes beyond are other sessions').
// ok=false: the stream is not RESP; nothing more can be framed. A
// released session's replies are framed and dropped.
func (s *session) fromUpstream(buf []byte, limit int) (off, frames int, ok bool) {
	l := s.el
	l.downv = l.downv[:0]
	fwd := 0 // bytes [fwd, off) go to the client
	for off < len(buf) && (limit <= 0 || frames < limit) {
		if s.opacity == opaque {
			off = len(buf)
			break
		}
		if !s.framer.InProgress() {
			s.startFrame(buf[off])
			if s.opacity == opaque {
				continue
			}
			if limit > 0 && buf[off] == resp.TypePush {
				// A push on a lane, which subscribes to nothing and tracks
				// nothing, belongs to none of its clients (an invalidation
				// another client REDIRECTed to the lane's id): dropped.
				s.reply = replySwallow
			}
			if s.reply.withheld() && off > fwd {
				s.down(buf[fwd:off])
			}
		}
		hr := s.hkFrame // nil unless a HOTKEYS session counts this reply
		var t0 time.Time
		if hr != nil && hr.tk.Sampled {
			t0 = time.Now()
		}
		n, done, err := s.framer.Feed(buf[off:])
		if err != nil {
			s.srv.log.Error("invalid reply from upstream; closing the connection",
				zap.Error(err), zap.String("client", s.client.RemoteAddr().String()))
			s.srv.upstreamErrors.Add(1)
			// The replies before it are the client's, as if Redis had
			// closed the connection after them.
			if off > fwd && !s.reply.withheld() {
				s.down(buf[fwd:off])
			}
			s.flushDown()
			return off, frames, false
		}
		if s.reply == replyCapture {
			s.captureBytes(buf[off : off+n])
		}
		if s.reply.rewrites() {
			s.rewriteBuf = append(s.rewriteBuf, buf[off:off+n]...)
			if s.rewriteGiveUp() {
				// Pass on what was held and the rest as it comes.
				s.down(s.rewriteBuf)
				s.rewriteBuf = nil
				s.reply, s.rewriting = replyPass, cluster.ReplyNone
				fwd = off + n
			}
		}
		off += n
		if s.reply.withheld() {
			fwd = off
		}
		if hr != nil {
			s.hkBytes += uint64(n)
		}
		if !done {
			if hr != nil && hr.tk.Sampled {
				s.hkNs += int64(time.Since(t0))
			}
			break
		}
		fr := s.framer.Frame()
		s.onFrame(fr)
		if limit <= 0 || fr.Value.Type != resp.TypePush {
			frames++
		}
		switch m := s.srv.cfg.AddrMap; s.reply {
		case replyRewriteTopology:
			s.down(m.Rewrite(s.rewriting, s.rewriteBuf))
		case replyRewriteExec:
			s.down(m.RewriteExec(s.rewriteBuf, s.rewriteExec))
		case replyRewriteError:
			b, ok := m.RewriteRedirect(s.rewriteBuf)
			if !ok {
				b = s.rewriteBuf
			}
			s.down(b)
		}
		if s.reply.rewrites() {
			s.rewriting, s.rewriteBuf = cluster.ReplyNone, nil
		}
		s.reply = replyPass
		if hr != nil {
			s.hkFrameDone(hr, t0)
		}
	}
	if off > fwd {
		s.down(buf[fwd:off])
	}
	s.flushDown()
	return off, frames, true
}

// maxDownv bounds the slices gathered for one Writev: the kernel refuses
// more than IOV_MAX (1024) and gnet closes the connection when it does.
const maxDownv = 256

// down queues b for the client, cut into pieces (see piece), writing what
// is queued first when the gather list is full (a read of thousands of
// rewritten redirects, a reply of hundreds of MB).
func (s *session) down(b []byte) {
	for len(b) > 0 {
		if len(s.el.downv) == maxDownv {
			s.flushDown()
		}
		n := piece(len(b))
		s.el.downv = append(s.el.downv, b[:n])
		b = b[n:]
	}
}

// pieceMin and pieceMax bound the pieces down cuts: what the client's
// socket does not take, gnet copies into a buffer of its own per slice
// (elastic.Buffer's list), sized to the next power of two
// (pkg/pool/byteslice): a cached 1 MB value's reply, 1 MiB and 10 bytes,
// took 2 MiB, and a client that reads nothing held twice the bytes
// max-client-memory counts (TestSlowReaderFlood with one loop: RSS 405 MB
// over a 256 MB bound). Cut at powers of two, a reply wastes less than
// pieceMin bytes. Below pieceMin a slice stays whole: one write call, as
// before, for every small reply.
const (
	pieceMin = 4 << 10
	pieceMax = 1 << 20
)

// piece is how many bytes of a slice of n bytes down queues as one: n up
// to pieceMin, else the largest power of two at most n, up to pieceMax.
func piece(n int) int {
	if n <= pieceMin {
		return n
	}
	return min(1<<(bits.Len(uint(n))-1), pieceMax)
}

// flushDown writes the queued bytes to the client (gnet copies what the
// socket does not take) and checks its output limits (also while a large
// reply is held for rewriting).
func (s *session) flushDown() {
	l := s.el
	switch {
	case len(l.downv) > 0 && !s.closing():
		_, _ = s.client.Writev(l.downv)
		s.checkOutput()
	case cap(s.rewriteBuf) >= heavyBytes && !s.closing():
		s.checkOutput() // a reply held for rewriting counts too
	}
	l.downv = l.downv[:0]
}

// salvageMax bounds what salvage reads: more than a socket's receive
// buffer holds.
const salvageMax = 16 << 20

// salvage passes on the replies Redis sent before it closed the upstream
// connection that gnet has not read. gnet closes a connection whose write
// fails before it reads what arrived, and a write fails when Redis reset the
// connection: Redis closes with input unread after a protocol error it
// found at a header whose bulk Cicada was still streaming (a length over
// proto-max-bulk-len, or over 16 KiB before authentication). A client of
// Redis reads those replies; so must a client of Cicada. Runs in OnClose,
// where the descriptor is still open.
func (s *session) salvage(c gnet.Conn) {
	if s.released() || s.closing() || s.upLife == upInvalid {
		return
	}
	if buf := unread(c); buf != nil {
		_, _, _ = s.fromUpstream(buf, 0)
	}
}

// shrink frees the buffers of s grown past their initial size, if
// nothing is in flight (see shrinkEvery): the conversation's, and a
// request in progress kept in partial keeps its bytes, not the room a
// large pipeline once needed.
func (s *session) shrink() {
	if s.closing() || !s.conversation.shrink() {
		return
	}
	if s.partial != nil && cap(s.partial) > shrinkSlack<<10 && cap(s.partial) > 4*len(s.partial) {
		s.partial = append(make([]byte, 0, len(s.partial)), s.partial...)
	}
}

// onRequest decides a complete request: HOTKEYS, which Cicada answers
// itself (onHotkeys), or whatever the conversation decides (onCommand).
func (s *session) onRequest(n int) decision {
	if args := s.parser.Args(); len(args) > 0 && hotkeys.Is(args[0]) {
		if d, ok := s.onHotkeys(args, s.parser.Argc()); ok {
			return d
		}
	}
	return s.onCommand(n)
}

// onRequestCounted is onRequest while a HOTKEYS session is active: it
// counts the request (see above) around the same decision.
func (s *session) onRequestCounted(n int) decision {
	args, argc := s.parser.Args(), s.parser.Argc()
	key := hkKey(s.srv.settings.Commands(), args, argc)
	if key == nil {
		return s.onRequest(n)
	}
	l := s.el
	tk, ok := s.srv.hk.Begin(l.idx)
	if !ok {
		return s.onRequest(n)
	}
	var t0 time.Time
	if tk.Sampled {
		t0 = time.Now()
	}
	outBefore, slotsBefore := len(l.out), s.sent.len()
	d := s.onRequest(n)
	var ns int64
	if tk.Sampled {
		ns = int64(time.Since(t0))
	}
	switch d {
	case decidePause, decideOwn, decideSwitch:
		return d // counted when it is parsed again
	case decideLocal:
		s.srv.hk.Record(l.idx, tk, key, uint64(n+len(l.out)-outBefore), ns)
		return d
	}
	if s.sent.len() > slotsBefore {
		if rq := s.sent.at(slotsBefore); rq.kind == expectReply {
			var r *hkReq
			if k := len(l.hkFree); k > 0 {
				r, l.hkFree = l.hkFree[k-1], l.hkFree[:k-1]
			} else {
				r = &hkReq{}
			}
			r.tk, r.key, r.net, r.ns = tk, append(r.key[:0], key...), uint64(n), ns
			rq.hk = r
			return d
		}
	}
	// No reply Cicada follows (an opaque connection): the request only.
	s.srv.hk.Record(l.idx, tk, key, uint64(n), ns)
	return d
}

// hkFrameDone runs when a frame read while the head request had a record
// ends; t0 is when its last chunk started to be framed. If the frame
// settled the request, the request is recorded with the reply's bytes and
// time; if not (a RESP2 pub/sub message came first), the frame is not the
// key's and is forgotten.
func (s *session) hkFrameDone(r *hkReq, t0 time.Time) {
	if r.tk.Sampled {
		s.hkNs += int64(time.Since(t0))
	}
	bytes, ns := s.hkBytes, s.hkNs
	s.hkFrame, s.hkBytes, s.hkNs = nil, 0, 0
	if s.sent.len() > 0 && s.sent.front().hk == r {
		return // still waiting for its reply
	}
	r.net += bytes
	r.ns += ns
	l := s.el
	s.srv.hk.Record(l.idx, r.tk, r.key, r.net, r.ns)
	// The pool keeps what a steady stream reuses, not what a burst of
	// requests in flight (or of long keys) once needed.
	if len(l.hkFree) < hkFreeMax && cap(r.key) <= hkFreeKeyMax {
		l.hkFree = append(l.hkFree, r)
	}
}

// onHotkeys answers HOTKEYS, or ok=false to forward it: inside MULTI
// (Cicada cannot put its reply inside EXEC's), in RESP2 subscribed mode
// (Redis refuses it there), on an opaque connection, when an argument is
// beyond what the parser captured, or when part of it already went to
// Redis (a header of more than 10 arguments, a streamed argument). A HOTKEYS behind unanswered replies
// waits for them, like a cached GET.
//
// Order of checks, as Redis's processCommand: subcommand and arity
// (hotkeys.Lookup), authentication and ACL (permission, answered from
// permCache or after an ACL GETUSER lookup that pauses the connection),
// then the subcommand itself.
func (s *session) onHotkeys(args [][]byte, argc int64) (decision, bool) {
	if int64(len(args)) != argc || (argc >= 2 && args[1] == nil) || s.parser.Consumed() ||
		s.tx.queuing() || s.opacity != framed || (s.proto == 2 && s.subscribed()) {
		return 0, false // Consumed: part of it went to Redis already
	}
	if s.sent.len() > 0 {
		return decidePause, true
	}
	l := s.el
	sub, out, ok := hotkeys.Lookup(l.out, args, argc)
	l.out = out
	if !ok {
		return decideLocal, true
	}
	if s.srv.cfg.ACLUser != nil {
		if s.userAnon {
			l.out = append(l.out, "-ERR Cicada cannot check HOTKEYS against this connection's ACL user: its name was not seen\r\n"...)
			return decideLocal, true
		}
		name, fresh := s.user, s.user == ""
		if fresh {
			name = "default"
		}
		u, err, ready := s.srv.perms.lookup(s, name)
		if !ready {
			s.pause = pauseACL
			return decidePause, true
		}
		if err != nil {
			l.out = append(l.out, "-ERR Cicada could not check HOTKEYS against the connection's ACL user: "...)
			l.out = append(l.out, oneLine(err.Error())...)
			l.out = append(l.out, '\r', '\n')
			return decideLocal, true
		}
		if p := hotkeys.Check(u, fresh, sub); p != hotkeys.Allowed {
			l.out = hotkeys.AppendDenied(l.out, p, name, sub)
			return decideLocal, true
		}
	}
	l.out = s.srv.hk.Execute(l.out, sub, args, s.proto)
	return decideLocal, true
}

// aclLooked runs on the loop when the ACL lookup this connection waited
// for is done: it parses the HOTKEYS request again (answered from the
// cache now, or with the lookup's error).
func (s *session) aclLooked(gnet.Conn, error) error {
	s.resume(pauseACL)
	return nil
}
