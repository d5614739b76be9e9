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

// commandKey is a key a write touches, resolved to its db.
type commandKey struct {
	db  int
	key []byte
}

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
	if authenticates(args, argc) && !s.opaqueSend {
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
		s.quit = true
		if !s.opaqueSend {
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
		s.opaqueDBUnknown = s.opaqueSend
	case command.ConnReset:
		sl.act = conn
		s.sendMulti, s.txState = false, false
		s.clearTxEffects()
		s.opaqueDBUnknown = s.opaqueSend
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
	if s.opaqueSend {
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
	var keys []commandKey
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
	case s.opaqueSend:
		s.applyOpaque(keys, h, sl.act == command.ConnAuthRules)
	case s.multi && s.sendMulti && s.txInFlight == 0:
		// Redis confirmed MULTI and nothing can end it before this
		// command: it is queued, and runs at EXEC.
		for _, k := range keys {
			key := clone(k.key)
			s.txKeyBytes += int64(cap(key))
			s.txEffects = append(s.txEffects, txEffect{db: k.db, key: key})
		}
		if h != holdNone {
			s.txEffects = append(s.txEffects, txEffect{hold: h})
		}
		sl.hold = holdNone
	default:
		cache := s.srv.cache
		for _, k := range keys {
			s.writes.push(cache.BeginWrite(k.db, hotcache.Hash(k.db, k.key), k.key))
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
	db   int
	key  []byte
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
	var keys []commandKey
	for _, e := range s.txEffects {
		if e.hold != holdNone {
			h |= e.hold
			continue
		}
		keys = append(keys, commandKey{db: e.db, key: e.key})
	}
	s.clearTxEffects()
	if s.opaqueSend {
		s.applyOpaque(keys, h, false)
		return
	}
	cache := s.srv.cache
	for _, k := range keys {
		s.writes.push(cache.BeginWrite(k.db, hotcache.Hash(k.db, k.key), k.key))
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
func (s *session) applyOpaque(keys []commandKey, h hold, rules bool) {
	for _, k := range keys {
		s.srv.cache.Invalidate(k.db, hotcache.Hash(k.db, k.key), k.key, hotcache.ReasonWrite)
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
func (s *session) writtenKeys(spec *command.Spec, args [][]byte, argc int64) ([]commandKey, bool) {
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
				keys = append(keys, commandKey{db: int(s.txDB), key: args[r.Arg]})
			}
		}
		keys = append(keys, commandKey{db: db, key: args[r.Arg]})
	}
	s.keysBuf = keys[:0]
	return keys, true
}

// onRead handles GET key and HGET key field: a local answer, a pause, or a
// forward that may fill the cache. ok=false for any other request.
func (s *session) onRead(args [][]byte, argc int64) (decision, bool) {
	isField := false
	switch {
	case argc == 2 && len(args) == 2 && command.EqualFold(args[0], "get") && args[1] != nil:
	case argc == 3 && len(args) == 3 && command.EqualFold(args[0], "hget") && args[1] != nil && args[2] != nil:
		isField = true
	default:
		return 0, false
	}
	if s.parser.Consumed() {
		return 0, false // part of it went to Redis already
	}
	srv := s.srv
	if srv.cache.Off() { // cache-enabled false: a plain proxy, no counting
		return s.forwardRead(nil), true
	}
	key := args[1]
	var field []byte
	if isField {
		field = args[2]
	}
	h := hotcache.Hash(s.db, key)
	dh := h
	if isField {
		dh = hotcache.FieldHash(h, field)
	}
	if s.pauseCounted {
		s.pauseCounted = false // counted when it paused; this is the same request parsed again
	} else {
		srv.det.Observe(s.loop.idx, dh)
	}
	// In Redis Cluster, only a key of a slot the node answers for
	// (cluster.Topology); a cached key's slot comes with it.
	clustered := srv.topo.Enabled()
	if s.slots.len() > 0 {
		// Answer it once the replies before it are in, if it is cached and
		// nothing sent so far rules a local answer out.
		if !s.sendMulti && !s.opaqueSend && !s.rawRequests {
			s.checkFresh()
			_, cslot, st := srv.cache.LookupSlot(s.db, h, key, field, isField, s.ident, s.proto)
			if st == hotcache.Hit && (!clustered || srv.topo.Answerable(cslot, s.readonly)) {
				s.pauseCounted = true
				return decidePause, true
			}
		}
		return s.forwardRead(nil), true
	}
	if !s.canAnswer() {
		return s.forwardRead(nil), true
	}
	s.checkFresh()
	reply, cslot, st := srv.cache.LookupSlot(s.db, h, key, field, isField, s.ident, s.proto)
	if st == hotcache.Hit && !s.loop.unappliedAsked {
		// Ask, then look again: a notification the subscriber applied
		// between the lookup and the peek would be in neither.
		s.loop.settled(srv.fences, h)
		reply, cslot, st = srv.cache.LookupSlot(s.db, h, key, field, isField, s.ident, s.proto)
	}
	if clustered && (st == hotcache.Hit || st == hotcache.Unproven) && !srv.topo.Answerable(cslot, s.readonly) {
		return s.forwardRead(nil), true
	}
	switch st {
	case hotcache.Hit:
		if r := srv.idleRefresh.Load(); r > 0 && srv.clock.Load()-s.lastForward > r {
			break // let Redis see this one, or it closes the connection as idle
		}
		if !s.loop.settled(srv.fences, h) {
			// A notification of a write (from outside Cicada, perhaps
			// acknowledged already) is on its way into the cache.
			s.loop.stats.unsettled.Add(1)
			break
		}
		s.loop.out = append(s.loop.out, reply...)
		s.loop.stats.hits.Add(1)
		return decideLocal, true
	case hotcache.Unproven:
		return s.forwardRead(&readInfo{db: s.db, h: h, key: clone(key), field: clone(field), isField: isField,
			epoch: srv.cache.Epoch()}), true
	case hotcache.Miss:
		if !srv.det.IsHot(dh) {
			break
		}
		t, ok := srv.cache.BeginFill(h)
		// The view is read after the ticket: a view that loses the slot
		// is published before the epoch moves (keyspace.applyCluster).
		if !ok || (clustered && !srv.topo.Answerable(cluster.Slot(key), s.readonly)) {
			break
		}
		ri := &readInfo{db: s.db, h: h, key: clone(key), field: clone(field), isField: isField,
			fill: true, ticket: t, sentAt: srv.cache.Now()}
		s.forwardRead(ri)
		s.queue(slot{kind: slotSwallow})
		s.loop.inject = resp.AppendCommand(s.loop.inject[:0], pttl, key)
		if isField && srv.settings.Commands().FieldTTL() {
			// A field expires on its own (Redis 7.4+), and Redis tells
			// only when its active expiry deletes it: the field's TTL
			// bounds the entry too.
			ri.fieldTTL = true
			s.queue(slot{kind: slotSwallow})
			s.loop.inject = resp.AppendCommand(s.loop.inject, hpttl, key, fields, one, field)
		}
		s.loop.stats.fillsTried.Add(1)
		return decideInject, true
	}
	return s.forwardRead(nil), true
}

var (
	pttl   = []byte("PTTL")
	hpttl  = []byte("HPTTL")
	fields = []byte("FIELDS")
	one    = []byte("1")
)

func (s *session) forwardRead(ri *readInfo) decision {
	if !s.opaqueSend {
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

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}
