package hotcache

import (
	"errors"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Errors returned by New.
var (
	ErrCapacity = errors.New("hotcache: capacity must be at least 1")
	ErrMaxBytes = errors.New("hotcache: max bytes must be at least 1")
	ErrMaxValue = errors.New("hotcache: max value must be at least 0")
	ErrStripes  = errors.New("hotcache: stripes must be a power of two")
)

// Defaults for Config fields left at zero.
const (
	// DefaultStripes is the number of version stripes of the fill guard.
	DefaultStripes = 4096
	// probe is how many consecutive slots hold the entries of one hash.
	probe = 8
	// maxReaders bounds the identities remembered per reply; further
	// identities are answered by Redis.
	maxReaders = 8
	// entryOverhead estimates the bytes an entry costs beyond its key,
	// fields and replies (structs, map buckets, slot pointer).
	entryOverhead = 160
	// replyOverhead is the same for one reply.
	replyOverhead = 64
)

// Status says what Get and HGet found.
type Status uint8

const (
	// Hit: the reply bytes may be sent to the client.
	Hit Status = iota
	// Miss: nothing usable is cached (absent, expired, field missing).
	Miss
	// Unproven: a reply is cached but Redis has not yet shown that this
	// identity may read it; forward the request and call AddReader if Redis
	// answers it with a value.
	Unproven
	// Suspended: the cache answers nothing right now (see Hold).
	Suspended
)

// Config sizes a Cache.
type Config struct {
	// Capacity is the maximum number of cached replies (a GET reply or one
	// HGET field reply each count one). Must be >= 1.
	Capacity int
	// MaxBytes bounds the bytes held: keys, fields, reply bytes and a fixed
	// per-entry overhead estimate. Must be >= 1.
	MaxBytes int64
	// MaxValue is the largest value payload in bytes that is cached; replies
	// with a longer bulk string are refused. 0 caches only nil replies.
	MaxValue int
	// Stripes is the number of fill-guard version stripes, a power of two;
	// 0 means DefaultStripes.
	Stripes int
	// Now returns the clock of cached TTLs in nanoseconds; nil means the
	// wall clock (time.Now().UnixNano(), CLOCK_REALTIME), the clock Redis's
	// expiry follows (mstime, from gettimeofday): beside Redis on one host
	// a step of it (an NTP correction, a hypervisor's after pausing the
	// machine) expires a cached key when Redis expires the key, where a
	// monotonic clock would serve it for the step's length longer. Tests
	// inject a fake clock.
	Now func() int64
	// StrictHolds makes a second Release of a Hold panic instead of only
	// counting it (Stats.DoubleReleases): for tests.
	StrictHolds bool
}

// Ident is an identity: the user Redis authenticated a connection as, as
// numbered by the proxy (proxy/identity.go). A cached reply lists the
// identities Redis let read it. 64 bits: identities are never reused, and
// an attacker minting one per failed HELLO AUTH (35,000/s measured) would
// wrap 32 bits in about 34 hours.
type Ident uint64

// Reason says why replies left the cache; used as a metrics label.
type Reason uint8

// Eviction reasons.
const (
	ReasonWrite        Reason = iota // a write forwarded by Cicada
	ReasonNotification               // a keyspace notification
	ReasonExpired                    // the key's TTL passed
	ReasonCold                       // the key is no longer hot
	ReasonCapacity                   // room was needed (entries or bytes)
	ReasonFlush                      // FLUSHALL/FLUSHDB/SWAPDB or a lost subscription
	ReasonConfig                     // a live configuration change (SetLimits, SetDenied, SetEnabled)
	ReasonCluster                    // the key's hash slot is no longer served by the node (Redis Cluster)
	numReasons
)

// String returns the metrics label of r.
func (r Reason) String() string {
	return [...]string{"write", "notification", "expired", "cold", "capacity", "flush", "config", "cluster"}[r]
}

// reply is one cached reply. Immutable once published.
type reply struct {
	bytes   []byte  // the exact RESP reply; nil for a nil reply
	readers []Ident // identities Redis let read it
	// pending is set by Fill from before it publishes the reply until its
	// ticket is confirmed after: a lookup meanwhile finds no reply. A
	// write whose BeginWrite found nothing because the reply was not
	// published yet may have completed by then (the Fill's goroutine
	// descheduled between its two ticket checks), and the reply read
	// before it must not be served.
	pending atomic.Bool
}

func (r *reply) allows(ident Ident) bool {
	for _, id := range r.readers {
		if id == ident {
			return true
		}
	}
	return false
}

// entry holds every cached reply of one key in one db. Immutable once
// published in a slot; writers publish a modified copy.
type entry struct {
	hash     uint64
	db       int32
	hashSlot uint16 // Redis Cluster hash slot of key (cluster.Slot)
	key      string
	expireAt int64             // Now() reading at which the key expires; 0 = no TTL
	get      *reply            // GET reply, or nil
	fields   map[string]*reply // HGET replies by field, or nil
	rec      *record           // writer-side bookkeeping; readers never touch it
	// used is set by the key's first hit (Lookup) and read when the key
	// leaves (removeLocked); shared by the key's entry copies.
	used *atomic.Bool
}

// record is the writer-side state of a cached key. Guarded by Cache.mu.
type record struct {
	slot       int
	e          *entry
	replies    int
	bytes      int64
	prev, next *record // insertion order, oldest first
	seq        uint64  // insertion number: a smaller one is older
	// skip: the key's next skip keyspace notifications are the write's
	// that put its GET reply here (WriteThrough) and do not evict it.
	skip uint8
}

// stripe is one fill-guard counter pair, padded to its own cache line.
type stripe struct {
	// version moves by writeMove at every write's start and end (and a
	// write Cicada cannot see complete), by 1 at every notification.
	version  atomic.Uint64
	inflight atomic.Int64 // writes sent but not yet answered
	// last is the last key of the stripe with a GET reply cached that a
	// write evicted (bury), for a later write-through of the key to take
	// its readers from (BeginWriteThrough); nil: none yet.
	last atomic.Pointer[buried]
	_    [40]byte
}

// buried is a GET-cached key a write evicted: the key, its GET reply's
// readers (who Redis let read it) and the cache's epoch at the eviction.
// It holds no reply: the 4,096 stripes' records keep only keys and
// identities alive. Immutable.
type buried struct {
	hash    uint64
	db      int32
	key     string
	readers []Ident
	epoch   uint64
}

// bury records e, which a write has just evicted, as its stripe's last
// evicted key, when it had a GET reply. epoch is the cache's, read before
// e was looked up: an ACL change takes a Hold, flushes at its reply and
// bumps the epoch again at the Release, so an entry found before the
// flush, however late the writer gets here, is buried under an epoch
// older than the Release's.
func (c *Cache) bury(st *stripe, e *entry, epoch uint64) {
	if e.get != nil {
		st.last.Store(&buried{hash: e.hash, db: e.db, key: e.key, readers: e.get.readers, epoch: epoch})
	}
}

// writeMove is how far a write's start or end moves its stripe's version,
// a notification moving it by 1: WriteThrough counts the notifications
// that came during its write apart from other writes of the stripe, which
// may have run after it in Redis (on another connection) whatever the
// order of their replies.
const writeMove = 1 << 32

// Ticket is what BeginFill hands out and Fill checks.
type Ticket struct {
	epoch   uint64
	version uint64
	stripe  uint32
}

// Cache is the hot-reply table. Safe for concurrent use: reads from any
// number of event loops are lock-free; writers serialize on mu.
type Cache struct {
	table          atomic.Pointer[slotTable] // replaced under mu, after a flush, when the capacity changes its size
	stripes        []stripe
	smask          uint64
	suspended      atomic.Int64  // Holds not released (hold.go); > 0: no hits, no fills
	strictHolds    bool          // Config.StrictHolds
	doubleReleases atomic.Uint64 // Hold.Release calls after the first
	off            atomic.Bool   // mirrors disabled, for lock-free readers (Off)
	noNils         atomic.Bool   // nil replies are not cached (SetNilReplies); set under mu
	epoch          atomic.Uint64 // bumped by Hold, Release and Flush
	now            func() int64
	maxValue       atomic.Int64                                           // bytes; read by Fill before it locks
	denied         atomic.Pointer[func([]byte) bool]                      // keys never cached; nil: none
	rank           atomic.Pointer[func(keyHash, readHash uint64) float64] // SetRank's; nil: evict oldest first

	evicted [numReasons]atomic.Uint64 // replies evicted, by reason
	fills   atomic.Uint64
	unused  atomic.Uint64 // of those, keys that served no hit
	// writeThroughs counts the GET replies WriteThrough kept.
	writeThroughs atomic.Uint64
	// expiring is the number of published entries with a TTL; written
	// under mu, read by Sweep without it.
	expiring atomic.Int64

	mu       sync.Mutex // guards the following
	replies  int        // cached replies
	bytes    int64      // accounted bytes
	oldest   *record
	newest   *record
	seq      uint64 // records pushed so far
	capacity int    // replies
	maxBytes int64  // bytes
	disabled *Hold  // SetEnabled(false)'s suspension; nil when enabled
}

// slotTable is the open-addressing table of published entries: an entry
// of hash h lives in one of the probe slots from h&mask. Read lock-free;
// its slots change under mu.
type slotTable struct {
	slots []slot
	mask  uint64
}

// slot is one cell of a slotTable: the published entry and, beside it, the
// hash of the last entry published there. A lookup reads tag first and
// loads an entry only where tag is its hash: a miss reads the probe slots
// (128 bytes: two or three cache lines) instead of following a pointer to
// each entry on the way (BenchmarkLookupLarge, scenario 4's 10,000s of
// cached keys). tag is a filter only: a lookup checks the entry's own hash
// and key, and a tag read out of step with e (a slot being republished)
// costs at most a miss. A slot that holds an entry has its hash as tag
// (publish fills an empty slot or replaces the same key's entry), so a
// find under the writer lock is exact.
type slot struct {
	tag atomic.Uint64
	e   atomic.Pointer[entry]
}

// publish makes e the entry of s (under Cache.mu).
func (s *slot) publish(e *entry) {
	s.tag.Store(e.hash)
	s.e.Store(e)
}

// newSlotTable sizes a table for capacity replies: the power of two at
// least twice as large (at least 2*probe slots).
func newSlotTable(capacity int) *slotTable {
	size := slotTableSize(capacity)
	return &slotTable{slots: make([]slot, size), mask: uint64(size - 1)}
}

// slotTableSize is the number of slots newSlotTable gives capacity.
func slotTableSize(capacity int) int {
	return max(1<<bits.Len(uint(2*capacity-1)), 2*probe)
}

// New returns an empty cache, or an error naming the bad Config field.
func New(cfg Config) (*Cache, error) {
	if err := checkLimits(cfg.Capacity, cfg.MaxBytes, cfg.MaxValue); err != nil {
		return nil, err
	}
	if cfg.Stripes == 0 {
		cfg.Stripes = DefaultStripes
	}
	if cfg.Stripes < 1 || cfg.Stripes&(cfg.Stripes-1) != 0 {
		return nil, ErrStripes
	}
	c := &Cache{
		stripes:  make([]stripe, cfg.Stripes),
		smask:    uint64(cfg.Stripes - 1),
		now:      cfg.Now,
		capacity: cfg.Capacity,
		maxBytes: cfg.MaxBytes,

		strictHolds: cfg.StrictHolds,
	}
	c.table.Store(newSlotTable(cfg.Capacity))
	c.maxValue.Store(int64(cfg.MaxValue))
	if c.now == nil {
		c.now = func() int64 { return time.Now().UnixNano() }
	}
	return c, nil
}

var seed = maphash.MakeSeed()

// Hash returns the hash of key in db that KeyOf and FieldKeyOf compute.
// Process-wide (random seed per process); Hash and HashString agree.
func Hash(db int, key []byte) uint64 {
	return mixDB(maphash.Bytes(seed, key), db)
}

// HashString is Hash for a string key.
func HashString(db int, key string) uint64 {
	return mixDB(maphash.String(seed, key), db)
}

// FieldHash derives the hash of a hash field from its key's hash, for
// counting HGET key field separately from GET key in the detector.
func FieldHash(h uint64, field []byte) uint64 {
	return h ^ bits.RotateLeft64(maphash.Bytes(seed, field), 29) ^ 0x9e3779b97f4a7c15
}

func mixDB(h uint64, db int) uint64 {
	return h ^ (uint64(db)+1)*0xbf58476d1ce4e5b9
}

// Now returns the cache's clock reading (ns; Config.Now), the time base of
// FillRequest.ExpireAt. A difference of two readings is a duration only
// while the wall clock does not step: it may be negative or too long.
func (c *Cache) Now() int64 { return c.now() }

// Found is what Lookup found for a key: on Hit the exact reply bytes
// (immutable, valid forever), on Hit or Unproven the key's Redis Cluster
// hash slot (computed once, when it was filled, so that a hit behind a
// cluster node costs no CRC16 of the key). Current tells whether it still
// holds.
type Found struct {
	Reply    []byte
	HashSlot int
	Status   Status
	e        *entry
	t        *slotTable
	cell     uint64 // e's cell in t
}

// Lookup looks up k's reply for a connection with identity ident speaking
// protocol proto (2 or 3) and fills in f (an out-parameter: the request
// path keeps it on its stack, uncopied); on Miss and Suspended only
// Status is meaningful. Lock-free; it does not allocate.
func (c *Cache) Lookup(k *Key, ident Ident, proto int, f *Found) {
	if c.suspended.Load() != 0 {
		f.Status, f.e = Suspended, nil
		return
	}
	e, t, cell := c.findCell(k.db, k.hash, k.name)
	if e == nil {
		f.Status, f.e = Miss, nil
		return
	}
	f.e, f.t, f.cell, f.HashSlot = e, t, cell, 0
	f.Reply, f.Status = c.replyOf(e, k.field, k.isField, ident, proto)
	if f.Status == Hit && !e.used.Load() {
		e.used.Store(true) // once per key: later hits only load
	}
	if f.Status == Hit || f.Status == Unproven {
		f.HashSlot = int(e.hashSlot)
	}
}

// Current reports whether what f found is still what the cache holds and
// serves: the entry is still published where it was, and the cache is not
// held. A lookup now would find the same (a write, notification, flush or
// fill of the key since Lookup replaced or removed the entry). Lock-free:
// three atomic loads.
func (c *Cache) Current(f *Found) bool {
	return f.e != nil && c.suspended.Load() == 0 && c.table.Load() == f.t && f.t.slots[f.cell].e.Load() == f.e
}

// replyOf returns e's reply for GET or for the field, as Lookup reports it.
func (c *Cache) replyOf(e *entry, field []byte, isField bool, ident Ident, proto int) ([]byte, Status) {
	if e.expireAt != 0 && c.now() >= e.expireAt {
		return nil, Miss
	}
	var r *reply
	if isField {
		r = e.fields[string(field)]
	} else {
		r = e.get
	}
	if r == nil || r.pending.Load() {
		return nil, Miss
	}
	if !r.allows(ident) {
		return nil, Unproven
	}
	if r.bytes == nil {
		return nullReply(proto), Hit
	}
	return r.bytes, Hit
}

var (
	null2 = []byte("$-1\r\n")
	null3 = []byte("_\r\n")
)

func nullReply(proto int) []byte {
	if proto >= 3 {
		return null3
	}
	return null2
}

// resp2 is the reply as a RESP2 client gets it.
func (r *reply) resp2() []byte {
	if r.bytes == nil {
		return null2
	}
	return r.bytes
}

// find returns the published entry of key in db, or nil. Lock-free.
func (c *Cache) find(db int, h uint64, key []byte) *entry {
	e, _, _ := c.findCell(db, h, key)
	return e
}

// findCell is find that also returns the table and the cell the entry was
// found in.
func (c *Cache) findCell(db int, h uint64, key []byte) (*entry, *slotTable, uint64) {
	t := c.table.Load()
	for i := uint64(0); i < probe; i++ {
		cell := (h + i) & t.mask
		s := &t.slots[cell]
		if s.tag.Load() != h {
			continue
		}
		if e := s.e.Load(); e != nil && e.hash == h && e.db == int32(db) && e.key == string(key) {
			return e, t, cell
		}
	}
	return nil, nil, 0
}

// Suspended reports whether the cache answers nothing now.
func (c *Cache) Suspended() bool { return c.suspended.Load() != 0 }

// Hold suspends the cache until the returned Hold is released. Safe from
// any goroutine.
func (c *Cache) Hold() *Hold {
	c.suspended.Add(1)
	c.epoch.Add(1)
	return &Hold{c: c}
}

// Holds is the number of Holds taken and not yet released. Safe from any
// goroutine.
func (c *Cache) Holds() int64 { return c.suspended.Load() }

// Flush drops every cached reply and refuses every fill begun before it.
func (c *Cache) Flush() {
	c.epoch.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeAllLocked(ReasonFlush)
}

// BeginWrite must be called before a write to k is sent to Redis. It
// evicts the key's replies (GET and every field) and refuses fills of its
// stripe until EndWrite(stripe). Returns the stripe to pass to EndWrite.
func (c *Cache) BeginWrite(k *Key) uint32 {
	s := uint32(k.hash & c.smask)
	st := &c.stripes[s]
	st.inflight.Add(1)
	st.version.Add(writeMove)
	epoch := c.epoch.Load()
	if e := c.find(k.db, k.hash, k.name); e != nil {
		c.evictEntry(e, ReasonWrite)
		c.bury(st, e, epoch)
	}
	return s
}

// Writing reports whether a write of k's fill-guard stripe is in flight
// (begun and not ended): always when one of k is, sometimes for another
// key of the stripe. Safe from any goroutine.
func (c *Cache) Writing(k *Key) bool { return c.stripes[k.hash&c.smask].inflight.Load() > 0 }

// EndWrite ends one BeginWrite once the write's reply has arrived (or its
// connection is gone).
func (c *Cache) EndWrite(stripe uint32) {
	st := &c.stripes[stripe]
	st.version.Add(writeMove)
	st.inflight.Add(-1)
}

// Invalidate evicts every reply of k's key and refuses fills begun before
// it; why is ReasonNotification for a keyspace notification, ReasonWrite
// for a write Cicada forwards whose completion it does not observe.
func (c *Cache) Invalidate(k *Key, why Reason) {
	move := uint64(1)
	if why == ReasonWrite {
		move = writeMove
	}
	c.stripes[k.hash&c.smask].version.Add(move)
	if e := c.find(k.db, k.hash, k.name); e != nil {
		c.evictEntry(e, why)
	}
}

// evictEntry removes the key of e if it is still cached, unless why is
// the notification a WriteThrough waits for.
func (c *Cache) evictEntry(e *entry, why Reason) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := e.rec
	switch {
	case r.e == nil || c.slotLocked(r.slot).e.Load() != r.e:
	case r.skip > 0 && why == ReasonNotification:
		r.skip--
	default:
		c.removeLocked(r, why)
	}
}

// BeginFill is called when a GET/HGET of a hot key with hash h is sent to
// Redis. ok=false means a fill could not be kept anyway (suspended, a key
// SetDenied denies, or a write to the stripe is in flight): do not fetch
// what a fill needs. A denied key read often went on costing Redis a PTTL
// per read, each fill refused only at Fill (found by a new user's trial:
// 10,773 PTTLs for 10,822 GETs in a second). Fill checks again: the
// deny-list may change in between.
func (c *Cache) BeginFill(k *Key) (t Ticket, ok bool) {
	if c.suspended.Load() != 0 {
		return t, false
	}
	if c.isDenied(k) {
		return t, false
	}
	s := uint32(k.hash & c.smask)
	st := &c.stripes[s]
	t = Ticket{epoch: c.epoch.Load(), version: st.version.Load(), stripe: s}
	if st.inflight.Load() != 0 {
		return t, false
	}
	return t, true
}

// isDenied reports whether the deny-list in force (SetDenied) matches k's
// name: such a key is never filled nor written through.
func (c *Cache) isDenied(k *Key) bool {
	deny := c.denied.Load()
	return deny != nil && (*deny)(k.name)
}

func (c *Cache) ticketValid(t Ticket) bool {
	st := &c.stripes[t.stripe]
	return c.suspended.Load() == 0 && c.epoch.Load() == t.epoch &&
		st.inflight.Load() == 0 && st.version.Load() == t.version
}

// FillRequest describes a reply to cache.
type FillRequest struct {
	// Key is the GET or HGET whose reply this is; its bytes are copied.
	Key Key
	// Reply is the exact reply bytes ("$5\r\nhello\r\n"); nil for a nil
	// reply. Copied by Fill.
	Reply []byte
	// ValueLen is the payload length of Reply (checked against MaxValue).
	ValueLen int
	// ExpireAt is the Now() reading at which the key expires (computed by
	// the caller from the time the GET was sent and the key's PTTL), or 0
	// for a key without TTL.
	ExpireAt int64
	// Ident is the identity that read the reply.
	Ident Ident
}

// Fill caches a reply if t is still valid, the value is small enough and
// has not expired. It reports whether the reply was kept.
func (c *Cache) Fill(t Ticket, f FillRequest) bool {
	if int64(f.ValueLen) > c.maxValue.Load() || (f.ExpireAt != 0 && c.now() >= f.ExpireAt) {
		return false
	}
	k := &f.Key
	if c.isDenied(k) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ticketValid(t) || (f.Reply == nil && c.noNils.Load()) {
		return false
	}
	if old := c.find(k.db, k.hash, k.name); old != nil && old.expireAt != 0 && c.now() >= old.expireAt {
		// The key expired since: its other replies are stale too.
		c.removeLocked(old.rec, ReasonExpired)
	}
	r := &reply{readers: []Ident{f.Ident}}
	r.pending.Store(true)
	if f.Reply != nil {
		r.bytes = append(make([]byte, 0, len(f.Reply)), f.Reply...)
	}
	rec := c.upsertLocked(k.db, k.hash, k.name, func(e *entry) {
		e.expireAt = minExpiry(e.expireAt, f.ExpireAt)
		if k.isField {
			e.fields = withField(e.fields, string(k.field), r)
		} else {
			e.get = r
		}
	})
	if rec == nil {
		return false
	}
	// A write or notification may have looked for the key between the
	// check above and the publication: look again.
	if !c.ticketValid(t) {
		c.removeLocked(rec, ReasonWrite)
		return false
	}
	r.pending.Store(false)
	c.fills.Add(1)
	return true
}

// Epoch returns the cache's epoch, which every Flush, Hold and Release
// changes; pass it to AddReader when the read is sent.
func (c *Cache) Epoch() uint64 { return c.epoch.Load() }

// AddReader records that Redis answered ident's read of k (GET or HGET of
// a cached key) with a value, so ident may be answered from the cache.
// epoch is Epoch() when the read was sent: if the cache was flushed since
// (as on an ACL change), the proof may be outdated and is dropped.
func (c *Cache) AddReader(epoch uint64, k *Key, ident Ident) {
	e := c.find(k.db, k.hash, k.name)
	if e == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.currentLocked(e) || c.epoch.Load() != epoch {
		return // replaced or flushed meanwhile; a later read proves it again
	}
	old := e.get
	if k.isField {
		old = e.fields[string(k.field)]
	}
	if old == nil || old.allows(ident) || len(old.readers) >= maxReaders {
		return
	}
	r := &reply{bytes: old.bytes, readers: append(append(make([]Ident, 0, len(old.readers)+1), old.readers...), ident)}
	c.upsertLocked(int(e.db), k.hash, k.name, func(e *entry) {
		if k.isField {
			e.fields = withField(e.fields, string(k.field), r)
		} else {
			e.get = r
		}
	})
}

func withField(m map[string]*reply, field string, r *reply) map[string]*reply {
	n := make(map[string]*reply, len(m)+1)
	for k, v := range m {
		n[k] = v
	}
	n[field] = r
	return n
}

func minExpiry(a, b int64) int64 {
	switch {
	case a == 0:
		return b
	case b == 0 || a < b:
		return a
	}
	return b
}
