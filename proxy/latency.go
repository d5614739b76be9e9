package proxy

import (
	"sync/atomic"
	"time"
)

// upstreamBuckets are the upper bounds, in seconds, of the upstream latency
// histogram: 50 µs (a loopback round trip to an idle Redis takes about
// 30 µs) to 1 s.
var upstreamBuckets = [...]float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}

// latencyHist is one event loop's share of the upstream latency histogram:
// the loop is its only writer (plain atomic adds, no shared cache line);
// Collect sums the loops' shares at scrape time.
type latencyHist struct {
	counts [len(upstreamBuckets) + 1]atomic.Uint64 // per bucket of upstreamBuckets, then +Inf
	sumNs  atomic.Int64
}

func (h *latencyHist) observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(upstreamBuckets) && s > upstreamBuckets[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}
