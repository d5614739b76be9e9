package proxy

import (
	"bytes"
	"time"

	"github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/command"
	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/resp"
)

// Rewritten replies are held whole until complete (Config.AddrMap); what
// is held counts towards the client's memory (backlog). maxRedirect is
// the longest error reply held to see whether it is a redirect
// ("-MOVED 16383 " + a 253-byte host name + ":65535\r\n" fits);
// maxRewrite is the longest topology or EXEC reply held: past it the
// reply goes through unrewritten (CLUSTER NODES of a 1,000-node cluster
// is about 200 KB).
const (
	maxRedirect = 300
	maxRewrite  = 16 << 20
)

// rewriteGiveUp reports whether the reply being held for rewriting should
// be passed on as it is: an error that cannot be a redirect (its start
// is not -MOVED or -ASK, or it is longer than one), or a reply over
// maxRewrite.
func (cv *conversation) rewriteGiveUp() bool {
	b := cv.rewriteBuf
	if cv.reply != replyRewriteError {
		return len(b) > maxRewrite
	}
	if len(b) > maxRedirect {
		return true
	}
	for _, p := range [...][]byte{redirectMoved, redirectAsk} {
		if n := min(len(b), len(p)); bytes.Equal(b[:n], p[:n]) {
			return false
		}
	}
	return true
}

var (
	redirectMoved = []byte("-MOVED ")
	redirectAsk   = []byte("-ASK ")
)

// startFrame looks at the first byte of a reply and the head request to decide
// whether the reply is swallowed or captured.
func (cv *conversation) startFrame(first byte) {
	cv.advance()
	if cv.opacity == opaque || cv.sent.len() == 0 || first == resp.TypePush {
		return
	}
	head := cv.sent.front()
	cv.hkFrame = head.hk
	switch {
	case head.kind == expectSwallow || head.kind == expectSetup || head.kind == expectDrop:
		cv.reply = replySwallow
	case first == resp.TypeError && cv.env.addrMap.Len() > 0:
		// Read whole even when it arrives in pieces: it may be a redirect.
		cv.reply, cv.rewriteBuf = replyRewriteError, nil
	case head.rewrite != cluster.ReplyNone:
		cv.reply, cv.rewriting, cv.rewriteBuf = replyRewriteTopology, head.rewrite, nil
	case head.act == command.ConnExec && len(cv.tx.rewrites) > 0:
		cv.reply, cv.rewriteBuf = replyRewriteExec, nil
		cv.rewriteExec = append(cv.rewriteExec[:0], cv.tx.rewrites...)
	case head.read != nil && head.read.fill:
		cv.reply = replyCapture
		cv.captureOverflow = false
		cv.capture = cv.capture[:0]
	}
}

// captureSlack is what a reply adds to its value: a bulk string's header
// and CRLF.
const captureSlack = 32

// captureBytes keeps a copy of a fill reply, up to the largest cacheable
// size (the cache's, which live configuration can change).
func (cv *conversation) captureBytes(b []byte) {
	if cv.captureOverflow {
		return
	}
	if len(cv.capture)+len(b) > cv.env.cache.MaxValue()+captureSlack {
		cv.captureOverflow = true
		return
	}
	cv.capture = append(cv.capture, b...)
}

// advance pops opaque requests that reached the head: from there on, replies
// pass through unframed, and a transaction in progress is abandoned.
func (cv *conversation) advance() {
	for cv.sent.len() > 0 && cv.sent.front().kind == expectOpaque {
		cv.dequeue()
		cv.goOpaque()
	}
}

// goOpaque stops following replies on this connection for good.
func (cv *conversation) goOpaque() {
	cv.opacity = opaque
	if cv.tx.open() || len(cv.tx.stripes) > 0 || len(cv.tx.holds) > 0 {
		cv.tx.confirmed = txClosed
		cv.abandonTx()
	}
}

// onFrame settles one complete reply from Redis.
func (cv *conversation) onFrame(fr *resp.Frame) {
	v := &fr.Value
	// An error may be Redis refusing the connection itself (maxclients,
	// protected mode), sent before it read anything.
	cv.accepted = cv.accepted || (v.Type != resp.TypeError && v.Type != resp.TypeBulkError)
	if v.Type == resp.TypeError && cv.env.topo.Enabled() {
		cv.noteClusterError(v.Head())
	}
	conf, isConf := subConfirmation(fr)
	switch {
	case v.Type == resp.TypePush:
		// Pub/sub messages and invalidations belong to no request. In RESP3
		// (un)subscribe confirmations are pushes too, and do answer one.
		if !isConf {
			return
		}
		cv.countSubs(conf, fr)
		if cv.sent.len() == 0 || cv.sent.front().kind != expectSubs || cv.sent.front().subKind != conf.family {
			return
		}
		cv.subReply(conf.family, true)
	case cv.proto == 2 && cv.subscribed() && v.Type == resp.TypeArray && isMessage(fr.Elems[0].Head()):
		return
	case cv.sent.len() == 0:
		return // after a protocol error Redis answers what Cicada did not frame
	case cv.sent.front().kind == expectSubs:
		ok := isConf && v.Type == resp.TypeArray && conf.family == cv.sent.front().subKind
		if ok {
			cv.countSubs(conf, fr)
		}
		cv.subReply(conf.family, ok)
	case cv.sent.front().kind == expectDrop:
		cv.dequeue()
	case cv.sent.front().kind == expectSetup:
		cv.dequeue()
		cv.setupFailed = cv.setupFailed || v.Type == resp.TypeError || v.Type == resp.TypeBulkError
	case cv.sent.front().kind == expectSwallow:
		rq := cv.dequeue()
		cv.finishFill(rq.read, fr)
		if cv.pendingFill != rq.read { // not waiting for its HPTTL
			cv.endFill(rq.read)
		}
	default:
		rq := cv.dequeue()
		cv.complete(&rq, fr)
	}
	cv.advance()
}

// subReply counts one reply to the (un)subscribe command at the head; a
// reply that is not a confirmation (an error, +QUEUED) ends it.
func (cv *conversation) subReply(family command.SubKind, confirmation bool) {
	head := cv.sent.front()
	switch {
	case !confirmation:
		if cv.tx.open() {
			// +QUEUED (or an error queued as a failure): the confirmations
			// will come inside EXEC's reply, and then messages.
			cv.tx.confirmed = txOpenSubscribing
		}
	case head.subLeft < 0:
		// Unsubscribe from all: Redis confirms each subscription it drops
		// (or once, when there was none); the last leaves the count at 0.
		if cv.subs[family] > 0 {
			return
		}
	default:
		head.subLeft--
		if head.subLeft > 0 {
			return
		}
	}
	cv.dequeue()
}

// complete applies the effects of the reply to a forwarded request.
func (cv *conversation) complete(rq *request, fr *resp.Frame) {
	v := &fr.Value
	failed := v.Type == resp.TypeError || v.Type == resp.TypeBulkError
	// Outside MULTI, +QUEUED can only be a script's status reply.
	queued := cv.tx.open() && v.Type == resp.TypeSimple && bytes.Equal(v.Head(), queuedReply)
	if queued {
		cv.deferQueued(rq)
		return
	}
	switch rq.act {
	case command.ConnMulti, command.ConnExec, command.ConnDiscard:
		cv.tx.inFlight--
	}
	switch {
	case rq.act == command.ConnExec:
		executed := !failed && !v.Null && v.Type != resp.TypeSimple
		if executed {
			cv.applyTx()
		}
		opaque := executed && cv.tx.confirmed == txOpenSubscribing
		cv.endMulti()
		if opaque {
			// The transaction subscribed: messages may follow at once.
			cv.releaseWrites(rq.stripes)
			cv.releaseHold(rq.hold, rq.held)
			rq.stripes, rq.hold, rq.held = 0, holdNone, nil
			cv.dropSent()
			cv.goOpaque()
			cv.opaquePubsub = true // its subscriptions are no longer counted
		}
	case rq.act == command.ConnDiscard:
		if !failed { // a DISCARD refused (ACL) leaves the transaction open
			cv.endMulti()
		}
	case !failed:
		cv.confirm(rq)
	case rq.act == command.ConnHello && rq.auth:
		// HELLO may authenticate and then fail (an invalid SETNAME): who
		// the connection is now, only a unique identity can stand for.
		cv.setIdent(cv.env.ids.anonymous())
		cv.user, cv.userAnon = "", true
		cv.gen, cv.laneUser = 0, ""
	}
	if rq.auth {
		cv.authPass = "" // used by confirm, or refused
	}
	if cv.tx.inFlight == 0 { // what was predicted at send is now known
		switch {
		case !cv.tx.open():
			cv.tx.send = txSendNone // no MULTI, or refused
		case cv.tx.send == txSendNone:
			cv.tx.send = txSendQueue // a DISCARD refused (ACL)
		}
	}
	if rq.through != nil && !fr.Attr && v.Type == resp.TypeSimple && bytes.Equal(v.Head(), okReply) {
		cv.env.cache.WriteThrough(rq.through) // before its EndWrite
	}
	cv.releaseWrites(rq.stripes)
	if rq.through != nil {
		cv.env.throughs.end(rq.through) // after: a woken read finds the value
	}
	cv.releaseHold(rq.hold, rq.held)
	switch {
	case rq.read == nil:
	case failed:
		rq.read.backoff = true // WRONGTYPE, say: a fill fails again
	default:
		cv.readReplied(rq.read, fr)
	}
}

// deferQueued keeps what a command queued in a transaction will do at
// EXEC: its writes, suspensions and state change.
func (cv *conversation) deferQueued(rq *request) {
	if rq.hold != holdNone {
		cv.tx.holds = append(cv.tx.holds, queuedHold{kind: rq.hold, held: rq.held})
		rq.hold, rq.held = holdNone, nil
	}
	cv.tx.rules = cv.tx.rules || rq.act == command.ConnAuthRules
	if rq.rewrite != cluster.ReplyNone {
		cv.tx.rewrites = append(cv.tx.rewrites, cluster.ExecElem{Index: cv.tx.queued, Kind: rq.rewrite})
	}
	if rq.act.QueuedAtExec() {
		cv.tx.acts = append(cv.tx.acts, queuedAct{idx: cv.tx.queued, rq: *rq})
		if rq.act == command.ConnSelect {
			cv.tx.db, cv.tx.dbSet = rq.arg, true
		}
	}
	cv.tx.queued++
	for ; rq.stripes > 0; rq.stripes-- {
		cv.tx.stripes = append(cv.tx.stripes, cv.writes.pop())
	}
	if rq.through != nil {
		cv.env.throughs.end(rq.through) // queued, it caches nothing
	}
}

// applyTx applies the state changes of an executed transaction, each one
// whose element of EXEC's reply is not an error.
func (cv *conversation) applyTx() {
	for _, qa := range cv.tx.acts {
		t, ok := cv.framer.ElemType(qa.idx)
		switch {
		case !ok:
			// Beyond what the framer recorded: the state is unknown.
			cv.pushOpaque()
			cv.opaqueDBUnknown = true
			return
		case t == resp.TypeError || t == resp.TypeBulkError:
			if qa.rq.act == command.ConnHello && qa.rq.auth {
				cv.setIdent(cv.env.ids.anonymous())
				cv.user, cv.userAnon = "", true
			}
		default:
			cv.confirm(&qa.rq)
		}
	}
}

var (
	queuedReply = []byte("QUEUED")
	okReply     = []byte("OK")
	hllMagic    = []byte("HYLL")
)

// releaseHold ends the cache hold held, taken when the request was sent,
// as its kind says: at once or through a fence.
func (cv *conversation) releaseHold(kind hold, held *hotcache.Hold) {
	if kind == holdNone {
		return
	}
	if kind&holdFlush != 0 {
		cv.env.cache.Flush()
	}
	switch {
	case kind&holdVerify != 0:
		cv.env.fences.VerifyFence(held)
	case kind&holdFence != 0:
		cv.env.fences.Fence(held)
	default:
		held.Release()
	}
}

// confirm applies the connection state change of a successful reply.
func (cv *conversation) confirm(rq *request) {
	env := cv.env
	switch rq.act {
	case command.ConnSelect:
		cv.db = int(rq.arg)
	case command.ConnAuth:
		cv.setIdent(env.ids.userOrAnonymous(rq.user, rq.anon))
		cv.setUser(rq.user, rq.anon)
		cv.authenticated(rq)
	case command.ConnHello:
		if rq.arg != 0 {
			cv.proto = int(rq.arg)
		}
		if rq.auth {
			cv.setIdent(env.ids.userOrAnonymous(rq.user, rq.anon))
			cv.setUser(rq.user, rq.anon)
			cv.authenticated(rq)
		}
	case command.ConnReset:
		cv.endMulti()
		cv.db, cv.proto = 0, 2
		cv.setFresh()
		// Redis authenticates the connection as a fresh one now, if the
		// default user needs no password, which its own connection, where
		// RESET went, shows and a lane cannot: no lane until AUTH.
		cv.gen, cv.laneUser = 0, ""
		cv.tracking, cv.readonly, cv.watching = false, false, false
		cv.subs = [3]int64{}
	case command.ConnMulti:
		cv.tx.confirmed = txOpen
		cv.tx.queued = 0
	case command.ConnTracking:
		cv.tracking = rq.arg == 1
	case command.ConnReadonly:
		cv.readonly = rq.arg == 1
	case command.ConnSetName:
		cv.name = rq.user
	case command.ConnSetInfo:
		if rq.arg == setInfoName {
			cv.libName = rq.user
		} else {
			cv.libVer = rq.user
		}
	case command.ConnClusterChange:
		env.topo.Distrust()
	case command.ConnAuthRules:
		env.ids.rulesChanged()
		env.cache.Flush()
	}
}

// authenticated records the identity lanes carry for a connection Redis
// has just authenticated (AUTH or HELLO AUTH rq): its user, with the
// password Cicada saw (remembered for the lanes of that user), or none
// (a user Cicada cannot name, a password it did not capture, an AUTH
// queued in a transaction).
func (cv *conversation) authenticated(rq *request) {
	cv.gen, cv.laneUser = 0, ""
	if !rq.anon && cv.authPass != "" {
		cv.env.ids.remember(rq.user, cv.authPass)
		cv.laneUser = rq.user
	}
}

// endMulti releases the writes queued in a transaction: it ran (EXEC) or
// was dropped (DISCARD, RESET, EXECABORT).
func (cv *conversation) endMulti() {
	cv.tx.confirmed = txClosed
	cv.watching = false // EXEC and DISCARD unwatch, as RESET does
	if cv.tx.rules {
		cv.tx.rules = false
		cv.env.ids.rulesChanged()
		cv.env.cache.Flush()
	}
	for _, st := range cv.tx.stripes {
		cv.env.cache.EndWrite(st)
	}
	for _, q := range cv.tx.holds {
		cv.releaseHold(q.kind, q.held)
	}
	cv.tx.stripes, cv.tx.holds = cv.tx.stripes[:0], cv.tx.holds[:0]
	cv.tx.acts = cv.tx.acts[:0]
	cv.tx.rewrites = cv.tx.rewrites[:0]
	cv.tx.queued, cv.tx.dbSet = 0, false
}

// readReplied handles the reply to a GET/HGET Cicada follows: a proof of
// permission for a cached reply, or the first half of a fill.
func (cv *conversation) readReplied(ri *readInfo, fr *resp.Frame) {
	v := &fr.Value
	isValue := !fr.Attr && (v.Type == resp.TypeBulk || v.Type == resp.TypeNull)
	if !isValue {
		ri.backoff = true
		return
	}
	if !ri.fill {
		cv.env.cache.AddReader(ri.epoch, &ri.key, cv.ident)
		return
	}
	if cv.captureOverflow {
		ri.backoff = true
		return
	}
	ri.isNil = v.Null
	if !v.Null {
		if bytes.HasPrefix(v.Head(), hllMagic) {
			// A HyperLogLog: PFCOUNT rewrites its cached cardinality with
			// no notification, so its bytes cannot be kept.
			ri.backoff = true
			return
		}
		ri.reply = append(ri.reply[:0], cv.capture...)
		ri.valueLen = int(v.Len)
	}
	cv.pendingFill = ri
}

// finishFill takes the PTTL reply that follows a fill GET/HGET (and, for
// a field on a server with hash-field expiration, the HPTTL reply after
// it) and caches the reply if the TTLs allow.
func (cv *conversation) finishFill(ri *readInfo, fr *resp.Frame) {
	if cv.pendingFill != ri {
		return // its GET/HGET reply cannot be kept (readReplied)
	}
	cv.pendingFill = nil
	if ri.awaitHPTTL {
		cv.finishFieldFill(ri, fr)
		return
	}
	cv.env.adm.NoteFill(time.Duration(cv.env.cache.Now() - ri.sentAt)) // the PTTL's reply: the fill's round trip
	if fr.Value.Type != resp.TypeInteger {
		return
	}
	ttl, ok := resp.ParseInt(fr.Value.Head())
	if !ok {
		return
	}
	var expireAt int64
	switch {
	case ttl == -2:
		if !ri.isNil {
			return // deleted in between: no consistent pair
		}
	case ttl == -1:
	case ttl >= 0:
		expireAt = ri.sentAt + ttl*1e6
	default:
		return
	}
	if ttl != -2 && ri.isNil && !ri.key.IsField() {
		return // GET said absent, PTTL present: created in between
	}
	if ri.fieldTTL {
		ri.expireAt, ri.awaitHPTTL = expireAt, true
		cv.pendingFill = ri // the HPTTL reply is next
		return
	}
	cv.fill(ri, expireAt)
}

// finishFieldFill takes the HPTTL key FIELDS 1 field reply, a one-element
// array: -2 the field is absent, -1 it has no TTL, else its TTL in ms.
func (cv *conversation) finishFieldFill(ri *readInfo, fr *resp.Frame) {
	if fr.Value.Type != resp.TypeArray || fr.Value.Len != 1 ||
		fr.Elems[0].Type != resp.TypeInteger {
		return
	}
	ttl, ok := resp.ParseInt(fr.Elems[0].Head())
	if !ok {
		return
	}
	expireAt := ri.expireAt
	switch {
	case ttl == -2:
		if !ri.isNil {
			return // deleted or expired in between
		}
	case ttl == -1:
		if ri.isNil {
			return // HGET said absent, HPTTL present: created in between
		}
	case ttl >= 0:
		if ri.isNil {
			return
		}
		if at := ri.sentAt + ttl*1e6; expireAt == 0 || at < expireAt {
			expireAt = at
		}
	default:
		return
	}
	cv.fill(ri, expireAt)
}

// endFill records on the loop that the fill ri is over, kept or not,
// once: the connections waiting for it are woken.
func (cv *conversation) endFill(ri *readInfo) {
	if ri.ended {
		return
	}
	ri.ended = true
	cv.loop.endFill(ri.key.ReadHash(), ri.backoff, cv.env.clock.Load())
}

// fill caches the reply of a fill whose TTLs are known; expireAt is the
// cache clock's expiry (0: none). A TTL is not kept when the clock reads
// earlier than at the GET's send: the wall clock stepped back meanwhile,
// and Redis's expiry may then come after expireAt.
func (cv *conversation) fill(ri *readInfo, expireAt int64) {
	if expireAt != 0 && cv.env.cache.Now() < ri.sentAt {
		return
	}
	req := hotcache.FillRequest{Key: ri.key, ValueLen: ri.valueLen, ExpireAt: expireAt, Ident: cv.ident}
	if !ri.isNil {
		req.Reply = ri.reply
	}
	if cv.env.cache.Fill(ri.ticket, req) {
		cv.loop.stats.fills.Add(1)
	}
}

// subConf is a recognized (un)subscribe confirmation.
type subConf struct{ family command.SubKind }

// subConfirmation recognizes a (un)subscribe confirmation by its first
// element.
func subConfirmation(fr *resp.Frame) (subConf, bool) {
	if fr.Value.Len != 3 {
		return subConf{}, false
	}
	k, ok := command.Confirmation(fr.Elems[0].Head())
	return subConf{k}, ok
}

func isMessage(kind []byte) bool {
	switch string(kind) {
	case "message", "pmessage", "smessage":
		return true
	}
	return false
}

// countSubs tracks subscriptions from a confirmation's count: for channels
// and patterns Redis reports their sum after the command, for shard
// channels their own count.
func (cv *conversation) countSubs(k subConf, fr *resp.Frame) {
	n, ok := resp.ParseInt(fr.Elems[2].Head())
	if !ok || fr.Elems[2].Type != resp.TypeInteger {
		return
	}
	if k.family == command.SubShard {
		cv.subs[2] = n
		return
	}
	delta := n - (cv.subs[0] + cv.subs[1])
	cv.subs[k.family] += delta
	if cv.subs[k.family] < 0 {
		cv.subs[k.family] = 0
	}
}

// noteClusterError tells the cluster view about a -MOVED, -ASK or
// -CLUSTERDOWN reply (head: the error line's start) before the client
// sees it: if the
// view said the node would have answered, it is stale, and no GET is
// answered from it until a new one is read (cluster.Topology.Contradicted).
func (cv *conversation) noteClusterError(head []byte) {
	var rest []byte
	switch {
	case bytes.HasPrefix(head, movedPrefix):
		rest = head[len(movedPrefix):]
	case bytes.HasPrefix(head, askPrefix):
		rest = head[len(askPrefix):]
	case bytes.HasPrefix(head, clusterDownPrefix):
		cv.env.topo.Contradicted(-1, cv.readonly)
		return
	default:
		return
	}
	if sp := bytes.IndexByte(rest, ' '); sp > 0 {
		rest = rest[:sp]
	}
	if slot, ok := resp.ParseInt(rest); ok && slot >= 0 && slot < cluster.Slots {
		cv.env.topo.Contradicted(int(slot), cv.readonly)
	}
}

var (
	movedPrefix       = []byte("MOVED ")
	askPrefix         = []byte("ASK ")
	clusterDownPrefix = []byte("CLUSTERDOWN ")
)
