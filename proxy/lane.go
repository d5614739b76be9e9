package proxy

import (
	"bytes"
	"context"
	"time"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/cicada-proxy/cicada/resp"
)

// Lanes: upstream connections an event loop shares between its clients.
//
// One upstream connection per client makes Redis read and write once per
// client per request. A lane carries the requests of every client of its
// loop whose connection is in the lane's state (shareKey: an identity, the
// fresh connection's of a rules generation or an ACL user's, a db, a
// protocol), so Redis reads many clients' requests at once and writes
// their replies at once. A client starts on the lane of the state a fresh
// connection has (Config.Multiplex):
//
//	client A ─┐                 ┌─ owed: A 2, B 1, A 1
//	client B ─┼─► lane (identity, db, proto) ─► Redis
//	client C ─┘     replies, in order ─► the owed client's framer ─► client
//
// A lane writes only whole requests (the parser's hold mode): what its
// clients send while it owes replies goes out in one write when the loop
// runs its queued tasks, or at once when the lane owes no reply. It keeps the
// sessions it owes replies in the order their requests were written
// (owed); each reply is framed by its session's own conversation, as on a
// connection of its own; a session whose client left has its replies
// framed and dropped.
//
// Where a request needs its connection's state (command.Sharing), its
// session waits until its replies on the lane are in, then goes on a
// connection of its own (dialed the first time, then kept), given the
// client's state (conversation.setup). Once that state is gone
// (conversation.canShare), its next request a lane carries takes it back
// to the lane of its state. A SELECT or HELLO moves the session to the
// lane of the state it asks for, where it is a no-op. A client Redis has
// authenticated as a user shares that user's lanes, which authenticate
// with the password Redis accepted from a client (identities.remember).
// A client's requests are never on two connections at once: a session
// moves only with nothing in flight.
//
// A lane dies as a connection does (CLIENT KILL, a restart, a reply that
// is not RESP): the sessions it owed replies get what Redis sent and then
// the close their own connection would have given them (laneLost);
// others take another lane at their next request. Redis counts a lane's
// clients as one: lanes show in CLIENT LIST and INFO clients, Redis's
// maxclients and timeout see lanes, not clients (Cicada applies the
// timeout to the clients on lanes itself), and nothing Redis refuses by
// a connection's state alone can reach a lane: a lane exists only for a
// state Redis authenticates (docs/limits.md).

// lane is one shared upstream connection of an event loop. Owned by the
// loop.
type lane struct {
	key  shareKey
	l    *loopState
	srv  *Server
	conn gnet.Conn // nil until enrolled
	life laneLife
	// owed are the sessions owed replies, in the order their requests
	// were written, n replies each.
	owed ring[owedReplies]
	// setup are the lane's own requests whose replies are still to come
	// (onOpen); framer frames them.
	setup  []setupStep
	framer resp.ReplyFramer
	// waiters are sessions paused (pauseRoute) until the lane opens, or
	// until its requests in flight fall under laneInflight.
	waiters []*session
	// inflight is the bytes of requests written whose replies are not all
	// in (the owed entries' bytes).
	inflight int64
	// attached is how many sessions have it as their lane (session.lane):
	// a lane with any is kept open, and alive through Redis's timeout.
	attached int
	// lastUsed is the coarse clock when a request was last written.
	lastUsed int64
	// out holds the requests written since the last flush: they go to
	// Redis when the loop runs its queued tasks (flush, queued once).
	// gnet runs them after the events of the round whose poll sees its
	// wakeup, the round after the one that queued them (Poller.Polling),
	// so Redis reads the requests of the clients served in about two
	// rounds in one read. Writing sooner cost more than it saved in
	// scenario 4: writing once the replies to the last write are in
	// (Nagle's rule, RFC 896), Redis read 16-18 requests per read instead
	// of 20-21 and spent 18% more CPU per request, for no more
	// throughput; with the lanes also read every 8 client events, 5 per
	// read and 20% less throughput (issue 18).
	out      []byte
	flushing bool
	flushFn  gnet.RunnableFunc
	// done is onTraffic's scratch: the sessions whose replies are all in.
	done []*session
}

// owedReplies are n replies a lane owes session s (nil: the lane's own
// keepalive PING), for requests of bytes bytes.
type owedReplies struct {
	s     *session
	n     int
	bytes int64
}

// laneLife is where a lane is in its life. It only moves forward:
//
//	laneDialing ─► laneSetup ─► laneOpen ─► laneClosed
//
// skipping any state but the last.
type laneLife uint8

const (
	laneDialing laneLife = iota // the dial waits its turn or runs
	laneSetup                   // enrolled; its setup replies are awaited
	laneOpen                    // carries requests
	laneClosed                  // closed, or failed: out of its loop's map
)

// Lane limits.
const (
	// laneInflight is how many bytes of requests a lane has in flight
	// (written, their replies not all in) before its clients wait: a lane
	// stalled behind a slow command (or a write CLIENT PAUSE WRITE holds)
	// holds what one connection may hold in Redis (what Redis has read of
	// it stays under client-query-buffer-limit's minimum, 1 MiB, which
	// Redis would close the lane for).
	laneInflight = 768 << 10
	// laneIdle is how long a lane that no session has as its lane carries
	// nothing before it is closed.
	laneIdle = 30 * time.Second
	// laneFlushAt is how many bytes of requests a lane gathers before it
	// writes them without waiting for the loop's queued tasks.
	laneFlushAt = 64 << 10
)

// setupStep is one of a lane's setup requests (lane.onOpen).
type setupStep uint8

const (
	setupAuth   setupStep = iota // AUTH user password, for a user's lane
	setupName                    // CLIENT SETNAME cicada-lane
	setupSelect                  // SELECT db
	setupHello                   // HELLO 3
)

// laneFor returns the lane of state k, dialing it if the loop has none, or
// nil when lanes cannot carry k: Redis does not authenticate a fresh
// connection under k's rules generation (learned from a lane's setup), or
// no password of k's user is known (identities.credential).
func (l *loopState) laneFor(srv *Server, k shareKey) *lane {
	if ln := l.lanes[k]; ln != nil {
		return ln
	}
	if k.user == "" && l.denied[k.gen] {
		return nil
	}
	if _, ok := srv.ids.credential(k.user); k.user != "" && !ok {
		return nil
	}
	ln := &lane{key: k, l: l, srv: srv}
	ln.flushFn = func(context.Context) error {
		ln.flushing = false
		ln.flush()
		return nil
	}
	if l.lanes == nil {
		l.lanes = map[shareKey]*lane{}
	}
	l.lanes[k] = ln
	go ln.dial()
	return ln
}

// switchLane moves session s, with nothing in flight, to the lane of state
// k, from another lane or from its own connection, and reports true if it
// is open for requests; otherwise s waits for it (pauseRoute), or, when
// no lane can carry k, goes on on its own connection (noLane).
func (l *loopState) switchLane(s *session, k shareKey) bool {
	ln := l.laneFor(s.srv, k)
	switch {
	case ln == nil:
		l.noLane(s, k)
		return false
	case ln.life != laneOpen || ln.full(0):
		s.pause = pauseRoute
		ln.wait(s)
		return false
	}
	if !s.shared {
		s.shared = true
		s.leaveOwn()
		s.parser.SetHold(laneHold)
		if s.upLife != upNone {
			l.stats.returns.Add(1)
		}
	}
	s.setLane(ln)
	s.on = k
	// The lane's setup was answered: Redis accepted the connection that
	// carries the client's requests.
	s.accepted = true
	return true
}

// noLane sends the requests of session s, which no lane of state k can
// carry, to its own connection: the client stays there while its state
// is k (conversation.noLane).
func (l *loopState) noLane(s *session, k shareKey) {
	s.noLane = k
	if s.shared {
		l.pin(s)
	}
}

// pin moves session s, with nothing in flight on its lane, to its own
// connection, which it keeps: the first time, the loop's spare or one
// dialed now (it waits, pauseRoute, until session.onUpstreamOpen), then
// given back the client's state (conversation.setup, pauseSetup until
// Redis has answered it).
func (l *loopState) pin(s *session) {
	s.shared = false
	s.setLane(nil)
	s.parser.SetHold(0)
	l.stats.pins.Add(1)
	switch s.upLife {
	case upNone:
		s.pause = pauseRoute
		s.upLife = upDialing
		if s.laneUser == "" {
			// Dialed now (or a spare dialed under the rules of now), the
			// connection is what a fresh one is under the rules of now.
			s.gen = s.srv.ids.generation()
		}
		// A client Redis has not accepted on a lane may be one it does not
		// authenticate: not given a spare (spare.go).
		if s.accepted {
			if c := l.takeSpare(s.srv); c != nil {
				l.giveSpare(s, c)
				return
			}
		}
		go s.dial()
	case upDialing:
		s.pause = pauseRoute // onUpstreamOpen sets it up
	case upOpen:
		s.setupOwn()
	}
}

// full reports whether the lane has laneInflight bytes of requests in
// flight, counting more bytes about to go.
func (ln *lane) full(more int64) bool { return ln.inflight+more >= laneInflight }

// wait makes s wait for the lane (pauseRoute): until it opens, or until
// replies bring its requests in flight under laneInflight (onTraffic).
func (ln *lane) wait(s *session) {
	ln.waiters = append(ln.waiters, s)
}

// setLane makes ln the lane of session s (nil: none), keeping the
// lanes' counts of their sessions.
func (s *session) setLane(ln *lane) {
	if s.lane != nil {
		s.lane.attached--
	}
	if ln != nil {
		ln.attached++
	}
	s.lane = ln
}

// wakeWaiters resumes the sessions waiting for the lane: each decides its
// request again (on this lane, another, or its own connection).
func (ln *lane) wakeWaiters() {
	ws := ln.waiters
	ln.waiters = nil
	for _, s := range ws {
		s.resume(pauseRoute)
	}
}

// send writes a batch of session s's requests, expecting n replies: at
// once if the lane owed no reply (Redis is idle on it: waiting adds only
// latency), else when the loop runs its queued tasks, with every other
// batch written meanwhile, as TCP corks while data is in flight.
func (ln *lane) send(s *session, bs [][]byte, n int) {
	idle := ln.owed.len() == 0
	start := len(ln.out)
	for _, b := range bs {
		ln.out = append(ln.out, b...)
	}
	size := int64(len(ln.out) - start)
	ln.inflight += size
	if k := ln.owed.len(); k > 0 && ln.owed.at(k-1).s == s {
		o := ln.owed.at(k - 1)
		o.n, o.bytes = o.n+n, o.bytes+size
	} else {
		ln.owed.push(owedReplies{s: s, n: n, bytes: size})
	}
	ln.lastUsed = ln.srv.clock.Load()
	switch {
	case idle || len(ln.out) >= laneFlushAt:
		ln.flush()
	case !ln.flushing:
		ln.flushing = true
		if ln.l.evl.Execute(context.Background(), ln.flushFn) != nil {
			ln.flushing = false
			ln.flush() // the engine is stopping
		}
	}
}

// flush writes the requests the lane has gathered. A write that fails
// closes the lane (gnet runs OnClose inside Write), and with it the
// sessions it owes replies.
func (ln *lane) flush() {
	if len(ln.out) == 0 || ln.life == laneClosed {
		return
	}
	out := ln.out
	ln.out = ln.out[:0]
	if cap(ln.out) > laneInflight {
		ln.out = nil // a burst's buffer is not kept
	}
	if _, err := ln.conn.Write(out); err != nil {
		ln.srv.log.Debug("lane write failed", zap.Error(err))
	}
}

// onOpen writes the lane's setup: its name, its db and protocol.
func (ln *lane) onOpen(c gnet.Conn) gnet.Action {
	if ln.life == laneClosed {
		return gnet.Close
	}
	ln.conn, ln.life = c, laneSetup
	ln.l.stats.lanes.Add(1)
	var b []byte
	if ln.key.user != "" {
		pass, ok := ln.srv.ids.credential(ln.key.user)
		if !ok {
			return gnet.Close // forgotten since (a rules change): its waiters go to their own connections
		}
		b = resp.AppendCommand(b, authCmd, []byte(ln.key.user), []byte(pass))
		ln.setup = append(ln.setup, setupAuth)
	}
	b = resp.AppendCommand(b, clientCmd, setnameArg, laneName)
	ln.setup = append(ln.setup, setupName)
	if ln.key.db != 0 {
		b = resp.AppendCommand(b, selectCmd, itoa(ln.key.db))
		ln.setup = append(ln.setup, setupSelect)
	}
	if ln.key.proto != 2 {
		b = resp.AppendCommand(b, helloCmd, itoa(ln.key.proto))
		ln.setup = append(ln.setup, setupHello)
	}
	if _, err := c.Write(b); err != nil {
		return gnet.Close
	}
	return gnet.None
}

// onTraffic frames what Redis sent: the setup's replies, then each owed
// session's, through its conversation, to its client.
func (ln *lane) onTraffic() gnet.Action {
	if ln.life == laneClosed {
		return gnet.Close
	}
	buf, _ := ln.conn.Peek(-1)
	off, done, ok := ln.take(buf, ln.done[:0])
	ln.done = done
	if off > 0 { // gnet's Discard(0) discards everything
		_, _ = ln.conn.Discard(off)
	}
	if !ok {
		return gnet.Close // onClose closes the clients it owes replies
	}
	for i, s := range done {
		done[i] = nil
		s.repliesIn()
	}
	if ln.life == laneOpen && ln.waiters != nil && !ln.full(0) {
		ln.wakeWaiters() // the setup just ended, or replies freed room
	}
	return gnet.None
}

// take frames buf: setup replies while they are awaited, then replies for
// the owed sessions in order. It returns the bytes consumed, the sessions
// whose replies are all in (appended to done), and ok=false when the lane
// is broken: a setup Redis refused, a reply nobody asked for, bytes that
// are not RESP.
func (ln *lane) take(buf []byte, done []*session) (off int, _ []*session, ok bool) {
	for ln.life == laneSetup && off < len(buf) {
		n, complete, err := ln.framer.Feed(buf[off:])
		if err != nil {
			return off, done, false
		}
		off += n
		if !complete {
			return off, done, true
		}
		if !ln.setupReplied(ln.framer.Frame()) {
			return off, done, false
		}
	}
	for off < len(buf) {
		if ln.owed.len() == 0 {
			ln.srv.log.Error("reply from Redis on a lane that owes none; closing it")
			ln.srv.upstreamErrors.Add(1)
			return off, done, false
		}
		o := ln.owed.front()
		var n, frames int
		fine := true
		if o.s == nil { // the lane's own PING (keepAlive)
			var complete bool
			var err error
			n, complete, err = ln.framer.Feed(buf[off:])
			fine = err == nil
			frames = b2i(complete && ln.framer.Frame().Value.Type != resp.TypePush)
		} else {
			n, frames, fine = o.s.fromUpstream(buf[off:], o.n)
		}
		off += n
		o.n -= frames
		if !fine {
			return off, done, false
		}
		if o.n > 0 {
			if n == 0 || o.s == nil && frames == 0 {
				break // the rest of its reply is still to come
			}
			continue
		}
		ln.inflight -= o.bytes
		if o.s != nil {
			done = append(done, o.s)
			o.s.laneSent = 0
		}
		ln.owed.pop()
	}
	return off, done, true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// setupReplied takes one reply to the lane's setup and reports false if
// the lane cannot serve: Redis refused the connection (maxclients,
// protected mode: an error before any reply, then the close), its AUTH
// (the password is forgotten: identities.forget), SELECT or HELLO, or a
// fresh connection's requests (CLIENT SETNAME's -NOAUTH: the loop then
// dials no lane for that rules generation). Only an ACL that forbids the
// lane's user CLIENT SETNAME (-NOPERM) leaves it serving, unnamed. The
// waiters of a lane that cannot serve go to connections of their own,
// and get Redis's own refusal there.
func (ln *lane) setupReplied(fr *resp.Frame) bool {
	step := ln.setup[0]
	ln.setup = ln.setup[1:]
	if t := fr.Value.Type; t == resp.TypeError || t == resp.TypeBulkError {
		head := fr.Value.Head()
		switch {
		case step == setupAuth:
			ln.srv.ids.forget(ln.key.user)
			return false
		case step == setupName && ln.key.user == "" && bytes.HasPrefix(head, noAuth):
			if ln.l.denied == nil {
				ln.l.denied = map[uint64]bool{}
			}
			ln.l.denied[ln.key.gen] = true
			return false
		case step != setupName || !bytes.HasPrefix(head, noPerm):
			return false
		}
	}
	if len(ln.setup) == 0 {
		ln.life = laneOpen
	}
	return true
}

var (
	authCmd = []byte("AUTH")
	noAuth  = []byte("NOAUTH")
	noPerm  = []byte("NOPERM")
)

// onClose ends the lane: the replies Redis sent before it closed go to
// their sessions, the sessions still owed replies lose them as they would
// lose their own connection (laneLost), and the sessions waiting for it
// decide their request again (on another lane, or their own connection
// when no lane could open).
func (ln *lane) onClose(c gnet.Conn) {
	if ln.life == laneClosed {
		return
	}
	opened := ln.life == laneOpen
	ln.drop()
	ln.out, ln.inflight = nil, 0
	if c != nil {
		ln.l.stats.lanes.Add(-1)
	}
	if c != nil && opened {
		if rest := unread(c); len(rest) > 0 {
			if _, done, _ := ln.take(rest, nil); done != nil {
				for _, s := range done {
					s.repliesIn()
				}
			}
		}
	}
	for ln.owed.len() > 0 {
		if s := ln.owed.pop().s; s != nil {
			s.laneLost()
		}
	}
	ws := ln.waiters
	ln.waiters = nil
	for _, s := range ws {
		switch {
		case opened:
			s.resume(pauseRoute) // takes another lane
		case s.pause == pauseRoute && !s.closing() && !s.released():
			if s.shared {
				ln.l.noLane(s, ln.key) // to its own connection: dialed, or set up, or ready
			} else {
				s.noLane, s.pause = ln.key, pauseNone // it stays on its own connection
			}
			if s.pause == pauseNone {
				s.resume(pauseNone) // its own connection is ready: what waited goes there
			}
		}
	}
}

// drop takes the lane out of its loop's map.
func (ln *lane) drop() {
	ln.life = laneClosed
	if ln.l.lanes[ln.key] == ln {
		delete(ln.l.lanes, ln.key)
	}
}

// fail ends a lane whose dial failed with err: its waiters' own dials
// would fail alike, and they end as a failed dial ends a client
// (session.dialFailed).
func (ln *lane) fail(err error) {
	ws := ln.waiters
	ln.waiters = nil
	ln.onClose(nil)
	for _, s := range ws {
		s.dialFailed(err)
	}
}

// closeIdle closes the loop's lanes that no session has as its lane,
// owe nothing and carried nothing since before now - laneIdle (coarse
// clock), or half Redis's timeout (0: none) when that is shorter; a lane
// that has sessions and carried nothing for half Redis's timeout gets a
// PING (keepAlive), so that Redis never closes it for being idle. A lane
// a session has is kept: a new one might not get its state (a fresh
// connection that Redis no longer authenticates since requirepass was
// set on it). On the loop.
func (l *loopState) closeIdle(now int64, timeout time.Duration) {
	idle := laneIdle
	if timeout > 0 {
		idle = min(idle, timeout/2)
	}
	for _, ln := range l.lanes {
		switch {
		case ln.life != laneOpen || ln.owed.len() > 0 || len(ln.waiters) > 0 || now-ln.lastUsed < int64(idle):
		case ln.attached == 0:
			ln.drop()
			l.stats.lanes.Add(-1)
			_ = ln.conn.Close()
		case timeout > 0 && now-ln.lastUsed >= int64(timeout/2):
			ln.keepAlive()
		}
	}
}

// keepAlive sends the lane's own PING, whose reply is dropped.
func (ln *lane) keepAlive() {
	ln.lastUsed = ln.srv.clock.Load()
	ln.owed.push(owedReplies{n: 1, bytes: int64(len(pingCmd))})
	ln.inflight += int64(len(pingCmd))
	_, _ = ln.conn.Write(pingCmd)
}

// unread returns what Redis sent on c that gnet has not read (a partial
// header line fromUpstream left, then the socket's contents), up to
// salvageMax bytes: gnet closes a connection whose write fails before it
// reads what arrived. Runs in OnClose, where the descriptor is still
// open.
func unread(c gnet.Conn) []byte {
	pending, _ := c.Peek(-1)
	var buf []byte
	chunk := make([]byte, 16<<10)
	for len(buf) < salvageMax {
		n, err := unix.Read(c.Fd(), chunk)
		if n <= 0 || err != nil {
			break
		}
		if buf == nil {
			buf = append(buf, pending...)
		}
		buf = append(buf, chunk[:n]...)
	}
	return buf
}
