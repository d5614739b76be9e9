package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	lgreport "github.com/cicada-proxy/cicada/test/bench/loadgen/report"
)

// goLoad runs the Go load generator (test/bench/loadgen) for scenarios 4
// and 5, which redis-benchmark cannot produce: a Zipf-skewed key space
// with 90% GET / 10% SET, and a fixed-rate open loop timed from intended
// send times. Its -json output is one object per run.
type goLoad struct {
	Bin      string
	Duration time.Duration // measured time of one run
	Flags    []string      // the scenario's shape (-c, -scenario, -rate)
	// Seed is the load generator's -seed; 0 leaves its default (1), which
	// the warm-up uses. Every run with one seed sends the same keys in
	// the same order on each connection.
	Seed uint64
}

func (g goLoad) Args(addr string) []string {
	args := append([]string{g.Bin, "-addr", addr, "-json", "-duration", g.Duration.String()}, g.Flags...)
	if g.Seed != 0 {
		args = append(args, "-seed", strconv.FormatUint(g.Seed, 10))
	}
	return args
}

// Round is the load of measured round r (0-based): seed r + 2, the same
// for every target of the round and no other run's. With one seed for
// every run, each run replayed the keys the runs before it began with:
// Cicada, settled and measured on the same trace, had the measured run's
// keys cached from the settle, and answered 68-70% of scenario 4's
// requests from the cache, more than a cache of the 100,000 most-read
// keys could (about 66%).
func (g goLoad) Round(r int) Load {
	g.Seed = uint64(r) + 2
	return g
}

// settleSeed is the seed of the settle before a measured run of round r:
// above every round's.
func settleSeed(r int) uint64 { return 1<<32 + uint64(r) }

// WarmUp runs one second of the load.
func (g goLoad) WarmUp(addr string) error { return g.runFor(time.Second)(addr) }

// runFor returns a function that applies the load to an address for d,
// unmeasured.
func (g goLoad) runFor(d time.Duration) func(addr string) error {
	g.Duration = d
	return func(addr string) error {
		_, _, err := g.Run(addr)
		return err
	}
}

func (g goLoad) Run(addr string) (benchResult, []byte, error) {
	return runLoad(g.Args(addr), parseLoadgenJSON)
}

// parseLoadgenJSON reads one run of the load generator. A run with error
// replies or none completed is an error; requests it never sent (an open
// loop the target, or a busy machine, could not keep up with) are counted
// in Missed, and the table says so.
func parseLoadgenJSON(out []byte) (benchResult, error) {
	var r lgreport.Run
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		return benchResult{}, fmt.Errorf("loadgen output: %w", err)
	}
	res := benchResult{Requests: r.Ops, RPS: r.OpsPerSec, P50Ms: r.P50us / 1000, P99Ms: r.P99us / 1000,
		P999Ms: r.P999us / 1000, MaxMs: r.MaxUs / 1000, Missed: r.Missed,
		GetP50Ms: r.GetP50us / 1000, GetP99Ms: r.GetP99us / 1000, SetP50Ms: r.SetP50us / 1000, SetP99Ms: r.SetP99us / 1000}
	switch {
	case r.Ops == 0:
		return res, fmt.Errorf("loadgen: no request completed")
	case r.Errors > 0:
		return res, fmt.Errorf("loadgen: %d error replies", r.Errors)
	}
	return res, nil
}

// skewValueBytes is the size of the skew scenarios' values: the load
// generator's -value-size default.
const skewValueBytes = 100

// prefillSkew writes the skew scenarios' key space (key:0 to key:999999,
// skewValueBytes-byte values) with the load generator.
func prefillSkew(bin string) func(addr string) error {
	return func(addr string) error {
		ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "-addr", addr, "-prefill", "-duration", "0")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s -prefill: %w: %s", bin, err, out)
		}
		return nil
	}
}

// goScenarios are scenarios 4 to 6.
func goScenarios(c scenarioConfig) []scenario {
	load := func(flags ...string) goLoad {
		return goLoad{Bin: c.Loadgen, Duration: c.GoDuration, Flags: flags}
	}
	// settle is what runs before each measured run of a Cicada target:
	// the same load for c.Settle (nil when 0), with keys of its own
	// (settleSeed), so the measured run is not a replay of it.
	settle := func(l goLoad) func(addr string, round int) error {
		if c.Settle <= 0 {
			return nil
		}
		return func(addr string, round int) error {
			l.Seed = settleSeed(round)
			return l.runFor(c.Settle)(addr)
		}
	}
	skew := load("-c", "200")
	open := load("-scenario", "open", "-c", "50", "-rate", strconv.FormatFloat(c.OpenRate, 'f', -1, 64))
	many := load("-c", "2000")
	return []scenario{{
		Name:         "4 skew 90/10 c200",
		HotThreshold: defaultThreshold,
		Prefill:      prefillSkew(c.Loadgen),
		Load:         skew,
		Settle:       settle(skew),
		Alone:        true,
		// Redis cannot use the second core; Cicada with two loops can.
		// The bare server, answering every request itself, is the most
		// any proxy could reach with this load generator on this machine;
		// bare-forward-2loops, answering Cicada's share of hits itself and
		// forwarding the rest, the most a caching proxy could. Cicada
		// with one loop (the harness's -loops) too: on two cores shared
		// with Redis and the load generator, whether a second loop pays
		// for the CPU it adds per request.
		Targets: []string{targetRedis, targetCicada2, targetCicada, targetCicada2Ded, targetTwem, targetBare, targetBareFwd2},
	}, {
		Name:         "5 open " + strconv.FormatFloat(c.OpenRate, 'f', -1, 64) + "/s",
		HotThreshold: defaultThreshold,
		Prefill:      prefillSkew(c.Loadgen),
		Load:         open,
		Settle:       settle(open),
		Alone:        true,
		// bare-forward: the least latency a caching proxy with Cicada's
		// loops could add on this machine.
		Targets: []string{targetRedis, targetCicada, targetCicadaDed, targetTwem, targetBareFwd},
	}, {
		// Application fleets hold thousands of connections; Redis's cost
		// per connection (reads, writes, client buffers) shows here.
		Name:         "6 skew 90/10 c2000",
		HotThreshold: defaultThreshold,
		Prefill:      prefillSkew(c.Loadgen),
		Load:         many,
		Settle:       settle(many),
		Alone:        true,
		Targets:      []string{targetRedis, targetCicada2, targetCicada2Ded, targetTwem},
	}}
}
