package hotcache

import (
	"iter"
	"sync/atomic"

	"github.com/cicada-proxy/cicada/cluster"
)

// Writer side of the slot table. Everything here runs with Cache.mu held.

// upsertLocked publishes a modified copy of key's entry in db (or a new
// entry), applying edit to the copy, and makes room as needed. It returns
// the key's record, or nil when the key cannot be stored (bigger than the
// whole cache).
func (c *Cache) upsertLocked(db int, h uint64, key []byte, edit func(*entry)) *record {
	old := c.find(db, h, key)
	var n entry
	if old != nil {
		n = *old
	} else {
		n = entry{hash: h, db: int32(db), key: string(key), hashSlot: uint16(cluster.Slot(key)), used: new(atomic.Bool)}
	}
	edit(&n)
	replies, size := measure(&n)
	if replies > c.capacity || size > c.maxBytes {
		if old != nil {
			c.removeLocked(old.rec, ReasonCapacity)
		}
		return nil
	}
	rec := (*record)(nil)
	if old != nil {
		rec = old.rec
		c.replies += replies - rec.replies
		c.bytes += size - rec.bytes
	} else {
		slot := c.freeSlotLocked(h)
		rec = &record{slot: slot}
		c.pushLocked(rec)
		c.replies += replies
		c.bytes += size
	}
	rec.replies, rec.bytes = replies, size
	if old != nil && old.expireAt != 0 {
		c.expiring.Add(-1)
	}
	if n.expireAt != 0 {
		c.expiring.Add(1)
	}
	n.rec = rec
	rec.e = &n
	c.slotLocked(rec.slot).publish(&n)
	for c.replies > c.capacity || c.bytes > c.maxBytes {
		victim := c.victimLocked(rec)
		if victim == nil {
			break
		}
		c.removeLocked(victim, ReasonCapacity)
	}
	return rec
}

// victimSample is how many of the oldest keys an eviction for room ranks.
const victimSample = 8

// victimLocked returns the key to evict for room, never keep: without a
// rank (SetRank), the oldest; with one, the lowest ranked of the
// victimSample oldest (the oldest among equals). nil when keep is the
// only key.
func (c *Cache) victimLocked(keep *record) *record {
	rank := c.rankLocked()
	var victim *record
	var low float64
	n := 0
	for r := c.oldest; r != nil && n < victimSample; r = r.next {
		if r == keep {
			continue
		}
		if rank == nil {
			return r
		}
		if v := c.worthLocked(rank, r.e); victim == nil || v < low {
			victim, low = r, v
		}
		n++
	}
	return victim
}

// rankLocked returns the rank SetRank set, or nil.
func (c *Cache) rankLocked() func(keyHash, readHash uint64) float64 {
	if p := c.rank.Load(); p != nil {
		return *p
	}
	return nil
}

// worthLocked is what keeping e is worth: the sum of its replies' ranks.
func (c *Cache) worthLocked(rank func(keyHash, readHash uint64) float64, e *entry) float64 {
	var v float64
	if e.get != nil {
		v += rank(e.hash, e.hash)
	}
	for f := range e.fields {
		v += rank(e.hash, FieldHash(e.hash, []byte(f)))
	}
	return v
}

// freeSlotLocked returns an empty slot among the probe slots of h, evicting
// an entry there when all are taken: the lowest ranked (SetRank), the
// oldest among equals or without a rank.
func (c *Cache) freeSlotLocked(h uint64) int {
	rank := c.rankLocked()
	var victim *record
	var low float64
	for i := uint64(0); i < probe; i++ {
		s := int((h + i) & c.table.Load().mask)
		e := c.slotLocked(s).e.Load()
		if e == nil {
			return s
		}
		var v float64
		if rank != nil {
			v = c.worthLocked(rank, e)
		}
		if victim == nil || v < low || (v == low && e.rec.seq < victim.seq) {
			victim, low = e.rec, v
		}
	}
	s := victim.slot
	c.removeLocked(victim, ReasonCapacity)
	return s
}

func (c *Cache) pushLocked(r *record) {
	c.seq++
	r.seq = c.seq
	r.prev, r.next = c.newest, nil
	if c.newest != nil {
		c.newest.next = r
	} else {
		c.oldest = r
	}
	c.newest = r
}

// removeLocked unpublishes r's entry and forgets r.
func (c *Cache) removeLocked(r *record, why Reason) {
	if r.e == nil {
		return
	}
	c.slotLocked(r.slot).e.CompareAndSwap(r.e, nil)
	c.evicted[why].Add(uint64(r.replies))
	switch why {
	case ReasonCold, ReasonCapacity: // what admission let in and nothing took out earlier
		if !r.e.used.Load() {
			c.unused.Add(1)
		}
	}
	c.replies -= r.replies
	c.bytes -= r.bytes
	if r.e.expireAt != 0 {
		c.expiring.Add(-1)
	}
	r.e = nil
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		c.oldest = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	} else {
		c.newest = r.prev
	}
	r.prev, r.next = nil, nil
}

// measure returns the replies an entry holds and the bytes it is charged.
func measure(e *entry) (replies int, size int64) {
	size = entryOverhead + int64(len(e.key))
	if e.get != nil {
		replies++
		size += replyOverhead + int64(len(e.get.bytes))
	}
	for f, r := range e.fields {
		replies++
		size += replyOverhead + int64(len(f)+len(r.bytes))
	}
	return replies, size
}

// Sweep drops replies whose key expired and replies cold calls cold:
// cold gets the hash of each cached reply's key (Hash) and the hash its
// reads are counted under (the key's hash for GET, FieldHash for HGET;
// Key.ReadHash); nil means none is cold, and then a cache holding no key
// with a TTL is not walked at all (the walk touches every entry: 8 ms
// for 85,000 of them in scenario 4, 3.7% of Cicada's CPU, at 4 sweeps a
// second). Called periodically by one goroutine; it takes the writer lock
// only to change something.
func (c *Cache) Sweep(cold func(keyHash, readHash uint64) bool) {
	if cold == nil {
		if c.expiring.Load() == 0 {
			return
		}
		cold = func(_, _ uint64) bool { return false }
	}
	now := c.now()
	c.published(func(e *entry) {
		if e.expireAt != 0 && now >= e.expireAt {
			c.evictEntry(e, ReasonExpired)
			return
		}
		dropGet := e.get != nil && cold(e.hash, e.hash)
		var coldFields []string
		for f := range e.fields {
			if cold(e.hash, FieldHash(e.hash, []byte(f))) {
				coldFields = append(coldFields, f)
			}
		}
		if !dropGet && coldFields == nil {
			return
		}
		c.dropReplies(e, dropGet, coldFields)
	})
}

// published calls fn for every entry published in the current table,
// read without the writer lock (each as of some moment during the call).
func (c *Cache) published(fn func(*entry)) {
	t := c.table.Load()
	for i := range t.slots {
		if e := t.slots[i].e.Load(); e != nil {
			fn(e)
		}
	}
}

// dropReplies removes some replies of e's key, or the whole key when none
// would be left.
func (c *Cache) dropReplies(e *entry, dropGet bool, fields []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.currentLocked(e) {
		return
	}
	keepGet := e.get != nil && !dropGet
	if !keepGet && len(fields) == len(e.fields) {
		c.removeLocked(e.rec, ReasonCold)
		return
	}
	before := e.rec.replies
	c.upsertLocked(int(e.db), e.hash, []byte(e.key), func(n *entry) {
		if dropGet {
			n.get = nil
		}
		if len(fields) > 0 {
			m := make(map[string]*reply, len(n.fields))
			for k, v := range n.fields {
				m[k] = v
			}
			for _, f := range fields {
				delete(m, f)
			}
			n.fields = m
		}
	})
	c.evicted[ReasonCold].Add(uint64(before - e.rec.replies))
}

// Stats is a snapshot of the cache's size and activity.
type Stats struct {
	Replies int    // cached replies now
	Bytes   int64  // accounted bytes now
	Fills   uint64 // replies stored since start by Fill
	// WriteThroughs counts the GET replies stored since start by
	// WriteThrough: a write's value, cached at its +OK.
	WriteThroughs uint64
	// Unused counts keys evicted since start for room or as cold (not
	// for a write, a notification, a TTL, a flush, a setting or the
	// cluster: those end a key whatever admission did) that served no
	// hit: filled for nothing.
	Unused  uint64
	Evicted [numReasons]uint64 // replies evicted since start, by Reason
	// DoubleReleases counts Hold.Release calls after a Hold's first: each
	// is a bug (see Hold); 0 in a correct run.
	DoubleReleases uint64
}

// Stats returns a snapshot. Safe from any goroutine.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	s := Stats{Replies: c.replies, Bytes: c.bytes}
	c.mu.Unlock()
	s.Fills = c.fills.Load()
	s.WriteThroughs = c.writeThroughs.Load()
	s.Unused = c.unused.Load()
	s.DoubleReleases = c.doubleReleases.Load()
	for i := range s.Evicted {
		s.Evicted[i] = c.evicted[i].Load()
	}
	return s
}

// Full reports whether the cache holds at least full (a share, such as
// 15/16) of its capacity in replies or of its byte bound. Safe from any
// goroutine.
func (c *Cache) Full(full float64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return float64(c.replies) >= full*float64(c.capacity) || float64(c.bytes) >= full*float64(c.maxBytes)
}

// Replies yields (keyHash, readHash) for every cached reply, as Sweep
// gives them to cold, in the table's order (that of the hashes, so any
// first n are a random sample). Like Sweep it reads the published entries
// without the writer lock. Safe from any goroutine.
func (c *Cache) Replies() iter.Seq2[uint64, uint64] {
	return func(yield func(uint64, uint64) bool) {
		t := c.table.Load()
		for i := range t.slots {
			e := t.slots[i].e.Load()
			if e == nil {
				continue
			}
			if e.get != nil && !yield(e.hash, e.hash) {
				return
			}
			for f := range e.fields {
				if !yield(e.hash, FieldHash(e.hash, []byte(f))) {
					return
				}
			}
		}
	}
}

// SetRank makes evictions for room take, among the eight oldest keys (and
// among the probe cells of a new key), the one whose replies' ranks sum
// lowest: rank(keyHash, readHash) of each reply, as Sweep's cold gets
// them (detector.Admission.Saved). It is called with the writer lock held
// and must be safe for concurrent use; nil evicts oldest first, as
// without SetRank. Safe from any goroutine.
func (c *Cache) SetRank(rank func(keyHash, readHash uint64) float64) {
	if rank == nil {
		c.rank.Store(nil)
		return
	}
	c.rank.Store(&rank)
}

// Reasons lists every Reason, for exporting Stats.Evicted.
func Reasons() []Reason {
	rs := make([]Reason, numReasons)
	for i := range rs {
		rs[i] = Reason(i)
	}
	return rs
}

// Item is one cached reply as an admin listing shows it: where it is and
// how big, never its value.
type Item struct {
	DB      int
	Key     string
	Field   string // HGET's field; "" for GET
	IsField bool   // HGET (Field may be empty)
	// Hash is the detector's hash of the reply's reads: Hash(DB, Key) for
	// GET, FieldHash of it for HGET.
	Hash uint64
	// Bytes is the length of the reply as served to a RESP2 client (its
	// encoding, value included): the same for RESP3 except for a nil
	// reply, stored once and served as $-1\r\n (5 bytes) in RESP2 or
	// _\r\n (3) in RESP3; Bytes is 5 for it.
	Bytes int
	// Nil: the reply is a nil reply (the key or field does not exist).
	Nil bool
	// Expired: the key's TTL has passed (not served; the next sweep drops
	// it).
	Expired bool
}

// Items calls fn for every cached reply, in no particular order. Like
// Sweep it reads the published entries without the writer lock, so it
// sees each entry as of some moment during the call. Safe from any
// goroutine; fn must not call back into the cache's writers.
func (c *Cache) Items(fn func(Item)) {
	now := c.now()
	c.published(func(e *entry) {
		expired := e.expireAt != 0 && now >= e.expireAt
		if e.get != nil {
			fn(Item{DB: int(e.db), Key: e.key, Hash: e.hash, Bytes: len(e.get.resp2()), Nil: e.get.bytes == nil, Expired: expired})
		}
		for f, r := range e.fields {
			fn(Item{DB: int(e.db), Key: e.key, Field: f, IsField: true, Hash: FieldHash(e.hash, []byte(f)),
				Bytes: len(r.resp2()), Nil: r.bytes == nil, Expired: expired})
		}
	})
}

// Live settings: limits, denied keys, nil replies, on and off.

// currentLocked reports whether e, found without the lock, is still the
// published entry of its key (the caller holds mu). Its record says so
// first: once the key is removed (as every key is before SetLimits
// replaces the table with a smaller one) the record's slot may be past the
// end of the current table.
func (c *Cache) currentLocked(e *entry) bool {
	return e.rec.e == e && c.slotLocked(e.rec.slot).e.Load() == e
}

// slotLocked returns slot i of the current table; the caller holds mu, so
// the table cannot be replaced meanwhile.
func (c *Cache) slotLocked(i int) *slot {
	return &c.table.Load().slots[i]
}

// checkLimits validates the sizing Config fields, as New and SetLimits take
// them.
func checkLimits(capacity int, maxBytes int64, maxValue int) error {
	switch {
	case capacity < 1:
		return ErrCapacity
	case maxBytes < 1:
		return ErrMaxBytes
	case maxValue < 0:
		return ErrMaxValue
	}
	return nil
}

// SetLimits changes the cache's capacity (replies), byte bound and largest
// cached value (bytes) while it serves; it returns ErrCapacity, ErrMaxBytes
// or ErrMaxValue, changing nothing, for a bad value. Replies over a lowered
// capacity or byte bound are evicted as for room (ReasonCapacity): the
// least ranked of the oldest keys (SetRank), oldest first without a rank. A
// capacity that needs a table of another size, or a lowered max value,
// empties the cache (ReasonConfig): the entries are not moved, so no
// lock-free reader or invalidation can see one table while a reply lives
// in the other; hot keys are filled again at their next miss. Safe from
// any goroutine.
func (c *Cache) SetLimits(capacity int, maxBytes int64, maxValue int) error {
	if err := checkLimits(capacity, maxBytes, maxValue); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setLimitsLocked(capacity, maxBytes, maxValue)
	return nil
}

// setLimitsLocked is SetLimits for valid limits, under mu.
func (c *Cache) setLimitsLocked(capacity int, maxBytes int64, maxValue int) {
	resize := slotTableSize(capacity) != len(c.table.Load().slots)
	if resize || int64(maxValue) < c.maxValue.Load() {
		c.epoch.Add(1)
		c.removeAllLocked(ReasonConfig)
	}
	if resize {
		// Published empty, after the old table was emptied: a reader that
		// still holds the old one finds nothing there.
		c.table.Store(newSlotTable(capacity))
	}
	c.maxValue.Store(int64(maxValue))
	c.capacity, c.maxBytes = capacity, maxBytes
	for c.replies > c.capacity || c.bytes > c.maxBytes {
		victim := c.victimLocked(nil) // as for room: the least ranked of the oldest
		if victim == nil {
			break
		}
		c.removeLocked(victim, ReasonCapacity)
	}
}

// Limits returns the capacity (replies), byte bound and largest cached
// value (bytes) in force.
func (c *Cache) Limits() (capacity int, maxBytes int64, maxValue int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.capacity, c.maxBytes, int(c.maxValue.Load())
}

// MaxValue returns the largest cached value in bytes. Lock-free, for the
// event loops sizing what they capture for a fill.
func (c *Cache) MaxValue() int { return int(c.maxValue.Load()) }

// SetDenied makes the cache refuse, from now on, every key for which
// denied returns true, and evicts the cached keys it matches
// (ReasonConfig); nil denies nothing. denied is called by Fill (on the
// filling event loop) and here, with the key's bytes, which it must not
// keep; it must be safe for concurrent use.
func (c *Cache) SetDenied(denied func(key []byte) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if denied == nil {
		c.denied.Store(nil)
		return
	}
	c.denied.Store(&denied)
	// A fill that checked the old list before this Store may still publish
	// a matching key: the epoch bump makes its ticket invalid.
	c.evictKeysLocked(denied, ReasonConfig)
}

// EvictKeys evicts every cached key for which match returns true (called
// with the key's bytes, which it must not keep) and refuses every fill
// begun before the call, matching or not: the caller has already made
// sure fills begun after it cannot store a matching key. Safe from any
// goroutine.
func (c *Cache) EvictKeys(match func(key []byte) bool, why Reason) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evictKeysLocked(match, why)
}

func (c *Cache) evictKeysLocked(match func(key []byte) bool, why Reason) {
	c.epoch.Add(1)
	for r := c.oldest; r != nil; {
		next := r.next
		if match([]byte(r.e.key)) {
			c.removeLocked(r, why)
		}
		r = next
	}
}

// SetNilReplies allows (true, the default) or refuses caching nil replies
// (GET or HGET of an absent key or field). Refusing empties the cache and
// invalidates fill tickets already handed out, so no nil reply is served
// from then on. For a server whose key creations Cicada cannot hear of
// (keyspace.Subscriber: a module's writes without keyspace notifications).
// Idempotent. Safe from any goroutine.
func (c *Cache) SetNilReplies(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.noNils.Load() == !on {
		return
	}
	c.noNils.Store(!on)
	if !on {
		c.epoch.Add(1)
		c.removeAllLocked(ReasonConfig)
	}
}

// SetEnabled turns caching off (empty, no hits, no fills: every request is
// forwarded) or back on. Idempotent. Safe from any goroutine.
func (c *Cache) SetEnabled(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !on && c.disabled == nil:
		c.disabled = c.Hold()
		c.off.Store(true)
		c.removeAllLocked(ReasonConfig)
	case on && c.disabled != nil:
		c.off.Store(false)
		c.disabled.Release()
		c.disabled = nil
	}
}

// Off reports whether caching is turned off (SetEnabled(false)), without
// locking: the read path's test for skipping detection and lookup.
func (c *Cache) Off() bool { return c.off.Load() }

// Enabled reports whether caching is on (SetEnabled).
func (c *Cache) Enabled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.disabled == nil
}

// removeAllLocked evicts every cached reply.
func (c *Cache) removeAllLocked(why Reason) {
	for r := c.oldest; r != nil; r = c.oldest {
		c.removeLocked(r, why)
	}
}
