// Package hotcache holds pre-serialized RESP replies of hot GET and HGET
// requests, and the guard that keeps them from ever being older than Redis.
//
// # Read path (any event loop, lock-free)
//
//	Lookup(Key) ── held? ── probe 8 cells of Key.Hash ── same db+name? ──
//	    expired? ── reply for GET or for the field? ── identity proven? ── bytes
//	Current(Found) ── still the published entry, cache not held?
//
// A Key (db, name, field, its hashes computed once by KeyOf or FieldKeyOf)
// names what is looked up, written or filled. A cell of the table (a
// "slot" in the code) holds an immutable *entry (atomic.Pointer) beside
// its hash, which lookups compare before they load the entry; writers
// replace whole entries (copy on write), so a reader sees an old entry or a
// new one, never a torn one. A missing or hidden entry costs a forwarded
// request; it is never wrong. There is no lock and no shared counter on
// this path.
//
// # Fill (miss on a hot key)
//
//	BeginFill(Key) at send ─ Ticket{epoch, stripe version}; refused while a write
//	to the stripe is in flight or the cache is suspended
//	Fill(ticket, reply) at reply ─ kept only if the epoch and the stripe's
//	version did not move in between (so no write, flush or notification for
//	the key happened while the GET was in flight) — checked before and again
//	after publishing
//
// # Invalidation
//
//	BeginWrite(Key) before a write is forwarded: version += 2^32,
//	    inflight++, evict; EndWrite at its reply: inflight--,
//	    version += 2^32
//	BeginWriteThrough(Key, value, ttl) for SET key value [EX|PX ttl],
//	    SETEX or PSETEX of a cached key (or of the stripe's last key a
//	    write evicted, with that reply's readers: Revived), then
//	    WriteThrough at its +OK,
//	    before EndWrite: the value is cached if the stripe's version moved
//	    by at most n, n the SET's own notifications (set, and expire
//	    with a TTL): no other write began or ended meanwhile, and no
//	    other is in flight; the key's next n minus the moves
//	    notifications are taken as the SET's and do not evict
//	Invalidate(Key) on a keyspace notification: version++, evict (a
//	    write whose reply Cicada cannot see: version += 2^32)
//	Hold, then its Release exactly once, around writes whose keys are
//	    unknown (scripts, MULTI/EXEC with them, a lost notification
//	    subscription): no hits, no fills
//	Flush on FLUSHALL, FLUSHDB, SWAPDB and a re-established subscription
//
// Versions live in a fixed array of stripes indexed by the key hash, so the
// guard's memory is bounded; two keys sharing a stripe only cost a refused
// fill.
//
// # Access control
//
// Each cached reply lists the identities (see Identities) that Redis let read
// it: the one that filled it and any other whose forwarded read succeeded. A
// connection whose identity is not on the list is answered by Redis, so a
// cached value never reaches a connection Redis would refuse (-NOAUTH,
// -NOPERM).
package hotcache
