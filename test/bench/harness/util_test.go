package main

import (
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestParseStatTicks(t *testing.T) {
	// A real /proc/<pid>/stat line, the name edited to hold ") " and spaces.
	stat := "4242 (redis ) x) S 1 4242 4242 0 -1 4194560 1371 0 0 0 1234 567 0 0 20 0 5 0 123 24805376 2339 18446744073709551615 1 1 0 0 0 0 0 4096 17987 0 0 0 17 1 0 0 0 0 0\n"
	got, err := parseStatTicks(stat)
	if err != nil || got != 1234+567 {
		t.Errorf("parseStatTicks = %d, %v; want %d, nil", got, err, 1234+567)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 u s"} {
		if _, err := parseStatTicks(bad); err == nil {
			t.Errorf("parseStatTicks(%q): got nil error, want one", bad)
		}
	}
	// The harness's own process reads without error.
	if _, err := cpuTicks(os.Getpid()); err != nil {
		t.Errorf("cpuTicks(self): %v", err)
	}
}

func TestMetricSum(t *testing.T) {
	text := `# HELP cicada_cache_hits_total Requests answered from the cache.
# TYPE cicada_cache_hits_total counter
cicada_cache_hits_total{command="get"} 1.5e+06
cicada_cache_hits_total{command="hget"} 10
cicada_cache_hits_total_other 99
cicada_cache_misses_total 7
`
	got, err := metricSum(strings.NewReader(text), "cicada_cache_hits_total")
	if err != nil || got != 1500010 {
		t.Errorf("metricSum = %v, %v; want 1500010, nil", got, err)
	}
	got, err = metricSum(strings.NewReader(text), "cicada_cache_misses_total")
	if err != nil || got != 7 {
		t.Errorf("metricSum = %v, %v; want 7, nil", got, err)
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median(nil) = %v, want NaN", got)
	}
}

func TestTrimProgress(t *testing.T) {
	out, err := os.ReadFile("testdata/hget-p1.txt")
	if err != nil {
		t.Fatal(err)
	}
	got := trimProgress(out)
	if !strings.HasPrefix(got, "====== hget h f ======\n") || strings.Contains(got, "\r") {
		t.Errorf("trimProgress: got %q..., want it to start with the test's title and hold no \\r", got[:min(len(got), 60)])
	}
}

// TestPrintTableNotes: the table compares twemproxy with the two-loop
// Cicada where a scenario has no one-loop Cicada, counts requests an open
// loop never sent, and says when the run stopped early.
func TestPrintTableNotes(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	r := report{Rounds: 1, Clients: 50, ClockTicksPerSecond: 100, Samples: []sample{
		{Scenario: "4 skew", Target: targetRedis, benchResult: benchResult{Requests: 100, RPS: 100}, RedisCPUus: f(7)},
		{Scenario: "4 skew", Target: targetCicada2, benchResult: benchResult{Requests: 100, RPS: 50}, ProxyCPUus: f(14), RedisCPUus: f(8)},
		{Scenario: "4 skew", Target: targetTwem, benchResult: benchResult{Requests: 100, RPS: 100}, ProxyCPUus: f(7), RedisCPUus: f(2)},
		{Scenario: "5 open", Target: targetCicada, benchResult: benchResult{Requests: 100, RPS: 100, Missed: 3}},
	}}
	r.Incomplete = "harness: 5 open on cicada, round 1: exit status 1"
	var b strings.Builder
	printTable(&b, r)
	for _, want := range []string{"4 skew               cicada-2loops ops/s ×0.50", "Requests never sent: 3, in 1 open-loop runs",
		"INCOMPLETE: the run stopped early (harness: 5 open on cicada, round 1: exit status 1)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
}

// TestSweepTargets: -loops-sweep replaces a scenario's Cicada targets, in
// their place, by one per loop count, and ensure reads the count back.
func TestSweepTargets(t *testing.T) {
	got := sweepTargets([]string{targetRedis, targetCicada, targetCicadaOff, targetTwem, targetCicada2}, 3)
	want := []string{targetRedis, "cicada-1loops", "cicada-2loops", "cicada-3loops", targetCicadaOff, targetTwem}
	if !slices.Equal(got, want) {
		t.Errorf("sweepTargets: got %v, want %v", got, want)
	}
	for _, c := range []struct {
		t  string
		n  int
		ok bool
	}{{"cicada-4loops", 4, true}, {targetCicada2, 2, true}, {targetCicada, 0, false}, {targetCicadaOff, 0, false}, {"cicada-0loops", 0, false}} {
		if n, ok := sweepLoops(c.t); n != c.n || ok != c.ok {
			t.Errorf("sweepLoops(%q) = %d, %v; want %d, %v", c.t, n, ok, c.n, c.ok)
		}
	}
}

// TestPickTargets: -cicada-b puts a twin right after each Cicada target
// (sweep targets included, not twemproxy or the bare servers), the twin
// takes its target's settings and the second binary, and -targets keeps
// what it matches.
func TestPickTargets(t *testing.T) {
	o := options{loops: 1, cicada: "bin/cicada", cicadaB: "/tmp/new", targets: regexp.MustCompile("")}
	ts := []string{targetRedis, targetCicada, targetTwem, targetCicada2Ded, "cicada-3loops", targetBareFwd2}
	want := []string{targetRedis, targetCicada, "cicada+b", targetTwem, targetCicada2Ded, "cicada-2loops-dedicated+b",
		"cicada-3loops", "cicada-3loops+b", targetBareFwd2}
	if got := o.pickTargets(ts); !slices.Equal(got, want) {
		t.Errorf("pickTargets: got %v, want %v", got, want)
	}
	cfg, ok := o.cicadaFor("cicada-2loops-dedicated+b", 7)
	if want := (cicadaConfig{loops: 2, threshold: 7, dedicated: true, bin: "/tmp/new"}); !ok || cfg != want {
		t.Errorf("cicadaFor(twin) = %+v, %v; want %+v, true", cfg, ok, want)
	}
	if cfg, ok := o.cicadaFor(targetCicada2Ded, 7); !ok || cfg.bin != "" {
		t.Errorf("cicadaFor(%s) = %+v, %v; want the default binary", targetCicada2Ded, cfg, ok)
	}
	if _, ok := o.cicadaFor("twemproxy+b", 1); ok {
		t.Error("cicadaFor(twemproxy+b): a twin of a target that is not a Cicada")
	}
	o.targets = regexp.MustCompile(`^(redis|cicada-2loops-dedicated)`)
	want = []string{targetRedis, targetCicada2Ded, "cicada-2loops-dedicated+b"}
	if got := o.pickTargets(ts); !slices.Equal(got, want) {
		t.Errorf("pickTargets with -targets: got %v, want %v", got, want)
	}
	o.cicadaB = ""
	want = []string{targetRedis, targetCicada2Ded}
	if got := o.pickTargets(ts); !slices.Equal(got, want) {
		t.Errorf("pickTargets without -cicada-b: got %v, want %v", got, want)
	}
}

// TestPairedDiffs: the differences pair runs by round, and rounds one
// side lacks are left out.
func TestPairedDiffs(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	smp := func(round int, rps, p99, proxy, redis float64) sample {
		s := sample{Round: round, ProxyCPUus: f(proxy), RedisCPUus: f(redis)}
		s.RPS, s.P99Ms = rps, p99
		return s
	}
	a := []sample{smp(1, 100, 1.0, 10, 2), smp(2, 90, 1.2, 12, 2.2), smp(3, 80, 1, 1, 1)}
	b := []sample{smp(1, 110, 0.9, 9, 2), smp(2, 94, 1.0, 11, 2.0)}
	want := "ops/s +7 ± 3  p99 ms -0.150 ± 0.050  proxy µs/req -1.00 ± 0.00  redis µs/req -0.10 ± 0.10  (2 pairs)"
	if got := pairedDiffs(a, b); got != want {
		t.Errorf("pairedDiffs:\ngot  %s\nwant %s", got, want)
	}
	if got := pairedDiffs(a, nil); got != "no paired rounds" {
		t.Errorf("pairedDiffs with no twin runs: %q", got)
	}
}

// TestPairedRatio: the ratio of each round's two runs, their geometric
// mean and its standard error; rounds one side lacks are left out.
func TestPairedRatio(t *testing.T) {
	smp := func(round int, rps float64) sample {
		s := sample{Round: round}
		s.RPS = rps
		return s
	}
	redis := []sample{smp(1, 100), smp(2, 50), smp(3, 70)}
	proxy := []sample{smp(1, 110), smp(2, 50), smp(4, 10)}
	// ln 1.1 and ln 1: mean 0.04766, standard error 0.04766; e^0.04766 = 1.0488.
	want := "×1.049 ± 0.050  (2 rounds)"
	if got := pairedRatio(redis, proxy); got != want {
		t.Errorf("pairedRatio: got %q, want %q", got, want)
	}
	if got := pairedRatio(redis, nil); got != "no paired rounds" {
		t.Errorf("pairedRatio with no runs: %q", got)
	}
	open := []sample{{Args: []string{"bin/loadgen", "-scenario", "open", "-c", "50", "-rate", "20000"}}}
	if !fixedRate(open) || fixedRate(redis) {
		t.Errorf("fixedRate: %v for an open loop, %v for a closed one", fixedRate(open), fixedRate(redis))
	}
}

// TestRoundOrder: a twin runs after its target in even rounds (0-based,
// as roundOrder counts; the harness prints them from 1) and before it in
// odd ones; the other targets keep their places.
func TestRoundOrder(t *testing.T) {
	ts := []string{targetRedis, targetCicada, "cicada+b", targetTwem, targetCicada2, "cicada-2loops+b"}
	if got := roundOrder(ts, 2); !slices.Equal(got, ts) {
		t.Errorf("round 2: got %v, want %v", got, ts)
	}
	want := []string{targetRedis, "cicada+b", targetCicada, targetTwem, "cicada-2loops+b", targetCicada2}
	if got := roundOrder(ts, 1); !slices.Equal(got, want) {
		t.Errorf("round 1: got %v, want %v", got, want)
	}
	if !slices.Equal(ts, []string{targetRedis, targetCicada, "cicada+b", targetTwem, targetCicada2, "cicada-2loops+b"}) {
		t.Errorf("roundOrder changed its argument: %v", ts)
	}
}
