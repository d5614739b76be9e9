package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// runTimeout bounds one load run.
const runTimeout = 3 * time.Minute

// valueBytes is the size of every value the scenarios store and read, the
// same as the bare server's fixed reply.
const valueBytes = 64

// Keys of the scenarios. redis-benchmark's -t get without -r reads the
// literal key "key:__rand_int__"; with -r N it reads and writes
// key:%012d for random numbers below N.
const (
	hotKey     = "key:__rand_int__"
	hotHash    = "hot:hash"
	hotField   = "field"
	missKeys   = 100000
	missKeyFmt = "key:%012d"
)

// Load generates one scenario's load against one address and reports what
// it measured. redisBenchmark is the implementation for scenarios 1 to 3;
// scenarios 4 to 6 plug in the Go load generator by implementing Load
// and adding their scenario in scenarios (below).
type Load interface {
	// Args describes the load for the report (a command line or a
	// summary).
	Args(addr string) []string
	// Run applies the load to addr once and returns its figures and the
	// raw output it parsed them from (kept in the JSON report).
	Run(addr string) (benchResult, []byte, error)
	// WarmUp applies a short version of the load to addr, unmeasured:
	// connections made, hot keys detected, caches filled.
	WarmUp(addr string) error
}

// defaultThreshold is Cicada's default --hot-threshold (cmd/cicada), the
// floor below which no key is filled: the realistic scenarios run Cicada
// as it ships.
const defaultThreshold = 1

// scenario is one row group of the table: a load, the data it needs in
// Redis, and how Cicada is configured for it.
type scenario struct {
	Name string
	// HotThreshold is Cicada's --hot-threshold (ops/s on one key) for
	// this scenario: 1 where a key is meant to be hot from its first
	// request, the default (defaultThreshold) for realistic traffic.
	HotThreshold uint32
	// Prefill writes the scenario's data to the Redis at addr.
	Prefill func(addr string) error
	Load    Load
	// Targets are the targets it runs against, in each round's order;
	// nil: defaultTargets.
	Targets []string
	// Settle, if not nil, applies the load to a Cicada target's address,
	// unmeasured, before each of its measured runs. What Cicada caches
	// depends on how long the traffic has lasted, and the rounds of the
	// other targets leave it idle: with Zipf traffic over 1,000,000 keys
	// a round that began after such a pause answered 70% of requests
	// from the cache, against 47-50% under sustained load (the admission
	// floor falls back while no key is read, so the next round's first
	// seconds fill widely; docs/performance.md). round is the measured
	// run's (0-based).
	Settle func(addr string, round int) error
	// Alone: no other Cicada runs during a target's warm-up, settle and
	// measured runs (each is stopped; a Cicada target starts again for
	// its own). For the scenarios that write: every running Cicada
	// subscribes to Redis's keyspace notifications, so an idle one costs
	// Redis a notification per write and itself CPU for each, on the
	// cores the measured run shares (under scenario 4's load, 3.6% of a
	// core for each idle Cicada, about 4 µs per notification;
	// 2026-12-05), a cost no deployment has: one Cicada fronts a Redis.
	Alone bool
}

// roundLoad is a Load whose traffic differs per round: Round(r) is the
// load of round r (0-based), the same for every target of the round.
type roundLoad interface {
	Round(r int) Load
}

// forRound is sc with the load of round r, where its load differs per
// round.
func (sc scenario) forRound(r int) scenario {
	if rl, ok := sc.Load.(roundLoad); ok {
		sc.Load = rl.Round(r)
	}
	return sc
}

func (sc scenario) targets() []string {
	if sc.Targets == nil {
		return defaultTargets
	}
	return sc.Targets
}

// scenarioConfig holds the request counts and the load's shape.
type scenarioConfig struct {
	NP1, NP16 int // requests per run with -P 1 and with -P 16
	Clients   int
	Bench     string // redis-benchmark binary
	// Loadgen is the load generator binary (scenarios 4 to 6), "" to
	// leave them out; GoDuration is one of its runs, OpenRate scenario
	// 5's rate in ops/s.
	Loadgen    string
	GoDuration time.Duration
	OpenRate   float64
	// Settle is how long scenarios 4 to 6 run on a Cicada target before
	// each measured run (scenario.Settle); 0: not at all.
	Settle time.Duration
}

// scenarios returns the scenarios in the order they run.
func scenarios(c scenarioConfig) []scenario {
	rbThreads := func(threads, pipeline int, args ...string) redisBenchmark {
		n := c.NP1
		if pipeline > 1 {
			n = c.NP16
		}
		return redisBenchmark{Bin: c.Bench, Clients: c.Clients, Pipeline: pipeline, Requests: n, Threads: threads, Extra: args}
	}
	rb := func(pipeline int, args ...string) Load { return rbThreads(1, pipeline, args...) }
	var out []scenario
	for _, p := range []int{16, 1} {
		out = append(out, scenario{
			Name:         "1 hot GET -P" + strconv.Itoa(p),
			HotThreshold: 1,
			Prefill:      prefillHotKey,
			Load:         rb(p, "-t", "get"),
		})
	}
	// Two event loops against a two-thread load generator: Redis stays
	// on one core; twice the requests, as both sides are faster.
	for _, p := range []int{16, 1} {
		l := rbThreads(2, p, "-t", "get")
		l.Requests *= 2
		out = append(out, scenario{
			Name:         "1 hot GET -P" + strconv.Itoa(p) + " 2 loops",
			HotThreshold: 1,
			Prefill:      prefillHotKey,
			Load:         l,
			Targets:      []string{targetRedis, targetCicada2, targetBare2},
		})
	}
	for _, p := range []int{16, 1} {
		out = append(out, scenario{
			Name:         "2 hot HGET -P" + strconv.Itoa(p),
			HotThreshold: 1,
			Prefill:      prefillHotHash,
			Load:         rb(p, "hget", hotHash, hotField),
		})
	}
	for _, cmd := range []string{"get", "set"} {
		for _, p := range []int{1, 16} {
			l := rbThreads(1, p, "-t", cmd, "-r", strconv.Itoa(missKeys))
			if cmd == "set" && p > 1 {
				l.Requests = l.Requests * 2 / 5 // Redis SETs at -P 16 are ~2.5x slower than GETs
			}
			out = append(out, scenario{
				Name:         fmt.Sprintf("3 miss %s -P%d", cmdUpper(cmd), p),
				HotThreshold: 1000, // a floor no key reaches (each is read about once a second): the miss path
				Prefill:      prefillMissKeys,
				Load:         l,
				Alone:        cmd == "set",
				// cicada-off: the detector's cost is the gap to it.
				Targets: []string{targetRedis, targetCicada, targetCicadaDed, targetCicadaOff, targetTwem},
			})
		}
	}
	if c.Loadgen != "" {
		out = append(out, goScenarios(c)...)
	}
	return out
}

func cmdUpper(s string) string { return string(bytes.ToUpper([]byte(s))) }

func value() string { return string(bytes.Repeat([]byte{'x'}, valueBytes)) }

func prefillHotKey(addr string) error {
	return pipeline(addr, [][]byte{command("SET", hotKey, value())}, "+OK")
}

func prefillHotHash(addr string) error {
	return pipeline(addr, [][]byte{command("DEL", hotHash), command("HSET", hotHash, hotField, value())}, ":")
}

func prefillMissKeys(addr string) error {
	reqs := make([][]byte, missKeys)
	v := value()
	for i := range reqs {
		reqs[i] = command("SET", fmt.Sprintf(missKeyFmt, i), v)
	}
	return pipeline(addr, reqs, "+OK")
}

// redisBenchmark runs redis-benchmark (7.0) with its full output (not -q,
// not --csv: only the full output has the percentile table p99.9 comes
// from).
type redisBenchmark struct {
	Bin      string
	Clients  int
	Pipeline int
	Requests int
	Threads  int      // --threads; 1 runs without it
	Extra    []string // -t get, or a custom command
}

func (r redisBenchmark) Args(addr string) []string {
	host, port := splitAddr(addr)
	a := []string{r.Bin, "-h", host, "-p", port, "-c", strconv.Itoa(r.Clients),
		"-n", strconv.Itoa(r.Requests), "-P", strconv.Itoa(r.Pipeline), "-d", strconv.Itoa(valueBytes)}
	if r.Threads > 1 {
		a = append(a, "--threads", strconv.Itoa(r.Threads))
	}
	return append(a, r.Extra...)
}

// WarmUp runs a tenth of the requests (at least 1,000).
func (r redisBenchmark) WarmUp(addr string) error {
	r.Requests = max(r.Requests/10, 1000)
	_, _, err := r.Run(addr)
	return err
}

func (r redisBenchmark) Run(addr string) (benchResult, []byte, error) {
	return runLoad(r.Args(addr), parseBenchOutput)
}

// runLoad runs argv (within runTimeout, killed with the harness), parses
// its standard output and adds the process's CPU time.
func runLoad(argv []string, parse func([]byte) (benchResult, error)) (benchResult, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return benchResult{}, out, fmt.Errorf("harness: %v: %w: %s", argv, err, stderr.Bytes())
	}
	res, err := parse(out)
	if err != nil {
		return res, out, fmt.Errorf("harness: %v: %w", argv, err)
	}
	res.LoadCPUSeconds = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	return res, out, nil
}

// splitAddr splits host:port; a malformed address gives it whole as host.
func splitAddr(addr string) (host, port string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, ""
	}
	return host, port
}
