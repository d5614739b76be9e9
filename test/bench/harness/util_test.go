package main

import (
	"math"
	"os"
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
