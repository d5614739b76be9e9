package clustertest

import (
	"strconv"
	"strings"
	"testing"
)

// CacheCounts are a sidecar's GET/HGET counters at one moment.
type CacheCounts struct {
	// Hits are GET and HGET requests answered from the cache
	// (cicada_cache_hits_total).
	Hits float64
	// Gets are all GET and HGET requests: hits plus those forwarded to
	// Redis (cicada_cache_misses_total).
	Gets float64
}

// Sub returns the counts since earlier.
func (c CacheCounts) Sub(earlier CacheCounts) CacheCounts {
	return CacheCounts{Hits: c.Hits - earlier.Hits, Gets: c.Gets - earlier.Gets}
}

// Ratio returns Hits/Gets, or 0 without GETs.
func (c CacheCounts) Ratio() float64 {
	if c.Gets == 0 {
		return 0
	}
	return c.Hits / c.Gets
}

// Counts scrapes n's sidecar's /metrics once and returns its cache
// counters. It fails t when the page lacks them.
func (n *Node) Counts(t testing.TB) CacheCounts {
	t.Helper()
	var c CacheCounts
	found := 0
	for _, line := range strings.Split(n.Sidecar.Get(t, "/metrics"), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok || (name != "cicada_cache_hits_total" && name != "cicada_cache_misses_total") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("%v: /metrics line %q: %v", n, line, err)
		}
		c.Gets += f
		if name == "cicada_cache_hits_total" {
			c.Hits = f
		}
		found++
	}
	if found != 2 {
		t.Fatalf("%v: /metrics has %d of cicada_cache_hits_total and cicada_cache_misses_total, want both", n, found)
	}
	return c
}
