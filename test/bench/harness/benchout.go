package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// errNoSummary reports redis-benchmark output without the figures the
// harness needs (a run that failed or was cut short).
var errNoSummary = errors.New("harness: redis-benchmark output has no throughput summary or latency percentiles")

// benchResult is what one redis-benchmark run (without -q and --csv)
// reports for its single test.
type benchResult struct {
	Requests int64   // requests completed, from "N requests completed in"
	RPS      float64 // requests per second, from "throughput summary:"
	P50Ms    float64 // median latency in ms, from the latency summary
	P99Ms    float64 // 99th percentile in ms, from the latency summary
	P999Ms   float64 // 99.9th percentile in ms; see parseBenchOutput
	MaxMs    float64 // slowest request in ms, from the latency summary
	// Missed is how many requests an open-loop run never sent (the
	// target fell behind the rate; not in the latency histogram).
	Missed int64 `json:",omitempty"`
	// GetP50Ms ... SetP99Ms are the same latencies for GETs and SETs
	// apart, in ms, where the load generator reports them (one request
	// per round trip); 0 otherwise. Through Cicada a SET always waits for
	// Redis, a GET may be a hit.
	GetP50Ms, GetP99Ms, SetP50Ms, SetP99Ms float64 `json:",omitempty"`
	// LoadCPUSeconds is the user+system CPU time of the load generator's
	// process over its whole run (its rusage; set by runLoad, not parsed).
	LoadCPUSeconds float64
}

// parseBenchOutput reads the full (not -q, not --csv) output of a
// redis-benchmark 7.0 run of one test. Progress lines end in '\r' and are
// skipped.
//
// p50 and p99 come from the "latency summary" (HdrHistogram's value at
// that percentile, 1 µs resolution). redis-benchmark prints no p99.9 there,
// so P999Ms is the latency of the first line of "Latency by percentile
// distribution" at or above 99.9%: that table halves the remaining
// fraction on each line (99.805%, 99.902%, ...), so this is the value at a
// percentile between 99.9% and 99.95%, an upper bound of p99.9 that is
// off by at most one histogram step.
func parseBenchOutput(out []byte) (benchResult, error) {
	var r benchResult
	var haveRPS, haveSummary, haveP999 bool
	inPercentiles, summaryNext := false, false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.LastIndexByte(line, '\r'); i >= 0 {
			line = line[i+1:] // the part after the last progress line
		}
		line = strings.TrimSpace(line)
		switch {
		case strings.Contains(line, " requests completed in "):
			n, err := strconv.ParseInt(strings.Fields(line)[0], 10, 64)
			if err != nil {
				return r, fmt.Errorf("harness: requests line %q: %w", line, err)
			}
			r.Requests = n
		case line == "Latency by percentile distribution:":
			inPercentiles = true
		case inPercentiles && line == "":
			inPercentiles = false
		case inPercentiles && !haveP999:
			// "99.902% <= 0.807 milliseconds (cumulative count 19984)"
			f := strings.Fields(line)
			if len(f) < 3 || !strings.HasSuffix(f[0], "%") || f[1] != "<=" {
				return r, fmt.Errorf("harness: percentile line %q", line)
			}
			pct, err1 := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
			ms, err2 := strconv.ParseFloat(f[2], 64)
			if err := errors.Join(err1, err2); err != nil {
				return r, fmt.Errorf("harness: percentile line %q: %w", line, err)
			}
			if pct >= 99.9 {
				r.P999Ms, haveP999 = ms, true
			}
		case strings.HasPrefix(line, "throughput summary:"):
			f := strings.Fields(line)
			if len(f) < 3 {
				return r, fmt.Errorf("harness: throughput line %q", line)
			}
			v, err := strconv.ParseFloat(f[2], 64)
			if err != nil {
				return r, fmt.Errorf("harness: throughput line %q: %w", line, err)
			}
			r.RPS, haveRPS = v, true
		case strings.HasPrefix(line, "avg") && strings.Contains(line, "p99"):
			summaryNext = true
			continue
		case summaryNext:
			// avg min p50 p95 p99 max
			f := strings.Fields(line)
			if len(f) != 6 {
				return r, fmt.Errorf("harness: latency summary %q", line)
			}
			var v [6]float64
			for i, s := range f {
				x, err := strconv.ParseFloat(s, 64)
				if err != nil {
					return r, fmt.Errorf("harness: latency summary %q: %w", line, err)
				}
				v[i] = x
			}
			r.P50Ms, r.P99Ms, r.MaxMs = v[2], v[4], v[5]
			haveSummary = true
		}
		summaryNext = false
	}
	if err := sc.Err(); err != nil {
		return r, err
	}
	if !haveRPS || !haveSummary || !haveP999 || r.Requests == 0 {
		return r, errNoSummary
	}
	return r, nil
}
