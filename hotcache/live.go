package hotcache

import "sync/atomic"

// slotLocked returns slot i of the current table; the caller holds mu, so
// the table cannot be replaced meanwhile.
func (c *Cache) slotLocked(i int) *atomic.Pointer[entry] {
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
// capacity or byte bound are evicted oldest first (ReasonCapacity). A
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
	for c.oldest != nil && (c.replies > c.capacity || c.bytes > c.maxBytes) {
		c.removeLocked(c.oldest, ReasonCapacity)
	}
	return nil
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
