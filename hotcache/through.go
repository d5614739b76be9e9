package hotcache

import "strconv"

// WriteThrough is a write of a cached key's whole value whose success puts
// the new value back in the cache (a plain SET key value): BeginWriteThrough
// hands it out when the write is sent, Cache.WriteThrough takes it at the
// write's +OK. It holds the value's GET reply, built at send, and is owned
// by the connection that sent the write until then.
type WriteThrough struct {
	key     Key // its own bytes (Clone)
	reply   []byte
	readers []Ident // the evicted GET reply's: who Redis let read the key
	epoch   uint64
	version uint64 // the stripe's version right after this write's start
	stripe  uint32
}

// BeginWriteThrough is BeginWrite for a write that sets k's whole value to
// value and has no other effect (SET key value): it evicts and blocks
// fills as BeginWrite does, and returns the stripe to pass to EndWrite.
// When k had a GET reply cached and value would be cached (not over
// MaxValue, not a denied key), it also returns a WriteThrough to pass to
// Cache.WriteThrough at the write's +OK, so the key's next reads are hits
// instead of a refill (a GET and a PTTL). value is copied; w is nil
// otherwise. Safe from any goroutine.
func (c *Cache) BeginWriteThrough(k *Key, value []byte) (stripe uint32, w *WriteThrough) {
	s := uint32(k.hash & c.smask)
	st := &c.stripes[s]
	st.inflight.Add(1)
	version := st.version.Add(1)
	e := c.find(k.db, k.hash, k.name)
	if e == nil {
		return s, nil
	}
	c.evictEntry(e, ReasonWrite)
	if e.get == nil || c.suspended.Load() != 0 || int64(len(value)) > c.maxValue.Load() {
		return s, nil
	}
	if deny := c.denied.Load(); deny != nil && (*deny)(k.name) {
		return s, nil
	}
	reply := make([]byte, 0, len(value)+16)
	reply = append(strconv.AppendInt(append(reply, '$'), int64(len(value)), 10), '\r', '\n')
	reply = append(append(reply, value...), '\r', '\n')
	return s, &WriteThrough{key: k.Clone(), reply: reply, readers: e.get.readers,
		epoch: c.epoch.Load(), version: version, stripe: s}
}

// WriteThrough caches w's value as its key's GET reply, once Redis has
// answered the write +OK; call it before the write's EndWrite. It reports
// whether the reply was kept.
//
// The write's own keyspace notification may reach Cicada before or after
// its reply. The write's stripe shows which: its version has not moved
// since the write started (the notification is still to come; the key's
// next notification is taken as it and does not evict), or moved once
// (taken as the notification, applied; the next one evicts). Anything
// else refuses: another write of the stripe in flight or ended, two
// notifications, a flush, a hold, an ACL change (the epoch). Where the
// one move was another key's notification, or an earlier write's, the
// write's own notification evicts the reply when it comes: a lost hit,
// never a stale one. A reply kept with its notification still to come is
// served meanwhile: its value is the key's since the write ran, as a
// fill's is since its GET ran.
func (c *Cache) WriteThrough(w *WriteThrough) bool {
	st := &c.stripes[w.stripe]
	c.mu.Lock()
	defer c.mu.Unlock()
	moved := st.version.Load() - w.version
	if c.suspended.Load() != 0 || c.epoch.Load() != w.epoch || st.inflight.Load() != 1 || moved > 1 {
		return false
	}
	k := &w.key
	if c.find(k.db, k.hash, k.name) != nil {
		return false // not expected (fills wait for the stripe's writes), never overwritten
	}
	r := &reply{bytes: w.reply, readers: w.readers}
	r.pending.Store(true)
	rec := c.upsertLocked(k.db, k.hash, k.name, func(e *entry) { e.get = r })
	if rec == nil {
		return false
	}
	// A notification may have looked for the key between the check and
	// the publication, and not found it: look again.
	if st.version.Load() != w.version+moved {
		c.removeLocked(rec, ReasonNotification)
		return false
	}
	rec.skip = moved == 0
	r.pending.Store(false)
	c.writeThroughs.Add(1)
	return true
}
