package main

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// sample is one measured run: one scenario, one target, one round.
type sample struct {
	Scenario string
	Target   string
	Round    int      // 1-based
	Args     []string // the load's command line
	benchResult
	WallSeconds float64
	// ProxyTicks and RedisTicks are the user+system CPU clock ticks the
	// proxy (Cicada, twemproxy or the bare server) and redis-server used
	// during the run; 0 where the target has no such process.
	ProxyTicks, RedisTicks int64
	// ProxyCPUus and RedisCPUus are the same per request, in µs; nil
	// where the target has no such process.
	ProxyCPUus, RedisCPUus *float64 `json:",omitempty"`
	// LoadCPUus is the load generator's CPU time per request in µs
	// (connection setup included).
	LoadCPUus float64
	// RedisClientMB is the most memory Redis held for its normal clients
	// during the run (INFO memory's mem_clients_normal, sampled every
	// 100 ms), in MiB; nil where the target has no Redis.
	RedisClientMB *float64 `json:",omitempty"`
	// CacheHits is how many requests Cicada answered from its cache
	// (cicada_cache_hits_total before and after); nil for other targets.
	CacheHits *float64 `json:",omitempty"`
	// Output is the load generator's output, progress lines dropped.
	Output string
}

// report is the JSON document -json writes, and what the table is
// printed from.
type report struct {
	Started, Finished   time.Time
	ClockTicksPerSecond int64
	Rounds, Loops       int
	Clients             int
	// Settle is how long each measured run of a Cicada target in
	// scenarios 4 to 6 followed the same load, unmeasured (-settle;
	// nanoseconds in the JSON).
	Settle  time.Duration
	Samples []sample
	// Incomplete is the error that stopped the run early ("" for a whole
	// run): the scenarios after it are missing, and its own targets may
	// have fewer rounds than Rounds.
	Incomplete string `json:",omitempty"`
	// Micro are the Go micro-benchmarks' medians, MicroOutput go test's
	// output they were read from.
	Micro       []microResult `json:",omitempty"`
	MicroOutput string        `json:",omitempty"`
}

// median returns the median of xs (the mean of the middle two for an even
// count); NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// summary holds the medians of one scenario and target.
type summary struct {
	n                   int
	rps, p50, p99, p999 float64
	proxyCPU, redisCPU  float64 // NaN where not applicable
	loadCPU             float64 // the load generator's µs per request
	hitRatio            float64 // NaN except for Cicada
	clientMB            float64 // Redis's peak mem_clients_normal, MiB; NaN without Redis
	rpsSpread           float64 // (max-min)/median of ops/s
}

func summarize(ss []sample) summary {
	var rps, p50, p99, p999, pc, rc, lc, hit, mem []float64
	for _, s := range ss {
		lc = append(lc, s.LoadCPUus)
		rps = append(rps, s.RPS)
		p50 = append(p50, s.P50Ms)
		p99 = append(p99, s.P99Ms)
		p999 = append(p999, s.P999Ms)
		if s.ProxyCPUus != nil {
			pc = append(pc, *s.ProxyCPUus)
		}
		if s.RedisCPUus != nil {
			rc = append(rc, *s.RedisCPUus)
		}
		if s.RedisClientMB != nil {
			mem = append(mem, *s.RedisClientMB)
		}
		if s.CacheHits != nil && s.Requests > 0 {
			hit = append(hit, *s.CacheHits/float64(s.Requests))
		}
	}
	m := summary{n: len(ss), rps: median(rps), p50: median(p50), p99: median(p99), p999: median(p999),
		proxyCPU: median(pc), redisCPU: median(rc), loadCPU: median(lc), hitRatio: median(hit), clientMB: median(mem)}
	if len(rps) > 0 {
		m.rpsSpread = (slices.Max(rps) - slices.Min(rps)) / m.rps
	}
	return m
}

// total is the CPU per request of every server process on the path.
func (m summary) total() float64 {
	t := 0.0
	for _, v := range []float64{m.proxyCPU, m.redisCPU} {
		if !math.IsNaN(v) {
			t += v
		}
	}
	return t
}

// busyCores is how many cores the run kept busy: the CPU time per request
// of the servers and the load generator times the throughput. Near the
// machine's core count, the figures are bounded by CPU, not by a server.
func (m summary) busyCores() float64 { return (m.total() + m.loadCPU) * m.rps / 1e6 }

// printTable prints the medians per scenario and target, with ratios
// against direct Redis and, for Cicada, against twemproxy.
func printTable(w io.Writer, r report) {
	if r.Incomplete != "" {
		fmt.Fprintf(w, "\nINCOMPLETE: the run stopped early (%s); the last scenario's targets may have fewer rounds.", r.Incomplete)
	}
	fmt.Fprintf(w, "\nMedians of %d rounds (targets alternating), %d connections, loopback; cicada: --loops %d; CPU is user+system from /proc/<pid>/stat (%d ticks/s), per request.\n",
		r.Rounds, r.Clients, r.Loops, r.ClockTicksPerSecond)
	if r.Settle > 0 {
		fmt.Fprintf(w, "Scenarios 4-6: each run of a Cicada target follows %v of the same load, unmeasured (-settle): what it caches under sustained traffic.\n", r.Settle)
	}
	fmt.Fprintln(w, "×redis: this target's figure divided by direct Redis's (ops/s: >1 is faster; latency and CPU: <1 is better). CPU total = proxy + Redis.")
	fmt.Fprintf(w, "load µs/req: the load generator's own CPU; busy cores: (proxy + Redis + load generator) CPU × ops/s, out of %d cores; hits: requests (SETs too) answered from Cicada's cache.\n", runtime.NumCPU())
	fmt.Fprintln(w, "redis clients MiB: the most memory Redis held for its clients during a run (INFO memory mem_clients_normal, sampled every 100 ms).")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\ttarget\tops/s\tspread\tp50 ms\tp99 ms\tp99.9 ms\tproxy µs/req\tredis µs/req\tload µs/req\tbusy cores\tops ×redis\tp50 ×redis\tp99 ×redis\tredis µs ×redis\tCPU total ×redis\thits\tredis clients MiB\tclients ×redis\t")
	var order []string
	groups := map[string]map[string][]sample{}
	targets := map[string][]string{} // each scenario's targets, in run order
	for _, s := range r.Samples {
		if groups[s.Scenario] == nil {
			groups[s.Scenario] = map[string][]sample{}
			order = append(order, s.Scenario)
		}
		if groups[s.Scenario][s.Target] == nil {
			targets[s.Scenario] = append(targets[s.Scenario], s.Target)
		}
		groups[s.Scenario][s.Target] = append(groups[s.Scenario][s.Target], s)
	}
	var vsRedis, vsTwem, vsOff, vsB []string
	for _, name := range order {
		g := groups[name]
		base := summarize(g[targetRedis])
		for _, t := range targets[name] {
			if t != targetRedis && len(g[targetRedis]) > 0 && !fixedRate(g[targetRedis]) {
				vsRedis = append(vsRedis, fmt.Sprintf("%-22s %-24s %s", name, t, pairedRatio(g[targetRedis], g[t])))
			}
		}
		for _, t := range targets[name] {
			m := summarize(g[t])
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f%%\t%.3f\t%.3f\t%.3f\t%s\t%s\t%.2f\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
				name, t, m.rps, 100*m.rpsSpread, m.p50, m.p99, m.p999,
				num(m.proxyCPU, 2), num(m.redisCPU, 2), m.loadCPU, m.busyCores(),
				ratio(m.rps, base.rps), ratio(m.p50, base.p50), ratio(m.p99, base.p99), ratio(m.redisCPU, base.redisCPU), ratio(m.total(), base.total()),
				pct(m.hitRatio), num(m.clientMB, 1), ratio(m.clientMB, base.clientMB))
		}
		tw2 := summarize(g[targetTwem])
		for _, ct := range []string{targetCicada, targetCicada2} {
			if c := summarize(g[ct]); c.n > 0 && tw2.n > 0 {
				vsTwem = append(vsTwem, fmt.Sprintf("%-20s %-13s ops/s ×%s  p50 ×%s  p99 ×%s  p99.9 ×%s  CPU total ×%s  proxy CPU ×%s",
					name, ct, ratio(c.rps, tw2.rps), ratio(c.p50, tw2.p50), ratio(c.p99, tw2.p99), ratio(c.p999, tw2.p999),
					ratio(c.total(), tw2.total()), ratio(c.proxyCPU, tw2.proxyCPU)))
			}
		}
		for _, t := range targets[name] {
			if twin := g[t+twinSuffix]; len(twin) > 0 {
				vsB = append(vsB, fmt.Sprintf("%-20s %-13s %s", name, t, pairedDiffs(g[t], twin)))
			}
		}
		c := summarize(g[targetCicada])
		if off := summarize(g[targetCicadaOff]); c.n > 0 && off.n > 0 {
			vsOff = append(vsOff, fmt.Sprintf("%-20s ops/s ×%s  p50 ×%s  p99 ×%s  proxy CPU ×%s",
				name, ratio(c.rps, off.rps), ratio(c.p50, off.p50), ratio(c.p99, off.p99), ratio(c.proxyCPU, off.proxyCPU)))
		}
	}
	tw.Flush()
	if len(vsRedis) > 0 {
		fmt.Fprintln(w, "\nops/s ÷ direct Redis's, paired by round (geometric mean and its standard error; ops ×redis above divides medians of different rounds):")
		fmt.Fprintln(w, strings.Join(vsRedis, "\n"))
	}
	if len(vsTwem) > 0 {
		fmt.Fprintln(w, "\nCicada ÷ twemproxy (medians):")
		fmt.Fprintln(w, strings.Join(vsTwem, "\n"))
	}
	if len(vsOff) > 0 {
		fmt.Fprintln(w, "\nCicada ÷ Cicada with the cache off (cicada-off: no detection, no lookup; the detector's cost):")
		fmt.Fprintln(w, strings.Join(vsOff, "\n"))
	}
	if len(vsB) > 0 {
		fmt.Fprintln(w, "\nT+b − T (-cicada-b's binary minus -cicada's, same settings; mean ± standard error of the differences of the runs paired by round):")
		fmt.Fprintln(w, strings.Join(vsB, "\n"))
	}
	var missed, missedRuns int64
	for _, s := range r.Samples {
		if s.Missed > 0 {
			missed += s.Missed
			missedRuns++
		}
	}
	if missed > 0 {
		fmt.Fprintf(w, "\nRequests never sent: %d, in %d open-loop runs (the target or the machine fell behind the rate; their latency is not in the histograms).\n", missed, missedRuns)
	}
	fmt.Fprintf(w, "\n%d runs in %s.\n", len(r.Samples), r.Finished.Sub(r.Started).Round(time.Second))
}

// byRound pairs the samples of a and b of the same round, for the rounds
// both ran, in b's order.
func byRound(a, b []sample) [][2]sample {
	of := map[int]sample{}
	for _, s := range a {
		of[s.Round] = s
	}
	var pairs [][2]sample
	for _, sb := range b {
		if sa, ok := of[sb.Round]; ok {
			pairs = append(pairs, [2]sample{sa, sb})
		}
	}
	return pairs
}

// pairedDiffs formats the mean and standard error of b − a over the rounds
// both ran, for ops/s, p99, the proxy's and Redis's CPU per request: two
// builds run alternately in one run differ by these, the machine's drift
// between rounds cancelled.
func pairedDiffs(a, b []sample) string {
	var d [4][]float64
	for _, p := range byRound(a, b) {
		sa, sb := p[0], p[1]
		if sa.ProxyCPUus == nil || sb.ProxyCPUus == nil || sa.RedisCPUus == nil || sb.RedisCPUus == nil {
			continue
		}
		d[0] = append(d[0], sb.RPS-sa.RPS)
		d[1] = append(d[1], sb.P99Ms-sa.P99Ms)
		d[2] = append(d[2], *sb.ProxyCPUus-*sa.ProxyCPUus)
		d[3] = append(d[3], *sb.RedisCPUus-*sa.RedisCPUus)
	}
	if len(d[0]) == 0 {
		return "no paired rounds"
	}
	f := func(xs []float64, prec int) string {
		m, se := meanSE(xs)
		return fmt.Sprintf("%+.*f ± %.*f", prec, m, prec, se)
	}
	return fmt.Sprintf("ops/s %s  p99 ms %s  proxy µs/req %s  redis µs/req %s  (%d pairs)",
		f(d[0], 0), f(d[1], 3), f(d[2], 2), f(d[3], 2), len(d[0]))
}

// pairedRatio formats the geometric mean of b's ops/s over a's in the
// rounds both ran, with its standard error: from the standard error of
// the logs of the ratios (the delta method: the ratio times the logs'
// standard error). A round's two runs share the machine's phase, so the
// ratio of one round drifts less than either figure does.
func pairedRatio(a, b []sample) string {
	var logs []float64
	for _, p := range byRound(a, b) {
		if p[0].RPS > 0 && p[1].RPS > 0 {
			logs = append(logs, math.Log(p[1].RPS/p[0].RPS))
		}
	}
	if len(logs) == 0 {
		return "no paired rounds"
	}
	m, se := meanSE(logs)
	r := math.Exp(m)
	return fmt.Sprintf("×%.3f ± %.3f  (%d rounds)", r, r*se, len(logs))
}

// fixedRate reports whether ss ran an open loop at a fixed rate (the
// load generator's -rate), where every target's ops/s is the rate.
func fixedRate(ss []sample) bool {
	return len(ss) > 0 && slices.Contains(ss[0].Args, "-rate")
}

// meanSE returns the mean of xs and its standard error (the sample
// standard deviation over √n; NaN for fewer than two).
func meanSE(xs []float64) (mean, se float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, math.NaN()
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss/float64(len(xs)-1)) / math.Sqrt(float64(len(xs)))
}

func num(v float64, prec int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}
