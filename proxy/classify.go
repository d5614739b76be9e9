package proxy

import (
	"github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/command"
	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/hotkeys"
	"github.com/cicada-proxy/cicada/resp"
)

// decision is what processClient does with a complete request.
type decision uint8

const (
	decideForward decision = iota // send it to Redis (slot queued)
	decideLocal                   // answered from the cache (reply in loop.out)
	decidePause                   // stop parsing until every reply is in
	decideInject                  // forward it and loop.inject right behind it
)

// onCommand decides what to do with the complete request the parser holds.
func (s *session) onCommand(n int) decision {
	args := s.parser.Args()
	argc := s.parser.Argc()
	if d, ok := s.onRead(args, argc); ok {
		return d
	}
	if len(args) > 0 && hotkeys.Is(args[0]) {
		if d, ok := s.onHotkeys(args, argc); ok {
			return d
		}
	}
	if authenticates(args, argc) && s.opacity == framed {
		switch {
		case s.sendMulti && s.srv.settings.Commands().AuthErrorsDropped():
			// Queued, a failed AUTH's error goes missing from EXEC's
			// reply (redis/redis#15640): the replies that follow cannot
			// be counted.
			s.loop.stats.forwarded.Add(1)
			s.pushOpaque()
			return decideForward
		case s.proto == 3 && (s.subscribed() || s.tracking) && s.srv.settings.Commands().AuthErrorsDropped():
			// A push (a message, an invalidation) may be in Redis's output
			// buffer at any moment, so a failed AUTH's error may be dropped
			// whatever Cicada waits for, and nothing tells whether it was:
			// the replies that follow cannot be counted.
			s.loop.stats.forwarded.Add(1)
			s.pushOpaque()
			return decideForward
		case !s.sendMulti && s.slots.len() > 0:
			// Sent behind other requests, Redis 7.2+ drops a failed
			// AUTH's error while their replies are pending in its output
			// buffer (redis/redis#15640): it goes alone, once they are in.
			return decidePause
		}
	}
	s.loop.stats.forwarded.Add(1)
	spec := s.srv.settings.Commands().Resolve(args)
	if spec != nil && spec.Conn == command.ConnQuit {
		// Redis answers +OK to QUIT (whatever its arguments, even in MULTI),
		// then closes: it reads nothing after it.
		s.input = inputQuit
		if s.opacity == framed {
			s.queue(slot{kind: slotReply})
		}
		return decideForward
	}
	conn := command.ConnNone
	if spec != nil && spec.ArityOK(int(argc)) {
		conn = spec.Conn
	}
	sl := slot{kind: slotReply}
	pauseAfter := conn.PausesAfter() // what follows must see the state it sets
	switch conn {
	case command.ConnSelect:
		if db, ok := resp.ParseInt(args[1]); ok {
			sl.act, sl.arg = conn, db
		}
		s.opaqueDBUnknown = s.opacity != framed
	case command.ConnReset:
		sl.act = conn
		s.sendMulti, s.txState = false, false
		s.clearTxEffects()
		s.opaqueDBUnknown = s.opacity != framed
	case command.ConnMulti:
		sl.act = conn
		s.sendMulti = true
		s.txInFlight++
	case command.ConnExec:
		sl.act = conn
		pauseAfter = s.txState // what follows must see the state it sets
		s.sendMulti, s.txState = false, false
		s.txInFlight++
	case command.ConnDiscard:
		sl.act = conn
		s.sendMulti, s.txState = false, false
		s.clearTxEffects()
		s.txInFlight++
	case command.ConnAuth:
		sl.act, sl.user, sl.auth = conn, "default", true
		if argc == 3 {
			if args[1] == nil {
				sl.user, sl.anon = "", true // too long to capture
			} else {
				sl.user = string(args[1])
			}
		}
	case command.ConnHello:
		sl.act = conn
		sl.arg, sl.user, sl.auth, sl.anon = parseHello(args)
		if int64(len(args)) != argc { // an AUTH option may be among the uncaptured
			sl.auth, sl.anon = true, true
		}
	case command.ConnClusterChange:
		sl.act = conn
	case command.ConnReadonly:
		sl.act = conn
		if spec.ConnOn {
			sl.arg = 1
		}
	case command.ConnTracking:
		sl.act = conn
		if command.EqualFold(args[2], "on") {
			sl.arg = 1
		}
	case command.ConnReplyMode:
		if command.EqualFold(args[2], "off") || command.EqualFold(args[2], "skip") {
			s.pushOpaque() // the replies that follow cannot be counted
			return decideForward
		}
	case command.ConnReplconf:
		if replconfMaySkipReply(args, argc) {
			// REPLCONF ACK or GETACK, which Redis runs without a reply
			// but refuses with one (ACL, MULTI, an earlier option): the
			// replies that follow cannot be counted.
			s.pushOpaque()
			return decideForward
		}
	case command.ConnStream:
		// A stream of monitor lines or a replication stream, not replies.
		s.pushOpaque()
		return decideForward
	case command.ConnAuthRules:
		sl.act = conn
		if spec.ConnVerify {
			// CONFIG SET may change requirepass or notify-keyspace-events:
			// no cache answers until the classes Cicada needs are
			// verified again.
			sl.hold = holdVerify
		}
	case command.ConnSubscribe:
		sl.kind = slotSub
		sl.subKind = spec.ConnSub
		sl.subLeft = int32(argc - 1)
		if argc == 1 {
			sl.subLeft = -1
		}
		if s.sendMulti {
			// Queued, its confirmations come inside EXEC's reply (see
			// subReply), or executed if MULTI was refused: wait and see.
			s.txState, pauseAfter = true, true
		}
	}
	if sl.act.QueuedAtExec() && s.sendMulti {
		// Probably queued, to take effect at EXEC (see applyTx). Wait
		// for Redis's answer: +QUEUED, or the change itself if MULTI
		// was refused.
		s.txState, pauseAfter = true, true
	}
	if s.srv.cfg.AddrMap.Len() > 0 {
		// Inside MULTI the reply is +QUEUED, which Rewrite leaves alone;
		// a MULTI Redis refused leaves the command run at once.
		sl.rewrite = cluster.TopologyCommand(args)
	}
	s.effects(spec, args, argc, &sl)
	if sl.act == command.ConnExec {
		s.applyTxEffects(&sl)
	}
	if s.opacity != framed {
		return decideForward
	}
	s.queue(sl)
	if pauseAfter {
		s.paused = true
	}
	return decideForward
}

// effects applies what a forwarded command can do to cached data before it
// is sent: its keys are evicted and their fills blocked (BeginWrite), or
// the cache is suspended (a hold) until its reply. Inside a transaction
// Redis has confirmed, this waits for EXEC (applyTxEffects): queued
// commands run there. On an opaque connection, whose replies are not
// followed, the keys are only invalidated, and anything broader empties
// the cache and suspends it for opaqueHold.
func (s *session) effects(spec *command.Spec, args [][]byte, argc int64, sl *slot) {
	effect := command.EffectUnknown
	if spec != nil {
		effect = spec.Effect
		if !spec.ArityOK(int(argc)) {
			effect = command.EffectNone // Redis rejects it unexecuted
		}
	}
	var keys []hotcache.Key
	if effect == command.EffectKeys {
		var ok bool
		if keys, ok = s.writtenKeys(spec, args, argc); !ok || s.opaqueDBUnknown {
			effect, keys = command.EffectUnknown, nil
		}
	}
	h := sl.hold
	switch effect {
	case command.EffectUnknown:
		h |= holdFence
	case command.EffectFlush:
		h |= holdFlush
	}
	switch {
	case s.opacity != framed:
		s.applyOpaque(keys, h, sl.act == command.ConnAuthRules)
	case s.multi && s.sendMulti && s.txInFlight == 0:
		// Redis confirmed MULTI and nothing can end it before this
		// command: it is queued, and runs at EXEC.
		for i := range keys {
			key := keys[i].Clone()
			s.txKeyBytes += int64(key.Size())
			s.txEffects = append(s.txEffects, txEffect{key: key})
		}
		if h != holdNone {
			s.txEffects = append(s.txEffects, txEffect{hold: h})
		}
		sl.hold = holdNone
	default:
		cache := s.srv.cache
		for i := range keys {
			s.writes.push(cache.BeginWrite(&keys[i]))
			sl.stripes++
		}
		if h != holdNone {
			sl.held = cache.Hold()
		}
		sl.hold = h
	}
}

// txEffect is one effect of a command queued in a confirmed transaction,
// applied when EXEC is sent: a key to evict, or a hold.
type txEffect struct {
	key  hotcache.Key // its own bytes (Clone)
	hold hold
}

// clearTxEffects forgets the effects of the queued transaction.
func (s *session) clearTxEffects() {
	clear(s.txEffects) // drop the keys: the slice's storage is reused
	s.txEffects, s.txKeyBytes = s.txEffects[:0], 0
}

// applyTxEffects applies the deferred effects of the transaction to the
// EXEC being sent: its slot then holds them until EXEC's reply.
func (s *session) applyTxEffects(sl *slot) {
	var h hold
	var keys []hotcache.Key
	for _, e := range s.txEffects {
		if e.hold != holdNone {
			h |= e.hold
			continue
		}
		keys = append(keys, e.key)
	}
	s.clearTxEffects()
	if s.opacity != framed {
		s.applyOpaque(keys, h, false)
		return
	}
	cache := s.srv.cache
	for i := range keys {
		s.writes.push(cache.BeginWrite(&keys[i]))
		sl.stripes++
	}
	if h != holdNone {
		if sl.hold == holdNone {
			sl.held = cache.Hold() // one per slot, whatever its hold bits
		}
		sl.hold |= h
	}
}

// applyOpaque applies effects whose completion Cicada cannot observe: they
// are treated like writes from outside Cicada (keys invalidated; notified
// when they run), and anything broader empties the cache and suspends it
// for opaqueHold, the time such a write most likely takes to run.
func (s *session) applyOpaque(keys []hotcache.Key, h hold, rules bool) {
	for i := range keys {
		s.srv.cache.Invalidate(&keys[i], hotcache.ReasonWrite)
	}
	if rules {
		s.srv.ids.rulesChanged()
	}
	if h != holdNone || rules {
		s.srv.suspendFor(opaqueHold)
	}
}

// writtenKeys resolves the keys a keyed write modifies. ok=false when some
// key is not known (not captured).
func (s *session) writtenKeys(spec *command.Spec, args [][]byte, argc int64) ([]hotcache.Key, bool) {
	if int64(len(args)) != argc {
		return nil, false
	}
	refs, ok := spec.WrittenKeys(args, s.loop.refs[:0])
	s.loop.refs = refs[:0]
	if !ok {
		return nil, false
	}
	keys := s.keysBuf[:0]
	for _, r := range refs {
		db := r.DB
		if db == command.CurrentDB {
			db = s.db
			if s.sendMulti && s.txDBSet && int(s.txDB) != s.db {
				// A queued SELECT may have switched the db by the time
				// this runs: evict in both.
				keys = append(keys, hotcache.KeyOf(int(s.txDB), args[r.Arg]))
			}
		}
		keys = append(keys, hotcache.KeyOf(db, args[r.Arg]))
	}
	s.keysBuf = keys[:0]
	return keys, true
}

// onRead handles GET key and HGET key field: a local answer, a pause, or a
// forward that may fill the cache. ok=false for any other request.
func (s *session) onRead(args [][]byte, argc int64) (decision, bool) {
	var k hotcache.Key
	switch {
	case argc == 2 && len(args) == 2 && command.EqualFold(args[0], "get") && args[1] != nil:
		if s.parser.Consumed() {
			return 0, false // part of it went to Redis already
		}
		k = hotcache.KeyOf(s.db, args[1])
	case argc == 3 && len(args) == 3 && command.EqualFold(args[0], "hget") && args[1] != nil && args[2] != nil:
		if s.parser.Consumed() {
			return 0, false
		}
		k = hotcache.FieldKeyOf(s.db, args[1], args[2])
	default:
		return 0, false
	}
	srv := s.srv
	if srv.cache.Off() { // cache-enabled false: a plain proxy, no counting
		return s.forwardRead(nil), true
	}
	if s.pauseCounted {
		s.pauseCounted = false // counted when it paused; this is the same request parsed again
	} else {
		srv.det.Observe(s.loop.idx, k.ReadHash())
	}
	v, f := s.mayAnswer(&k)
	switch v {
	case answerLocal:
		s.loop.out = append(s.loop.out, f.Reply...)
		s.loop.stats.hits.Add(1)
		return decideLocal, true
	case answerAfterReplies:
		s.pauseCounted = true
		return decidePause, true
	case answerUnsettled:
		s.loop.stats.unsettled.Add(1)
	case answerProve:
		return s.forwardRead(&readInfo{key: k.Clone(), epoch: srv.cache.Epoch()}), true
	case answerFill:
		return s.forwardFill(&k), true
	}
	return s.forwardRead(nil), true
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
)

// mayAnswer is the one answer to "may this GET/HGET of k be answered from
// the cache now?", looking k up once. All must hold for a local answer:
//
//  1. The connection's state as Redis confirmed it allows one (canAnswer:
//     Redis accepted the connection, no transaction sent or confirmed, no
//     CLIENT TRACKING, not subscribed, not opaque, no protocol error). With
//     replies outstanding only what was sent is known (no MULTI, not
//     opaque, no protocol error): a cached key then pauses the connection
//     until they are in, and the request is decided again.
//  2. The connection's identity is the one Redis gave it (checkFresh), and
//     the cache holds a reply of k that identity was proven to read (Hit;
//     Unproven forwards it to prove it).
//  3. In Redis Cluster, the node answers k's hash slot (Topology.Answerable).
//  4. Redis would not have closed the connection as idle by now
//     (idleRefresh: it must see a request now and then).
//  5. No keyspace notification for k (nor a flush) is in Cicada's socket
//     unapplied (settled, asked once per batch of requests), and what was
//     found is still what the cache holds after asking (Cache.Current: a
//     notification applied between the lookup and the ask would be in
//     neither).
//
// A key that is not cached is filled when the detector says it is hot, a
// fill ticket is granted, and in Redis Cluster the node answers its slot.
func (s *session) mayAnswer(k *hotcache.Key) (answer, hotcache.Found) {
	srv := s.srv
	clustered := srv.topo.Enabled()
	var f hotcache.Found
	if s.slots.len() > 0 {
		if s.sendMulti || s.opacity != framed {
			return answerForward, f
		}
		s.checkFresh()
		if f = srv.cache.Lookup(k, s.ident, s.proto); f.Status == hotcache.Hit &&
			(!clustered || srv.topo.Answerable(f.HashSlot, s.readonly)) {
			return answerAfterReplies, f
		}
		return answerForward, f
	}
	if !s.canAnswer() {
		return answerForward, f
	}
	s.checkFresh()
	f = srv.cache.Lookup(k, s.ident, s.proto)
	switch f.Status {
	case hotcache.Hit:
		switch {
		case clustered && !srv.topo.Answerable(f.HashSlot, s.readonly):
		case srv.idleRefresh.Load() > 0 && srv.clock.Load()-s.lastForward > srv.idleRefresh.Load():
			// Let Redis see this one, or it closes the connection as idle.
		case !s.loop.settled(srv.fences, k.Hash()):
			// A notification of a write (from outside Cicada, perhaps
			// acknowledged already) is on its way into the cache.
			return answerUnsettled, f
		case !srv.cache.Current(&f):
		default:
			return answerLocal, f
		}
	case hotcache.Unproven:
		if !clustered || srv.topo.Answerable(f.HashSlot, s.readonly) {
			return answerProve, f
		}
	case hotcache.Miss:
		if srv.det.IsHot(k.ReadHash()) {
			return answerFill, f
		}
	}
	return answerForward, f
}

// forwardFill forwards a GET/HGET of hot key k that is not cached, with a
// PTTL (and, for a field on a server with hash-field expiration, an HPTTL)
// right behind it, to fill the cache from their replies; a plain forward
// when no fill can be kept.
func (s *session) forwardFill(k *hotcache.Key) decision {
	srv := s.srv
	t, ok := srv.cache.BeginFill(k)
	// The view is read after the ticket: a view that loses the slot is
	// published before the epoch moves (upstream.applyCluster).
	if !ok || (srv.topo.Enabled() && !srv.topo.Answerable(cluster.Slot(k.Name()), s.readonly)) {
		return s.forwardRead(nil)
	}
	ri := &readInfo{key: k.Clone(), fill: true, ticket: t, sentAt: srv.cache.Now()}
	s.forwardRead(ri)
	s.queue(slot{kind: slotSwallow})
	s.loop.inject = resp.AppendCommand(s.loop.inject[:0], pttl, k.Name())
	if k.IsField() && srv.settings.Commands().FieldTTL() {
		// A field expires on its own (Redis 7.4+), and Redis tells only
		// when its active expiry deletes it: the field's TTL bounds the
		// entry too.
		ri.fieldTTL = true
		s.queue(slot{kind: slotSwallow})
		s.loop.inject = resp.AppendCommand(s.loop.inject, hpttl, k.Name(), fields, one, k.Field())
	}
	s.loop.stats.fillsTried.Add(1)
	return decideInject
}

var (
	pttl   = []byte("PTTL")
	hpttl  = []byte("HPTTL")
	fields = []byte("FIELDS")
	one    = []byte("1")
)

func (s *session) forwardRead(ri *readInfo) decision {
	if s.opacity == framed {
		s.queue(slot{kind: slotReply, read: ri})
	}
	s.loop.stats.misses.Add(1)
	s.loop.stats.forwarded.Add(1)
	return decideForward
}

// authenticates reports whether a request is AUTH, or HELLO that may carry
// an AUTH option (one it cannot read counts).
func authenticates(args [][]byte, argc int64) bool {
	switch {
	case len(args) == 0:
		return false
	case command.EqualFold(args[0], "auth"):
		return true
	case command.EqualFold(args[0], "hello"):
		_, _, auth, _ := parseHello(args)
		return auth || int64(len(args)) != argc
	}
	return false
}

// parseHello returns the protocol version HELLO asks for (0 if none),
// whether it has an AUTH option (auth) and its user (which may be "", a
// valid ACL user name), and anon=true (with auth) when an AUTH option may
// be present whose user Cicada cannot name (not captured, or options it
// cannot read). The caller also treats arguments past the captured ones as
// a possible AUTH.
func parseHello(args [][]byte) (proto int64, user string, auth, anon bool) {
	if len(args) < 2 || args[1] == nil {
		return 0, "", len(args) > 1, len(args) > 1
	}
	proto, _ = resp.ParseInt(args[1])
	for i := 2; i < len(args); i++ {
		switch {
		case args[i] == nil:
			return proto, "", true, true
		case command.EqualFold(args[i], "auth") && i+2 < len(args):
			if args[i+1] == nil {
				return proto, "", true, true
			}
			user, auth = string(args[i+1]), true
			i += 2
		case command.EqualFold(args[i], "setname") && i+1 < len(args):
			i++
		}
	}
	return proto, user, auth, false
}

// replconfMaySkipReply reports whether Redis may send no reply to a
// REPLCONF with these arguments: Redis 7.0's replconfCommand takes its
// option-value pairs in order and returns without a reply at ACK or GETACK
// (for any client), after replying to an error in an earlier option; an
// even argument count is a syntax error and every other option ends with
// +OK. An option Cicada did not capture may be either.
func replconfMaySkipReply(args [][]byte, argc int64) bool {
	if argc%2 == 0 {
		return false
	}
	for j := int64(1); j < argc; j += 2 {
		if j >= int64(len(args)) || args[j] == nil {
			return true
		}
		if command.EqualFold(args[j], "ack") || command.EqualFold(args[j], "getack") {
			return true
		}
	}
	return false
}
