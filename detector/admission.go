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
// For a reply read at r ops/s, of a key whose invalidations (writes,
// expiry, eviction: its keyspace notifications) come at w ops/s, with
// fills taking t seconds from send to reply, caching saves Redis about
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
// times, behind 40-ms round trips). t is an average of recent fills
// (NoteFill).
//
// # Rates
//
// Where the 1-s sliding windows (the read [Detector] the event loops
// count in, and a write Detector of a quarter of its width) or the long
// horizon below say [ShortMin] (8) ops/s or more, the 1-s window's rate
// counts: a key turning hot, or turning write-heavy, counts at once, and
// one that the long horizon counts at 8 ops/s or more but the last second
// at less has slowed down (a key written 44,000 times in a few seconds
// and then only read is worth caching once its writes stop:
// test/clients' TestRedisBenchmark). Below that, the 1-s windows cannot
// tell a key from its neighbours in the sketch: at 60,000 requests/s each
// of the read Detector's counters gathers about 1.6 reads a second of
// other keys (54,000 over 32,768 counters a row), and each of the write
// Detector's 0.7 writes (6,000 over 8,192), while bench scenario
// 4's 100,000th most-read key (Zipf 0.99 over 1,000,000 keys) is read
// 0.04 times a second. Those rates come from two long-horizon sketches,
// one of reads and one of invalidations, that TinyLFU ages by halving (see
// frequency): [LongCountersPerReply] counters per reply the cache can hold
// (4 MiB for reads and 1 MiB for invalidations at the default 100,000),
// halved together once the reads counted since the last halving reach
// [LongSamplePerReply] per reply (1,000,000: 17 s at 60,000 reads/s),
// so that a rate stands for the last 17 to 34 s of traffic.
//
// # Admission and eviction
//
// The admission filter follows TinyLFU (G. Einziger, R. Friedman and
// B. Manes, "TinyLFU: A Highly Efficient Cache Admission Policy", ACM
// Transactions on Storage 13(4), 2017): the long-horizon frequency decides
// whether a newcomer is worth more than what it would evict, so that a
// cache full of keys that save much is not churned by keys read once.
// Instead of comparing each newcomer with one victim, which would need the
// victim before the fill is sent, the filter compares it with a bar: while
// the cache is below 15/16 of its limits the bar is 0 (any key whose
// saving is positive is filled); once it is fuller, [Admission.Rebar] sets
// the bar to the median saving of the cached replies, and a newcomer must
// save more, and a key read less than [ShortMin] times a second must have
// been read at least twice over the long horizon: keys read once (a scan)
// tie with the cached ones or, once halvings took the cache's counts to
// 0, beat a bar of 0, and each fill would cost Redis a PTTL for nothing
// (TestAdmissionKeysReadOnce: 20,000 keys read once, a cache of 100: 15
// fills once it is full, 13,814 without the rule). TinyLFU's doorkeeper, a
// Bloom filter that keeps keys seen once out of the sketch, serves the
// same end. The cache evicts by the same measure (hotcache.Cache.SetRank):
// the least saving of its eight oldest keys. In test/cachesim's replay of
// scenario 4 (100,000 replies), a bar at the median answers 64.4% of the
// requests from the cache with 0.088 fills per request, against 64.6% and
// 0.106 at the 1/4 quantile, 64.5% and 0.121 at 1/16, and 62.7% and
// 0.071 at 3/4: the median costs Redis the fewest requests (misses plus
// fills, 0.443 per request) with the most hits. A reply that keeps its
// place without being read is not dropped by a sweep: dropping those
// saving less than half the bar, as the sweep did with the 1-s rates,
// answered 64.2% with 0.203 fills per request (the cache shrank to
// 63,000 replies, refilled by newcomers), and the sweep cost the janitor
// about 18 ms every 250 ms.
//
// The floor is the read detector's threshold (--hot-threshold): a key
// whose 1-s estimate is below it is never filled, whatever its saving, so
// a user can keep the cache to truly hot keys; while the cache is full,
// replies read at less than half of a threshold above 1 are dropped by the
// sweep ([Admission.Cold]). At the default 1 the floor lets every key in:
// the read being decided is in its own estimate. Memory is the detectors'
// and the long-horizon sketches', bounded whatever the number of keys.
//
// # Concurrency
//
// ObserveWrite is called by one goroutine at a time (the notification
// watcher's); ObserveRead for loop i by loop i's owner; Advance and Rebar
// by the janitor, which owns the fields they keep without atomics; the
// rest from any goroutine, lock-free.
type Admission struct {
	reads    *Detector
	writes   *Detector
	long     atomic.Pointer[horizon] // the long-horizon sketches; replaced by Advance only
	capacity atomic.Int64            // replies the cache holds at most (SetCapacity)
	bar      atomic.Uint64           // math.Float64bits of the bar, saved requests per second
	full     atomic.Bool             // the cache was full at the last Rebar
	rtt      atomic.Int64            // ns: moving average of fill round trips
	sample   []float64               // Rebar's scratch; the janitor's
}

// FullAt is the share of a cache limit (replies or bytes) above which the
// cache counts as full for [Admission.Rebar]: 15/16.
const FullAt = 15.0 / 16

// barQuantile is where in the cached replies' savings the bar sits once
// the cache is full: the median (see the type's doc for why).
const barQuantile = 1.0 / 2

// barSample bounds how many cached replies Rebar reads: 512, whose median
// stands within about 2% of the cached replies' ranks of theirs (the
// binomial standard error, (0.25/512)^0.5). 4,096 until issue 18, when
// the janitor's Rebar was found to take 1.7-2.2 ms of CPU every 300 ms in
// front of a full cache at 20,000 requests/s (each saving reads about
// eight counters the loops' traffic keeps out of the core's cache), a
// stall the event loop on the other core felt; test/cachesim's scenario 4
// answered 59.0% either way (2026-12-06).
const barSample = 512

// LongCountersPerReply is how many counters (4 bytes each) the
// long-horizon read sketch has per reply the cache can hold, rounded up to
// a power of two within [minLongCounters, maxLongCounters]; the
// invalidation sketch has a quarter as many. 4 MiB and 1 MiB at the
// default capacity of 100,000 replies.
const LongCountersPerReply = 8

// minLongCounters and maxLongCounters bound the long-horizon read
// sketch: at least 2^16 counters (256 KiB), since a small cache's sketch
// would otherwise be all noise under traffic over many keys
// (TestAdmissionKeysReadOnce), and at most 2^24 (64 MiB, reached at
// 2,097,152 replies), since the largest --cache-capacity would otherwise
// ask for 512 MiB.
const (
	minLongCounters = 1 << 16
	maxLongCounters = 1 << 24
)

// LongSamplePerReply is how many reads per reply the cache can hold end a
// period of the long-horizon sketches: TinyLFU's sample size W over the
// cache's size C, 10 in Einziger et al.'s evaluation and in Caffeine.
const LongSamplePerReply = 10

// ShortMin is the rate in ops/s from which the 1-s detectors' estimates
// are used: when the 1-s or the long-horizon rate reaches it; below it,
// the long-horizon one.
const ShortMin = 8

// NewAdmission returns an Admission over reads, the detector the event
// loops count reads in (its threshold is the floor), for a cache of
// capacity replies (at least 1), with its own write detector, counted by
// one goroutine, and its long-horizon sketches (see the type's doc for
// their sizes), whose windows and first period start at now. The write
// detector is a quarter of reads' width (at least 1): invalidations are a
// fraction of reads, and (88 + 120) × width/4 bytes, 1.6 MiB at the
// default width, is what it costs. The bar starts at 0.
func NewAdmission(reads *Detector, capacity int, now time.Time) *Admission {
	w, err := New(Config{Threshold: 1, Loops: 1, Width: max(reads.width/4, 1)}, now)
	if err != nil {
		panic(err) // reads' width was accepted by New already
	}
	a := &Admission{reads: reads, writes: w}
	a.SetCapacity(capacity)
	a.long.Store(a.newHorizon(int(a.capacity.Load()), now))
	return a
}

// horizon is the pair of long-horizon sketches and the capacity they were
// sized for. Its fields are set before it is published and not replaced.
type horizon struct {
	reads, writes *frequency
	capacity      int
}

// newHorizon returns sketches sized for a cache of capacity replies.
func (a *Admission) newHorizon(capacity int, now time.Time) *horizon {
	counters := longCounters(capacity)
	sample := uint64(LongSamplePerReply * capacity)
	return &horizon{capacity: capacity,
		reads:  newFrequency(counters, a.reads.Loops(), sample, now),
		writes: newFrequency(counters/4, 1, sample, now)}
}

// longCounters is how many counters the read sketch of a cache of
// capacity replies asks for (newFrequency rounds it up).
func longCounters(capacity int) int {
	return min(max(LongCountersPerReply*capacity, minLongCounters), maxLongCounters)
}

// SetCapacity tells admission that the cache now holds at most capacity
// replies (at least 1; --cache-capacity, a live setting). The next
// Advance applies it: a new period length, and, when the read sketch's
// size changes with it (crossing a power of two), new sketches whose
// counts start from nothing, as the cache's own replies do when its table
// changes size. Any goroutine.
func (a *Admission) SetCapacity(capacity int) { a.capacity.Store(int64(max(capacity, 1))) }

// Reads is the read detector NewAdmission was given.
func (a *Admission) Reads() *Detector { return a.reads }

// ObserveRead counts one read of the key whose read hash is h
// (hotcache.Key.ReadHash), by the goroutine that owns event loop loop
// (0 <= loop < the read detector's Loops; it panics otherwise): in the
// read Detector ([Detector.Observe]) and in the long-horizon sketch.
// Lock-free and allocation-free: the long-horizon count adds one cache
// line to the detector's.
func (a *Admission) ObserveRead(loop int, h uint64) {
	a.reads.Observe(loop, h)
	a.long.Load().reads.add(loop, h)
}

// ObserveWrite counts one invalidation of the key whose hash (of db and
// name, hotcache.Hash) is h: a keyspace notification. One call at a time
// (upstream.Config.Invalidated: under the notification connection's read
// lock, on its reading goroutine or an event loop).
func (a *Admission) ObserveWrite(h uint64) {
	a.writes.Observe(0, h)
	a.long.Load().writes.add(0, h)
}

// Advance moves both detectors' windows to now ([Detector.Advance]),
// applies a capacity SetCapacity changed, and halves the long-horizon
// sketches once the reads counted since their last halving reach their
// sample. One goroutine (the janitor's), at least every 100 ms.
func (a *Admission) Advance(now time.Time) {
	a.reads.Advance(now)
	a.writes.Advance(now)
	l := a.long.Load()
	if c := int(a.capacity.Load()); c != l.capacity {
		if roundCounters(longCounters(c)) != len(l.reads.c) {
			l = a.newHorizon(c, now)
		} else {
			l = &horizon{reads: l.reads, writes: l.writes, capacity: c}
			l.reads.sample = uint64(LongSamplePerReply * c)
		}
		a.long.Store(l)
	}
	halve := l.reads.due()
	l.reads.age(now, halve)
	l.writes.age(now, halve)
}

// NoteFill records that a fill's two replies took rtt from send to the
// last reply. Any goroutine: the average is updated without a lock, and
// an update lost to a concurrent one does not matter to an average. An
// rtt below zero or over maxFillRTT (measured on a wall clock that
// stepped) is ignored.
func (a *Admission) NoteFill(rtt time.Duration) {
	if rtt < 0 || rtt > maxFillRTT {
		return
	}
	old := a.rtt.Load()
	if old == 0 {
		a.rtt.Store(int64(rtt))
		return
	}
	a.rtt.Store(old + (int64(rtt)-old)/16)
}

// maxFillRTT is the longest fill round trip NoteFill takes: a second.
// A longer one is a step of the clock it was measured on or a fill queued
// behind a slow command, and taken into the average it would make every
// written key look too costly to cache (Saved) for many fills after.
const maxFillRTT = time.Second

// FillRTT is the moving average of fill round trips (0 before the first).
func (a *Admission) FillRTT() time.Duration { return time.Duration(a.rtt.Load()) }

// Saved is what caching the reply of the key hashed keyHash
// (hotcache.Hash) whose reads are counted under readHash (Key.ReadHash) is
// expected to save Redis, in requests per second (the type's measure;
// negative when it costs more than it saves). Lock-free.
func (a *Admission) Saved(keyHash, readHash uint64) float64 {
	return a.saved(a.readRate(a.reads.Estimate(readHash), readHash), keyHash)
}

func (a *Admission) saved(r float64, keyHash uint64) float64 {
	w := rate(a.writes.Estimate(keyHash), a.long.Load().writes.rate(keyHash))
	if w == 0 {
		return r
	}
	t := time.Duration(a.rtt.Load()).Seconds()
	return r*math.Exp(-w*t) - w
}

// readRate is the read rate in ops/s of the key whose read hash is h and
// whose 1-s estimate is short.
func (a *Admission) readRate(short uint32, h uint64) float64 {
	return rate(short, a.long.Load().reads.rate(h))
}

// rate is a rate in ops/s from a 1-s estimate and a long-horizon one: the
// long one when both are below ShortMin, else the 1-s one.
func rate(short uint32, long float64) float64 {
	if short < ShortMin && long < ShortMin {
		return long
	}
	return float64(short)
}

// Worth reports whether a miss of the reply should fill it: its 1-s read
// estimate reaches the floor, its saving is positive and above the bar,
// and, while the cache is full, a key read less than ShortMin times a
// second was read at least twice over the long horizon (see the type's
// doc). Lock-free; on the request path (a miss with no fill of the key in
// flight).
func (a *Admission) Worth(keyHash, readHash uint64) bool {
	r := a.reads.Estimate(readHash)
	if r < a.reads.Threshold() {
		return false
	}
	if r < ShortMin && a.full.Load() && a.long.Load().reads.count(readHash) < 2 {
		return false
	}
	s := a.saved(a.readRate(r, readHash), keyHash)
	return s > a.Bar() // the bar is 0 or more
}

// Cold reports whether a cached reply should be dropped: only while the
// cache is full (the last Rebar said so) and --hot-threshold is above the
// default 1 (a user who raises it keeps only truly hot keys), when its 1-s
// read estimate is below half of it. Nothing else makes a reply cold: a
// reply saving little keeps its place until eviction for room finds it
// among the eight oldest with the least saving, or its key is written,
// expires or is evicted by Redis (see the type's doc for why). Lock-free
// (the cache's sweep).
func (a *Admission) Cold(keyHash, readHash uint64) bool {
	thr := a.reads.Threshold()
	return a.full.Load() && thr > 1 && 2*uint64(a.reads.Estimate(readHash)) < uint64(thr)
}

// MayCold reports whether Cold can call any reply cold now: the last
// Rebar said the cache was full and the read detector's threshold is above
// 1. When it cannot, the cache's sweep has only expiry to look for.
// Lock-free.
func (a *Admission) MayCold() bool {
	return a.full.Load() && a.reads.Threshold() > 1
}

// Bar is the saving (requests per second) a newcomer must exceed to be
// filled.
func (a *Admission) Bar() float64 { return math.Float64frombits(a.bar.Load()) }

// Rebar sets the bar from the cache: 0 when it is not full, else the
// median saving of at most barSample (512) of its replies, each given by its
// (keyHash, readHash), or 0 if that is negative. The janitor's, after the
// sweep.
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
