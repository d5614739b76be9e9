package proxy

import (
	"time"
	"unsafe"

	"github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/command"
	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/resp"
)

// expect says which replies a sent request expects and what becomes of them.
type expect uint8

const (
	expectReply   expect = iota // one reply, forwarded to the client
	expectSubs                  // (P|S)(UN)SUBSCRIBE: one confirmation per channel
	expectSwallow               // Cicada's own PTTL (and HPTTL) after a fill GET/HGET: not forwarded
	expectOpaque                // from here on, replies pass through unframed
	// expectSetup: Cicada's own request that gives a client's own
	// connection the state the client had on a lane (conversation.setup):
	// not forwarded; an error ends the client (setupFailed).
	expectSetup
	// expectDrop: Cicada's own request whose reply is dropped, whatever
	// it is (a lane's name restored after a client's CLIENT SETNAME).
	expectDrop
)

// hold is how the cache suspension a request keeps until its reply (one
// hotcache.Hold, in request.held) is released: at once or through a fence,
// after a flush or not.
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

// request is one forwarded request waiting for its reply, in conversation.sent.
type request struct {
	kind    expect
	act     command.ConnEffect // the state change its reply confirms
	hold    hold
	subKind command.SubKind
	subLeft int32 // slotSub: confirmations still expected; -1 = as many as subscriptions of subKind
	stripes int32 // write stripes to release (the front of conversation.writes)
	auth    bool  // AUTH, or HELLO with an AUTH option: the identity follows its reply
	anon    bool  // AUTH/HELLO AUTH whose resulting user Cicada cannot name
	// rewrite: a CLUSTER SLOTS/SHARDS/NODES whose reply's node addresses
	// Cicada rewrites (Config.AddrMap); ReplyNone for any other request.
	// (The small fields come first: the request stays 72 bytes.)
	rewrite cluster.Reply
	arg     int64
	// user is the user of AUTH or HELLO AUTH, or the value CLIENT SETNAME
	// or CLIENT SETINFO sets (arg: which attribute, setInfoName or
	// setInfoVer).
	user string
	held *hotcache.Hold // the cache hold when hold is not holdNone, released with its reply
	read *readInfo      // GET/HGET bookkeeping, rare; an expectSwallow's fill
	// through: a SET of a cached key, whose +OK caches its value
	// (hotcache.WriteThrough); nil for any other request.
	through *hotcache.WriteThrough
	hk      *hkReq // hot-key record, only while a HOTKEYS session is active (hotkeys.go)
}

// queuedAct is a connection state change queued in a transaction: it takes
// effect at EXEC if element idx of EXEC's reply is not an error.
type queuedAct struct {
	idx int
	rq  request
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
	// backoff: the fill failed for what the key holds (not a string, too
	// large, a HyperLogLog): none is tried for a while (loopEnv.endFill).
	// ended: endFill ran for this fill.
	backoff, ended bool
}

// newConversation returns the conversation of a new client connection of
// loop: RESP2, db 0, the identity of a connection that has not
// authenticated, nothing confirmed yet.
func newConversation(env *convEnv, loop *loopEnv) conversation {
	return conversation{env: env, loop: loop, parser: resp.NewRequestParser(), proto: 2, own: ownState{proto: 2}}
}

// conversation is the state of one client connection as Redis sees it,
// and the rules that follow it: what each request does (forward, answer
// from the cache, pause, fill), what each reply confirms, and what the
// cache must not serve meanwhile. It holds no connection: the session
// (the gnet adapter) feeds it parsed requests (onCommand) and reply frames
// (startFrame, onFrame) and does the I/O it decides. Owned by the
// session's event loop.
//
// Its state machines, each a typed value or a small group of fields:
//
//   - opacity (framed, opaqueAhead, opaque) and input (open, quit,
//     protocol error): whether replies are still followed, and whether
//     what the client sends next is read. Both only move forward.
//   - the transaction (tx): its phase as the requests sent predict it
//     (txSend) and as Redis confirmed it (txConfirmed), and what queued
//     commands will do at EXEC. Only framed connections follow one;
//     going opaque abandons it (goOpaque).
//   - the reply mode of the reply being framed (reply, replyMode).
//   - the state Redis confirmed: db, proto, ident/user, tracking,
//     readonly, subs, accepted.
//
// A local answer needs all of: no reply outstanding, framed, input open,
// no transaction, not subscribed, not tracking (mayAnswer states every
// rule).
type conversation struct {
	env    *convEnv
	loop   *loopEnv
	parser *resp.RequestParser
	framer resp.ReplyFramer // Redis's replies; the last one's summary (EXEC's element types)
	sent   ring[request]    // requests sent to Redis and not yet answered, oldest first
	writes ring[uint32]     // stripes of forwarded writes, in request order

	// Connection state as Redis confirmed it (replies processed so far).
	db    int
	proto int
	ident hotcache.Ident
	// freshGen is the identities gen of ident when ident is an initial
	// (unauthenticated) number, 0 otherwise (gens start at 1).
	freshGen uint64
	user     string // ACL user Redis authenticated the connection as; "" if it never authenticated
	userAnon bool   // authenticated as a user Cicada cannot name (or the user "")
	tracking bool
	readonly bool     // READONLY confirmed (Redis Cluster): a replica answers its master's slots
	subs     [3]int64 // channels, patterns, shard channels

	// Send side.
	opacity         opacity // whether replies are still followed (opaque mode)
	input           input   // what becomes of what the client sends next
	opaqueDBUnknown bool    // a SELECT or RESET was sent in opaque mode: the db is not known
	pause           pause   // why parsing waits, if it does
	pauseCounted    bool    // the GET/HGET that paused was counted; parsed again after the pause, not counted twice
	// fillWaited: the request being parsed again waited for another
	// connection's fill once; it does not wait again (mayAnswer).
	fillWaited bool
	// settleFound and settleHash are the hit a pauseSettle holds
	// (settle.go): what the lookup found and the key's hash. settleAgain:
	// its settle pass found it stale, and the request, parsed again, is
	// decided at once.
	settleFound hotcache.Found
	settleHash  uint64
	settleAgain bool
	// wakeFill resumes the connection after a fill it waits for ended
	// (the adapter's; loopEnv.endFill calls it).
	wakeFill func()
	// throughTimer wakes the connection when a wait for a write-through
	// (answerWaitThrough) has lasted throughWaitFor; nil when none is
	// armed. Stopped when the request is decided again.
	throughTimer *time.Timer
	// queuedN and dequeuedN count the requests queued and dequeued so far;
	// otherAt is the queuedN of the last one that is not a plain read
	// (readsAhead): one is in flight while otherAt > dequeuedN.
	queuedN, dequeuedN, otherAt uint64

	tx transaction
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
	capture     []byte
	// captureOverflow: the captured reply outgrew what the cache keeps;
	// read when the reply is complete, reset at the next capture.
	captureOverflow bool
	keysBuf         []hotcache.Key
	// A fill whose GET/HGET reply arrived; its PTTL reply comes next.
	pendingFill *readInfo

	// Bookkeeping the limits charge (limits.go): held by the readInfo of
	// queued requests (and by tx.effects' keys, tx.keyBytes).
	readBytes int64
	// opaquePubsub: EXEC of a (un)subscribe made the connection opaque:
	// pubsub output limits apply.
	opaquePubsub bool

	// Upstream latency (queue, dequeue): the request being timed is the
	// timedLeft-th request from the head; 0 when none is.
	timedLeft int
	timedAt   time.Time

	// Sharing (lane.go). shared: requests go on a lane of the loop, the
	// one whose state is on; want is the state a decideSwitch asks for;
	// noLane the last state no lane could carry, which the client's own
	// connection carries instead. The identity a lane can carry: gen, the
	// rules generation of the fresh identity the client connected (or
	// RESET) under, or laneUser, the ACL user Redis authenticated it as
	// with a password Cicada saw (identities.remember); neither: no lane.
	shared           bool
	gen              uint64
	laneUser         string
	on, want, noLane shareKey
	// own is the state of the client's own connection while the client is
	// on lanes (setup gives the connection the client's state when it
	// comes back).
	own ownState
	// What the connection says of its client, as Redis confirmed it
	// (CLIENT SETNAME, CLIENT SETINFO; "" for none), and whether a write
	// went on a lane since the client's last WAIT or WAITAOF.
	name, libName, libVer string
	laneWrote             bool
	// State of the client's own connection no lane carries, besides the
	// transaction, subscriptions, tracking, READONLY and opacity:
	// watching (WATCH, until EXEC, DISCARD, UNWATCH or RESET), asking
	// (ASKING, for the next request), sticky (for the connection's life:
	// CLIENT NO-EVICT, NO-TOUCH, CACHING, a command the table cannot
	// classify, a half-closed client).
	watching, asking, sticky bool
	// authPass is the password of the AUTH (or HELLO AUTH) in flight
	// outside a transaction, kept until its reply: accepted, it lets lanes
	// of its user authenticate.
	authPass string
	// setupFailed: Redis refused a setup request: the client's own
	// connection cannot have its state.
	setupFailed bool

	// HOTKEYS (hotkeys.go): the record of the head request, whose reply
	// may be the frame being read.
	hkFrame *hkReq
	hkBytes uint64 // bytes of hkFrame's reply so far
	hkNs    int64  // event-loop time framing it so far (sampled only)
}

// shareKey is the connection state a lane carries: a client's requests
// may go on a lane whose key is its state's. Its identity is the fresh
// one of a rules generation (identities.fresh), the one a client has
// before it authenticates, or an ACL user's.
type shareKey struct {
	gen   uint64 // the fresh identity's; 0 for a user's
	user  string // the user Redis authenticated the lane as; "" for the fresh identity
	db    int
	proto int
}

// ownState is what a client's own connection has of the client's state
// while the client is on lanes.
type ownState struct {
	db, proto             int
	name, libName, libVer string
}

// laneHold is the largest request a client on a lane sends there, in
// bytes (resp.RequestParser.SetHold): every bulk of it is below
// proto-max-bulk-len (at least 1 MiB), and a lane's query buffer in Redis
// stays below client-query-buffer-limit (at least 1 MiB) with what a read
// brings besides. A larger request, or an inline one over
// resp.MaxInlineSize, goes on the client's own connection.
const laneHold = 512 << 10

// CLIENT SETINFO attributes (request.arg).
const (
	setInfoName = iota // LIB-NAME
	setInfoVer         // LIB-VER
)

// txSend is a transaction's phase as the requests sent so far predict it.
// MULTI moves it from txSendNone to txSendQueue, a queued command that
// changes connection state at EXEC (SELECT, AUTH, a subscribe, ...) to
// txSendQueueState; EXEC, DISCARD and RESET back to txSendNone, and so
// does the reply that shows Redis refused the MULTI (complete).
type txSend uint8

const (
	txSendNone       txSend = iota // no MULTI sent since the last EXEC, DISCARD or RESET
	txSendQueue                    // MULTI sent: what follows is probably queued
	txSendQueueState               // ... and changes connection state at EXEC: pause after it
)

// txConfirmed is a transaction's phase as Redis's replies confirmed it:
// MULTI's +OK opens it, a queued (un)subscribe's +QUEUED marks it
// subscribing, EXEC's or DISCARD's reply, RESET's, or going opaque closes
// it (endMulti, goOpaque).
type txConfirmed uint8

const (
	txClosed          txConfirmed = iota // no transaction Redis confirmed
	txOpen                               // commands are answered +QUEUED, to run at EXEC
	txOpenSubscribing                    // ... one of them an (un)subscribe: EXEC makes the connection opaque
)

// transaction is a connection's MULTI ... EXEC, both sides of it: several
// may be in flight in one pipeline, so what was sent runs ahead of what
// Redis confirmed. Rules: a command's effects wait for EXEC only when
// confirmed is open, send is queuing and no MULTI, EXEC or DISCARD is in
// flight (effects); when inFlight reaches 0 the send side is corrected
// to what Redis confirmed (complete). Owned by the conversation's loop.
type transaction struct {
	// Send side.
	send     txSend
	inFlight int // MULTI, EXEC and DISCARD sent and not yet answered
	// effects of commands sent in a confirmed transaction, applied when
	// EXEC is sent (see conversation.effects); keyBytes is what their keys
	// hold, charged by the limits.
	effects  []txEffect
	keyBytes int64

	// Reply side.
	confirmed txConfirmed
	queued    int   // commands Redis answered +QUEUED since MULTI
	db        int64 // the db a queued SELECT switches to at EXEC
	dbSet     bool  // ... when one was queued
	rules     bool  // CONFIG SET or ACL changes queued: flush and re-check at the end
	// Writes queued, released at EXEC's or DISCARD's reply.
	stripes []uint32
	holds   []queuedHold
	// acts are the state changes queued, applied from EXEC's reply;
	// rewrites the topology commands queued, by their index in EXEC's
	// reply.
	acts     []queuedAct
	rewrites []cluster.ExecElem
}

// queuing reports whether a MULTI was sent and no EXEC, DISCARD or RESET
// after it.
func (t *transaction) queuing() bool { return t.send != txSendNone }

// open reports whether Redis confirmed a MULTI that is not over.
func (t *transaction) open() bool { return t.confirmed != txClosed }

// pause is why a connection's parsing waits; the request that paused it
// is parsed again when it ends. Each reason has its one way out.
type pause uint8

const (
	pauseNone    pause = iota // parsing
	pauseReplies              // until every reply is in (the upstream side resumes it)
	pauseACL                  // until the ACL lookup of HOTKEYS is done (session.aclLooked)
	pauseFill                 // until another connection's fill of the key ends (session.fillWoken)
	pauseRoute                // until the connection its request needs is ready: a lane open, its own enrolled (lane.go)
	pauseSetup                // until its own connection has the client's state (setup's replies in, like pauseReplies)
	pauseSettle               // a hit decided, its reply held until the loop's settle pass (settle.go); not parsed again unless that fails
)

// decision is what processClient does with a complete request.
type decision uint8

const (
	decideForward decision = iota // send it to Redis (request queued)
	decideLocal                   // answered from the cache (reply in loop.out)
	decidePause                   // stop parsing: pauseReplies, unless the decider set another reason
	decideInject                  // forward it and loop.injected right behind it
	decidePrefix                  // forward loop.injected, then it
	decideOwn                     // not yet: it needs the client's own connection (nothing decided, see route)
	decideSwitch                  // not yet: it needs the lane of state want (nothing decided, see route)
)

// txEffect is one effect of a command queued in a confirmed transaction,
// applied when EXEC is sent: a key to evict, or a hold.
type txEffect struct {
	key  hotcache.Key // its own bytes (Clone)
	hold hold
}

// answer is mayAnswer's verdict on a GET/HGET.
type answer uint8

const (
	answerForward      answer = iota // forward it, nothing to follow
	answerLocal                      // answer it now with Found.Reply
	answerAfterReplies               // pause: answerable once the replies before it are in
	answerUnsettled                  // cached, but a notification for it is unapplied: forward
	answerProve                      // cached for others: forward, and its reply proves this identity may read it
	answerFill                       // not cached and hot: forward with a PTTL, and fill from both replies
	answerWaitFill                   // not cached, its fill in flight on another connection of the loop: wait for it
	answerWaitThrough                // not cached, a SET of it written through in flight: waiting for it (throughWaits.wait)
	answerSettle                     // a hit, to be answered once the loop's settle pass finds nothing unapplied (settle.go)
)

// What Cicada's bookkeeping of one request Redis has not answered costs,
// in bytes: a request, a write stripe, a GET/HGET followed for a fill or a
// proof (plus its key and field), an effect or state change queued in a
// transaction (plus its key).
const (
	requestBytes   = int64(unsafe.Sizeof(request{}))
	stripeBytes    = int64(unsafe.Sizeof(uint32(0)))
	readInfoBytes  = int64(unsafe.Sizeof(readInfo{}))
	txEffectBytes  = int64(unsafe.Sizeof(txEffect{}))
	queuedActBytes = int64(unsafe.Sizeof(queuedAct{}))
)

// readInfoSize is what a followed GET/HGET holds while it is in flight.
func readInfoSize(ri *readInfo) int64 {
	return readInfoBytes + int64(ri.key.Size())
}
