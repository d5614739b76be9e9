// Package proxy is Cicada's RESP proxy: gnet event loops that answer hot GET
// and HGET requests from the hot cache and forward everything else to Redis,
// byte for byte and in order.
//
// # One client connection
//
// Each client connection gets one upstream Redis connection, enrolled on the
// client's own event loop, so both sides of a session are handled by one
// goroutine without locks:
//
//	client ──► OnTraffic(client) ── RequestParser ──┬─ hit ──────────► client
//	                                                │   (queue empty)
//	                                                ├─ pause: a cached GET behind
//	                                                │   unanswered replies waits
//	                                                └─ forward ─► slot queued
//	                                                              ─► upstream
//	Redis ──► OnTraffic(upstream) ── ReplyFramer ── reply for the head slot
//	                                                 (state change, fill,
//	                                                  write released) ─► client
//	                                                 push / pub/sub message
//	                                                  (no slot) ─────► client
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
// applied yet (Notifications.Unapplied, asked once per batch of requests
// read from a connection): a write another client sent to Redis directly is
// seen as soon as its notification is in Cicada's socket. A miss on a hot key (the
// detector's verdict) that is sent while the queue is empty also sends a
// PTTL for the key right behind it; both replies together, if no write or
// notification for the key intervened (hotcache's fill ticket), fill the
// cache. The PTTL reply is swallowed.
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
// # Modes that stop local answers
//
// MULTI, subscribed mode, CLIENT TRACKING, and for the rest of the
// connection MONITOR, CLIENT REPLY OFF|SKIP, REPLCONF ACK|GETACK and
// protocol errors: in the last four, replies are passed through unframed
// ("opaque") and writes are only invalidated, like writes from outside
// Cicada.
//
// # Ownership
//
// A session and both its gnet connections are touched only by their event
// loop. Server fields are set before the engine starts or are atomics.
package proxy
