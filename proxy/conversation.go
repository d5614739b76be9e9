package proxy

import (
	"strconv"
	"time"

	"github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/command"
	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/resp"
)

// onCommand decides what to do with the complete request the parser holds.
func (cv *conversation) onCommand(n int) decision {
	args := cv.parser.Args()
	argc := cv.parser.Argc()
	var spec *command.Spec
	resolved := false
	if cv.shared || cv.canShare() {
		var d decision
		if spec, resolved, d = cv.route(args, argc, n); d != decideForward {
			return d
		}
	}
	cv.asking = false // ASKING is for the one request after it (ownState sets it again)
	if d, ok := cv.onRead(args, argc); ok {
		return d
	}
	if authenticates(args, argc) && cv.opacity == framed {
		switch {
		case cv.tx.queuing() && cv.env.settings.Commands().AuthErrorsDropped():
			// Queued, a failed AUTH's error goes missing from EXEC's
			// reply (redis/redis#15640): the replies that follow cannot
			// be counted.
			cv.loop.stats.forwarded.Add(1)
			cv.pushOpaque()
			return decideForward
		case cv.proto == 3 && (cv.subscribed() || cv.tracking) && cv.env.settings.Commands().AuthErrorsDropped():
			// A push (a message, an invalidation) may be in Redis's output
			// buffer at any moment, so a failed AUTH's error may be dropped
			// whatever Cicada waits for, and nothing tells whether it was:
			// the replies that follow cannot be counted.
			cv.loop.stats.forwarded.Add(1)
			cv.pushOpaque()
			return decideForward
		case !cv.tx.queuing() && cv.sent.len() > 0:
			// Sent behind other requests, Redis 7.2+ drops a failed
			// AUTH's error while their replies are pending in its output
			// buffer (redis/redis#15640): it goes alone, once they are in.
			return decidePause
		}
	}
	cv.loop.stats.forwarded.Add(1)
	if !resolved {
		spec = cv.env.settings.Commands().Resolve(args)
	}
	if spec != nil && spec.Conn == command.ConnQuit {
		// Redis answers +OK to QUIT (whatever its arguments, even in MULTI),
		// then closes: it reads nothing after it.
		cv.input = inputQuit
		if cv.opacity == framed {
			cv.queue(request{kind: expectReply})
		}
		return decideForward
	}
	conn := command.ConnNone
	if spec != nil && spec.ArityOK(int(argc)) {
		conn = spec.Conn
	}
	rq := request{kind: expectReply}
	pauseAfter := conn.PausesAfter() // what follows must see the state it sets
	switch conn {
	case command.ConnSelect:
		if db, ok := resp.ParseInt(args[1]); ok {
			rq.act, rq.arg = conn, db
		}
		cv.opaqueDBUnknown = cv.opacity != framed
	case command.ConnReset:
		rq.act = conn
		cv.tx.send = txSendNone
		cv.clearTxEffects()
		cv.opaqueDBUnknown = cv.opacity != framed
	case command.ConnMulti:
		rq.act = conn
		if cv.tx.send == txSendNone { // a nested MULTI is refused
			cv.tx.send = txSendQueue
		}
		cv.tx.inFlight++
	case command.ConnExec:
		rq.act = conn
		pauseAfter = cv.tx.send == txSendQueueState // what follows must see the state it sets
		cv.tx.send = txSendNone
		cv.tx.inFlight++
	case command.ConnDiscard:
		rq.act = conn
		cv.tx.send = txSendNone
		cv.clearTxEffects()
		cv.tx.inFlight++
	case command.ConnAuth:
		rq.act, rq.user, rq.auth = conn, "default", true
		if argc == 3 {
			if args[1] == nil {
				rq.user, rq.anon = "", true // too long to capture
			} else {
				rq.user = string(args[1])
			}
		}
		if pass := args[len(args)-1]; pass != nil && !cv.tx.queuing() {
			cv.authPass = string(pass)
		}
	case command.ConnHello:
		rq.act = conn
		rq.arg, rq.user, rq.auth, rq.anon = parseHello(args)
		if int64(len(args)) != argc { // an AUTH option may be among the uncaptured
			rq.auth, rq.anon = true, true
		}
		if pass, ok := helloPass(args); ok && rq.auth && !rq.anon && !cv.tx.queuing() {
			cv.authPass = pass
		}
	case command.ConnClusterChange:
		rq.act = conn
	case command.ConnReadonly:
		rq.act = conn
		if spec.ConnOn {
			rq.arg = 1
		}
	case command.ConnTracking:
		rq.act = conn
		if command.EqualFold(args[2], "on") {
			rq.arg = 1
		}
	case command.ConnSetName:
		if args[2] != nil {
			rq.act, rq.user = conn, string(args[2])
		}
	case command.ConnSetInfo:
		switch {
		case args[3] == nil:
		case command.EqualFold(args[2], "lib-name"):
			rq.act, rq.arg, rq.user = conn, setInfoName, string(args[3])
		case command.EqualFold(args[2], "lib-ver"):
			rq.act, rq.arg, rq.user = conn, setInfoVer, string(args[3])
		}
	case command.ConnReplyMode:
		if command.EqualFold(args[2], "off") || command.EqualFold(args[2], "skip") {
			cv.pushOpaque() // the replies that follow cannot be counted
			return decideForward
		}
	case command.ConnReplconf:
		if replconfMaySkipReply(args, argc) {
			// REPLCONF ACK or GETACK, which Redis runs without a reply
			// but refuses with one (ACL, MULTI, an earlier option): the
			// replies that follow cannot be counted.
			cv.pushOpaque()
			return decideForward
		}
	case command.ConnStream:
		// A stream of monitor lines or a replication stream, not replies.
		cv.pushOpaque()
		return decideForward
	case command.ConnAuthRules:
		rq.act = conn
		if spec.ConnVerify {
			// CONFIG SET may change requirepass or notify-keyspace-events:
			// no cache answers until the classes Cicada needs are
			// verified again.
			rq.hold = holdVerify
		}
	case command.ConnSubscribe:
		rq.kind = expectSubs
		rq.subKind = spec.ConnSub
		rq.subLeft = int32(argc - 1)
		if argc == 1 {
			rq.subLeft = -1
		}
		if cv.tx.queuing() {
			// Queued, its confirmations come inside EXEC's reply (see
			// subReply), or executed if MULTI was refused: wait and see.
			cv.tx.send, pauseAfter = txSendQueueState, true
		}
	}
	if rq.act.QueuedAtExec() && cv.tx.queuing() {
		// Probably queued, to take effect at EXEC (see applyTx). Wait
		// for Redis's answer: +QUEUED, or the change itself if MULTI
		// was refused.
		cv.tx.send, pauseAfter = txSendQueueState, true
	}
	if cv.env.addrMap.Len() > 0 {
		// Inside MULTI the reply is +QUEUED, which Rewrite leaves alone;
		// a MULTI Redis refused leaves the command run at once.
		rq.rewrite = cluster.TopologyCommand(args)
	}
	cv.effects(spec, args, argc, &rq)
	cv.laneWrote = cv.laneWrote || cv.shared && (spec == nil || spec.Effect != command.EffectNone)
	cv.ownState(spec, args, argc)
	if rq.act == command.ConnExec {
		cv.applyTxEffects(&rq)
	}
	if cv.opacity != framed {
		return decideForward
	}
	prefix := cv.laneWrote && !cv.shared && spec != nil && (spec.Name == "wait" || spec.Name == "waitaof") && !cv.tx.queuing()
	if prefix {
		// WAIT and WAITAOF wait for this connection's writes, up to its
		// replication offset, which the client's writes on lanes did not
		// move: a PUBLISH (propagated to replicas and the AOF) moves it
		// past them. Its reply is dropped: a user refused the channel, or
		// a Redis Cluster node (whose PUBLISH goes through the cluster bus,
		// not replication), gets a WAIT that counts only this connection's
		// writes (docs/limits.md).
		cv.laneWrote = false
		cv.queue(request{kind: expectDrop})
		cv.loop.injected = waitPublish
	}
	cv.queue(rq)
	if spec == nil || spec.Flags&command.FlagReadonly == 0 || spec.Flags&command.FlagBlocking != 0 || conn != command.ConnNone {
		// Not a plain read: it may change the connection's state without
		// pausing it (CLIENT TRACKING), or wait in Redis (a blocking
		// command, WAIT, a write held by CLIENT PAUSE WRITE).
		cv.otherAt = cv.queuedN
	}
	if pauseAfter {
		cv.pause = pauseReplies
	}
	if prefix {
		return decidePrefix
	}
	if cv.shared && (rq.act == command.ConnSetName || rq.act == command.ConnSetInfo) {
		// The lane keeps what it says of itself in CLIENT LIST; the
		// client's name and library go to its own connection when it
		// gets one (setup).
		cv.queue(request{kind: expectDrop})
		cv.loop.injected = laneNameCmd
		if rq.act == command.ConnSetInfo {
			cv.loop.injected = libInfoCmd[rq.arg]
		}
		return decideInject
	}
	return decideForward
}

// route decides where a request goes when the conversation is on a lane
// (shared) or could be (canShare): on the connection it is on
// (decideForward, with its spec when it resolved it), or on another once
// the replies in flight are in: the client's own (decideOwn: the request
// needs or creates state of its own connection, command.Sharing), or the
// lane of cv.want (decideSwitch: the lane of the client's state, for a
// client on its own connection that could share again, on another lane,
// or whose confirmed state is no longer its lane's; the lane of the state
// a SELECT or HELLO asks for). It decides nothing else: the request is
// decided again once the session has moved it. A request of n bytes that
// a lane would not take (laneHold), or some of whose bytes went to the
// client's own connection already, stays there.
func (cv *conversation) route(args [][]byte, argc int64, n int) (spec *command.Spec, resolved bool, d decision) {
	if !cv.shared && (cv.parser.Consumed() || n > laneHold || cv.parser.Inline() && n > resp.MaxInlineSize) {
		return nil, false, decideForward
	}
	want := cv.shareKey()
	if !readShape(args, argc) {
		spec, resolved = cv.env.settings.Commands().Resolve(args), true
		sh := spec.Sharing(args, argc)
		if spec == nil {
			sh = command.UnknownSharing(args)
		}
		switch sh {
		case command.ShareNone:
			if !cv.shared {
				return spec, resolved, decideForward
			}
			return spec, resolved, decideOwn
		case command.ShareSwitch:
			want = switchKey(want, spec, args)
		}
	}
	if cv.shared && want == cv.on || !cv.shared && want == cv.noLane {
		return spec, resolved, decideForward
	}
	cv.want = want
	return spec, resolved, decideSwitch
}

// canShare reports whether a client on its own connection could move to
// a lane: lanes are on (Config.Multiplex), its identity is one a lane
// carries (gen, laneUser) and its
// connection has no state of its own (no transaction, WATCH, ASKING,
// subscription, tracking, READONLY, and nothing sticky), replies are
// framed and input open.
func (cv *conversation) canShare() bool {
	return cv.env.multiplex && (cv.gen != 0 || cv.laneUser != "") && cv.opacity == framed && cv.input == inputOpen &&
		!cv.tx.open() && !cv.tx.queuing() && !cv.subscribed() && !cv.tracking && !cv.readonly &&
		!cv.watching && !cv.asking && !cv.sticky && !cv.opaquePubsub
}

// ownState notes what a request sent on the client's own connection
// leaves there that no lane carries (see conversation.watching).
func (cv *conversation) ownState(spec *command.Spec, args [][]byte, argc int64) {
	if cv.shared {
		return
	}
	name := ""
	if spec != nil {
		name = spec.Name
	}
	switch name {
	case "":
		// Nothing tells what it does to its connection, unless Redis
		// refuses it (an unknown subcommand).
		cv.sticky = cv.sticky || command.UnknownSharing(args) == command.ShareNone
	case "watch":
		cv.watching = cv.watching || spec.ArityOK(int(argc))
	case "unwatch":
		cv.watching = false
	case "asking":
		cv.asking = true
	case "client|no-evict", "client|no-touch", "client|caching":
		cv.sticky = true
	}
}

// shareKey is the state of the conversation a lane must carry.
func (cv *conversation) shareKey() shareKey {
	return shareKey{gen: cv.gen, user: cv.laneUser, db: cv.db, proto: cv.proto}
}

// switchKey returns the state a SELECT or HELLO (command.ShareSwitch)
// asks for from state k: a lane in that state answers it as the client's
// own connection would, changing nothing. An argument Redis refuses (a
// negative db, a protocol other than 2 and 3) leaves k: the refusal
// changes nothing either. A db beyond Redis's databases is refused by the
// lane's own SELECT, and the client gets its own connection.
func switchKey(k shareKey, spec *command.Spec, args [][]byte) shareKey {
	v, ok := resp.ParseInt(args[1])
	switch {
	case !ok:
	case spec.Conn == command.ConnSelect && v >= 0:
		k.db = int(v)
	case spec.Conn == command.ConnHello && (v == 2 || v == 3):
		k.proto = int(v)
	}
	return k
}

// readShape reports whether a request has the shape of GET key or HGET
// key field, which any lane carries.
func readShape(args [][]byte, argc int64) bool {
	switch {
	case argc == 2 && len(args) == 2:
		return command.EqualFold(args[0], "get")
	case argc == 3 && len(args) == 3:
		return command.EqualFold(args[0], "hget")
	}
	return false
}

// setup appends to dst the requests that give the client's own
// connection, which has state own (a new connection: a fresh one's), the
// state the client has on lanes, and queues their replies to be
// swallowed (expectSetup): its db and protocol, its name and library
// (CLIENT SETNAME, CLIENT SETINFO). Nothing is in flight when it is
// called.
func (cv *conversation) setup(dst []byte) []byte {
	add := func(args ...[]byte) {
		dst = resp.AppendCommand(dst, args...)
		cv.queue(request{kind: expectSetup})
	}
	own := cv.own
	if cv.db != own.db {
		add(selectCmd, itoa(cv.db))
	}
	if cv.proto != own.proto {
		add(helloCmd, itoa(cv.proto))
	}
	if cv.name != own.name {
		add(clientCmd, setnameArg, []byte(cv.name))
	}
	if cv.libName != own.libName {
		add(clientCmd, setinfoArg, libNameArg, []byte(cv.libName))
	}
	if cv.libVer != own.libVer {
		add(clientCmd, setinfoArg, libVerArg, []byte(cv.libVer))
	}
	return dst
}

// leaveOwn records, as the client moves to a lane, the state its own
// connection keeps (setup restores the client's on it).
func (cv *conversation) leaveOwn() {
	cv.own = ownState{db: cv.db, proto: cv.proto, name: cv.name, libName: cv.libName, libVer: cv.libVer}
}

// itoa is n in decimal, as a request argument.
func itoa(n int) []byte { return strconv.AppendInt(nil, int64(n), 10) }

// What a lane says of itself: its name (CLIENT SETNAME) and no library
// (CLIENT SETINFO), set again after a client of the lane set its own.
var (
	laneName    = []byte("cicada-lane")
	laneNameCmd = resp.AppendCommand(nil, clientCmd, setnameArg, laneName)
	libInfoCmd  = [...][]byte{setInfoName: resp.AppendCommand(nil, clientCmd, setinfoArg, libNameArg, nil),
		setInfoVer: resp.AppendCommand(nil, clientCmd, setinfoArg, libVerArg, nil)}
)

// Setup requests (conversation.setup), and waitPublish, the PUBLISH sent
// before a WAIT or WAITAOF of a client that wrote on lanes: a subscriber
// of __cicada__:wait sees an empty message each time.
var (
	selectCmd   = []byte("SELECT")
	helloCmd    = []byte("HELLO")
	clientCmd   = []byte("CLIENT")
	setnameArg  = []byte("SETNAME")
	setinfoArg  = []byte("SETINFO")
	libNameArg  = []byte("LIB-NAME")
	libVerArg   = []byte("LIB-VER")
	waitPublish = resp.AppendCommand(nil, []byte("PUBLISH"), []byte("__cicada__:wait"), []byte{})
)

// effects applies what a forwarded command can do to cached data before it
// is sent: its keys are evicted and their fills blocked (BeginWrite), or
// the cache is suspended (a hold) until its reply. Inside a transaction
// Redis has confirmed, this waits for EXEC (applyTxEffects): queued
// commands run there. On an opaque connection, whose replies are not
// followed, the keys are only invalidated, and anything broader empties
// the cache and suspends it for opaqueHold.
func (cv *conversation) effects(spec *command.Spec, args [][]byte, argc int64, rq *request) {
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
		if keys, ok = cv.writtenKeys(spec, args, argc); !ok || cv.opaqueDBUnknown {
			effect, keys = command.EffectUnknown, nil
		}
	}
	h := rq.hold
	switch effect {
	case command.EffectUnknown:
		h |= holdFence
	case command.EffectFlush:
		h |= holdFlush
	}
	switch {
	case cv.opacity != framed:
		cv.applyOpaque(keys, h, rq.act == command.ConnAuthRules)
	case cv.tx.open() && cv.tx.queuing() && cv.tx.inFlight == 0:
		// Redis confirmed MULTI and nothing can end it before this
		// command: it is queued, and runs at EXEC.
		for i := range keys {
			key := keys[i].Clone()
			cv.tx.keyBytes += int64(key.Size())
			cv.tx.effects = append(cv.tx.effects, txEffect{key: key})
		}
		if h != holdNone {
			cv.tx.effects = append(cv.tx.effects, txEffect{hold: h})
		}
		rq.hold = holdNone
	default:
		cache := cv.env.cache
		for i := range keys {
			if cache.Writing(&keys[i]) { // a write-through of it may be in flight
				cv.env.throughs.wrote(keys[i].Hash())
			}
		}
		if h == holdNone && len(keys) == 1 {
			if value, ttl, ok := throughSet(spec, args, argc); ok {
				st, w := cache.BeginWriteThrough(&keys[0], value, ttl)
				if w != nil && w.Revived() && !cv.env.adm.Worth(w.Hash(), w.Hash()) {
					w = nil // no longer worth its place (a fill asks the same)
				}
				cv.writes.push(st)
				rq.stripes, rq.through = 1, w
				if w != nil {
					cv.env.throughs.start(w, cv.readsAhead() && cv.sent.len() <= fillWaitAhead, cache.Now())
				}
				return
			}
		}
		for i := range keys {
			cv.writes.push(cache.BeginWrite(&keys[i]))
			rq.stripes++
		}
		if h != holdNone {
			rq.held = cache.Hold()
		}
		rq.hold = h
	}
}

// throughSet reports whether a command sets a string key to a value and
// nothing else, so that its +OK says the key holds exactly that value,
// with a TTL or none (hotcache.WriteThrough): SET key value with no option
// but EX seconds or PX milliseconds, SETEX key seconds value, PSETEX key
// milliseconds value. It returns the value and the TTL in ms (0: none). A
// TTL is taken only as digits with no sign or leading zero, up to
// hotcache.MaxThroughTTL ms, where Redis reads the same number; anything
// else is not written through. An argument too long to capture is nil;
// spec is nil for a command Redis does not know.
func throughSet(spec *command.Spec, args [][]byte, argc int64) (value []byte, ttl int64, ok bool) {
	if spec == nil || int64(len(args)) != argc {
		return nil, 0, false
	}
	var n []byte
	var unit int64
	switch {
	case spec.Name == "set" && argc == 3:
		return args[2], 0, args[2] != nil
	case spec.Name == "set" && argc == 5 && command.EqualFold(args[3], "ex"):
		value, n, unit = args[2], args[4], 1000
	case spec.Name == "set" && argc == 5 && command.EqualFold(args[3], "px"):
		value, n, unit = args[2], args[4], 1
	case spec.Name == "setex" && argc == 4:
		value, n, unit = args[3], args[2], 1000
	case spec.Name == "psetex" && argc == 4:
		value, n, unit = args[3], args[2], 1
	default:
		return nil, 0, false
	}
	if value == nil || len(n) == 0 || len(n) > 12 || n[0] == '0' {
		return nil, 0, false
	}
	for _, d := range n {
		if d < '0' || d > '9' {
			return nil, 0, false
		}
		ttl = ttl*10 + int64(d-'0')
	}
	if ttl *= unit; ttl > hotcache.MaxThroughTTL {
		return nil, 0, false
	}
	return value, ttl, true
}

// clearTxEffects forgets the effects of the queued transaction.
func (cv *conversation) clearTxEffects() {
	clear(cv.tx.effects) // drop the keys: the slice's storage is reused
	cv.tx.effects, cv.tx.keyBytes = cv.tx.effects[:0], 0
}

// applyTxEffects applies the deferred effects of the transaction to the
// EXEC being sent: its request then holds them until EXEC's reply.
func (cv *conversation) applyTxEffects(rq *request) {
	var h hold
	var keys []hotcache.Key
	for _, e := range cv.tx.effects {
		if e.hold != holdNone {
			h |= e.hold
			continue
		}
		keys = append(keys, e.key)
	}
	cv.clearTxEffects()
	if cv.opacity != framed {
		cv.applyOpaque(keys, h, false)
		return
	}
	cache := cv.env.cache
	for i := range keys {
		cv.writes.push(cache.BeginWrite(&keys[i]))
		rq.stripes++
	}
	if h != holdNone {
		if rq.hold == holdNone {
			rq.held = cache.Hold() // one per request, whatever its hold bits
		}
		rq.hold |= h
	}
}

// applyOpaque applies effects whose completion Cicada cannot observe: they
// are treated like writes from outside Cicada (keys invalidated; notified
// when they run), and anything broader empties the cache and suspends it
// for opaqueHold, the time such a write most likely takes to run.
func (cv *conversation) applyOpaque(keys []hotcache.Key, h hold, rules bool) {
	for i := range keys {
		cv.env.cache.Invalidate(&keys[i], hotcache.ReasonWrite)
	}
	if rules {
		cv.env.ids.rulesChanged()
	}
	if h != holdNone || rules {
		cv.env.suspendFor(opaqueHold)
	}
}

// writtenKeys resolves the keys a keyed write modifies. ok=false when some
// key is not known (not captured).
func (cv *conversation) writtenKeys(spec *command.Spec, args [][]byte, argc int64) ([]hotcache.Key, bool) {
	if int64(len(args)) != argc {
		return nil, false
	}
	refs, ok := spec.WrittenKeys(args, cv.loop.refs[:0])
	cv.loop.refs = refs[:0]
	if !ok {
		return nil, false
	}
	keys := cv.keysBuf[:0]
	for _, r := range refs {
		db := r.DB
		if db == command.CurrentDB {
			db = cv.db
			if cv.tx.queuing() && cv.tx.dbSet && int(cv.tx.db) != cv.db {
				// A queued SELECT may have switched the db by the time
				// this runs: evict in both.
				keys = append(keys, hotcache.KeyOf(int(cv.tx.db), args[r.Arg]))
			}
		}
		keys = append(keys, hotcache.KeyOf(db, args[r.Arg]))
	}
	cv.keysBuf = keys[:0]
	return keys, true
}

// onRead handles GET key and HGET key field: a local answer, a pause, or a
// forward that may fill the cache. ok=false for any other request.
func (cv *conversation) onRead(args [][]byte, argc int64) (decision, bool) {
	var k hotcache.Key
	switch {
	case argc == 2 && len(args) == 2 && command.EqualFold(args[0], "get") && args[1] != nil:
		if cv.parser.Consumed() {
			return 0, false // part of it went to Redis already
		}
		k.Set(cv.db, args[1])
	case argc == 3 && len(args) == 3 && command.EqualFold(args[0], "hget") && args[1] != nil && args[2] != nil:
		if cv.parser.Consumed() {
			return 0, false
		}
		k.SetField(cv.db, args[1], args[2])
	default:
		return 0, false
	}
	env := cv.env
	if env.cache.Off() { // cache-enabled false: a plain proxy, no counting
		return cv.forwardRead(nil), true
	}
	if cv.pauseCounted {
		cv.pauseCounted = false // counted when it paused; this is the same request parsed again
		if cv.throughTimer != nil {
			// Woken before its write-through's time ran out.
			cv.throughTimer.Stop()
			cv.throughTimer = nil
		}
	} else {
		env.adm.ObserveRead(cv.loop.idx, k.ReadHash())
	}
	v, reply := cv.mayAnswer(&k)
	cv.fillWaited = false
	switch v {
	case answerLocal:
		cv.loop.out = append(cv.loop.out, reply...)
		cv.loop.stats.hits.Add(1)
		return decideLocal, true
	case answerAfterReplies:
		cv.pauseCounted = true
		return decidePause, true
	case answerUnsettled:
		cv.loop.stats.unsettled.Add(1)
	case answerProve:
		return cv.forwardRead(&readInfo{key: k.Clone(), epoch: env.cache.Epoch()}), true
	case answerFill:
		return cv.forwardFill(&k), true
	case answerSettle:
		cv.pauseCounted = true
		cv.pause = pauseSettle
		return decidePause, true
	case answerWaitFill:
		cv.pauseCounted = true
		cv.pause = pauseFill
		cv.loop.waitFill(k.ReadHash(), cv.wakeFill)
		return decidePause, true
	case answerWaitThrough: // waiting already (throughWaits.wait)
		cv.pauseCounted = true
		cv.pause = pauseFill
		return decidePause, true
	}
	return cv.forwardRead(nil), true
}

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
//     (idleRefresh: it must see a request now and then; not for a client
//     on a lane).
//  5. No keyspace notification for k (nor a flush) is in Cicada's socket
//     unapplied (settled, asked once per batch of requests), and what was
//     found is still what the cache holds after asking (Cache.Current: a
//     notification applied between the lookup and the ask would be in
//     neither). A hit that ends its batch, with nothing asked yet, leaves
//     both to the loop's settle pass (answerSettle, settle.go), which asks
//     once for all the hits of a poll.
//
// A key that is not cached is filled when the detector says it is hot, a
// fill ticket is granted, and in Redis Cluster the node answers its slot.
func (cv *conversation) mayAnswer(k *hotcache.Key) (answer, []byte) {
	env := cv.env
	clustered := env.topo.Enabled()
	var f hotcache.Found
	if cv.sent.len() > 0 {
		if cv.tx.queuing() || cv.opacity != framed {
			return answerForward, nil
		}
		cv.checkFresh()
		env.cache.Lookup(k, cv.ident, cv.proto, &f)
		switch f.Status {
		case hotcache.Hit:
			if !clustered || env.topo.Answerable(f.HashSlot, cv.readonly) {
				return answerAfterReplies, nil
			}
		case hotcache.Miss:
			if cv.mayFill() {
				return cv.missed(k, true), nil
			}
		}
		return answerForward, nil
	}
	if !cv.canAnswer() {
		return answerForward, nil
	}
	cv.checkFresh()
	env.cache.Lookup(k, cv.ident, cv.proto, &f)
	switch f.Status {
	case hotcache.Hit:
		switch {
		case clustered && !env.topo.Answerable(f.HashSlot, cv.readonly):
		case !cv.shared && env.idleRefresh.Load() > 0 && env.clock.Load()-cv.lastForward > env.idleRefresh.Load():
			// Let Redis see this one, or it closes the connection as idle
			// (a client on a lane has no connection of its own to keep;
			// Cicada applies Redis's timeout to it, see shrinkIdle).
		case cv.loop.mayDefer && !cv.loop.unappliedAsked && !cv.settleAgain:
			// Nothing asked yet for this batch: the loop's settle pass
			// asks once for every hit held this way (settle.go).
			cv.settleFound, cv.settleHash = f, k.Hash()
			return answerSettle, nil
		case !cv.loop.settled(env.fences, k.Hash()):
			// A notification of a write (from outside Cicada, perhaps
			// acknowledged already) is on its way into the cache.
			return answerUnsettled, nil
		case !env.cache.Current(&f):
		default:
			return answerLocal, f.Reply
		}
	case hotcache.Unproven:
		if !clustered || env.topo.Answerable(f.HashSlot, cv.readonly) {
			return answerProve, nil
		}
	case hotcache.Miss:
		return cv.missed(k, false), nil
	}
	return answerForward, nil
}

// missed decides a GET/HGET of k that is not cached, on a connection whose
// confirmed state allows local answers (behind: with replies of its own
// outstanding, and then mayFill's rules suffice, and it fills only if
// every request ahead is a plain read: anything else may change the state
// the fill is kept under, or hold its reply back). A key worth caching
// (detector.Admission.Worth: read at the floor rate at least, saving
// Redis at least the admission bar) is filled unless a notification of it
// is waiting to be applied (loopEnv.notified), or a fill of it is in
// flight on the loop (one fill per key and loop, whatever the number of connections
// that read it) or failed lately for what the key holds; with one in
// flight, or a write-through of the key on any loop (through.go), the
// request waits for it, behind its own replies first, and is decided
// again (once: woken, it does not wait a second time).
func (cv *conversation) missed(k *hotcache.Key, behind bool) answer {
	switch cv.loop.fillOf(k.ReadHash(), cv.env.clock.Load()) {
	case fillRunning:
		if behind {
			return answerAfterReplies
		}
		if !cv.fillWaited {
			return answerWaitFill
		}
	case fillRunningBehind: // behind a request of its connection that may block
		if behind {
			return answerAfterReplies
		}
	case fillNone:
		if !k.IsField() && cv.env.cache.Writing(k) {
			// A SET of the key may be in flight, written through
			// (through.go): wait for its reply instead of going to Redis.
			// (No fill could be kept while a write of the stripe is in
			// flight: hotcache.Cache.BeginFill refuses.)
			now, limit := cv.env.cache.Now(), throughWaitFor(cv.env.adm.FillRTT())
			if behind {
				if _, ok := cv.env.throughs.wait(k.Hash(), nil, now, limit); ok {
					return answerAfterReplies
				}
			} else if !cv.fillWaited {
				if left, ok := cv.env.throughs.wait(k.Hash(), cv.wakeFill, now, limit); ok {
					cv.throughTimer = time.AfterFunc(time.Duration(left), cv.wakeFill)
					return answerWaitThrough
				}
			}
			return answerForward
		}
		// A notification of the key not applied yet (a write just
		// acknowledged) would evict the fill's reply: the fill would cost
		// Redis a PTTL for nothing. The write detector counts that write
		// only once the notification is applied, so without this check a
		// key written before each read would look read more than written.
		// (Only an efficiency matter: the fill's ticket keeps it correct.)
		if cv.env.adm.Worth(k.Hash(), k.ReadHash()) && (!behind || cv.readsAhead()) && !cv.loop.notified(cv.env.fences, k.Hash()) {
			return answerFill
		}
	}
	return answerForward
}

// readsAhead reports whether every request in flight is a plain read
// (GET, HGET, or a readonly command that cannot block and changes no
// connection state): their replies come as soon as Redis serves them and
// leave the connection as it is.
func (cv *conversation) readsAhead() bool { return cv.otherAt <= cv.dequeuedN }

// forwardFill forwards a GET/HGET of hot key k that is not cached, with a
// PTTL (and, for a field on a server with hash-field expiration, an HPTTL)
// right behind it, to fill the cache from their replies; a plain forward
// when no fill can be kept.
func (cv *conversation) forwardFill(k *hotcache.Key) decision {
	env := cv.env
	t, ok := env.cache.BeginFill(k)
	// The view is read after the ticket: a view that loses the slot is
	// published before the epoch moves (upstream.applyCluster).
	if !ok || (env.topo.Enabled() && !env.topo.Answerable(cluster.Slot(k.Name()), cv.readonly)) {
		return cv.forwardRead(nil)
	}
	ri := &readInfo{key: k.Clone(), fill: true, ticket: t, sentAt: env.cache.Now()}
	// Other connections wait for this fill only if its reply comes as
	// soon as Redis serves it: only plain reads, and few, are ahead of it.
	cv.loop.startFill(k.ReadHash(), cv.readsAhead() && cv.sent.len() <= fillWaitAhead)
	cv.forwardRead(ri)
	cv.queue(request{kind: expectSwallow, read: ri})
	// Appended: the batch's earlier fills' PTTLs wait in upv until it is
	// written.
	start := len(cv.loop.inject)
	cv.loop.inject = resp.AppendCommand(cv.loop.inject, pttl, k.Name())
	if k.IsField() && env.settings.Commands().FieldTTL() {
		// A field expires on its own (Redis 7.4+), and Redis tells only
		// when its active expiry deletes it: the field's TTL bounds the
		// entry too.
		ri.fieldTTL = true
		cv.queue(request{kind: expectSwallow, read: ri})
		cv.loop.inject = resp.AppendCommand(cv.loop.inject, hpttl, k.Name(), fields, one, k.Field())
	}
	cv.loop.injected = cv.loop.inject[start:]
	cv.loop.stats.fillsTried.Add(1)
	return decideInject
}

var (
	pttl   = []byte("PTTL")
	hpttl  = []byte("HPTTL")
	fields = []byte("FIELDS")
	one    = []byte("1")
)

func (cv *conversation) forwardRead(ri *readInfo) decision {
	if cv.opacity == framed {
		cv.queue(request{kind: expectReply, read: ri})
	}
	cv.loop.stats.misses.Add(1)
	cv.loop.stats.forwarded.Add(1)
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

// helloPass returns the password of HELLO's last AUTH option, if it was
// captured (parseHello tells whether its user can be named).
func helloPass(args [][]byte) (string, bool) {
	pass, ok := "", false
	for i := 2; i < len(args); i++ {
		switch {
		case args[i] == nil:
			return "", false
		case command.EqualFold(args[i], "auth") && i+2 < len(args):
			pass, ok = string(args[i+2]), args[i+2] != nil
			i += 2
		case command.EqualFold(args[i], "setname") && i+1 < len(args):
			i++
		}
	}
	return pass, ok
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

// queue appends a request; every queued request counts in the loop's in-flight
// gauge until dequeue.
func (cv *conversation) queue(rq request) {
	if rq.read != nil && rq.kind != expectSwallow { // a swallow shares its GET's
		cv.readBytes += readInfoSize(rq.read)
	}
	cv.sent.push(rq)
	cv.queuedN++
	cv.loop.stats.inflight.Add(1)
	cv.timeRequest()
}

// dequeue removes the head request.
func (cv *conversation) dequeue() request {
	cv.loop.stats.inflight.Add(-1)
	cv.replyArrived()
	rq := cv.sent.pop()
	cv.dequeuedN++
	if rq.read != nil && rq.kind != expectSwallow {
		cv.readBytes -= readInfoSize(rq.read)
	}
	return rq
}

// canAnswer reports whether confirmed state lets Cicada answer a GET/HGET
// locally. Only meaningful when no reply is outstanding. A subscribed
// connection (RESP3 allows GET there) is always forwarded: Redis may have
// sent it a message that is still on its way through Cicada, and a local
// answer could overtake it.
func (cv *conversation) canAnswer() bool {
	return cv.accepted && cv.mayFill()
}

// mayFill reports whether confirmed state lets a GET/HGET behind replies
// fill the cache or wait for its replies and a fill: canAnswer's rules
// but Redis's acceptance of the connection, which neither needs (a
// refused connection's reply is an error, which fills nothing; the wait
// ends with that reply).
func (cv *conversation) mayFill() bool {
	return !cv.tx.open() && !cv.tx.queuing() && !cv.tracking && cv.opacity == framed && !cv.subscribed()
}

func (cv *conversation) subscribed() bool { return cv.subs[0]+cv.subs[1]+cv.subs[2] > 0 }

// protocolError handles a request Redis will reject with a protocol error:
// Redis replies and closes the connection; Cicada passes the reply on and
// drops whatever the client sends after the bad request.
func (cv *conversation) protocolError() {
	cv.input = inputProtocolError
	cv.pushOpaque()
}

// pushOpaque queues the point after which replies pass unframed.
func (cv *conversation) pushOpaque() {
	if cv.opacity == framed {
		cv.opacity = opaqueAhead
	}
	cv.queue(request{kind: expectOpaque})
	cv.advance()
}

// dropSlots forgets every queued request whose reply will not be followed:
// its writes end and its holds are released with a flush (it may run, or
// have run, unobserved; its notifications do the rest).
func (cv *conversation) dropSent() {
	for cv.sent.len() > 0 {
		rq := cv.dequeue()
		if rq.read != nil && rq.read.fill {
			cv.endFill(rq.read)
		}
		cv.releaseWrites(rq.stripes)
		if rq.through != nil {
			cv.env.throughs.end(rq.through)
		}
		if rq.hold != holdNone {
			cv.env.cache.Flush()
			rq.held.Release()
		}
	}
}

// abandonTx forgets a transaction whose EXEC will not be followed (the
// connection closed or turned opaque): its writes end, its holds become a
// flush and an opaqueHold suspension.
func (cv *conversation) abandonTx() {
	cache := cv.env.cache
	for _, st := range cv.tx.stripes {
		cache.EndWrite(st)
	}
	if len(cv.tx.holds) > 0 || cv.tx.rules {
		cv.env.suspendFor(opaqueHold)
	}
	for _, q := range cv.tx.holds {
		q.held.Release()
	}
	cv.tx.stripes, cv.tx.holds, cv.tx.acts = cv.tx.stripes[:0], cv.tx.holds[:0], cv.tx.acts[:0]
	cv.tx.rewrites = cv.tx.rewrites[:0]
	cv.clearTxEffects()
	cv.tx.rules = false
}

// releaseWrites ends the n oldest in-flight writes.
func (cv *conversation) releaseWrites(n int32) {
	for ; n > 0; n-- {
		cv.env.cache.EndWrite(cv.writes.pop())
	}
}

// setFresh gives s the initial identity of a connection that has not
// authenticated (at connect and after RESET).
func (cv *conversation) setFresh() {
	cv.ident, cv.freshGen = cv.env.ids.fresh()
	cv.user, cv.userAnon = "", false
}

// setUser records the ACL user Redis confirmed the connection as, for the
// HOTKEYS permission check; "" (a valid user name, but the never-
// authenticated sentinel there) counts as one Cicada cannot name.
func (cv *conversation) setUser(user string, anon bool) {
	cv.user, cv.userAnon = user, anon || user == ""
}

// setIdent gives s an identity Redis confirmed (AUTH, HELLO AUTH) or an
// anonymous one.
func (cv *conversation) setIdent(id hotcache.Ident) {
	cv.ident, cv.freshGen = id, 0
}

// checkFresh runs before every cache lookup: an initial identity from
// before a rules change may stand for a connection Redis authenticated
// and one it did not (see identities); it becomes anonymous.
func (cv *conversation) checkFresh() {
	if cv.freshGen != 0 && cv.freshGen != cv.env.ids.gen.Load() {
		cv.setIdent(cv.env.ids.anonymous())
	}
}

// timeRequest starts timing the request just queued on s when none of s's
// is being timed: one request per round trip per connection is timed, so
// a pipeline of 16 costs one clock read, not 16.
func (cv *conversation) timeRequest() {
	if cv.timedLeft == 0 {
		cv.timedLeft = cv.sent.len()
		cv.timedAt = time.Now()
	}
}

// replyArrived counts down to the timed request's reply and records its
// latency.
func (cv *conversation) replyArrived() {
	if cv.timedLeft == 0 {
		return
	}
	cv.timedLeft--
	if cv.timedLeft == 0 {
		cv.loop.stats.upstream.observe(time.Since(cv.timedAt))
	}
}

// shrink frees the buffers grown past their initial size, unless a
// request is in flight (no reply unanswered, no command half parsed, no
// fill pending): reports whether it did.
func (cv *conversation) shrink() bool {
	if cv.sent.len() > 0 || cv.reply == replyCapture || cv.pendingFill != nil {
		return false
	}
	// keysBuf's storage holds slices of the parser's buffer: a parser
	// buffer let go must not stay reachable through it.
	if cv.parser.Shrink() || cap(cv.keysBuf) > shrinkSlack {
		cv.keysBuf = nil
	}
	cv.sent.shrink()
	cv.writes.shrink()
	if cap(cv.capture) > shrinkSlack<<10 {
		cv.capture = nil
	}
	if len(cv.tx.effects) == 0 && cap(cv.tx.effects) > shrinkSlack {
		cv.tx.effects = nil
	}
	if len(cv.tx.acts) == 0 && cap(cv.tx.acts) > shrinkSlack {
		cv.tx.acts = nil
	}
	if len(cv.tx.stripes) == 0 && cap(cv.tx.stripes) > shrinkSlack {
		cv.tx.stripes = nil
	}
	if len(cv.tx.holds) == 0 && cap(cv.tx.holds) > shrinkSlack {
		cv.tx.holds = nil
	}
	return true
}
