// Package proxy is Cicada's RESP proxy: gnet event loops that answer hot GET
// and HGET requests from the hot cache and forward everything else to Redis,
// byte for byte and in order.
//
// # Layers
//
// Each layer uses only its own and the ones below it; none calls back up
// (a session reads the Server's configuration, logger and shared
// counters, never its methods; a conversation sees only what env.go
// declares). TestLayers type-checks the package and holds every file to
// this drawing:
//
//	Server (server.go, admin.go,        gnet engine callbacks, dials, the janitor,
//	  │  metrics.go, descriptors.go,    HTTP handlers and metrics
//	  │  debug_hotkeys.go)
//	  ▼
//	session (session.go, limits.go)     the gnet adapter of one client connection:
//	  │  halfConn (half.go)             reads, writes, closes, half-closes, limits,
//	  │  loopState (loop.go)            timers, HOTKEYS (hotkeys_acl.go); the
//	  │  lane (lane.go)                 loop's sessions and their sweep; the
//	  │  dials (dial.go)                loop's lanes, shared upstream connections,
//	  │  spare (spare.go)               and its spare, dialed ahead; the settle
//	  │  settle pass (settle.go)        pass that checks a poll's hits at once
//	  ▼
//	conversation (conv_state.go,        the connection's state as Redis confirmed it
//	  conversation.go, conv_reply.go)   and the rules on requests and replies; no
//	  │                                 gnet, no connection
//	  ▼
//	env.go: the control plane's roles   what conversations depend on: convEnv
//	  (Fences, Settings, Topology,      (cache, detector, fences, settings, cluster
//	  Counters), convEnv, loopEnv;      view, identities, clock), loopEnv (an event
//	  identities, ring, latencyHist,    loop's scratch and counters), the
//	  hkReq (hotkeys.go),               write-throughs in flight that reads
//	  throughWaits (through.go)         wait for
//
// A request's walk: Server.OnTraffic ─► session.onClientTraffic ─►
// processClient (parse) ─► session.onRequest ─► conversation.onCommand ─►
// onRead ─► mayAnswer ─► hotcache.Cache.Lookup (once) ─► back to
// processClient, which writes the answer or forwards the bytes. A reply's:
// Server.OnTraffic ─► session.onUpstreamTraffic ─► fromUpstream (frame) ─►
// conversation.startFrame and onFrame ─► fromUpstream writes what the
// reply mode says.
//
// # One client connection
//
// A client's requests go to Redis on an upstream connection enrolled on the
// client's own event loop, so every side of a session is handled by one
// goroutine without locks: a lane the loop's clients in one state share
// (lane.go, Config.Multiplex), or a connection of the client's own when
// its state needs one (and with Multiplex off, always):
//
//	client ──► OnTraffic(client) ── RequestParser ──┬─ hit ──────────► client
//	                                                │   (queue empty)
//	                                                ├─ pause: a cached GET behind
//	                                                │   unanswered replies waits
//	                                                └─ forward ─► request queued
//	                                                              ─► upstream
//	Redis ──► OnTraffic(upstream) ── ReplyFramer ── reply for the head request
//	                                                 (state change, fill,
//	                                                  write released) ─► client
//	                                                 push / pub/sub message
//	                                                  (no request) ──► client
//
// A local answer is only given when no forwarded reply is outstanding, so it
// is written after every earlier reply and is computed from connection state
// (db, protocol, identity, MULTI, subscriptions, tracking) exactly as Redis
// confirmed it. A cached request that arrives behind outstanding replies
// pauses parsing until they are in; any other request is forwarded at once.
//
// # Hit, miss and fill
//
// A GET/HGET is a hit when the key is cached, unexpired, its reply was
// proven readable by the connection's identity, and no keyspace
// notification for it (nor a flush) has reached Cicada without being
// applied yet (Fences.Unapplied, asked once per batch of requests
// read from a connection, or once per poll for the hits that end their
// batch: settle.go): a write another client sent to Redis directly is
// seen as soon as its notification is in Cicada's socket. A miss on a hot key (the
// detector's verdict) also sends a PTTL for the key right behind it; both
// replies together, if no write or notification for the key intervened
// (hotcache's fill ticket), fill the cache. The PTTL reply is swallowed.
// One fill per key is in flight on a loop (loopEnv.fills): a later read
// of the key on its connection waits for its own replies, one on another
// connection with nothing in flight waits for the fill (pauseFill), and
// both are decided again when it lands (conversation.missed).
//
// # Writes
//
// Before a write is forwarded its keys are evicted and their fills blocked
// until its reply (hotcache.BeginWrite/EndWrite); inside MULTI until EXEC's
// reply. A write whose keys Cicada cannot name (EVAL, FCALL, unknown
// commands) suspends the whole cache from before it is sent until a fence
// on the notification connection shows its keyspace events were applied.
// FLUSHALL, FLUSHDB and SWAPDB suspend the cache until their reply, then
// flush it.
//
// # Redis Cluster
//
// Behind a cluster node (cluster.Topology, read by the keyspace
// subscriber), a GET/HGET is answered or filled only for a key whose slot
// the node serves: a master's own slots (not one migrating away), a
// replica's master's on a connection that sent READONLY. A -MOVED, -ASK
// or -CLUSTERDOWN reply that contradicts the view, and the reply to a
// CLUSTER command that changes slots or roles, stop local answers before
// the client sees them, until the view is read again. With an address
// map (Config.AddrMap), topology replies, also inside EXEC's, and every
// error reply are read whole and their node addresses rewritten.
//
// # Modes that stop local answers
//
// MULTI, subscribed mode, CLIENT TRACKING, and for the rest of the
// connection MONITOR, CLIENT REPLY OFF|SKIP, REPLCONF ACK|GETACK and
// protocol errors: in the last four, replies are passed through unframed
// ("opaque") and writes are only invalidated, like writes from outside
// Cicada.
//
// # HOTKEYS
//
// Cicada answers Redis 8.6's HOTKEYS itself (session.onHotkeys,
// hotkeys.go, package hotkeys): after the subcommand and arity checks,
// the connection's user (as Redis confirmed it) is checked against ACL
// GETUSER, cached per user until the next ACL change (hotkeys_acl.go); a lookup runs on its own goroutine
// while the connection is paused, and wakes it on its loop. While a
// session is active, each request with one key is counted on its loop:
// local answers at once, forwarded ones when their reply has been framed.
// With no session, the request path pays one atomic load (Tracker.On).
//
// # States
//
// Each state machine is a typed value, its transitions stated where it is
// declared: a session's two connections, clientLife (open, half, closing,
// gone) and upLife (none, dialing, open, shut, invalid, closed), and where
// its requests go (shared: on a lane, or on its own connection; a lane's
// laneLife: dialing, setup, open, closed); a conversation's opacity
// (framed, opaqueAhead, opaque), input (open, quit, protocol error),
// transaction (txSend and txConfirmed, with what queued commands do at
// EXEC) and the replyMode of the reply being framed; each sent request's
// expect (one reply, confirmations, swallowed, the opaque point, setup,
// dropped); why parsing pauses (replies, ACL lookup, fill, route, setup).
//
// # Closing
//
// Cicada closes a client that reaches a limit at once, with a reset
// (limits.go). When Redis closes the upstream connection, the client is
// closed once its replies are written. When the client ends its side
// with work left for Redis (a half-close, or a reset with requests not
// yet forwarded), the session goes on without the gnet connection until
// Redis has read everything and closed (half.go). Idle sessions give
// back what large commands grew (loop.go, shrinkIdle).
//
// # Ownership
//
// A session, its conversation and both its gnet connections (or the
// halfConn standing in for the client) are touched only by their event
// loop, as is the loop's list of sessions; the janitor reaches a loop through
// EventLoop.Execute. Server fields are set before the engine starts or
// are atomics, except the HOTKEYS state (hotkeys.Tracker: per-loop shares
// with their own mutexes) and permCache (its mutex), both off the request
// path.
package proxy
