package detector

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// benchKeys returns n key hashes (n a power of two) so benchmarks touch
// different counters, as real traffic does.
func benchKeys(n int) []uint64 {
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = hashOf("bench:" + strconv.Itoa(i))
	}
	return keys
}

// BenchmarkObserve measures the hot path of one event loop.
func BenchmarkObserve(b *testing.B) {
	d := mustNew(b, Config{Threshold: 1000, Loops: 1})
	keys := benchKeys(1024)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d.Observe(0, keys[i&1023])
		i++
	}
}

// BenchmarkObserveParallel runs one goroutine per event loop (Loops =
// GOMAXPROCS), each counting into its own shard, to show that loops do not
// contend.
func BenchmarkObserveParallel(b *testing.B) {
	loops := runtime.GOMAXPROCS(0)
	d := mustNew(b, Config{Threshold: 1000, Loops: loops})
	keys := benchKeys(1024)
	var nextLoop atomic.Int32
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		loop := int(nextLoop.Add(1)-1) % loops
		i := loop * 97
		for pb.Next() {
			d.Observe(loop, keys[i&1023])
			i++
		}
	})
}

// BenchmarkEstimate measures a lookup, whose cost grows with the number of
// loops (2 history loads plus 2 per loop).
func BenchmarkEstimate(b *testing.B) {
	for _, loops := range []int{1, 4, 16} {
		b.Run("loops="+strconv.Itoa(loops), func(b *testing.B) {
			d := mustNew(b, Config{Threshold: 1000, Loops: loops})
			keys := benchKeys(1024)
			for i, k := range keys {
				d.Observe(i%loops, k)
			}
			b.ReportAllocs()
			i := 0
			var sink uint32
			for b.Loop() {
				sink += d.Estimate(keys[i&1023])
				i++
			}
			_ = sink
		})
	}
}

// BenchmarkAdvance measures one sub-window rotation (zeroing one ring slot of
// every loop) at the default width: with no traffic, and with 4,000
// distinct keys counted per loop in each sub-window (scenario 4 of make
// bench through two loops: about 80,000 requests/s), the counting itself
// not timed.
func BenchmarkAdvance(b *testing.B) {
	keys := make([]uint64, 1<<20)
	for i := range keys {
		keys[i] = hashOf("adv:" + strconv.Itoa(i))
	}
	for _, perSub := range []int{0, 4000} {
		for _, loops := range []int{1, 8} {
			b.Run("keys="+strconv.Itoa(perSub)+"/loops="+strconv.Itoa(loops), func(b *testing.B) {
				d := mustNew(b, Config{Threshold: 1000, Loops: loops})
				now := t0
				next := 0
				b.ReportAllocs()
				for b.Loop() {
					if perSub > 0 {
						b.StopTimer()
						for loop := range loops {
							for range perSub {
								d.Observe(loop, keys[next&(len(keys)-1)])
								next++
							}
						}
						b.StartTimer()
					}
					now = now.Add(Window / SubWindows)
					d.Advance(now)
				}
			})
		}
	}
}

// BenchmarkObserveManyKeys is the detector's work for a forwarded GET of
// one of a million keys (Observe, then the threshold test on the cache miss), keys in
// random order: the case where a sketch larger than a core's cache missed
// on every access (issue 7: 12% of forwarding's CPU).
func BenchmarkObserveManyKeys(b *testing.B) {
	d := mustNew(b, Config{Threshold: 1000, Loops: 1})
	keys := make([]uint64, 1<<20)
	for i := range keys {
		keys[i] = hashOf("many:" + strconv.Itoa(i))
	}
	b.ReportAllocs()
	i := 0
	hot := 0
	for b.Loop() {
		k := keys[(i*7919)&(1<<20-1)]
		d.Observe(0, k)
		if isHot(d, k) {
			hot++
		}
		i++
	}
	_ = hot
}

// BenchmarkAdmissionManyKeys is admission's work for a forwarded GET of
// one of a million keys with the default capacity (100,000 replies):
// ObserveRead (the 1-s detector and the long-horizon sketch), then Worth
// on the miss, keys in random order. Against BenchmarkObserveManyKeys, it
// is what the long horizon adds to a miss.
func BenchmarkAdmissionManyKeys(b *testing.B) {
	d := mustNew(b, Config{Threshold: 1, Loops: 1})
	a := NewAdmission(d, 100_000, t0)
	a.Advance(t0.Add(time.Second))
	keys := make([]uint64, 1<<20)
	for i := range keys {
		keys[i] = hashOf("many:" + strconv.Itoa(i))
	}
	b.ReportAllocs()
	i, worth := 0, 0
	for b.Loop() {
		k := keys[(i*7919)&(1<<20-1)]
		a.ObserveRead(0, k)
		if a.Worth(k, k) {
			worth++
		}
		i++
	}
	_ = worth
}

// BenchmarkRebar is the janitor's Rebar over a full cache of 100,000
// replies whose keys were read in the last second (80,000 reads of
// 1,000,000 keys, scenario 4's rate), the savings of barSample of them
// estimated and sorted: a pause of the janitor's core every sweep.
func BenchmarkRebar(b *testing.B) {
	d := mustNew(b, Config{Threshold: 1, Loops: 1})
	a := NewAdmission(d, 100_000, t0)
	keys := make([]uint64, 1<<20)
	for i := range keys {
		keys[i] = hashOf("rebar:" + strconv.Itoa(i))
	}
	for i := range 80_000 {
		a.ObserveRead(0, keys[(i*7919)&(len(keys)-1)])
	}
	a.Advance(t0.Add(Window / SubWindows))
	cached := keys[:100_000]
	replies := func(yield func(uint64, uint64) bool) {
		for _, h := range cached {
			if !yield(h, h) {
				return
			}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		a.Rebar(true, replies)
	}
}
