package detector

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestAdmissionSaved: a key never written saves its reads; writes cost a
// refill each and make a fill survive its round trip with probability
// e^(−w·t); the floor and the bar gate Worth, half the threshold and
// half the bar Cold (only when the cache is full).
func TestAdmissionSaved(t *testing.T) {
	d := mustNew(t, Config{Threshold: 10, Loops: 1})
	a := NewAdmission(d, t0)
	read, written := hashOf("read"), hashOf("written")
	for range 100 {
		d.Observe(0, read)
		d.Observe(0, written)
	}
	for range 5 {
		a.ObserveWrite(written)
	}
	if s := a.Saved(read, read); s != 100 {
		t.Errorf("never written, read 100/s: saved %v, want 100", s)
	}
	if s := a.Saved(written, written); s != 95 {
		t.Errorf("read 100/s, written 5/s, no fill measured yet: saved %v, want 100 - 5", s)
	}
	a.NoteFill(100 * time.Millisecond)
	want := 100*math.Exp(-5*0.1) - 5
	if s := a.Saved(written, written); math.Abs(s-want) > 1e-9 {
		t.Errorf("with fills of 100 ms: saved %v, want 100·e^(−0.5) − 5 = %v", s, want)
	}
	a.NoteFill(200 * time.Millisecond) // the average moves a sixteenth of the way
	if got := a.FillRTT(); got != 100*time.Millisecond+100*time.Millisecond/16 {
		t.Errorf("FillRTT %v, want 106.25ms", got)
	}
	for range 200 {
		a.ObserveWrite(written) // 205 writes/s: saves nothing
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
	if a.Advance(t0.Add(2 * time.Second)); a.Saved(written, written) != 0 {
		t.Errorf("after the window: saved %v, want 0", a.Saved(written, written))
	}
}

// TestAdmissionRebar: the bar is 0 below full and the 1/16 quantile of the
// cached replies' savings above; Worth needs it, Cold half of it.
func TestAdmissionRebar(t *testing.T) {
	d := mustNew(t, Config{Threshold: 1, Loops: 1})
	a := NewAdmission(d, t0)
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
	if a.Bar() != 12 { // the sorted savings' element 32/16 = 2
		t.Errorf("full: bar %v, want 12", a.Bar())
	}
	weak, fair := hashOf("weak"), hashOf("fair")
	for range 11 {
		d.Observe(0, weak)
	}
	for range 12 {
		d.Observe(0, fair)
	}
	if a.Worth(weak, weak) || !a.Worth(fair, fair) {
		t.Errorf("bar 12: Worth(11/s) %v, Worth(12/s) %v; want false, true", a.Worth(weak, weak), a.Worth(fair, fair))
	}
	if a.Cold(weak, weak) {
		t.Error("bar 12: 11/s is cold, want kept (cold below 6)")
	}
}

// TestAdmissionColdKeepsIdle: in a full cache with a bar of 0, no reply
// is cold at the default threshold, not one unread in the window, not one
// written and not read, not one read under a floor Adapt raised, and the
// sweep need not look (MayCold); at a threshold the user raised, a reply
// read under half of it is cold, and so is one saving less than half a
// bar above 0.
func TestAdmissionColdKeepsIdle(t *testing.T) {
	d := mustNew(t, Config{Threshold: 1, Loops: 1})
	a := NewAdmission(d, t0)
	idle, once, written := hashOf("idle"), hashOf("once"), hashOf("written")
	d.Observe(0, once)
	a.ObserveWrite(written)
	a.Rebar(true, func(func(uint64, uint64) bool) {}) // full, bar 0
	for _, k := range []struct {
		name string
		h    uint64
	}{{"unread", idle}, {"read once", once}, {"written once, never read", written}} {
		if a.Cold(k.h, k.h) {
			t.Errorf("threshold 1, bar 0: %s is cold", k.name)
		}
	}
	if a.MayCold() {
		t.Error("threshold 1, bar 0: MayCold, want the sweep to skip Cold")
	}
	if !a.Worth(once, once) {
		t.Fatal("read once at floor 1: not worth a fill")
	}
	a.Adapt(64, 64) // 64 keys left, all unused: the floor doubles
	if a.Floor() != 2 {
		t.Fatalf("floor %d after Adapt, want 2", a.Floor())
	}
	if a.Cold(idle, idle) || a.Cold(once, once) || a.MayCold() {
		t.Errorf("floor raised to 2 by Adapt: Cold(unread) %v, Cold(read once) %v, MayCold %v; want false, false, false",
			a.Cold(idle, idle), a.Cold(once, once), a.MayCold())
	}
	d.SetThreshold(2)
	if !a.MayCold() || !a.Cold(idle, idle) || a.Cold(once, once) {
		t.Errorf("threshold 2: MayCold %v, Cold(unread) %v, Cold(read once) %v; want true, true, false",
			a.MayCold(), a.Cold(idle, idle), a.Cold(once, once))
	}
	d.SetThreshold(1)
	a.Rebar(true, func(yield func(uint64, uint64) bool) { yield(once, once) }) // bar 1: the saving of a key read once
	if a.Bar() != 1 || !a.MayCold() || !a.Cold(idle, idle) || a.Cold(once, once) {
		t.Errorf("bar %v: MayCold %v, Cold(unread) %v, Cold(read once) %v; want bar 1, true, true, false",
			a.Bar(), a.MayCold(), a.Cold(idle, idle), a.Cold(once, once))
	}
	a.Rebar(false, func(func(uint64, uint64) bool) {})
	if a.MayCold() || a.Cold(idle, idle) {
		t.Error("not full: a reply may be cold")
	}
}

// TestAdmissionAdapt: the floor doubles while most keys that left served
// no hit, halves back to the threshold when few did or after calls in a
// row that saw fewer than 64 keys leave (4, then twice as many each time
// the floor had to be raised again right after), and otherwise waits for
// 64; after the wait a raised floor also halves if Worth refused no key
// read at half the floor or more in as many calls, however many of the
// keys gone were unused, and it is raised only if Worth let a key fill
// since the last judgement.
func TestAdmissionAdapt(t *testing.T) {
	d := mustNew(t, Config{Threshold: 2, Loops: 1})
	a := NewAdmission(d, t0)
	steps := []struct {
		left, unused uint64
		floor        uint32
		near         bool // a key read at half the floor is refused first
	}{
		{63, 63, 2, false},   // fewer than 64 left: no judgement
		{100, 60, 4, false},  // 60 of 100 unused: doubled
		{200, 120, 8, false}, // 60 of 100 again
		{263, 182, 8, true},  // 63 left since: wait
		{300, 200, 16, false},
		{400, 205, 8, false}, // 5 of 100: halved
		{500, 210, 4, false},
		{600, 215, 2, false}, // down to the threshold
		{700, 220, 2, false}, // not below it
		{800, 270, 2, false}, // 50 of 100: kept
		{900, 370, 4, false}, // raised again, then quiet:
		{910, 370, 4, true},
		{920, 370, 4, true},
		{930, 370, 4, true},
		{940, 370, 2, true}, // the fourth quiet call halves it
		{950, 370, 2, true},
		{1050, 470, 4, true}, // raised right after easing: now 8 quiet calls to wait
		{1150, 570, 8, true},
		{1151, 570, 8, true},
		{1152, 570, 8, true},
		{1153, 570, 8, true},
		{1154, 570, 8, true},
		{1155, 570, 8, true},
		{1156, 570, 8, true},
		{1157, 570, 8, true},
		{1158, 570, 4, true}, // the eighth quiet call halves it
		{1159, 570, 4, true}, // and the count starts again
		{1300, 575, 2, true}, // 5 of 150 unused: halved, and the wait is 4 again
		{1400, 675, 4, true},
		{1401, 675, 4, true},
		{1402, 675, 4, true},
		{1403, 675, 4, true},
		{1404, 675, 2, true},
		{1504, 775, 4, true}, // raised; then a trickle of unused keys, under 64:
		{1510, 781, 4, true},
		{1520, 791, 4, true},
		{1530, 801, 4, true},
		{1540, 811, 4, true}, // not eased: 36 of 36 left unused
		{1541, 811, 4, true},
		{2000, 815, 2, true}, // 40 of 496 unused: halved
		{2100, 915, 4, true}, // raised, the wait 4; then the traffic stops, and what it filled leaves unused:
		{2130, 945, 4, false},
		{2160, 975, 4, false},
		{2161, 976, 4, false},
		{2162, 977, 2, false},  // the fourth call with nothing near halves it, though all that left was unused
		{2163, 978, 2, false},  // and the next call does not halve it again
		{2300, 1115, 2, false}, // 138 leave unused, but nothing was filled since the last judgement: kept
		{2400, 1215, 4, true},  // raised: keys were filled
		{2410, 1225, 4, true},  // then a trickle near the floor, all unused: waits
		{2420, 1235, 4, true},
		{2430, 1245, 4, true},
		{2440, 1255, 4, true},
		{2450, 1265, 4, true},
		{2900, 1270, 2, true}, // 55 of 500 unused: halved
	}
	for i, s := range steps {
		if s.near || i <= 40 { // keys filled, but for the steps after the traffic stopped (41-46)
			k := hashOf(fmt.Sprint("filled ", i))
			for range a.Floor() {
				d.Observe(0, k)
			}
			if !a.Worth(k, k) {
				t.Fatalf("step %d: a key read at the floor %d is not worth filling", i, a.Floor())
			}
		}
		if s.near {
			k := hashOf(fmt.Sprint("near ", i))
			for range a.Floor() / 2 {
				d.Observe(0, k)
			}
			if a.Worth(k, k) {
				t.Fatalf("step %d: a key read at half the floor %d is worth filling", i, a.Floor())
			}
		}
		a.Adapt(s.left, s.unused)
		if got := a.Floor(); got != s.floor {
			t.Fatalf("step %d (left %d unused %d): floor %d, want %d", i, s.left, s.unused, got, s.floor)
		}
	}
	h := hashOf("k")
	for range 3 {
		d.Observe(0, h)
	}
	if !a.Worth(h, h) {
		t.Error("read 3/s at floor 2: not worth")
	}
	d.SetThreshold(4)
	if a.Floor() != 4 || a.Worth(h, h) {
		t.Errorf("threshold raised to 4: floor %d, Worth %v; want 4, false", a.Floor(), a.Worth(h, h))
	}
}
