package hotcache

import (
	"strconv"
	"time"
)

// WriteThrough is a write of a cached key's whole value whose success puts
// the new value back in the cache (SET key value, with EX or PX or
// nothing; SETEX; PSETEX): BeginWriteThrough hands it out when the write
// is sent, Cache.WriteThrough takes it at the write's +OK. It holds the
// value's GET reply, built at send, and is owned by the connection that
// sent the write until then.
type WriteThrough struct {
	key      Key // its own bytes (Clone)
	reply    []byte
	readers  []Ident // the evicted GET reply's: who Redis let read the key
	epoch    uint64
	version  uint64 // the stripe's version right after this write's start
	expireAt int64  // Now() reading at send plus the TTL; 0 = no TTL
	sentAt   int64  // Now() reading at send, for a TTL
	notes    uint8  // keyspace notifications the write makes: set (and expire)
	revived  bool   // the key was not cached: its readers are from its last eviction by a write
	stripe   uint32
}

// Revived reports whether w's key was not cached when the write was sent:
// its readers come from the key's last eviction by a write (the stripe's
// record of it). The caller decides whether the key is still worth a
// place in the cache (detector.Admission.Worth), and drops w if not.
func (w *WriteThrough) Revived() bool { return w.revived }

// Hash is the written key's Hash (Key.Hash), which is also the ReadHash
// of its GET.
func (w *WriteThrough) Hash() uint64 { return w.key.hash }

// MaxThroughTTL is the longest TTL a write-through caches, in ms (about
// three years): Now() readings plus it stay far from overflowing.
const MaxThroughTTL = 100_000_000_000

// BeginWriteThrough is BeginWrite for a write that sets k's whole value to
// value, with a TTL of ttl ms (1 to MaxThroughTTL) or none (0), and has no
// other effect (SET key value, SET key value PX ttl, SETEX, PSETEX): it evicts and
// blocks fills as BeginWrite does, and returns the stripe to pass to
// EndWrite. When k had a GET reply cached and value would be cached (not
// over MaxValue, not a denied key), it also returns a WriteThrough to pass
// to Cache.WriteThrough at the write's +OK, so the key's next reads are
// hits instead of a refill (a GET and a PTTL). So it does, Revived, when
// k is not cached but is the last key of its stripe whose GET reply a
// write evicted, and no flush, hold or ACL change (the epoch) came since:
// the readers are that reply's, who Redis let read the key (what the
// value is does not change who may read it), and the checks at the +OK
// are the same. The key's expiry is taken
// from now, the write's send: Redis, which starts the TTL when it runs
// the write, expires the key no sooner. value is copied; w is nil
// otherwise. Safe from any goroutine.
func (c *Cache) BeginWriteThrough(k *Key, value []byte, ttl int64) (stripe uint32, w *WriteThrough) {
	s := uint32(k.hash & c.smask)
	st := &c.stripes[s]
	st.inflight.Add(1)
	version := st.version.Add(writeMove)
	// The epoch is read before the key is looked up: readers taken from an
	// entry found before a flush (an ACL change's) carry an older epoch,
	// refused at the +OK however late this goroutine runs on (bury).
	epoch := c.epoch.Load()
	var readers []Ident
	revived := false
	if e := c.find(k.db, k.hash, k.name); e != nil {
		c.evictEntry(e, ReasonWrite)
		c.bury(st, e, epoch)
		if e.get == nil {
			return s, nil
		}
		readers = e.get.readers
	} else if b := st.last.Load(); b != nil && b.hash == k.hash && b.db == int32(k.db) &&
		b.key == string(k.name) && b.epoch == epoch {
		readers, revived = b.readers, true
	} else {
		return s, nil
	}
	if c.suspended.Load() != 0 || int64(len(value)) > c.maxValue.Load() {
		return s, nil
	}
	if c.isDenied(k) {
		return s, nil
	}
	if ttl < 0 || ttl > MaxThroughTTL {
		return s, nil
	}
	reply := make([]byte, 0, len(value)+16)
	reply = append(strconv.AppendInt(append(reply, '$'), int64(len(value)), 10), '\r', '\n')
	reply = append(append(reply, value...), '\r', '\n')
	w = &WriteThrough{key: k.Clone(), reply: reply, readers: readers,
		epoch: epoch, version: version, notes: 1, revived: revived, stripe: s}
	if ttl > 0 {
		w.sentAt = c.now()
		w.expireAt, w.notes = w.sentAt+ttl*int64(time.Millisecond), 2
	}
	return s, w
}

// WriteThrough caches w's value as its key's GET reply, once Redis has
// answered the write +OK; call it before the write's EndWrite. It reports
// whether the reply was kept.
//
// The write's own keyspace notifications (set, then expire when it sets a
// TTL: Redis sends both, in that order, for every SET with EX or PX, SETEX
// and PSETEX) may reach Cicada before or after its reply. The write's
// stripe shows how many have: m notifications since the write started
// (version moves under writeMove), m no more than the write's
// notifications n. The key's next n−m notifications are taken as the
// write's and do not evict; the one after evicts. Anything else refuses:
// another write of the stripe in flight, begun or ended since (it may
// have run after this one in Redis: another connection), more
// notifications than the write makes, a flush, a hold, an ACL change (the
// epoch), an expiry already past, a clock reading before the send's (the
// wall clock stepped back: Redis's TTL may end after expireAt). A move
// that was not the write's own (another key's notification, or an
// earlier write's) only lowers how many are taken: the write's own then
// evict the reply when they come, a lost hit, never a stale one. Taking
// more would be the danger: a later write's notification taken as the
// write's. A reply kept with notifications still to come is served
// meanwhile: its value is the key's since the write ran, as a fill's is
// since its GET ran.
func (c *Cache) WriteThrough(w *WriteThrough) bool {
	st := &c.stripes[w.stripe]
	c.mu.Lock()
	defer c.mu.Unlock()
	moved := st.version.Load() - w.version
	if c.suspended.Load() != 0 || c.epoch.Load() != w.epoch || st.inflight.Load() != 1 ||
		moved > uint64(w.notes) {
		return false
	}
	if w.expireAt != 0 {
		if now := c.now(); now >= w.expireAt || now < w.sentAt {
			return false
		}
	}
	k := &w.key
	if c.find(k.db, k.hash, k.name) != nil {
		return false // not expected (fills wait for the stripe's writes), never overwritten
	}
	r := &reply{bytes: w.reply, readers: w.readers}
	r.pending.Store(true)
	rec := c.upsertLocked(k.db, k.hash, k.name, func(e *entry) { e.get, e.expireAt = r, w.expireAt })
	if rec == nil {
		return false
	}
	// A notification may have looked for the key between the check and
	// the publication, and not found it: look again.
	if st.version.Load() != w.version+moved {
		c.removeLocked(rec, ReasonNotification)
		return false
	}
	rec.skip = w.notes - uint8(moved)
	r.pending.Store(false)
	c.writeThroughs.Add(1)
	return true
}
