package detector

import (
	"iter"
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// Admission decides which keys are worth caching: those whose caching is
// expected to save Redis the most requests, within the cache's limits.
//
// # Measure
//
// For a reply whose reads the read [Detector] counts at r ops/s, of a key
// whose invalidations (writes, expiry, eviction: its keyspace
// notifications) the write Detector counts at w ops/s, with fills taking
// t seconds from send to reply, caching saves Redis about
//
//	saved = r × e^(−w·t) − w      requests per second
//
// Each invalidation costs a refill: the next read is forwarded anyway,
// with a PTTL behind it (one request more than without a cache, the −w);
// a fill is kept only if no invalidation lands during its round trip,
// which for invalidations spread at random (Poisson) happens with
// probability e^(−w·t), and only then do the reads after it hit. A key
// written faster than a fill's round trip saves nothing, however often it
// is read (bench scenario 6: keys read 5,000 times a second, written 550
// times, behind 40-ms round trips). The rates are the detectors' sliding
// 1-s windows, t an average of recent fills (NoteFill).
//
// # Admission and eviction
//
// The admission filter follows TinyLFU (G. Einziger, R. Friedman and
// B. Manes, "TinyLFU: A Highly Efficient Cache Admission Policy", ACM
// Transactions on Storage 13(4), 2017): a frequency sketch (here the
// detector's Count-Min Sketches, which age by their sliding window instead
// of TinyLFU's halving) decides whether a newcomer is worth more than
// what it would evict, so that a cache full of keys that save much is not
// churned by keys read once. Instead of comparing each newcomer with one
// victim, which would need the victim before the fill is sent, the filter
// compares it with a bar: while the cache is below 15/16 of its limits the
// bar is 0 (any key read at the floor rate is filled); once it is fuller,
// [Admission.Rebar] sets the bar to the saving of the cached reply at the
// 1/16 quantile, so a newcomer must beat the weakest sixteenth of the
// cache. The cache evicts by the same measure (hotcache.Cache.SetRank):
// the least saving of its eight oldest keys, and while it is full the
// sweep drops replies saving less than half a bar above 0 and, at a
// --hot-threshold above 1, those read at less than half of it
// ([Admission.Cold]).
//
// The floor is the read detector's threshold (--hot-threshold): a key read
// more slowly is never filled, whatever the bar, so a user can keep the
// cache to truly hot keys. [Admission.Adapt] raises it while most keys
// filled leave the cache without a hit (traffic spread over more keys
// than the cache holds, where every key looks read at the floor rate)
// and lowers it back when they pay. Memory is the two detectors' sketches, bounded
// whatever the number of keys.
//
// # Concurrency
//
// ObserveWrite is called by one goroutine at a time (the notification
// watcher's); Advance, Adapt and Rebar by the janitor, which owns the
// fields they keep without atomics; the rest from any
// goroutine, lock-free. The event loops count reads in the read Detector
// themselves ([Detector.Observe]).
type Admission struct {
	reads  *Detector
	writes *Detector
	raised atomic.Uint32 // the floor Adapt raised to, ops/s; 0 or at most the threshold: none
	// Adapt's: the totals it last judged from, the calls since that
	// could not judge, how many such calls start halving a raised floor,
	// and whether its last move was such a halving.
	left, unused uint64
	quiet        int
	patience     int
	eased        bool
	sinceNear    int           // Adapt's: calls in a row that found near unset
	near         atomic.Bool   // Worth refused a key read at half the floor or more since Adapt's last call
	filled       atomic.Bool   // Worth let a key fill since Adapt's last judgement
	bar          atomic.Uint64 // math.Float64bits of the bar, saved requests per second
	full         atomic.Bool   // the cache was full at the last Rebar
	rtt          atomic.Int64  // ns: moving average of fill round trips
	sample       []float64     // Rebar's scratch; the janitor's
}

// FullAt is the share of a cache limit (replies or bytes) above which the
// cache counts as full for [Admission.Rebar]: 15/16.
const FullAt = 15.0 / 16

// barQuantile is where in the cache's savings the bar sits once it is full.
const barQuantile = 1.0 / 16

// barSample bounds how many cached replies Rebar reads.
const barSample = 4096

// NewAdmission returns an Admission over reads, the detector the event
// loops count reads in (its threshold is the floor), with its own write
// detector, counted by one goroutine, whose window starts at now. The
// write detector is a quarter of reads' width (at least 1): invalidations
// are a fraction of reads, and (88 + 120) × width/4 bytes, 1.6 MiB at the
// default width, is what it costs. The bar starts at 0.
func NewAdmission(reads *Detector, now time.Time) *Admission {
	w, err := New(Config{Threshold: 1, Loops: 1, Width: max(reads.width/4, 1)}, now)
	if err != nil {
		panic(err) // reads' width was accepted by New already
	}
	return &Admission{reads: reads, writes: w}
}

// Reads is the read detector NewAdmission was given.
func (a *Admission) Reads() *Detector { return a.reads }

// ObserveWrite counts one invalidation of the key whose hash (of db and
// name, hotcache.Hash) is h: a keyspace notification. One call at a time
// (upstream.Config.Invalidated: under the notification connection's read
// lock, on its reading goroutine or an event loop).
func (a *Admission) ObserveWrite(h uint64) { a.writes.Observe(0, h) }

// Advance moves both detectors' windows to now: [Detector.Advance] of the
// read detector, then of the write detector. One goroutine (the
// janitor's), at least every 100 ms.
func (a *Admission) Advance(now time.Time) {
	a.reads.Advance(now)
	a.writes.Advance(now)
}

// NoteFill records that a fill's two replies took rtt from send to the
// last reply. Any goroutine: the average is updated without a lock, and
// an update lost to a concurrent one does not matter to an average.
func (a *Admission) NoteFill(rtt time.Duration) {
	old := a.rtt.Load()
	if old == 0 {
		a.rtt.Store(int64(rtt))
		return
	}
	a.rtt.Store(old + (int64(rtt)-old)/16)
}

// FillRTT is the moving average of fill round trips (0 before the first).
func (a *Admission) FillRTT() time.Duration { return time.Duration(a.rtt.Load()) }

// Saved is what caching the reply of the key hashed keyHash
// (hotcache.Hash) whose reads are counted under readHash (Key.ReadHash) is
// expected to save Redis, in requests per
// second (the package's measure; negative when it costs more than it
// saves). Lock-free.
func (a *Admission) Saved(keyHash, readHash uint64) float64 {
	return a.saved(float64(a.reads.Estimate(readHash)), keyHash)
}

func (a *Admission) saved(r float64, keyHash uint64) float64 {
	w := float64(a.writes.Estimate(keyHash))
	if w == 0 {
		return r
	}
	t := time.Duration(a.rtt.Load()).Seconds()
	return r*math.Exp(-w*t) - w
}

// Floor is the read rate in ops/s below which no key is filled: the read
// detector's threshold (--hot-threshold), or what Adapt raised it to.
func (a *Admission) Floor() uint32 { return max(a.reads.Threshold(), a.raised.Load()) }

// adaptMin is how many keys must have left the cache since the last
// change before Adapt judges the floor.
const adaptMin = 64

// adaptQuiet and maxPatience bound the calls without a judgement, in a
// row, after which a raised floor halves: 4 at first, twice as many each
// time the floor had to be raised again right after (up to 64, 16 s).
const (
	adaptQuiet  = 4
	maxPatience = 64
)

// maxRaise bounds Adapt's floor: 2^20 ops/s.
const maxRaise = 1 << 20

// Adapt judges the floor by what the fills it let in did, from the
// cache's totals (hotcache.Stats.Left and Unused: keys evicted for room
// or as cold since start, and those of them that served no hit; a write's
// eviction is the saving's business, not the floor's). A key filled and
// evicted without a hit cost Redis a PTTL for nothing; the sketches cannot
// tell a key read once from one read twice when the traffic is wide
// (their overestimate grows with it), so the floor follows what happened
// instead: when more than half of at least 64 keys that left since the
// last change served no hit, the floor doubles; when fewer than one in
// eight, it halves, down to the threshold. A raised floor also halves
// after four calls in a row with fewer than 64 keys gone, at most half of
// them unused, and again after four more, so that it comes down once the
// traffic that raised it has stopped (a floor too high fills nothing, and with nothing filled no key
// can leave): from 16 to 1 in 4 s. If a halving lets the same traffic
// back in (the next judgement raises the floor again), the wait doubles,
// up to 64 calls (16 s), and a good judgement sets it back to 4. After
// the wait the floor also halves, however many of the keys gone were
// unused, when as many calls in a row saw [Admission.Worth] refuse no key
// read at half the floor or more: halving then lets in nothing read now
// (the traffic that raised it has paused or stopped, and what leaves the
// cache, for room or as cold, is what it filled). A judgement raises the floor
// only if Worth let a key fill since the last one: keys leaving unused
// after the traffic stopped say nothing of a floor that fills nothing. The janitor's, after each sweep (every
// 250 ms).
func (a *Admission) Adapt(left, unused uint64) {
	if a.patience == 0 {
		a.patience = adaptQuiet
	}
	dl, du := left-a.left, unused-a.unused
	floor := a.Floor()
	if a.near.Swap(false) {
		a.sinceNear = 0
	} else {
		a.sinceNear++
	}
	if dl < adaptMin {
		if a.quiet++; a.quiet >= a.patience && floor > a.reads.Threshold() && (2*du <= dl || a.sinceNear >= a.patience) {
			a.raised.Store(floor / 2)
			a.eased, a.quiet = true, 0
		}
		return
	}
	a.quiet = 0
	a.left, a.unused = left, unused
	switch fills := a.filled.Swap(false); {
	case 2*du > dl && floor < maxRaise && fills:
		a.raised.Store(2 * floor)
		if a.eased {
			a.patience = min(2*a.patience, maxPatience)
		}
	case 8*du < dl:
		a.patience = adaptQuiet
		if floor > a.reads.Threshold() {
			a.raised.Store(floor / 2)
		}
	}
	a.eased = false
}

// Worth reports whether a miss of the reply should fill it: its reads
// reach the floor and its saving is positive and at least the bar.
// Lock-free; on the request path (a miss with no fill of the key in
// flight). A key refused for reads of half the floor or more, and a key
// let in, are noted for Adapt (a shared store each, only while none is
// noted).
func (a *Admission) Worth(keyHash, readHash uint64) bool {
	r := a.reads.Estimate(readHash)
	if f := a.Floor(); r < f {
		if 2*uint64(r) >= uint64(f) && !a.near.Load() {
			a.near.Store(true)
		}
		return false
	}
	s := a.saved(float64(r), keyHash)
	if s <= 0 || s < a.Bar() {
		return false
	}
	if !a.filled.Load() {
		a.filled.Store(true)
	}
	return true
}

// Cold reports whether a cached reply should be dropped: only while the
// cache is full (the last Rebar said so: a cache with room keeps what it
// filled until it is written, expires or is evicted for room, since a key
// read every few seconds still saves a request per read), when it saves
// less than half a bar above 0 (its place is better given to a newcomer
// that beats the bar) or, at a --hot-threshold above the default 1 (a
// user who raises it keeps only truly hot keys), is read at less than half
// of it. Nothing else makes a reply cold: not a saving of 0 (unread in
// the window) while the bar is 0, not a floor Adapt raised (it stops
// fills), not a saving below 0 (written faster than read: its next write
// evicts it anyway, and until then its hits save Redis requests). Such
// replies are left to eviction for room, which takes the least saving of
// the eight oldest keys when a fill needs a place. On wide traffic
// (scenario 4: Zipf over 1,000,000 keys, most of the 100,000 cached ones
// read less than once a second) each sweep that found the cache full
// dropped about half of it, 44,000 replies that had served no hit yet,
// and fills brought it back to full within 4 s (cicada_cache_unused_total,
// cicada_cache_replies). Lock-free (the cache's sweep).
func (a *Admission) Cold(keyHash, readHash uint64) bool {
	if !a.full.Load() {
		return false
	}
	r := a.reads.Estimate(readHash)
	if thr := a.reads.Threshold(); thr > 1 && 2*uint64(r) < uint64(thr) {
		return true
	}
	bar := a.Bar()
	return bar > 0 && 2*a.saved(float64(r), keyHash) < bar
}

// MayCold reports whether Cold can call any reply cold now: the last
// Rebar said the cache was full, and the bar is above 0 or the read
// detector's threshold above 1. When it cannot, the cache's sweep has only
// expiry to look for. Lock-free.
func (a *Admission) MayCold() bool {
	return a.full.Load() && (a.Bar() > 0 || a.reads.Threshold() > 1)
}

// Bar is the saving (requests per second) a newcomer needs to be filled.
func (a *Admission) Bar() float64 { return math.Float64frombits(a.bar.Load()) }

// Rebar sets the bar from the cache: 0 when it is not full, else the
// saving of the cached reply at the 1/16 quantile of at most 4,096 of
// replies, each given by its (keyHash, readHash). The janitor's, after
// the sweep.
func (a *Admission) Rebar(full bool, replies iter.Seq2[uint64, uint64]) {
	a.full.Store(full)
	if !full {
		a.bar.Store(0)
		return
	}
	s := a.sample[:0]
	for keyHash, readHash := range replies {
		s = append(s, a.Saved(keyHash, readHash))
		if len(s) == barSample {
			break
		}
	}
	a.sample = s
	if len(s) == 0 {
		a.bar.Store(0)
		return
	}
	slices.Sort(s)
	a.bar.Store(math.Float64bits(max(s[int(float64(len(s))*barQuantile)], 0)))
}
