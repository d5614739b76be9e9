package hotkeys

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newTestTracker(loops int) (*Tracker, *fakeClock) {
	c := &fakeClock{t: time.UnixMilli(1700000000000)}
	return NewTracker(loops, c.now, func() (time.Duration, time.Duration) { return 0, 0 }), c
}

func TestLifecycle(t *testing.T) {
	tr, clock := newTestTracker(2)
	if out := string(tr.Execute(nil, SubGet, words("HOTKEYS GET"), 2)); out != "$-1\r\n" {
		t.Fatalf("GET before START = %q, want $-1", out)
	}
	if out := string(tr.Execute(nil, SubStop, words("HOTKEYS STOP"), 3)); out != "_\r\n" {
		t.Fatalf("STOP before START = %q, want _", out)
	}
	if out := string(tr.Execute(nil, SubReset, words("HOTKEYS RESET"), 2)); out != "+OK\r\n" {
		t.Fatalf("RESET with nothing = %q, want +OK", out)
	}
	if out := string(tr.Execute(nil, SubStart, words("HOTKEYS START METRICS 1 NET DURATION 2"), 2)); out != "+OK\r\n" {
		t.Fatalf("START = %q", out)
	}
	if !tr.On() {
		t.Fatal("not on after START")
	}
	if out := string(tr.Execute(nil, SubStart, words("HOTKEYS START BOGUS"), 2)); out != "-ERR hotkey tracking session already in progress\r\n" {
		t.Fatalf("second START = %q", out)
	}
	if out := string(tr.Execute(nil, SubReset, words("HOTKEYS RESET"), 2)); out != "-ERR hotkey tracking session in progress, stop tracking first\r\n" {
		t.Fatalf("RESET while active = %q", out)
	}
	clock.t = clock.t.Add(1999 * time.Millisecond)
	tr.Tick()
	if !tr.On() {
		t.Fatal("stopped before DURATION")
	}
	clock.t = clock.t.Add(101 * time.Millisecond)
	tr.Tick()
	if tr.On() {
		t.Fatal("still on after DURATION")
	}
	r, ok := tr.Report()
	if !ok || r.Active || r.DurationMs != 2100 || r.StartUnixMs != 1700000000000 {
		t.Fatalf("report after auto-stop = %+v, %v; want inactive, 2100 ms", r, ok)
	}
	clock.t = clock.t.Add(time.Second)
	if r, _ := tr.Report(); r.DurationMs != 2100 {
		t.Fatalf("duration moved after stop: %d", r.DurationMs)
	}
	if out := string(tr.Execute(nil, SubStop, words("HOTKEYS STOP"), 2)); out != "$-1\r\n" {
		t.Fatalf("STOP when stopped = %q", out)
	}
	if out := string(tr.Execute(nil, SubReset, words("HOTKEYS RESET"), 2)); out != "+OK\r\n" {
		t.Fatalf("RESET = %q", out)
	}
	if _, ok := tr.Report(); ok {
		t.Fatal("report after RESET")
	}
}

func TestRecordAndMerge(t *testing.T) {
	tr, _ := newTestTracker(3)
	if err := tr.Start(Options{Metrics: CPU | NET, Count: 2, Sample: 1}); err != nil {
		t.Fatal(err)
	}
	// Key a on every loop, b on one, c little.
	for loop := 0; loop < 3; loop++ {
		for i := 0; i < 100; i++ {
			tk, ok := tr.Begin(loop)
			if !ok || !tk.Sampled {
				t.Fatal("Begin refused")
			}
			tr.Record(loop, tk, []byte("a"), 10, 2000)
		}
	}
	for i := 0; i < 50; i++ {
		tk, _ := tr.Begin(1)
		tr.Record(1, tk, []byte("b"), 10, 1000)
	}
	tk, _ := tr.Begin(2)
	tr.Record(2, tk, []byte("c"), 7, 500)
	r, _ := tr.Report()
	if fmt.Sprint(r.ByNet) != "[{a 3000} {b 500}]" || fmt.Sprint(r.ByCPU) != "[{a 600} {b 50}]" {
		t.Fatalf("rankings net %v cpu %v", r.ByNet, r.ByCPU)
	}
	if r.AllNetBytes != 3507 || r.TotalNetBytes != 3507 || r.AllCommandsUs != 650 {
		t.Fatalf("totals %+v", r)
	}
	// A session replaced: a ticket of the old one counts for nothing, and
	// loops start afresh.
	tr.Stop()
	tk, ok := tr.Begin(0)
	if ok {
		t.Fatal("Begin after STOP")
	}
	_ = tr.Start(Options{Metrics: NET, Count: 10, Sample: 1})
	tr.Record(0, tk, []byte("old"), 99, 0)
	tk, _ = tr.Begin(0)
	tr.Record(0, tk, []byte("new"), 5, 0)
	r, _ = tr.Report()
	if fmt.Sprint(r.ByNet) != "[{new 5}]" || r.AllNetBytes != 5 || r.ByCPU != nil {
		t.Fatalf("after restart: %+v", r)
	}
}

func TestSampling(t *testing.T) {
	tr, _ := newTestTracker(1)
	_ = tr.Start(Options{Metrics: NET, Count: 10, Sample: 10})
	sampled := 0
	const n = 100000
	for i := 0; i < n; i++ {
		tk, _ := tr.Begin(0)
		if tk.Sampled {
			sampled++
		}
		tr.Record(0, tk, []byte("k"), 1, 0)
	}
	// Binomial(100000, 0.1): sd 95.
	if sampled < 9500 || sampled > 10500 {
		t.Fatalf("sampled %d of %d at SAMPLE 10", sampled, n)
	}
	r, _ := tr.Report()
	if r.AllNetBytes != n || r.TotalNetBytes != uint64(sampled) || r.ByNet[0].Value != uint64(sampled) {
		t.Fatalf("report %+v, sampled %d", r, sampled)
	}
}

// Space-Saving: exact while the keys fit; beyond, every key heavier than
// total/capacity is kept and no count is below the true weight.
func TestSummary(t *testing.T) {
	s := newSummary(20)
	truth := map[string]uint64{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		var k string
		if rng.IntN(2) == 0 {
			k = fmt.Sprintf("hot%d", rng.IntN(5))
		} else {
			k = fmt.Sprintf("cold%d", rng.IntN(5000))
		}
		w := uint64(rng.IntN(100) + 1)
		truth[k] += w
		s.add([]byte(k), w)
	}
	if len(s.h.c) != 20 || len(s.idx) != 20 {
		t.Fatalf("size %d/%d, want 20", len(s.h.c), len(s.idx))
	}
	got := map[string]uint64{}
	s.mergeInto(got)
	bound := s.total / 20
	for k, v := range truth {
		c, ok := got[k]
		if v > bound && !ok {
			t.Errorf("%s (weight %d > %d) missing", k, v, bound)
		}
		if ok && (c < v || c > v+bound) {
			t.Errorf("%s: count %d, true %d, bound %d", k, c, v, bound)
		}
	}
	for i := 0; i < 5; i++ {
		if _, ok := got[fmt.Sprintf("hot%d", i)]; !ok {
			t.Errorf("hot%d missing", i)
		}
	}
	s.reset()
	s.add([]byte("x"), 3)
	got = map[string]uint64{}
	s.mergeInto(got)
	if len(got) != 1 || got["x"] != 3 || s.total != 3 {
		t.Fatalf("after reset: %v", got)
	}
}

// With no session, On is the only cost; with one, Begin and Record of a
// known key allocate nothing.
func TestNoAllocs(t *testing.T) {
	tr, _ := newTestTracker(1)
	key := []byte("key:__rand_int__")
	if a := testing.AllocsPerRun(1000, func() {
		if tr.On() {
			t.Fatal("on")
		}
	}); a != 0 {
		t.Fatalf("On: %v allocs", a)
	}
	_ = tr.Start(Options{Metrics: CPU | NET, Count: 10, Sample: 1})
	tk, _ := tr.Begin(0)
	tr.Record(0, tk, key, 10, 100)
	if a := testing.AllocsPerRun(1000, func() {
		tk, _ := tr.Begin(0)
		tr.Record(0, tk, key, 10, 100)
	}); a != 0 {
		t.Fatalf("Begin+Record of a counted key: %v allocs", a)
	}
}

func TestCheck(t *testing.T) {
	on := []string{"on", "nopass"}
	tests := []struct {
		u     UserACL
		fresh bool
		sub   Sub
		want  Permission
	}{
		{UserACL{Exists: true, Flags: on, Commands: []string{"+@all"}}, true, SubGet, Allowed},
		{UserACL{Exists: true, Flags: []string{"on"}, Commands: []string{"+@all"}}, true, SubGet, NoAuth},
		{UserACL{Exists: true, Flags: []string{"off", "nopass"}, Commands: []string{"+@all"}}, true, SubGet, NoAuth},
		{UserACL{Exists: true, Flags: []string{"on"}, Commands: []string{"+@all"}}, false, SubGet, Allowed},
		{UserACL{Exists: true, Flags: on, Commands: []string{"+@all -@dangerous"}}, false, SubStart, NoPerm},
		{UserACL{Exists: true, Flags: on, Commands: []string{"+@all -@dangerous"}}, false, SubHelp, Allowed},
		{UserACL{Exists: true, Flags: on, Commands: []string{"-@all +get +@read"}}, false, SubGet, NoPerm},
		{UserACL{Exists: true, Flags: on, Commands: []string{"-@all +@ADMIN"}}, false, SubReset, Allowed},
		{UserACL{Exists: true, Flags: on, Commands: []string{"-@all +@slow"}}, false, SubStop, Allowed},
		{UserACL{Exists: true, Flags: on, Commands: []string{"-@all +@admin -@slow"}}, false, SubStop, NoPerm},
		{UserACL{Exists: true, Flags: on, Commands: []string{"nocommands allcommands"}}, false, SubGet, Allowed},
		{UserACL{Exists: true, Flags: on, Commands: []string{"+@all -hotkeys|get"}}, false, SubGet, NoPerm},
		{UserACL{Exists: true, Flags: on, Commands: []string{"+@all -hotkeys|get"}}, false, SubStop, Allowed},
		{UserACL{Exists: true, Flags: on, Commands: []string{"-@all", "-@all +@admin"}}, false, SubGet, Allowed},
		{UserACL{}, false, SubGet, NoPerm},
		// Redis 7.0's reading of "-@all +@read +@slow -@admin": no @slow,
		// but every @slow stand-in and no @admin one.
		{UserACL{Exists: true, Flags: on, Commands: []string{
			"-@all +@read +config -config|get -config|set +acl -acl|getuser +slowlog -slowlog|get +latency -latency|latest"}},
			false, SubGet, NoPerm},
		{UserACL{Exists: true, Flags: on, Commands: []string{
			"-@all +@read +config -config|get -config|set +acl -acl|getuser +slowlog -slowlog|get +latency -latency|latest"}},
			false, SubHelp, Allowed},
		{UserACL{Exists: true, Flags: on, Commands: []string{"+@all -config|get"}}, false, SubGet, NoPerm},
		{UserACL{Exists: true, Flags: on, Commands: []string{"-@all +hotkeys"}}, false, SubStart, Allowed},
	}
	for _, tt := range tests {
		if got := Check(tt.u, tt.fresh, tt.sub); got != tt.want {
			t.Errorf("Check(%+v, fresh %v, %s) = %v, want %v", tt.u, tt.fresh, tt.sub.FullName(), got, tt.want)
		}
	}
	if got := string(AppendDenied(nil, NoPerm, "bob", SubGet)); got != "-NOPERM User bob has no permissions to run the 'hotkeys|get' command\r\n" {
		t.Errorf("NOPERM reply %q", got)
	}
	if got := string(AppendDenied(nil, NoAuth, "default", SubGet)); got != "-NOAUTH Authentication required.\r\n" {
		t.Errorf("NOAUTH reply %q", got)
	}
}
