package proxy

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"

	"github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/command"
	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/resp"
)

// slotKind says how a queued request's replies are consumed.
type slotKind uint8

const (
	slotReply   slotKind = iota // one reply, forwarded to the client
	slotSub                     // (P|S)(UN)SUBSCRIBE: one confirmation per channel
	slotSwallow                 // Cicada's own PTTL (and HPTTL) after a fill GET/HGET: not forwarded
	slotOpaque                  // from here on, replies pass through unframed
)

// hold is a cache suspension a slot keeps until its reply (one Suspend),
// with what its release must do first.
type hold uint8

const (
	holdNone   hold = 0
	holdFence  hold = 1 << iota // release through a notification fence (writes of unknown keys)
	holdFlush                   // flush the cache before releasing (FLUSHALL, FLUSHDB, SWAPDB, ...)
	holdVerify                  // release through a fence that re-checks notify-keyspace-events (CONFIG SET)
)

// opacity is whether Cicada still follows a connection's replies. It only
// moves forward: framed, opaqueAhead, opaque.
type opacity uint8

const (
	// framed: every reply is framed and matched to its request.
	framed opacity = iota
	// opaqueAhead: a request after which replies cannot be counted was
	// sent (CLIENT REPLY OFF|SKIP, REPLCONF ACK, MONITOR, SYNC, a protocol
	// error, a failed AUTH whose error Redis may drop): the requests after
	// it are not followed (no local answers, no bookkeeping; their writes
	// are invalidated like writes from outside Cicada), the replies before
	// it still are.
	opaqueAhead
	// opaque: that point was reached: replies pass through unframed, for
	// the rest of the connection; a transaction in progress is abandoned.
	opaque
)

// input is what becomes of what the client sends next.
type input uint8

const (
	inputOpen          input = iota // parsed, then answered or forwarded
	inputQuit                       // QUIT was sent: Redis reads nothing after it; dropped, as Redis does
	inputProtocolError              // a protocol error was sent: Redis closes; dropped (opacity is not framed)
)

// replyMode is what happens to the bytes of the reply being framed.
type replyMode uint8

const (
	replyPass            replyMode = iota // passed to the client as they arrive
	replySwallow                          // Cicada's own PTTL or HPTTL: dropped
	replyCapture                          // passed, and copied for a fill (captureBytes)
	replyRewriteTopology                  // held whole, its node addresses rewritten (Config.AddrMap)
	replyRewriteExec                      // EXEC's reply, held whole, its topology elements rewritten
	replyRewriteError                     // an error, held whole while it may be a -MOVED or -ASK to rewrite
)

// withheld reports whether the reply's bytes wait in Cicada instead of
// going to the client as they arrive.
func (m replyMode) withheld() bool { return m == replySwallow || m.rewrites() }

// rewrites reports whether the reply is held whole in rewriteBuf.
func (m replyMode) rewrites() bool { return m >= replyRewriteTopology }

// queuedHold is the hold of a command queued in a transaction, kept until
// EXEC's reply.
type queuedHold struct {
	kind hold
	held *hotcache.Hold
}

// slot is one forwarded request waiting for its reply.
type slot struct {
	kind    slotKind
	act     command.ConnEffect // the state change its reply confirms
	hold    hold
	subKind command.SubKind
	subLeft int32 // slotSub: confirmations still expected; -1 = as many as subscriptions of subKind
	stripes int32 // write stripes to release (front of session.stripes)
	arg     int64
	user    string
	auth    bool // AUTH, or HELLO with an AUTH option: the identity follows its reply
	anon    bool // AUTH/HELLO AUTH whose resulting user Cicada cannot name
	// rewrite: a CLUSTER SLOTS/SHARDS/NODES whose reply's node addresses
	// Cicada rewrites (Config.AddrMap); ReplyNone for any other request.
	rewrite cluster.Reply
	held    *hotcache.Hold // the cache hold when hold is not holdNone, released with its reply
	read    *readInfo      // GET/HGET bookkeeping, rare
	hk      *hkReq         // hot-key record, only while a HOTKEYS session is active (hotkeys.go)
}

// queuedAct is a connection state change queued in a transaction: it takes
// effect at EXEC if element idx of EXEC's reply is not an error.
type queuedAct struct {
	idx int
	sl  slot
}

// readInfo follows a forwarded GET/HGET whose reply Cicada wants: a fill
// (the key is hot and not cached) or a proof that this identity may read a
// cached reply.
type readInfo struct {
	key    hotcache.Key // its own bytes (Clone)
	fill   bool
	ticket hotcache.Ticket
	epoch  uint64 // cache epoch at send, for a proof of permission
	sentAt int64
	// fieldTTL: an HPTTL for the field follows the PTTL (a server with
	// hash-field expiration).
	fieldTTL bool
	// Set when the GET/HGET reply arrived and the PTTL reply is awaited.
	reply    []byte
	isNil    bool
	valueLen int
	// expireAt is the key's expiry from the PTTL reply (0: none), kept
	// while the HPTTL reply is awaited (awaitHPTTL).
	expireAt   int64
	awaitHPTTL bool
}

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

// session is one client connection and its upstream connection. Owned by
// the event loop of both.
type session struct {
	srv        *Server
	loop       *loopState
	loopIdx    int // in loop.sessions
	client     clientConn
	up         gnet.Conn     // nil until the upstream connection is enrolled
	closed     bool          // the client connection is closed (or closing)
	upClosed   bool          // the upstream connection is closed
	upShut     bool          // the upstream connection is shut down for writing (half.go)
	upInvalid  bool          // Redis sent something that is not RESP: its bytes are not framed
	drainWait  time.Duration // closeWhenFlushed's current poll interval
	drainArmed bool          // its timer is pending
	gone       bool          // both sides are being torn down; release done
	upLink     *upstreamLink
	// left is set on the loop once the client connection is gone
	// (finishClose) and read by the dial goroutine, so that a dial
	// waiting its turn is not made for a client that left.
	left atomic.Bool

	parser *resp.RequestParser
	// partial holds client bytes taken out of gnet (processClient, on the
	// session's loop): a request in progress of at least partialMin bytes
	// and whatever followed it. gnet's Peek copies all the bytes it holds
	// into one buffer at every read, which made a big request sent in many
	// small reads cost quadratic time; here each read's bytes are appended
	// once. nil when empty.
	partial []byte
	framer  resp.ReplyFramer
	slots   ring[slot]
	writes  ring[uint32] // stripes of forwarded writes, in slot order

	// Connection state as Redis confirmed it (replies processed so far).
	db    int
	proto int
	ident hotcache.Ident
	// freshGen is the identities gen of ident when ident is an initial
	// (unauthenticated) number, 0 otherwise (gens start at 1).
	freshGen uint64
	user     string // ACL user Redis authenticated the connection as; "" if it never authenticated
	userAnon bool   // authenticated as a user Cicada cannot name (or the user "")
	multi    bool
	tracking bool
	readonly bool     // READONLY confirmed (Redis Cluster): a replica answers its master's slots
	subs     [3]int64 // channels, patterns, shard channels

	// Send side.
	sendMulti       bool    // MULTI sent, EXEC/DISCARD/RESET not yet sent
	opacity         opacity // whether replies are still followed (opaque mode)
	input           input   // what becomes of what the client sends next
	opaqueAfterExec bool    // a (un)subscribe command was queued: EXEC makes the connection opaque
	multiRules      bool    // CONFIG SET or ACL changes queued in MULTI
	opaqueDBUnknown bool    // a SELECT or RESET was sent in opaque mode: the db is not known
	paused          bool    // parsing waits until every reply is in
	pauseCounted    bool    // the GET/HGET that paused was counted; parsed again after the pause, not counted twice

	// Writes queued inside MULTI, released at EXEC/DISCARD's reply.
	multiStripes []uint32
	multiHolds   []queuedHold
	// State changes queued inside MULTI, applied from EXEC's reply.
	multiActs []queuedAct
	// Effects of commands sent in a confirmed transaction, applied when
	// EXEC is sent (see effects).
	txEffects  []txEffect
	txInFlight int   // MULTI, EXEC and DISCARD sent and not yet answered
	txQueued   int   // commands Redis answered +QUEUED since MULTI
	txState    bool  // a state change was sent in MULTI: pause after EXEC
	txDB       int64 // the db a queued SELECT switches to at EXEC
	txDBSet    bool  // ... when one was queued
	// accepted is set by Redis's first reply that is not an error: until
	// then Redis may still refuse the connection (maxclients, protected
	// mode), so nothing is answered locally.
	accepted bool
	// lastForward is the coarse clock when a request last went to Redis,
	// so a connection Redis would time out is refreshed (see idleRefresh).
	lastForward int64

	// Reply side, per frame: what is done with the bytes of the reply being
	// framed (set at its first byte, replyPass again once it is complete).
	reply replyMode
	// A rewritten reply is held whole (rewriteBuf) until complete: a
	// topology reply of kind rewriting (replyRewriteTopology), EXEC's with
	// rewriteExec's elements (replyRewriteExec), or an error.
	rewriting   cluster.Reply
	rewriteExec []cluster.ExecElem
	rewriteBuf  []byte
	// multiRewrites are the topology commands queued in the confirmed
	// transaction, by their index in EXEC's reply.
	multiRewrites []cluster.ExecElem
	capture       []byte
	// captureOverflow: the captured reply outgrew what the cache keeps;
	// read when the reply is complete, reset at the next capture.
	captureOverflow bool
	keysBuf         []hotcache.Key
	// A fill whose GET/HGET reply arrived; its PTTL reply comes next.
	pendingFill *readInfo

	// Limits (limits.go).
	softSince    int64 // clock+1 when unread replies reached the soft limit, 0 if below
	held         int64 // bytes held for the client at its last charge
	readBytes    int64 // held by the readInfo of queued slots
	txKeyBytes   int64 // held by the keys in txEffects
	opaquePubsub bool  // EXEC of a (un)subscribe made the connection opaque: pubsub limits
	unchecked    int   // requests parsed since the input limits were last checked in processClient

	// Upstream latency (latency.go): the request being timed is the
	// timedLeft-th slot from the head; 0 when none is.
	timedLeft int
	timedAt   time.Time

	// HOTKEYS (hotkeys.go): the record of the head request, whose reply
	// may be the frame being read; aclWait while this connection waits
	// for an ACL lookup of its user (it is paused).
	hkFrame *hkReq
	hkBytes uint64 // bytes of hkFrame's reply so far
	hkNs    int64  // event-loop time framing it so far (sampled only)
	aclWait bool
}

// queue appends a slot; every queued slot counts in the loop's in-flight
// gauge until dequeue.
func (s *session) queue(sl slot) {
	if sl.read != nil {
		s.readBytes += readInfoSize(sl.read)
	}
	s.slots.push(sl)
	s.loop.stats.inflight.Add(1)
	s.timeRequest()
}

// dequeue removes the head slot.
func (s *session) dequeue() slot {
	s.loop.stats.inflight.Add(-1)
	s.replyArrived()
	sl := s.slots.pop()
	if sl.read != nil {
		s.readBytes -= readInfoSize(sl.read)
	}
	return sl
}

// upstreamLink is the gnet context of an upstream connection.
type upstreamLink struct{ s *session }

// canAnswer reports whether confirmed state lets Cicada answer a GET/HGET
// locally. Only meaningful when no reply is outstanding. A subscribed
// connection (RESP3 allows GET there) is always forwarded: Redis may have
// sent it a message that is still on its way through Cicada, and a local
// answer could overtake it.
func (s *session) canAnswer() bool {
	return s.accepted && !s.multi && !s.sendMulti && !s.tracking && s.opacity == framed && !s.subscribed()
}

func (s *session) subscribed() bool { return s.subs[0]+s.subs[1]+s.subs[2] > 0 }

// onClientTraffic parses what the client sent and answers or forwards it.
func (s *session) onClientTraffic() gnet.Action {
	if s.closed {
		return gnet.Close
	}
	if s.upClosed {
		// Redis closed the connection: it reads nothing more.
		if n := s.client.InboundBuffered(); n > 0 {
			_, _ = s.client.Discard(n)
		}
		s.partial = nil
		s.closeWhenFlushed()
		return gnet.None
	}
	if s.overInputLimits() {
		return gnet.None
	}
	if s.up == nil || s.paused || s.srv.draining.Load() {
		return gnet.None // bytes stay buffered in gnet until we can use them
	}
	s.processClient()
	if s.closed {
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
	l := s.loop
	l.out = l.out[:0]
	l.upv = l.upv[:0]
	l.unappliedAsked = false // these requests were sent before this read: ask again
	off, fwd := 0, 0         // bytes [fwd, off) are to be forwarded
	if s.input != inputOpen {
		// Redis reads nothing after a protocol error or QUIT.
		if held {
			s.partial = nil
		} else {
			_, _ = c.Discard(len(buf))
		}
		return
	}
	for off < len(buf) && !s.paused && s.input == inputOpen && !s.closed {
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
		case resp.ProtocolError:
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
				d = s.onCommandCounted(n)
			} else {
				d = s.onCommand(n)
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
				s.paused = true
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
			case decideInject:
				off += n
				l.upv = append(l.upv, buf[fwd:off], s.loop.inject)
				fwd = off
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
	if len(l.upv) > 0 && !s.gone {
		s.lastForward = s.srv.clock.Load()
		if _, err := s.up.Writev(l.upv); err != nil {
			s.srv.log.Debug("upstream write failed", zap.Error(err))
		}
	}
	switch {
	case s.closed:
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

// localFlush is how many bytes of local answers a batch collects before
// writing them to the client (and checking its output limits).
const localFlush = 64 << 10

// flushOut writes the loop's pending local answers to the client.
func (s *session) flushOut() {
	l := s.loop
	if len(l.out) > 0 && !s.closed {
		_, _ = s.client.Write(l.out)
		s.checkOutput()
	}
	l.out = l.out[:0]
}

// protocolError handles a request Redis will reject with a protocol error:
// Redis replies and closes the connection; Cicada passes the reply on and
// drops whatever the client sends after the bad request.
func (s *session) protocolError() {
	s.input = inputProtocolError
	s.pushOpaque()
}

// pushOpaque queues the point after which replies pass unframed.
func (s *session) pushOpaque() {
	if s.opacity == framed {
		s.opacity = opaqueAhead
	}
	s.queue(slot{kind: slotOpaque})
	s.advance()
}

// onUpstreamOpen links the enrolled upstream connection to the session.
func (s *session) onUpstreamOpen(c gnet.Conn) gnet.Action {
	if s.closed {
		return gnet.Close
	}
	s.up = c
	if _, half := s.client.(*halfConn); half {
		s.halfProgress()
	} else {
		s.processClient()
	}
	return gnet.None
}

// onClientClose handles the end of the gnet client connection c: if the
// client ended it with work left for Redis, the session goes on without
// it (halfClose); otherwise it is torn down.
func (s *session) onClientClose(c gnet.Conn, err error) {
	if err != nil && s.halfClose(c, err) {
		return
	}
	s.finishClose()
}

// finishClose tears the session down once its client connection is gone.
func (s *session) finishClose() {
	s.left.Store(true)
	s.srv.conns.Add(-1)
	s.closed = true
	s.untrack()
	s.loop.unregister(s)
	if s.up != nil && !s.gone {
		_ = s.up.Close()
	}
	s.release()
}

// onUpstreamClose tears the session down after Redis closed the connection
// (QUIT, CLIENT KILL, a restart, a protocol error): the client sees the
// replies Redis sent before (salvage) and the same close. A half-closed
// client is closed at once: Redis read its EOF and freed it, dropping any
// reply not yet written, and so does Cicada.
func (s *session) onUpstreamClose(c gnet.Conn) {
	s.salvage(c)
	s.upClosed = true
	s.release()
	if _, half := s.client.(*halfConn); half && !s.closed {
		s.closed = true
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
	if s.closed {
		return
	}
	if s.client.OutboundBuffered() == 0 {
		s.closed = true
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
func (s *session) release() {
	if s.gone {
		return
	}
	s.gone = true
	s.dropSlots()
	s.abandonTx()
}

// dropSlots forgets every queued request whose reply will not be followed:
// its writes end and its holds are released with a flush (it may run, or
// have run, unobserved; its notifications do the rest).
func (s *session) dropSlots() {
	for s.slots.len() > 0 {
		sl := s.dequeue()
		s.releaseWrites(sl.stripes)
		if sl.hold != holdNone {
			s.srv.cache.Flush()
			sl.held.Release()
		}
	}
}

// abandonTx forgets a transaction whose EXEC will not be followed (the
// connection closed or turned opaque): its writes end, its holds become a
// flush and an opaqueHold suspension.
func (s *session) abandonTx() {
	cache := s.srv.cache
	for _, st := range s.multiStripes {
		cache.EndWrite(st)
	}
	if len(s.multiHolds) > 0 || s.multiRules {
		s.srv.suspendFor(opaqueHold)
	}
	for _, q := range s.multiHolds {
		q.held.Release()
	}
	s.multiStripes, s.multiHolds, s.multiActs = s.multiStripes[:0], s.multiHolds[:0], s.multiActs[:0]
	s.multiRewrites = s.multiRewrites[:0]
	s.clearTxEffects()
	s.multiRules = false
}

// releaseWrites ends the n oldest in-flight writes.
func (s *session) releaseWrites(n int32) {
	for ; n > 0; n-- {
		s.srv.cache.EndWrite(s.writes.pop())
	}
}
