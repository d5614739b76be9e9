package detector

import (
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// TestAdmissionSaved: a key never written saves its reads; writes cost a
// refill each and make a fill survive its round trip with probability
// e^(−w·t); the floor and the bar gate Worth, half a threshold above 1
// Cold (only when the cache is full).
func TestAdmissionSaved(t *testing.T) {
	d := mustNew(t, Config{Threshold: 10, Loops: 1})
	a := NewAdmission(d, 100, t0)
	read, written := hashOf("read"), hashOf("written")
	for range 100 {
		d.Observe(0, read)
		d.Observe(0, written)
	}
	for range 10 {
		a.ObserveWrite(written)
	}
	if s := a.Saved(read, read); s != 100 {
		t.Errorf("never written, read 100/s: saved %v, want 100", s)
	}
	if s := a.Saved(written, written); s != 90 {
		t.Errorf("read 100/s, written 10/s, no fill measured yet: saved %v, want 100 - 10", s)
	}
	a.NoteFill(100 * time.Millisecond)
	want := 100*math.Exp(-10*0.1) - 10
	if s := a.Saved(written, written); math.Abs(s-want) > 1e-9 {
		t.Errorf("with fills of 100 ms: saved %v, want 100·e^(−1) − 10 = %v", s, want)
	}
	a.NoteFill(200 * time.Millisecond) // the average moves a sixteenth of the way
	if got := a.FillRTT(); got != 100*time.Millisecond+100*time.Millisecond/16 {
		t.Errorf("FillRTT %v, want 106.25ms", got)
	}
	a.NoteFill(-time.Millisecond) // the wall clock stepped back
	a.NoteFill(time.Hour)         // or forward
	if got := a.FillRTT(); got != 100*time.Millisecond+100*time.Millisecond/16 {
		t.Errorf("after round trips of -1 ms and 1 h: FillRTT %v, want 106.25ms unchanged", got)
	}
	for range 200 {
		a.ObserveWrite(written) // 210 writes/s: saves nothing
	}
	if a.Cold(written, written) {
		t.Error("cache not full: a key saving nothing is cold, want kept until written or evicted for room")
	}
	a.Rebar(true, func(func(uint64, uint64) bool) {}) // full, bar 0
	if a.Worth(written, written) || a.Cold(written, written) {
		t.Errorf("written faster than read: Worth %v Cold %v, want false (no fill) false (its next write evicts it)", a.Worth(written, written), a.Cold(written, written))
	}
	if !a.Worth(read, read) || a.Cold(read, read) {
		t.Errorf("read 100/s: Worth %v Cold %v, want true false", a.Worth(read, read), a.Cold(read, read))
	}
	d.SetThreshold(101)
	if a.Worth(read, read) || a.Cold(read, read) {
		t.Errorf("floor 101: Worth %v Cold %v, want false (below the floor) false (above half of it)", a.Worth(read, read), a.Cold(read, read))
	}
	d.SetThreshold(201)
	if !a.Cold(read, read) {
		t.Error("floor 201, read 100/s: not cold")
	}
	d.SetThreshold(1)
	// The reads were counted in the 1-s detector only, the writes in both:
	// 2 s later the 1-s windows are empty, and the long horizon's 105
	// writes a second are the rate of a key that has stopped: the last
	// second's 0 counts.
	if a.Advance(t0.Add(2 * time.Second)); a.Saved(read, read) != 0 || a.Saved(written, written) != 0 {
		t.Errorf("after the 1-s window: saved %v and %v, want 0 and 0", a.Saved(read, read), a.Saved(written, written))
	}
}

// TestAdmissionRebar: the bar is 0 below full and the median of the
// cached replies' savings above; Worth needs more.
func TestAdmissionRebar(t *testing.T) {
	d := mustNew(t, Config{Threshold: 1, Loops: 1})
	a := NewAdmission(d, 100, t0)
	var cached []uint64
	for i := range 32 {
		h := hashOf("cached" + string(rune('a'+i)))
		for range 10 + i { // savings 10..41
			d.Observe(0, h)
		}
		cached = append(cached, h)
	}
	replies := func(yield func(uint64, uint64) bool) {
		for _, h := range cached {
			if !yield(h, h) {
				return
			}
		}
	}
	a.Rebar(false, replies)
	if a.Bar() != 0 {
		t.Errorf("not full: bar %v, want 0", a.Bar())
	}
	a.Rebar(true, replies)
	if a.Bar() != 26 { // the sorted savings' element 32/2 = 16
		t.Errorf("full: bar %v, want 26", a.Bar())
	}
	weak, fair := hashOf("weak"), hashOf("fair")
	for range 26 {
		d.Observe(0, weak)
	}
	for range 27 {
		d.Observe(0, fair)
	}
	if a.Worth(weak, weak) || !a.Worth(fair, fair) {
		t.Errorf("bar 26: Worth(26/s) %v, Worth(27/s) %v; want false, true", a.Worth(weak, weak), a.Worth(fair, fair))
	}
	if a.MayCold() || a.Cold(weak, weak) {
		t.Error("bar 26, threshold 1: a reply may be cold")
	}
}

// TestAdmissionCold: at the default threshold no reply is cold, whatever
// the bar, and the sweep need not look (MayCold); at a threshold the user
// raised, a reply read under half of it in the last second is cold, but
// only while the cache is full.
func TestAdmissionCold(t *testing.T) {
	d := mustNew(t, Config{Threshold: 1, Loops: 1})
	a := NewAdmission(d, 100, t0)
	idle, once := hashOf("idle"), hashOf("once")
	a.ObserveRead(0, once)
	a.Rebar(true, func(yield func(uint64, uint64) bool) { yield(once, once) })
	if a.MayCold() || a.Cold(idle, idle) || a.Cold(once, once) {
		t.Errorf("threshold 1, full, bar %v: MayCold %v, Cold(unread) %v, Cold(read once) %v; want false",
			a.Bar(), a.MayCold(), a.Cold(idle, idle), a.Cold(once, once))
	}
	d.SetThreshold(2)
	if !a.MayCold() || !a.Cold(idle, idle) || a.Cold(once, once) {
		t.Errorf("threshold 2: MayCold %v, Cold(unread) %v, Cold(read once) %v; want true, true, false",
			a.MayCold(), a.Cold(idle, idle), a.Cold(once, once))
	}
	a.Rebar(false, func(func(uint64, uint64) bool) {})
	if a.MayCold() || a.Cold(idle, idle) {
		t.Error("not full: a reply may be cold")
	}
}

// TestAdmissionLongHorizon: below ShortMin a rate is a key's long-horizon
// count over the time it stands for; the counts halve once the reads
// since the last halving reach LongSamplePerReply per reply, and then
// stand for the period that ended plus the time since. Where either rate
// reaches ShortMin the 1-s one counts. A newcomer read
// more often than the median cached reply, over the long horizon, is
// worth a fill in a full cache; one read as often is not.
func TestAdmissionLongHorizon(t *testing.T) {
	d := mustNew(t, Config{Threshold: 1, Loops: 1})
	a := NewAdmission(d, 1000, t0) // 8,192 read counters, halved every 10,000 reads
	often, seldom, filler := hashOf("often"), hashOf("seldom"), hashOf("filler")
	for range 40 {
		a.ObserveRead(0, often)
	}
	for range 4 {
		a.ObserveRead(0, seldom)
	}
	a.ObserveWrite(seldom)
	a.Advance(t0.Add(10 * time.Second))
	if s, w := a.Saved(often, often), a.Saved(seldom, seldom); s != 4 || !near(w, 0.3) {
		t.Errorf("40 and 4 reads (one write) in 10 s: saved %v and %v, want 4 and 0.4 − 0.1", s, w)
	}
	a.Rebar(true, func(yield func(uint64, uint64) bool) {
		_ = yield(seldom, seldom) && yield(often, often) && yield(seldom, seldom)
	})
	if !near(a.Bar(), 0.3) || a.Worth(seldom, seldom) {
		t.Errorf("bar %v, Worth(seldom) %v; want 0.3 (the median), false (as much as the bar)", a.Bar(), a.Worth(seldom, seldom))
	}
	newcomer := hashOf("newcomer")
	for range 5 {
		a.ObserveRead(0, newcomer)
	}
	if !a.Worth(newcomer, newcomer) {
		t.Errorf("read 5 times in 10 s, bar %v: not worth a fill", a.Bar())
	}
	for range 10_000 - 49 {
		a.ObserveRead(0, filler)
	}
	a.Advance(t0.Add(20 * time.Second)) // halved: 20, 2 (its write 0), 4,975 over the 20-s period
	if s, w := a.Saved(often, often), a.Saved(seldom, seldom); s != 1 || !near(w, 0.1) {
		t.Errorf("halved after 20 s: saved %v and %v, want 1 and 0.1", s, w)
	}
	a.Advance(t0.Add(25 * time.Second))
	if s := a.Saved(often, often); s != 0.8 {
		t.Errorf("5 s later: saved %v, want 20 reads over 25 s = 0.8", s)
	}
	// The filler's 1-s estimate is 0 (its reads were 5 s ago) and its long
	// rate 4,975 over 25 s: it has stopped, and the last second counts.
	// Read 300 times now, it is read 300/s.
	if s := a.Saved(filler, filler); s != 0 {
		t.Errorf("filler, read 199 times a second over 25 s, not in the last: saved %v, want 0", s)
	}
	for range 300 {
		a.ObserveRead(0, filler)
	}
	if s := a.Saved(filler, filler); s != 300 {
		t.Errorf("filler read 300 times in the last second: saved %v, want 300 (the 1-s rate)", s)
	}
}

// near reports whether a and b differ by at most 1e-9.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9 }

// TestFrequencyCells: a key's two counters are different ones of the same
// 64-byte block, and the conservative update adds only to the smaller.
func TestFrequencyCells(t *testing.T) {
	f := newFrequency(1<<10, 1, 1<<20, t0)
	for i := range 10_000 {
		h := hashOf(fmt.Sprint("k", i))
		a, b := f.cells(h)
		ia, ib := index(f, a), index(f, b)
		if ia == ib || ia/blockCounters != ib/blockCounters {
			t.Fatalf("hash %#x: counters %d and %d, want two of one block of %d", h, ia, ib, blockCounters)
		}
	}
	h := hashOf("k")
	a, b := f.cells(h)
	a.Store(3)
	f.add(0, h)
	if a.Load() != 3 || b.Load() != 1 || f.count(h) != 1 {
		t.Errorf("counters 3 and 0, one add: %d and %d, count %d; want 3, 1, 1", a.Load(), b.Load(), f.count(h))
	}
}

// index is the position of counter c in f's counters.
func index(f *frequency, c *atomic.Uint32) int {
	return int((uintptr(unsafe.Pointer(c)) - uintptr(unsafe.Pointer(&f.c[0]))) / unsafe.Sizeof(*c))
}

// TestAdmissionSetCapacity: a new capacity takes effect at the next
// Advance; one that keeps the read sketch's size keeps its counts and
// changes the period's length, one that changes the size starts both
// sketches from nothing.
func TestAdmissionSetCapacity(t *testing.T) {
	d := mustNew(t, Config{Threshold: 1, Loops: 1})
	a := NewAdmission(d, 1000, t0) // 65,536 counters (the least), 10,000 reads a period
	h := hashOf("k")
	for range 10 {
		a.ObserveRead(0, h)
	}
	a.SetCapacity(2000)
	if a.long.Load().reads.sample != 10_000 {
		t.Fatal("SetCapacity took effect before Advance")
	}
	a.Advance(t0.Add(10 * time.Second))
	if l := a.long.Load(); len(l.reads.c) != 1<<16 || l.reads.sample != 20_000 || a.Saved(h, h) != 1 {
		t.Errorf("capacity 2,000: %d counters, period %d reads, saved %v; want 65,536, 20,000, 1 (10 reads in 10 s)",
			len(l.reads.c), l.reads.sample, a.Saved(h, h))
	}
	a.SetCapacity(100_000)
	a.Advance(t0.Add(11 * time.Second))
	if l := a.long.Load(); len(l.reads.c) != 1<<20 || len(l.writes.c) != 1<<18 || l.reads.sample != 1_000_000 || a.Saved(h, h) != 0 {
		t.Errorf("capacity 100,000: %d and %d counters, period %d reads, saved %v; want 2^20, 2^18, 1,000,000, 0",
			len(l.reads.c), len(l.writes.c), l.reads.sample, a.Saved(h, h))
	}
}

// TestLongCounters: the read sketch has 8 counters per reply, at least
// 2^16 and at most 2^24 once rounded.
func TestLongCounters(t *testing.T) {
	for _, c := range []struct{ capacity, want int }{
		{1, 1 << 16}, {8192, 1 << 16}, {8193, 1 << 17}, {100_000, 1 << 20}, {1 << 21, 1 << 24}, {1 << 24, 1 << 24},
	} {
		if got := roundCounters(longCounters(c.capacity)); got != c.want {
			t.Errorf("capacity %d: %d counters, want %d", c.capacity, got, c.want)
		}
	}
}
