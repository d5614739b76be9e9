package detector

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// frequency counts accesses over a long horizon, for keys read or written
// too seldom for the 1-s [Detector] to tell from its noise: TinyLFU's
// frequency sketch (G. Einziger, R. Friedman and B. Manes, "TinyLFU: A
// Highly Efficient Cache Admission Policy", ACM Transactions on Storage
// 13(4), 2017, section 3). It is a Count-Min Sketch of depth 2 with the
// conservative update, like the Detector's, whose two counters for a key
// lie in one 64-byte block of 16 uint32 counters (one cache miss per
// access, as in Caffeine's FrequencySketch), and which ages by halving
// every counter once the accesses counted since the last halving reach
// sample (TinyLFU's reset; the paper's W). A count therefore stands for
// the accesses of the last one or two periods, weighted 1 and 1/2: at a
// steady rate λ it is λ·(T + s) at time s after a halving that ended a
// period of length T, so [frequency.rate] divides by T + s.
//
// Concurrency: add for loop i is called only by loop i's owner (a
// counter's conservative update may lose a race with another loop's: an
// undercount of one, which an estimate can bear); count and rate from any
// goroutine; age by one goroutine (the janitor's). Counters are atomics,
// the halving is a load and a store per counter, so an add racing it can
// be lost.
type frequency struct {
	c    []atomic.Uint32 // blocks of 16 counters
	mask uint64          // block index mask: blocks − 1
	adds []paddedCount   // per loop: accesses since start, owner's
	// span is the time, in ns, that counts stand for: the last period
	// plus the time since the last halving (age's).
	span atomic.Int64
	// The janitor's (age's): the accesses counted at the last halving,
	// its time, the period before it, how many accesses end a period.
	halvedAt uint64
	last     time.Time
	period   time.Duration
	sample   uint64
}

// paddedCount is one loop's access count, alone in its cache line.
type paddedCount struct {
	n atomic.Uint64
	_ [56]byte
}

const blockCounters = 16

// newFrequency returns a sketch of at least counters counters (rounded up
// to a power of two of at least 16: 4 bytes each), for loops writers,
// halved every sample accesses; its first period starts at now.
func newFrequency(counters, loops int, sample uint64, now time.Time) *frequency {
	n := roundCounters(counters)
	return &frequency{
		c: make([]atomic.Uint32, n), mask: uint64(n/blockCounters - 1),
		adds: make([]paddedCount, loops), sample: sample, last: now,
	}
}

// roundCounters is the size of a sketch asked for counters counters: a
// power of two, at least one block.
func roundCounters(counters int) int {
	return max(1<<bits.Len(uint(counters-1)), blockCounters)
}

// cells returns the key's two counters: a block from the hash's low bits,
// two different counters in it from bits 32 to 39.
func (f *frequency) cells(h uint64) (*atomic.Uint32, *atomic.Uint32) {
	base := int(h&f.mask) * blockCounters
	i := int(h>>32) & (blockCounters - 1)
	j := (i + 1 + int(h>>36)%(blockCounters-1)) & (blockCounters - 1)
	return &f.c[base+i], &f.c[base+j]
}

// add counts one access of the key hashed h by loop's owner.
func (f *frequency) add(loop int, h uint64) {
	a, b := f.cells(h)
	va, vb := a.Load(), b.Load()
	if va <= vb {
		a.Add(1)
	}
	if vb <= va {
		b.Add(1)
	}
	n := &f.adds[loop].n
	n.Store(n.Load() + 1)
}

// count is the key's count: the smaller of its two counters.
func (f *frequency) count(h uint64) uint32 {
	a, b := f.cells(h)
	return min(a.Load(), b.Load())
}

// rate is the key's accesses per second over the horizon: its count over
// the time the counts stand for, taken as at least one Window (1 s), so
// that counts made before the first age, or in the first second, are
// rates too.
func (f *frequency) rate(h uint64) float64 {
	return float64(f.count(h)) * 1e9 / float64(max(f.span.Load(), int64(Window)))
}

// counted is the accesses counted since start, all loops together.
func (f *frequency) counted() uint64 {
	var n uint64
	for i := range f.adds {
		n += f.adds[i].n.Load()
	}
	return n
}

// due reports whether sample accesses were counted since the last halving.
func (f *frequency) due() bool { return f.counted()-f.halvedAt >= f.sample }

// age halves every counter when halve is true, starting a new period at
// now, and updates the span that rates divide by. The janitor's.
func (f *frequency) age(now time.Time, halve bool) {
	if halve {
		for i := range f.c {
			if v := f.c[i].Load(); v > 0 {
				f.c[i].Store(v / 2)
			}
		}
		f.halvedAt = f.counted()
		f.period, f.last = now.Sub(f.last), now
	}
	f.span.Store(int64(f.period + now.Sub(f.last)))
}
