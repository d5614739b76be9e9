// Package detector finds hot keys: keys whose access rate over the last
// second reaches a threshold in operations per second.
//
// # Flow
//
//	event loop i (owner of shard i)      ticker goroutine         any goroutine
//	-------------------------------      ----------------         -------------
//	parse GET k
//	h := maphash.String(seed, k)
//	d.Observe(i, h)  --+                 every <= 100 ms:
//	                   |  atomic Add     d.Advance(now)
//	                   v                   zero the slot(s) that
//	      shard i: ring of 11 sketches     become current, for all
//	      [cur][-1]...[-9][oldest]         loops; publish new index
//	                   ^
//	                   +------------------------------------ d.Estimate(h)
//	                                                         d.Threshold()
//
// # Algorithm
//
// Counts are kept in Count-Min Sketches (G. Cormode and S. Muthukrishnan,
// "An improved data stream summary: the count-min sketch and its
// applications", Journal of Algorithms 55(1), 2005). A sketch here has depth
// 2 (two rows) and width W (a power of two, default 32768) of uint32
// counters. A key has one counter in each row; the row-0 column is taken
// from the low bits of the caller's 64-bit hash and the row-1 column from
// bits 32 and up, so the two rows act as two independent hash functions
// without hashing again. A key's count is the smaller of its two counters.
// An access increments only the smaller of the key's two counters of its
// loop's current sketch (both when equal): the conservative update of
// C. Estan and G. Varghese ("New directions in traffic measurement and
// accounting", SIGCOMM 2002), which keeps every estimate an upper bound
// (each sketch's min is, and sums of upper bounds bound sums) and halves
// the overestimate of keys read once (detector.Admission needs to tell
// one read from two).
//
// Memory is bounded whatever the number of distinct keys: one sketch per
// (event loop, sub-window), allocated once by [New], and a "history" sketch.
// An access writes only its loop's current sub-window sketch (2 × W × 4
// bytes, 256 KiB at the default width); the history sketch holds, per
// counter, the sum over loops of the window's other sub-windows (rewritten
// by [Detector.Advance] from per-sub-window sums it takes when a sub-window
// ends), so Observe and Estimate together touch two 256-KiB arrays that
// stay in a core's L2 cache, whatever the key. (Until issue 7 the 11 sub-window
// counters of a column shared one cache line: 1 MiB per loop that random
// keys missed in cache on every access, 13% of the CPU of forwarding
// pipelined GETs of 100,000 keys.) Memory is (Loops × 88 + 120) × W bytes:
// 2.75 MiB per loop and 3.75 MiB for the history (two copies, see
// Concurrency) and the sums at the default width.
//
// Error bound, in words: a sketch never underestimates what it holds. Other
// keys that land in the same counters can only add to a key's count. Let N
// be the number of accesses, all keys and all loops together, that the
// estimate counts (about one second of traffic). With probability at least
// 1 - e^-2 (about 86%) the overestimate of a given key is at most e/W × N,
// where e ≈ 2.718 (the plain Count-Min bound, which the conservative
// update only improves). At the default width that is N/12055: with 1
// million accesses per second in the proxy, a cold key looks at most about
// 83 ops/s hotter than it is, in at least 86% of cases. Larger widths shrink the
// error in proportion. The bound holds for the whole window because every
// loop and sub-window uses the same two columns for a key: Estimate is the
// smaller of the two rows' sums over all of them, one Count-Min Sketch of
// the window's traffic (TestBoundedError: 100,000 distinct keys give unseen
// keys estimates of about 10, bound 33).
//
// # Sliding window
//
// Time is cut into [SubWindows] sub-windows of [Window]/[SubWindows] (100 ms),
// counted from the time given to [New]. Each loop keeps a ring of 11
// sketches: the current sub-window, the 9 previous full ones, and the oldest
// one, of which only the part still inside the 1-s window is counted:
//
//	Estimate = min over rows of
//	           history + Σ loops cur
//	history  = Σ loops [ prev1..prev9 + oldest × (1 - elapsed/100ms) ]   (Advance)
//
// where elapsed is the time between the start of the current sub-window and
// the time given to the last [Detector.Advance]. The window is one second
// only approximately: the current sub-window keeps counting until the
// Advance after its end, and the oldest is weighted as if its traffic were
// spread evenly over it (a burst at its end is partly left out, one at its
// start partly kept). For a steady rate, with Advance every 100 ms coming
// lag after each sub-window boundary, an estimate covers 1.0 - lag to
// 1.1 - lag seconds of traffic: in the proxy, whose ticker starts just
// after New, lag is a few ms, so a key becomes hot at about 91% to 100% of
// the threshold. Estimate never reads the wall clock, so
// tests drive time with an injected clock.
//
// # Concurrency
//
// Nothing on the hot path is contended:
//
//   - [Detector.Observe] for loop i is called only by the goroutine that owns
//     loop i. It loads the published sub-window index (read-mostly: written
//     only by Advance, 10 times a second) and does two atomic Adds on counters
//     that no other goroutine writes at that time. Each loop's counters are a
//     separate allocation padded by a cache line at both ends, so loops never
//     share a cache line.
//   - [Detector.Advance] is called by one ticker goroutine. When a
//     sub-window boundary has passed, it zeroes (atomic stores) the slot(s)
//     that become current for every loop, idle loops included, and only then
//     publishes the new index; then it sums the slot that ended over the
//     loops (owners have moved on) and writes the history sketch into the
//     copy readers are not using, then publishes that copy with the slot
//     it was written for. Owners never clear counters themselves. Until the
//     new history is published (about 0.3 ms plus 0.13 ms per loop at the
//     default width with traffic, BenchmarkAdvance; longer if the ticker
//     goroutine is descheduled), an estimate adds the loops' counters of
//     the sub-window that just ended to the old history itself, so it
//     never leaves that sub-window out.
//     (Until the flash-crowd test failed in CI, it did: a key that had
//     reached 900 of a threshold of 1,000 lost those reads for the length
//     of the rewrite, and Redis got 1,368 GETs of it before it was hot.)
//   - [Detector.Estimate],
//     [Detector.Threshold] and [Detector.SetThreshold] are lock-free (atomic
//     loads and stores only) and safe from any goroutine.
//
// The estimate is not a snapshot: counters are read one by one while owners
// keep counting, so a concurrent estimate may include some increments made
// during the call and not others. Each counter is read atomically.
package detector

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Window is the span of traffic that [Detector.Estimate] covers: 1 s, so an
// estimate is a rate in operations per second.
const Window = time.Second

// SubWindows is the number of sub-windows in [Window]; each lasts
// Window/SubWindows (100 ms). [Detector.Advance] must be called at least this
// often per Window for the oldest sub-window to be weighted accurately.
const SubWindows = 10

// DefaultWidth is the row width used when [Config].Width is 0: 32,768
// counters, so that at 80,000 reads a second a key read once looks read
// twice in under a quarter of cases (8,192 until issue 18, when a key's
// admission began to depend on telling one read from two: 94% of them
// did; measured on Zipf-distributed keys, s = 1, 1,000,000 keys).
const DefaultWidth = 32768

// MaxWidth is the largest accepted [Config].Width: 2^18 counters per row,
// 32 MiB per loop. It bounds memory and keeps the two row indexes in
// disjoint hash bits.
const MaxWidth = 1 << 18

const (
	subWindow = Window / SubWindows // 100 ms
	ringSlots = SubWindows + 1      // current + 9 full + oldest partial
	depth     = 2                   // rows per sketch

	// The published position packs the ring slot (0..10) in the low
	// slotBits bits and the nanoseconds elapsed in the current sub-window
	// (< 1e8 < 2^27) above them, so readers get both from one atomic load.
	slotBits = 4
	slotMask = 1<<slotBits - 1

	// padCounters is one 64-byte cache line of uint32 counters, put before
	// and after each loop's counters so two loops never share a line.
	padCounters = 64 / 4
)

// Errors returned by [New], wrapped with the offending value.
var (
	// ErrThreshold means Config.Threshold is 0.
	ErrThreshold = errors.New("detector: threshold must be at least 1 op/s")
	// ErrLoops means Config.Loops is less than 1.
	ErrLoops = errors.New("detector: loops must be at least 1")
	// ErrWidth means Config.Width is negative, not a power of two, or above
	// MaxWidth.
	ErrWidth = errors.New("detector: width must be a power of two up to MaxWidth")
)

// Config configures a [Detector]. The zero value is not valid: Threshold and
// Loops must be set.
type Config struct {
	// Threshold is the access rate, in operations per second per key over
	// the 1-s Window, at which a key is hot. Must be >= 1.
	Threshold uint32
	// Loops is the number of event loops that call Observe, each with its
	// own index in [0, Loops). Must be >= 1.
	Loops int
	// Width is the number of counters per sketch row; a power of two in
	// [1, MaxWidth]. 0 means DefaultWidth (32768). Memory is
	// (Loops × 88 + 120) × Width bytes.
	Width int
}

// Detector estimates per-key access rates over a sliding 1-s window. Create
// it with [New]; the zero value is not usable. Methods are safe for
// concurrent use as documented on each one.
type Detector struct {
	// Immutable after New.
	epoch  time.Time // start of sub-window 0
	width  int       // counters per row, power of two
	sketch int       // counters per sketch: depth × width
	mask   uint64    // width - 1
	shards []shard   // one per loop; the slice and headers are read-only
	// history holds two copies of a sketch (row r, column col at
	// r*width+col) of the window's traffic outside one sub-window, summed
	// over loops and saturated at math.MaxUint32: the published one (see
	// hist) and the one Advance writes next. Written (Store) only by
	// Advance, and only in the copy not published; loaded by anyone.
	history [2][]atomic.Uint32

	// Atomics, written by Advance (pos, hist) or SetThreshold (threshold),
	// read by everyone.
	pos atomic.Uint64 // slot | elapsedInSubWindowNs<<slotBits
	// hist names the published history copy: copy | slot<<1 | seq<<8,
	// where slot is the ring slot that was current when it was written
	// (its traffic is not in it) and seq counts publications, so a reader
	// can tell that the copy it read was rewritten meanwhile.
	hist      atomic.Uint64
	threshold atomic.Uint32

	// mu serializes Advance and guards the following.
	mu      sync.Mutex
	sub     int64 // number of the current sub-window since epoch
	elapsed int64 // ns from epoch to the latest Advance time
	// snaps[s] is ring slot s's counters summed over loops (saturated at
	// math.MaxUint32), taken when its sub-window ended; zero for the
	// current slot and for slots cleared since.
	snaps [ringSlots][]uint32
	// full is, per counter, the sum of snaps over the 9 slots between the
	// current and the oldest: kept up to date at each boundary (one slot
	// in, one out) instead of summing 9 slots at every Advance.
	full []uint64
}

// shard holds one loop's ring of sketches, one after the other: the counter
// of ring slot s, row r, column col is c[s*sketch + r*width + col]. The
// published slot is written (Add) only by the loop's owner; other slots are
// written (Store 0) only by Advance; anyone may Load.
type shard struct {
	c []atomic.Uint32
}

// New returns a Detector whose sub-window 0 starts at now. It allocates all
// sketches up front (see [Config].Width for the size). It returns an error
// wrapping ErrThreshold, ErrLoops or ErrWidth for an invalid cfg.
func New(cfg Config, now time.Time) (*Detector, error) {
	if cfg.Threshold == 0 {
		return nil, fmt.Errorf("%w: got %d", ErrThreshold, cfg.Threshold)
	}
	if cfg.Loops < 1 {
		return nil, fmt.Errorf("%w: got %d", ErrLoops, cfg.Loops)
	}
	w := cfg.Width
	if w == 0 {
		w = DefaultWidth
	}
	if w < 1 || w > MaxWidth || bits.OnesCount(uint(w)) != 1 {
		return nil, fmt.Errorf("%w: got %d", ErrWidth, cfg.Width)
	}
	d := &Detector{
		epoch:  now,
		width:  w,
		sketch: depth * w,
		mask:   uint64(w - 1),
		shards: make([]shard, cfg.Loops),
	}
	for i := range d.snaps {
		d.snaps[i] = make([]uint32, depth*w)
	}
	d.full = make([]uint64, depth*w)
	for i := range d.history {
		hist := make([]atomic.Uint32, padCounters+d.sketch+padCounters)
		d.history[i] = hist[padCounters : padCounters+d.sketch : padCounters+d.sketch]
	}
	n := ringSlots * d.sketch
	for i := range d.shards {
		buf := make([]atomic.Uint32, padCounters+n+padCounters)
		d.shards[i].c = buf[padCounters : padCounters+n : padCounters+n]
	}
	d.threshold.Store(cfg.Threshold)
	return d, nil
}

// Loops returns the number of event loops, as given in [Config].Loops.
func (d *Detector) Loops() int { return len(d.shards) }

// Threshold returns the current hot threshold in operations per second.
// Safe for concurrent use.
func (d *Detector) Threshold() uint32 { return d.threshold.Load() }

// SetThreshold sets the hot threshold in operations per second. It is safe to
// call at run time from any goroutine; callers see the new value at their
// next Threshold. t == 0 is ignored (the threshold stays >= 1).
func (d *Detector) SetThreshold(t uint32) {
	if t == 0 {
		return
	}
	d.threshold.Store(t)
}

// Observe counts one access to the key whose 64-bit hash is h (use
// hash/maphash with one seed for the whole process; Observe does not hash
// again). It must be called only by the goroutine that owns event loop
// loop, with 0 <= loop < Loops (it panics otherwise): the conservative
// update reads the two counters before it adds, which another writer
// could race. It does not allocate, lock or block: three atomic loads and
// one or two uncontended atomic adds in the loop's current sketch.
func (d *Detector) Observe(loop int, h uint64) {
	c := d.shards[loop].c
	base := int(d.pos.Load()&slotMask) * d.sketch
	a, b := &c[base+int(h&d.mask)], &c[base+d.width+int((h>>32)&d.mask)]
	// Conservative update: only the smaller counter grows (both when
	// equal). Only this goroutine adds to the current sketch, so the
	// loads cannot go stale before the adds.
	va, vb := a.Load(), b.Load()
	if va <= vb {
		a.Add(1)
	}
	if vb <= va {
		b.Add(1)
	}
}

// Estimate returns the number of accesses to the key with hash h over the
// last Window (1 s, approximately: see the package doc's sliding window) as
// of the latest Advance, summed over all loops: about the key's rate in
// ops/s. Other keys' accesses can only add to it; see the package doc for
// the overestimate bound. It saturates at math.MaxUint32.
// Safe for concurrent use from any goroutine; atomic loads only (read
// again if an Advance moved the window or published a history meanwhile,
// which would otherwise count a sub-window twice or read a history copy
// being rewritten), no allocation, no clock read.
func (d *Detector) Estimate(h uint64) uint32 {
	i0 := int(h & d.mask)
	i1 := d.width + int((h>>32)&d.mask)
	for {
		p, hs := d.pos.Load(), d.hist.Load()
		cur := int(p & slotMask)
		hist := d.history[hs&1]
		r0, r1 := uint64(hist[i0].Load()), uint64(hist[i1].Load())
		r0, r1 = d.addSlot(cur, i0, i1, r0, r1)
		// The history was written while another slot was current: until
		// Advance publishes one without it, that slot's traffic is in
		// neither, so it is added here.
		if old := int(hs>>1) & slotMask; old != cur {
			r0, r1 = d.addSlot(old, i0, i1, r0, r1)
		}
		if d.pos.Load() == p && d.hist.Load() == hs {
			return uint32(min(r0, r1, math.MaxUint32))
		}
	}
}

// addSlot adds ring slot s's counters i0 and i1 of every loop to r0 and r1.
func (d *Detector) addSlot(s, i0, i1 int, r0, r1 uint64) (uint64, uint64) {
	base := s * d.sketch
	for i := range d.shards {
		c := d.shards[i].c
		r0 += uint64(c[base+i0].Load())
		r1 += uint64(c[base+i1].Load())
	}
	return r0, r1
}

// Advance moves the window to now, a reading of the injected clock (use
// time.Now in production, with its monotonic reading). Call it from one
// ticker goroutine at least every 100 ms; estimates of the past sub-windows
// are frozen between calls. When sub-window boundaries have passed since the
// last call (at most 11 matter, so a long pause clears everything), it
// zeroes the ring slot(s) that become current in every loop, idle loops
// included, publishes the new slot, then sums the slot that ended over the
// loops. Every call then rewrites the history sketch from those sums, the
// oldest weighted by the time into the current sub-window, into the
// history copy readers are not using, and publishes it. A now earlier
// than the latest Advance (or than New's now) is ignored. Concurrent calls
// are serialized by a mutex; never called on the hot path.
//
// Cost (BenchmarkAdvance, default width 32,768, 2026-12-06): 0.16-0.25 ms
// for one loop and 0.74-0.96 ms for 8 with no traffic, 0.40-0.43 and
// 1.25-1.35 ms with 4,000 keys counted per loop in each sub-window (0.51-0.63
// and 1.36-1.46 ms in the same run before rotate fused the passes after a
// boundary into one): the history rewritten from the nine full
// sub-windows' sums (kept up to date at each boundary, one slot in and one
// out) and the oldest, plus per loop at a boundary one sketch zeroed and
// one summed. Zeroing and the history store only counters that change: an
// atomic store is a locked instruction on amd64, and storing every counter
// made an idle proxy's Advance cost 0.8 ms for one loop and 3.4 ms for 8
// (1.4 ms for one loop when the history was summed from all 11 slots at
// every call). Between the slot's
// publication and the history's, an estimate adds the sub-window that just
// ended to the old history (and so still counts what is leaving the
// window: the oldest sub-window's part, and, when the ticker was late and
// k boundaries passed at once, k-1 whole sub-windows more; never too
// little).
//
// An Observe that loaded the slot index before it moved and adds after the
// slot was summed is not counted (a race of nanoseconds), nor is one that
// loaded it more than 10 sub-windows before its Add (a loop descheduled for
// over 1 s mid-call), whose count lands in a later sub-window.
func (d *Detector) Advance(now time.Time) {
	e := int64(now.Sub(d.epoch))
	d.mu.Lock()
	defer d.mu.Unlock()
	if e < d.elapsed {
		return
	}
	d.elapsed = e
	sub := e / int64(subWindow)
	into := uint64(e - sub*int64(subWindow))
	cur := int(sub % ringSlots)
	passed, ended := sub-d.sub, int(d.sub%ringSlots)
	for k := int64(1); k <= min(passed, ringSlots); k++ {
		s := (ended + int(k)) % ringSlots
		d.clearSlot(s)
		clear(d.snaps[s])
	}
	d.sub = sub
	d.pos.Store(into<<slotBits | uint64(cur))
	// After the move: owners count elsewhere now.
	switch {
	case passed == 1:
		d.rotate(cur, ended, into)
		return
	case passed > 1 && passed < ringSlots:
		d.sumSlot(ended)
	}
	if passed > 0 {
		d.sumFull(cur)
	}
	d.publishHistory(cur, into)
}

// rotateBlock is how many counters rotate sums over loops at a time: 8 KiB
// of sums, which stay in a core's L1 cache until the pass over the other
// arrays uses them.
const rotateBlock = 2048

// rotate does, after one boundary, what sumSlot(ended), moving d.full by
// one slot in and one out, and publishHistory did in three passes over
// the arrays, in one: each counter's sum over loops, its running total of
// the full sub-windows and its history are written while its cache lines
// are at hand. The common
// case of Advance (the janitor ticks once per sub-window), and the one
// whose memory traffic stalled an event loop on the other core (issue 18:
// 0.5-0.8 ms of several MiB streamed at every tick). Called by Advance
// with d.mu held, after the move.
func (d *Detector) rotate(cur, ended int, into uint64) {
	keep := uint64(subWindow) - min(into, uint64(subWindow))
	in, oldest := d.snaps[ended], d.snaps[(cur+1)%ringSlots]
	hs := d.hist.Load()
	next := (hs & 1) ^ 1
	hist := d.history[next]
	base := ended * d.sketch
	for j0 := 0; j0 < d.sketch; j0 += rotateBlock {
		j1 := min(j0+rotateBlock, d.sketch)
		sum := in[j0:j1]
		for i := range d.shards {
			sk := d.shards[i].c[base+j0 : base+j1]
			sk = sk[:len(sum)]
			if i == 0 {
				for j := range sum {
					sum[j] = sk[j].Load()
				}
				continue
			}
			for j := range sum {
				sum[j] = uint32(min(uint64(sum[j])+uint64(sk[j].Load()), math.MaxUint32))
			}
		}
		old, full, h := oldest[j0:j1], d.full[j0:j1], hist[j0:j1]
		old, full, h = old[:len(sum)], full[:len(sum)], h[:len(sum)]
		for j, v := range sum {
			o := uint64(old[j])
			f := full[j] + uint64(v) - o
			full[j] = f
			// The part of the oldest still inside the window, as in
			// publishHistory.
			if w := uint32(min(f+o*keep/uint64(subWindow), math.MaxUint32)); h[j].Load() != w {
				h[j].Store(w)
			}
		}
	}
	d.hist.Store((hs>>8+1)<<8 | uint64(cur)<<1 | next)
}

// sumFull takes d.full again as the sums of the slots between the new
// current slot cur and the oldest (cur+1): after more than one boundary
// at once (after one, rotate moves it by one slot in and one out). Called
// by Advance with d.mu held.
func (d *Detector) sumFull(cur int) {
	clear(d.full)
	for s := range ringSlots {
		if s == cur || s == (cur+1)%ringSlots {
			continue
		}
		for j, v := range d.snaps[s] {
			d.full[j] += uint64(v)
		}
	}
}

// sumSlot takes ring slot s's sums over loops into d.snaps[s]. Called by
// Advance with d.mu held.
func (d *Detector) sumSlot(s int) {
	dst := d.snaps[s]
	clear(dst)
	for i := range d.shards {
		sk := d.shards[i].c[s*d.sketch : (s+1)*d.sketch : (s+1)*d.sketch]
		for j := range dst {
			dst[j] = uint32(min(uint64(dst[j])+uint64(sk[j].Load()), math.MaxUint32))
		}
	}
}

// publishHistory stores in the history copy not published, for current
// slot cur and into ns into it, the sums of the 9 slots before cur in full
// and of the oldest (cur+1) weighted by (1 - into/subWindow), then
// publishes it. Called by Advance with d.mu held.
func (d *Detector) publishHistory(cur int, into uint64) {
	into = min(into, uint64(subWindow))
	keep := uint64(subWindow) - into
	oldest := d.snaps[(cur+1)%ringSlots]
	hs := d.hist.Load()
	next := (hs & 1) ^ 1
	hist := d.history[next]
	for j := range hist {
		// The part of the oldest still inside the window. o × keep <
		// 2^32 × 2^27, no overflow.
		o := uint64(oldest[j])
		f := d.full[j] + o*keep/uint64(subWindow)
		if v := uint32(min(f, math.MaxUint32)); hist[j].Load() != v {
			hist[j].Store(v)
		}
	}
	d.hist.Store((hs>>8+1)<<8 | uint64(cur)<<1 | next)
}

// clearSlot zeroes ring slot s of every loop. Called by Advance with d.mu
// held, before s is published as current.
func (d *Detector) clearSlot(s int) {
	for i := range d.shards {
		sk := d.shards[i].c[s*d.sketch : (s+1)*d.sketch]
		for j := range sk {
			if sk[j].Load() != 0 {
				sk[j].Store(0)
			}
		}
	}
}
