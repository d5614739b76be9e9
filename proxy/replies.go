package proxy

import (
	"bytes"
	"time"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/command"
	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/resp"
)

// onUpstreamTraffic frames Redis's replies, settles the slots they answer,
// and passes every byte except Cicada's own PTTL replies to the client.
func (s *session) onUpstreamTraffic() gnet.Action {
	if s.gone {
		return gnet.Close
	}
	buf, _ := s.up.Peek(-1)
	off, ok := s.fromUpstream(buf)
	if !ok {
		return gnet.Close
	}
	if off > 0 { // gnet's Discard(0) discards everything
		_, _ = s.up.Discard(off)
	}
	if s.paused && s.slots.len() == 0 && !s.closed && !s.gone && !s.srv.draining.Load() {
		s.paused = false
		if _, half := s.client.(*halfConn); half {
			s.halfProgress()
		} else {
			s.processClient()
		}
	}
	return gnet.None
}

// fromUpstream frames buf, every byte Redis sent that the last call did not
// consume, writes the client's part of it to the client, and returns how
// many bytes it consumed (all but a partial header line at the end).
// ok=false: the stream is not RESP; nothing more can be framed.
func (s *session) fromUpstream(buf []byte) (off int, ok bool) {
	l := s.loop
	l.downv = l.downv[:0]
	fwd := 0 // bytes [fwd, off) go to the client
	for off < len(buf) {
		if s.opacity == opaque {
			off = len(buf)
			break
		}
		if !s.framer.InProgress() {
			s.startFrame(buf[off])
			if s.opacity == opaque {
				continue
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
			s.upInvalid = true
			// The replies before it are the client's, as if Redis had
			// closed the connection after them.
			if off > fwd && !s.reply.withheld() {
				s.down(buf[fwd:off])
			}
			s.flushDown()
			return off, false
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
		s.onFrame(s.framer.Frame())
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
	return off, true
}

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
func (s *session) rewriteGiveUp() bool {
	b := s.rewriteBuf
	if s.reply != replyRewriteError {
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

// maxDownv bounds the slices gathered for one Writev: the kernel refuses
// more than IOV_MAX (1024) and gnet closes the connection when it does.
const maxDownv = 256

// down queues bytes for the client, writing what is queued first when the
// gather list is full (a read of thousands of rewritten redirects).
func (s *session) down(bs ...[]byte) {
	if len(s.loop.downv)+len(bs) > maxDownv {
		s.flushDown()
	}
	s.loop.downv = append(s.loop.downv, bs...)
}

// flushDown writes the queued bytes to the client (gnet copies what the
// socket does not take) and checks its output limits (also while a large
// reply is held for rewriting).
func (s *session) flushDown() {
	l := s.loop
	switch {
	case len(l.downv) > 0 && !s.closed:
		_, _ = s.client.Writev(l.downv)
		s.checkOutput()
	case cap(s.rewriteBuf) >= heavyBytes && !s.closed:
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
	if s.gone || s.closed || s.upInvalid {
		return
	}
	pending, _ := c.Peek(-1) // a partial header line fromUpstream left
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
	if buf != nil {
		_, _ = s.fromUpstream(buf)
	}
}

// startFrame looks at the first byte of a reply and the head slot to decide
// whether the reply is swallowed or captured.
func (s *session) startFrame(first byte) {
	s.advance()
	if s.opacity == opaque || s.slots.len() == 0 || first == resp.TypePush {
		return
	}
	head := s.slots.front()
	s.hkFrame = head.hk
	switch {
	case head.kind == slotSwallow:
		s.reply = replySwallow
	case first == resp.TypeError && s.srv.cfg.AddrMap.Len() > 0:
		// Read whole even when it arrives in pieces: it may be a redirect.
		s.reply, s.rewriteBuf = replyRewriteError, nil
	case head.rewrite != cluster.ReplyNone:
		s.reply, s.rewriting, s.rewriteBuf = replyRewriteTopology, head.rewrite, nil
	case head.act == command.ConnExec && len(s.multiRewrites) > 0:
		s.reply, s.rewriteBuf = replyRewriteExec, nil
		s.rewriteExec = append(s.rewriteExec[:0], s.multiRewrites...)
	case head.read != nil && head.read.fill:
		s.reply = replyCapture
		s.captureOverflow = false
		s.capture = s.capture[:0]
	}
}

// captureSlack is what a reply adds to its value: a bulk string's header
// and CRLF.
const captureSlack = 32

// captureBytes keeps a copy of a fill reply, up to the largest cacheable
// size (the cache's, which live configuration can change).
func (s *session) captureBytes(b []byte) {
	if s.captureOverflow {
		return
	}
	if len(s.capture)+len(b) > s.srv.cache.MaxValue()+captureSlack {
		s.captureOverflow = true
		return
	}
	s.capture = append(s.capture, b...)
}

// advance pops opaque slots that reached the head: from there on, replies
// pass through unframed, and a transaction in progress is abandoned.
func (s *session) advance() {
	for s.slots.len() > 0 && s.slots.front().kind == slotOpaque {
		s.dequeue()
		s.goOpaque()
	}
}

// goOpaque stops following replies on this connection for good.
func (s *session) goOpaque() {
	s.opacity = opaque
	if s.multi || len(s.multiStripes) > 0 || len(s.multiHolds) > 0 {
		s.multi = false
		s.abandonTx()
	}
}

// onFrame settles one complete reply from Redis.
func (s *session) onFrame(fr *resp.Frame) {
	v := &fr.Value
	// An error may be Redis refusing the connection itself (maxclients,
	// protected mode), sent before it read anything.
	s.accepted = s.accepted || (v.Type != resp.TypeError && v.Type != resp.TypeBulkError)
	if v.Type == resp.TypeError && s.srv.topo.Enabled() {
		s.noteClusterError(v.Head())
	}
	conf, isConf := subConfirmation(fr)
	switch {
	case v.Type == resp.TypePush:
		// Pub/sub messages and invalidations belong to no request. In RESP3
		// (un)subscribe confirmations are pushes too, and do answer one.
		if !isConf {
			return
		}
		s.countSubs(conf, fr)
		if s.slots.len() == 0 || s.slots.front().kind != slotSub || s.slots.front().subKind != conf.family {
			return
		}
		s.subReply(conf.family, true)
	case s.proto == 2 && s.subscribed() && v.Type == resp.TypeArray && isMessage(fr.Elems[0].Head()):
		return
	case s.slots.len() == 0:
		return // after a protocol error Redis answers what Cicada did not frame
	case s.slots.front().kind == slotSub:
		ok := isConf && v.Type == resp.TypeArray && conf.family == s.slots.front().subKind
		if ok {
			s.countSubs(conf, fr)
		}
		s.subReply(conf.family, ok)
	case s.slots.front().kind == slotSwallow:
		s.dequeue()
		s.finishFill(fr)
	default:
		sl := s.dequeue()
		s.complete(&sl, fr)
	}
	s.advance()
}

// subReply counts one reply to the (un)subscribe command at the head; a
// reply that is not a confirmation (an error, +QUEUED) ends it.
func (s *session) subReply(family command.SubKind, confirmation bool) {
	head := s.slots.front()
	switch {
	case !confirmation:
		if s.multi {
			// +QUEUED (or an error queued as a failure): the confirmations
			// will come inside EXEC's reply, and then messages.
			s.opaqueAfterExec = true
		}
	case head.subLeft < 0:
		// Unsubscribe from all: Redis confirms each subscription it drops
		// (or once, when there was none); the last leaves the count at 0.
		if s.subs[family] > 0 {
			return
		}
	default:
		head.subLeft--
		if head.subLeft > 0 {
			return
		}
	}
	s.dequeue()
}

// complete applies the effects of the reply to a forwarded request.
func (s *session) complete(sl *slot, fr *resp.Frame) {
	v := &fr.Value
	failed := v.Type == resp.TypeError || v.Type == resp.TypeBulkError
	// Outside MULTI, +QUEUED can only be a script's status reply.
	queued := s.multi && v.Type == resp.TypeSimple && bytes.Equal(v.Head(), queuedReply)
	if queued {
		s.deferQueued(sl)
		return
	}
	switch sl.act {
	case command.ConnMulti, command.ConnExec, command.ConnDiscard:
		s.txInFlight--
	}
	switch {
	case sl.act == command.ConnExec:
		executed := !failed && !v.Null && v.Type != resp.TypeSimple
		if executed {
			s.applyTx()
		}
		opaque := executed && s.opaqueAfterExec
		s.endMulti()
		if opaque {
			// The transaction subscribed: messages may follow at once.
			s.releaseWrites(sl.stripes)
			s.releaseHold(sl.hold, sl.held)
			sl.stripes, sl.hold, sl.held = 0, holdNone, nil
			s.dropSlots()
			s.goOpaque()
			s.opaquePubsub = true // its subscriptions are no longer counted
		}
	case sl.act == command.ConnDiscard:
		if !failed { // a DISCARD refused (ACL) leaves the transaction open
			s.endMulti()
		}
	case !failed:
		s.confirm(sl)
	case sl.act == command.ConnHello && sl.auth:
		// HELLO may authenticate and then fail (an invalid SETNAME): who
		// the connection is now, only a unique identity can stand for.
		s.setIdent(s.srv.ids.anonymous())
		s.user, s.userAnon = "", true
	}
	if s.txInFlight == 0 {
		s.sendMulti = s.multi // what was predicted at send is now known
	}
	s.releaseWrites(sl.stripes)
	s.releaseHold(sl.hold, sl.held)
	if sl.read != nil && !failed {
		s.readReplied(sl.read, fr)
	}
}

// deferQueued keeps what a command queued in a transaction will do at
// EXEC: its writes, suspensions and state change.
func (s *session) deferQueued(sl *slot) {
	if sl.hold != holdNone {
		s.multiHolds = append(s.multiHolds, queuedHold{kind: sl.hold, held: sl.held})
		sl.hold, sl.held = holdNone, nil
	}
	s.multiRules = s.multiRules || sl.act == command.ConnAuthRules
	if sl.rewrite != cluster.ReplyNone {
		s.multiRewrites = append(s.multiRewrites, cluster.ExecElem{Index: s.txQueued, Kind: sl.rewrite})
	}
	if sl.act.QueuedAtExec() {
		s.multiActs = append(s.multiActs, queuedAct{idx: s.txQueued, sl: *sl})
		if sl.act == command.ConnSelect {
			s.txDB, s.txDBSet = sl.arg, true
		}
	}
	s.txQueued++
	for ; sl.stripes > 0; sl.stripes-- {
		s.multiStripes = append(s.multiStripes, s.writes.pop())
	}
}

// applyTx applies the state changes of an executed transaction, each one
// whose element of EXEC's reply is not an error.
func (s *session) applyTx() {
	for _, qa := range s.multiActs {
		t, ok := s.framer.ElemType(qa.idx)
		switch {
		case !ok:
			// Beyond what the framer recorded: the state is unknown.
			s.pushOpaque()
			s.opaqueDBUnknown = true
			return
		case t == resp.TypeError || t == resp.TypeBulkError:
			if qa.sl.act == command.ConnHello && qa.sl.auth {
				s.setIdent(s.srv.ids.anonymous())
				s.user, s.userAnon = "", true
			}
		default:
			s.confirm(&qa.sl)
		}
	}
}

var (
	queuedReply = []byte("QUEUED")
	hllMagic    = []byte("HYLL")
)

// releaseHold ends the cache hold held, taken when the request was sent,
// as its kind says: at once or through a fence.
func (s *session) releaseHold(kind hold, held *hotcache.Hold) {
	if kind == holdNone {
		return
	}
	if kind&holdFlush != 0 {
		s.srv.cache.Flush()
	}
	switch {
	case kind&holdVerify != 0:
		s.srv.fences.VerifyFence(held)
	case kind&holdFence != 0:
		s.srv.fences.Fence(held)
	default:
		held.Release()
	}
}

// confirm applies the connection state change of a successful reply.
func (s *session) confirm(sl *slot) {
	srv := s.srv
	switch sl.act {
	case command.ConnSelect:
		s.db = int(sl.arg)
	case command.ConnAuth:
		s.setIdent(srv.ids.userOrAnonymous(sl.user, sl.anon))
		s.setUser(sl.user, sl.anon)
	case command.ConnHello:
		if sl.arg != 0 {
			s.proto = int(sl.arg)
		}
		if sl.auth {
			s.setIdent(srv.ids.userOrAnonymous(sl.user, sl.anon))
			s.setUser(sl.user, sl.anon)
		}
	case command.ConnReset:
		s.endMulti()
		s.db, s.proto = 0, 2
		s.setFresh()
		s.tracking, s.readonly = false, false
		s.subs = [3]int64{}
	case command.ConnMulti:
		s.multi = true
		s.txQueued = 0
	case command.ConnTracking:
		s.tracking = sl.arg == 1
	case command.ConnReadonly:
		s.readonly = sl.arg == 1
	case command.ConnClusterChange:
		srv.topo.Distrust()
	case command.ConnAuthRules:
		srv.ids.rulesChanged()
		srv.cache.Flush()
	}
}

// endMulti releases the writes queued in a transaction: it ran (EXEC) or
// was dropped (DISCARD, RESET, EXECABORT).
func (s *session) endMulti() {
	s.multi, s.opaqueAfterExec = false, false
	if s.multiRules {
		s.multiRules = false
		s.srv.ids.rulesChanged()
		s.srv.cache.Flush()
	}
	for _, st := range s.multiStripes {
		s.srv.cache.EndWrite(st)
	}
	for _, q := range s.multiHolds {
		s.releaseHold(q.kind, q.held)
	}
	s.multiStripes, s.multiHolds = s.multiStripes[:0], s.multiHolds[:0]
	s.multiActs = s.multiActs[:0]
	s.multiRewrites = s.multiRewrites[:0]
	s.txQueued, s.txDBSet = 0, false
}

// readReplied handles the reply to a GET/HGET Cicada follows: a proof of
// permission for a cached reply, or the first half of a fill.
func (s *session) readReplied(ri *readInfo, fr *resp.Frame) {
	v := &fr.Value
	isValue := !fr.Attr && (v.Type == resp.TypeBulk || v.Type == resp.TypeNull)
	if !isValue {
		return
	}
	if !ri.fill {
		s.srv.cache.AddReader(ri.epoch, &ri.key, s.ident)
		return
	}
	if s.captureOverflow {
		return
	}
	ri.isNil = v.Null
	if !v.Null {
		if bytes.HasPrefix(v.Head(), hllMagic) {
			// A HyperLogLog: PFCOUNT rewrites its cached cardinality with
			// no notification, so its bytes cannot be kept.
			return
		}
		ri.reply = append(ri.reply[:0], s.capture...)
		ri.valueLen = int(v.Len)
	}
	s.pendingFill = ri
}

// finishFill takes the PTTL reply that follows a fill GET/HGET (and, for
// a field on a server with hash-field expiration, the HPTTL reply after
// it) and caches the reply if the TTLs allow.
func (s *session) finishFill(fr *resp.Frame) {
	ri := s.pendingFill
	s.pendingFill = nil
	if ri == nil {
		return
	}
	if ri.awaitHPTTL {
		s.finishFieldFill(ri, fr)
		return
	}
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
		s.pendingFill = ri // the HPTTL reply is next
		return
	}
	s.fill(ri, expireAt)
}

// finishFieldFill takes the HPTTL key FIELDS 1 field reply, a one-element
// array: -2 the field is absent, -1 it has no TTL, else its TTL in ms.
func (s *session) finishFieldFill(ri *readInfo, fr *resp.Frame) {
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
	s.fill(ri, expireAt)
}

// fill caches the reply of a fill whose TTLs are known; expireAt is the
// cache clock's expiry (0: none).
func (s *session) fill(ri *readInfo, expireAt int64) {
	req := hotcache.FillRequest{Key: ri.key, ValueLen: ri.valueLen, ExpireAt: expireAt, Ident: s.ident}
	if !ri.isNil {
		req.Reply = ri.reply
	}
	if s.srv.cache.Fill(ri.ticket, req) {
		s.loop.stats.fills.Add(1)
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
func (s *session) countSubs(k subConf, fr *resp.Frame) {
	n, ok := resp.ParseInt(fr.Elems[2].Head())
	if !ok || fr.Elems[2].Type != resp.TypeInteger {
		return
	}
	if k.family == command.SubShard {
		s.subs[2] = n
		return
	}
	delta := n - (s.subs[0] + s.subs[1])
	s.subs[k.family] += delta
	if s.subs[k.family] < 0 {
		s.subs[k.family] = 0
	}
}

// noteClusterError tells the cluster view about a -MOVED, -ASK or
// -CLUSTERDOWN reply (head: the error line's start) before the client
// sees it: if the
// view said the node would have answered, it is stale, and no GET is
// answered from it until a new one is read (cluster.Topology.Contradicted).
func (s *session) noteClusterError(head []byte) {
	var rest []byte
	switch {
	case bytes.HasPrefix(head, movedPrefix):
		rest = head[len(movedPrefix):]
	case bytes.HasPrefix(head, askPrefix):
		rest = head[len(askPrefix):]
	case bytes.HasPrefix(head, clusterDownPrefix):
		s.srv.topo.Contradicted(-1, s.readonly)
		return
	default:
		return
	}
	if sp := bytes.IndexByte(rest, ' '); sp > 0 {
		rest = rest[:sp]
	}
	if slot, ok := resp.ParseInt(rest); ok && slot >= 0 && slot < cluster.Slots {
		s.srv.topo.Contradicted(int(slot), s.readonly)
	}
}

var (
	movedPrefix       = []byte("MOVED ")
	askPrefix         = []byte("ASK ")
	clusterDownPrefix = []byte("CLUSTERDOWN ")
)
