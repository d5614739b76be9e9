// Command harness is Cicada's benchmark harness (`make bench`): it starts,
// on loopback ports it picks, a redis-server, Cicada in front of it,
// twemproxy (nutcracker) in front of the same Redis as the peer proxy, and
// the bare gnet server (test/bench/bareserver) as the physical floor. For
// each scenario it runs the load against the scenario's targets in
// alternation (for example R C T B R C T B ..., -rounds times, after one
// unrecorded warm-up run each), reads each server process's user+system
// CPU time from /proc/<pid>/stat around every run, and prints a table of
// medians and ratios; then it runs the Go micro-benchmarks (-micro) and
// prints their medians and scaling from one core to two. -json writes every
// raw sample.
//
// Targets: redis (direct), cicada (--loops -loops), cicada-off (the cache
// and its detector turned off: the detector's cost is the gap to it),
// cicada-2loops and bare-2loops (two event loops, for redis-benchmark
// --threads 2), cicada-dedicated and cicada-2loops-dedicated
// (--multiplex=false: an upstream connection per client), twemproxy, bare,
// bare-forward and bare-forward-2loops (the bare server answering the
// hottest keys' GETs and forwarding the rest to Redis: the floor under a
// caching proxy, with -loops or two event loops). With
// -loops-sweep N, a scenario's Cicada targets are cicada-1loops ...
// cicada-Nloops instead, so that one run on a machine with N cores
// measures how Cicada scales. With -cicada-b PATH, each Cicada target T
// gets a twin T+b right after it in every round, the binary at PATH with
// T's settings, and the report adds their paired differences: an
// old/new comparison of two builds alternating in one run. -targets keeps
// only the targets it matches. Flow per scenario: start the Cicada and bare
// servers it needs (a Cicada restarts when the scenario's --hot-threshold
// differs), prefill Redis directly, warm up each target,
// then the rounds. In scenarios 4 to 6 each measured run of a Cicada
// target comes right after -settle (15 s) of the same load, unmeasured:
// what Cicada caches depends on how long the traffic has lasted, and the
// other targets' runs leave it idle in between. Each measured round of
// those scenarios sends its own keys (the load generator's -seed: the
// same for every target of a round) and each settle others, so that no
// run replays what Cicada has already seen.
//
// Loopback figures: client, proxy and Redis share this machine's cores,
// so a proxy's figures include the contention it adds; they are not
// network latencies.
package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command-line settings.
type options struct {
	rounds      int
	np1, np16   int
	clients     int
	loops       int
	localKeys   int // bare-forward's -local-keys
	loopsSweep  int
	cicada      string
	cicadaB     string         // second Cicada binary ("": none), targets T+b
	targets     *regexp.Regexp // targets to run (all when it matches all)
	bare        string
	nutcracker  string
	redisServer string
	bench       string
	redisPort   int
	jsonPath    string
	only        *regexp.Regexp
	workdir     string
	loadgen     string
	goDuration  time.Duration
	settle      time.Duration
	openRate    float64
	micro       string // module directory for the Go micro-benchmarks; "" skips them
	microCount  int
}

func main() {
	var o options
	var only string
	flag.IntVar(&o.rounds, "rounds", 5, "measured runs per scenario and target (alternating targets)")
	flag.IntVar(&o.np1, "n-p1", 100000, "requests per run without pipelining (-P 1)")
	flag.IntVar(&o.np16, "n-p16", 1000000, "requests per run with -P 16")
	flag.IntVar(&o.clients, "clients", 50, "redis-benchmark connections (-c)")
	flag.IntVar(&o.loops, "loops", 1, "Cicada's --loops and the bare server's -loops (1: the single-core comparison with Redis and twemproxy)")
	flag.IntVar(&o.localKeys, "bare-local-keys", bareLocalKeys, "bare-forward targets answer GETs of key:0 to key:<N-1> themselves (18000: 63.6% of scenario 4's requests, 7000: 57.5%, 35000: 68%)")
	flag.IntVar(&o.loopsSweep, "loops-sweep", 0, "if N > 0, run each scenario's Cicada targets as cicada-1loops ... cicada-Nloops (N up to the machine's cores)")
	flag.StringVar(&o.cicada, "cicada", "bin/cicada", "Cicada binary")
	flag.StringVar(&o.cicadaB, "cicada-b", "", "a second Cicada binary: each Cicada target T gets a twin T+b run with it, alternating, and the report gives their paired differences (old/new builds)")
	var targets string
	flag.StringVar(&targets, "targets", "", "run only the targets whose name matches this regexp (e.g. '^(redis|cicada-2loops(\\+b)?)\\z': \\z, not $, which make would eat in BENCH_ARGS)")
	flag.StringVar(&o.bare, "bare", "bin/bareserver", "bare gnet server binary (test/bench/bareserver)")
	flag.StringVar(&o.nutcracker, "nutcracker", "nutcracker", "twemproxy binary")
	flag.StringVar(&o.redisServer, "redis-server", "redis-server", "redis-server binary")
	flag.StringVar(&o.bench, "redis-benchmark", "redis-benchmark", "redis-benchmark binary")
	flag.IntVar(&o.redisPort, "redis-port", 0, "Redis port on 127.0.0.1 (0: a free port)")
	flag.StringVar(&o.jsonPath, "json", "", "write every raw sample to this file as JSON")
	flag.StringVar(&only, "only", "", "run only the scenarios whose name matches this regexp")
	flag.StringVar(&o.loadgen, "loadgen", "bin/loadgen", "load generator binary for scenarios 4 to 6 (test/bench/loadgen); empty leaves them out")
	flag.DurationVar(&o.goDuration, "go-duration", 4*time.Second, "one run of scenarios 4 to 6")
	flag.DurationVar(&o.settle, "settle", 15*time.Second, "scenarios 4-6: the load a Cicada target gets, unmeasured, before each of its measured runs (what Cicada caches under sustained traffic; 0: none)")
	flag.Float64Var(&o.openRate, "open-rate", 20000, "scenario 5's fixed rate in ops/s")
	flag.StringVar(&o.micro, "micro", ".", "module directory to run the Go micro-benchmarks in (go test -bench); empty skips them")
	flag.IntVar(&o.microCount, "micro-count", 5, "runs of each micro-benchmark at each -cpu (200 ms each)")
	flag.Parse()
	if flag.NArg() > 0 {
		// make passes BENCH_ARGS split on spaces, quotes and all.
		fatal(fmt.Errorf("harness: unexpected argument %q (BENCH_ARGS is split on spaces: write -only hot.GET, not -only \"hot GET\")", flag.Arg(0)))
	}
	var err error
	if o.only, err = regexp.Compile(only); err != nil {
		fatal(err)
	}
	if o.targets, err = regexp.Compile(targets); err != nil {
		fatal(err)
	}
	if o.rounds < 1 || o.np1 < 1 || o.np16 < 1 || o.clients < 1 || o.loops < 1 || o.loopsSweep < 0 || o.localKeys < 0 {
		fatal(fmt.Errorf("harness: -rounds, -n-p1, -n-p16, -clients and -loops must be >= 1, -loops-sweep and -bare-local-keys >= 0"))
	}

	o.workdir, err = os.MkdirTemp("", "cicada-bench-")
	if err != nil {
		fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		stopAll()
		_ = os.RemoveAll(o.workdir)
		fmt.Fprintln(os.Stderr, "harness: stopped by", s)
		os.Exit(130)
	}()
	err = run(o)
	stopAll()
	if err != nil {
		if logs, _ := os.ReadDir(o.workdir); len(logs) == 0 {
			_ = os.Remove(o.workdir)
			fatal(err)
		}
		fatal(fmt.Errorf("%w (logs in %s)", err, o.workdir))
	}
	_ = os.RemoveAll(o.workdir)
}

func fatal(err error) {
	stopAll()
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// Target names. Each scenario lists the ones it runs (scenario.Targets),
// in the order of each round.
const (
	targetRedis  = "redis"
	targetCicada = "cicada" // --loops -loops (1: the single-core comparison)
	targetTwem   = "twemproxy"
	targetBare   = "bare" // -loops -loops
	// targetCicadaOff is Cicada with --cache-enabled=false: no detection,
	// no lookup, the baseline the detector's cost is measured against.
	targetCicadaOff = "cicada-off"
	// targetCicada2 and targetBare2 run two event loops, for the load of
	// redis-benchmark --threads 2.
	targetCicada2 = "cicada-2loops"
	targetBare2   = "bare-2loops"
	// targetCicadaDed and targetCicada2Ded are cicada and cicada-2loops
	// with --multiplex=false: an upstream connection per client, as
	// before lanes.
	targetCicadaDed  = "cicada-dedicated"
	targetCicada2Ded = "cicada-2loops-dedicated"
	// targetBareFwd is the bare server's forward mode with -loops event
	// loops: it answers GETs of the bareLocalKeys hottest keys itself and
	// forwards the rest to Redis on a lane per loop, batched as Cicada's
	// lanes are (test/bench/bareserver/forward.go). It is the floor under
	// a caching proxy that answers Cicada's share of the skew scenarios
	// itself. targetBareFwd2 is the same with two loops.
	targetBareFwd  = "bare-forward"
	targetBareFwd2 = "bare-forward-2loops"
)

// bareLocalKeys is how many of the skew scenarios' keys (key:0 to
// key:<bareLocalKeys-1>, the hottest) bare-forward answers itself by
// default (-bare-local-keys). Under Zipf(0.99) over 1,000,000 keys they
// draw 70.6% of the GETs, so with 90% GETs it answers 63.6% of requests,
// Cicada's share under sustained traffic (-settle; 62-65% since writes
// put their values in the cache, 57% before, when this was 7,000):
// bare-forward is then a proxy with Cicada's hits that does no work of
// its own. A cache of the 35,000 hottest keys that ignored writes would
// answer 68%; no cache that stays exact answers a key while a write to it
// is in flight, and scenario 4 writes its hottest keys every few
// milliseconds (docs/performance.md#sustained).
const bareLocalKeys = 18000

// defaultTargets are the targets of a scenario that names none.
var defaultTargets = []string{targetRedis, targetCicada, targetTwem, targetBare}

// cicadaConfig is how one Cicada target runs.
type cicadaConfig struct {
	loops     int
	threshold uint32 // --hot-threshold
	cacheOff  bool   // --cache-enabled=false
	dedicated bool   // --multiplex=false
	bin       string // the binary; "" = -cicada
}

// servers are the processes of one run of the harness. Redis and
// twemproxy live for the whole run; Cicada and bare servers start when a
// scenario first needs them, and a Cicada restarts when its
// configuration changes.
type servers struct {
	o      options
	redis  *proc
	twem   *proc
	bare   map[string]*proc // by target
	cicada map[string]*cicadaProc
}

// cicadaProc is a running Cicada.
type cicadaProc struct {
	*proc
	admin string // its admin (metrics) address
	cfg   cicadaConfig
}

func run(o options) error {
	tick := clockTicks()
	cfg := scenarioConfig{NP1: o.np1, NP16: o.np16, Clients: o.clients, Bench: o.bench,
		Loadgen: o.loadgen, GoDuration: o.goDuration, OpenRate: o.openRate, Settle: o.settle}
	var chosen []scenario
	for _, sc := range scenarios(cfg) {
		if o.only.MatchString(sc.Name) {
			if o.loopsSweep > 0 {
				sc.Targets = sweepTargets(sc.Targets, o.loopsSweep)
			}
			sc.Targets = o.pickTargets(sc.targets())
			if len(sc.Targets) == 0 {
				return fmt.Errorf("harness: %s: no target matches -targets %q", sc.Name, o.targets)
			}
			chosen = append(chosen, sc)
		}
	}
	switch {
	case len(chosen) == 0 && o.micro == "":
		return fmt.Errorf("harness: nothing to run: no scenario matches -only %q and -micro is empty", o.only)
	case len(chosen) == 0 && o.only.String() != "^$":
		return fmt.Errorf("harness: no scenario matches -only %q", o.only)
	}
	s := &servers{o: o, bare: map[string]*proc{}, cicada: map[string]*cicadaProc{}}
	if len(chosen) > 0 {
		if err := s.startFixed(); err != nil {
			return err
		}
	}
	rep := report{ClockTicksPerSecond: tick, Rounds: o.rounds, Loops: o.loops, Clients: o.clients, Settle: o.settle, Started: time.Now()}
	err := s.runScenarios(chosen, &rep, tick)
	if err == nil && o.micro != "" {
		fmt.Fprintln(os.Stderr, "Go micro-benchmarks: go test -bench ... -benchmem -cpu 1,2")
		var raw bytes.Buffer
		rep.Micro, err = runMicro(o.micro, o.microCount, 200*time.Millisecond, &raw)
		rep.MicroOutput = raw.String()
	}
	// What was measured is printed and kept even when a later step failed.
	rep.Finished = time.Now()
	if err != nil {
		rep.Incomplete = err.Error()
	}
	if len(rep.Samples) > 0 {
		printTable(os.Stdout, rep)
	}
	if len(rep.Micro) > 0 {
		printMicro(os.Stdout, rep.Micro)
	}
	if o.jsonPath != "" && (len(rep.Samples) > 0 || len(rep.Micro) > 0) {
		b, jerr := json.MarshalIndent(rep, "", "  ")
		if jerr == nil { // whole or not at all, even if a signal ends the harness
			tmp := o.jsonPath + ".tmp"
			if jerr = os.WriteFile(tmp, b, 0o644); jerr == nil {
				jerr = os.Rename(tmp, o.jsonPath)
			}
		}
		if jerr != nil {
			return errors.Join(err, jerr)
		}
		fmt.Fprintln(os.Stderr, "raw samples in", o.jsonPath)
	}
	return err
}

// runScenarios runs the chosen scenarios' rounds, appending each sample to
// rep as it is measured.
func (s *servers) runScenarios(chosen []scenario, rep *report, tick int64) error {
	for _, sc := range chosen {
		targets := sc.targets()
		if sc.Alone {
			s.stopCicadasBut(nil) // each target starts alone, below
		} else {
			s.stopCicadasBut(targets)
			for _, t := range targets {
				if err := s.ensure(t, sc.HotThreshold); err != nil {
					return err
				}
			}
		}
		if err := sc.Prefill(s.redis.addr); err != nil {
			return fmt.Errorf("harness: %s: prefill: %w", sc.Name, err)
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", sc.Name, sc.Load.Args("HOST:PORT")[1:])
		warmUp := func(t string) error { // connections, hot detection, cache fill
			if err := sc.Load.WarmUp(s.addr(t)); err != nil {
				return fmt.Errorf("harness: %s: warm-up on %s: %w", sc.Name, t, err)
			}
			return nil
		}
		for _, t := range targets {
			if sc.Alone {
				if _, isCicada := s.o.cicadaFor(t, sc.HotThreshold); isCicada {
					continue // started again, and warmed or settled, in each round
				}
				if err := s.ensure(t, sc.HotThreshold); err != nil {
					return err
				}
			}
			if err := warmUp(t); err != nil {
				return err
			}
		}
		for r := 0; r < s.o.rounds; r++ {
			rsc := sc.forRound(r)
			for _, t := range roundOrder(targets, r) {
				if sc.Alone {
					started, err := s.alone(t, sc.HotThreshold)
					if err != nil {
						return err
					}
					if started && sc.Settle == nil {
						if err := warmUp(t); err != nil {
							return err
						}
					}
				}
				if sc.Settle != nil && s.cicada[t] != nil {
					if err := sc.Settle(s.addr(t), r); err != nil {
						return fmt.Errorf("harness: %s: settling %s, round %d: %w", sc.Name, t, r+1, err)
					}
				}
				smp, err := s.measure(rsc, t, r, tick)
				if err != nil {
					return err
				}
				kinds := ""
				if smp.GetP99Ms > 0 && smp.SetP99Ms > 0 {
					kinds = fmt.Sprintf("  (GET p50 %.3f p99 %.3f, SET p50 %.3f p99 %.3f ms)", smp.GetP50Ms, smp.GetP99Ms, smp.SetP50Ms, smp.SetP99Ms)
				}
				fmt.Fprintf(os.Stderr, "  round %d %-13s %10.0f ops/s  p50 %.3f  p99 %.3f  p99.9 %.3f ms%s\n",
					r+1, t, smp.RPS, smp.P50Ms, smp.P99Ms, smp.P999Ms, kinds)
				rep.Samples = append(rep.Samples, smp)
			}
		}
	}
	return nil
}

// addr is where the load for target t goes.
func (s *servers) addr(t string) string {
	switch {
	case s.cicada[t] != nil:
		return s.cicada[t].addr
	case s.bare[t] != nil:
		return s.bare[t].addr
	case t == targetTwem:
		return s.twem.addr
	}
	return s.redis.addr
}

// startFixed starts the processes that live for the whole run: Redis and
// twemproxy.
func (s *servers) startFixed() error {
	o := s.o
	for _, bin := range []string{o.cicada, cmp.Or(o.cicadaB, o.cicada), o.bare, o.nutcracker, o.redisServer, o.bench} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("harness: %w (`make bench` installs and builds what is missing)", err)
		}
	}
	raddr := "127.0.0.1:" + strconv.Itoa(o.redisPort)
	if o.redisPort == 0 {
		var err error
		if raddr, err = freeAddr(); err != nil {
			return err
		}
	}
	_, port := splitAddr(raddr)
	var err error
	s.redis, err = start("redis-server", raddr, filepath.Join(o.workdir, "redis.log"),
		o.redisServer, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--dir", o.workdir, "--daemonize", "no")
	if err != nil {
		return err
	}
	if err := s.redis.waitGET(hotKey); err != nil {
		return err
	}
	if err := s.redis.ownsRedis(); err != nil {
		return err
	}

	taddr, err := freeAddr()
	if err != nil {
		return err
	}
	stats, err := freeAddr()
	if err != nil {
		return err
	}
	conf, err := writeFile(o.workdir, "nutcracker.yml", nutcrackerConf(taddr, raddr))
	if err != nil {
		return err
	}
	_, statsPort := splitAddr(stats)
	s.twem, err = start("nutcracker", taddr, filepath.Join(o.workdir, "nutcracker.out"),
		o.nutcracker, "-c", conf, "-o", filepath.Join(o.workdir, "nutcracker.log"),
		"-p", filepath.Join(o.workdir, "nutcracker.pid"), "-a", "127.0.0.1", "-s", statsPort, "-v", "4")
	if err != nil {
		return err
	}
	if err := s.twem.waitGET(hotKey); err != nil {
		return err
	}

	return nil
}

// ensure starts target t's process if it is a Cicada or a bare server not
// running yet, and restarts a Cicada running with other settings.
func (s *servers) ensure(t string, threshold uint32) error {
	if cfg, ok := s.o.cicadaFor(t, threshold); ok {
		return s.ensureCicada(t, cfg)
	}
	switch t {
	case targetBare:
		return s.ensureBare(t, s.o.loops)
	case targetBare2:
		return s.ensureBare(t, 2)
	case targetBareFwd:
		return s.ensureBareFwd(t, s.o.loops)
	case targetBareFwd2:
		return s.ensureBareFwd(t, 2)
	}
	return nil
}

// cicadaFor returns the settings of target t in a scenario run at
// --hot-threshold threshold, and whether t is a Cicada target at all. A
// twin (T+b) has T's settings and the -cicada-b binary.
func (o options) cicadaFor(t string, threshold uint32) (cicadaConfig, bool) {
	if base, ok := strings.CutSuffix(t, twinSuffix); ok {
		cfg, ok := o.cicadaFor(base, threshold)
		cfg.bin = o.cicadaB
		return cfg, ok
	}
	cfg := cicadaConfig{loops: o.loops, threshold: threshold}
	switch t {
	case targetCicada:
	case targetCicadaOff:
		cfg.cacheOff = true
	case targetCicada2:
		cfg.loops = 2
	case targetCicadaDed:
		cfg.dedicated = true
	case targetCicada2Ded:
		cfg.loops, cfg.dedicated = 2, true
	default:
		n, ok := sweepLoops(t)
		if !ok {
			return cicadaConfig{}, false
		}
		cfg.loops = n
	}
	return cfg, true
}

// roundOrder is the order of targets in round r (0-based): as listed, but
// in odd rounds each twin runs before its target, so that neither build
// of a pair always runs first (ABBA).
func roundOrder(targets []string, r int) []string {
	if r%2 == 0 {
		return targets
	}
	out := slices.Clone(targets)
	for i := 0; i+1 < len(out); i++ {
		if out[i+1] == out[i]+twinSuffix {
			out[i], out[i+1] = out[i+1], out[i]
			i++
		}
	}
	return out
}

// twinSuffix marks the target that runs -cicada-b with the settings of
// the target named without it.
const twinSuffix = "+b"

// pickTargets adds, with -cicada-b, the twin T+b after each Cicada target
// T of ts, then keeps the targets -targets matches.
func (o options) pickTargets(ts []string) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t)
		if _, ok := o.cicadaFor(t, 0); ok && o.cicadaB != "" {
			out = append(out, t+twinSuffix)
		}
	}
	return slices.DeleteFunc(out, func(t string) bool { return !o.targets.MatchString(t) })
}

// sweepTargets replaces the Cicada targets among ts (cicada,
// cicada-2loops; not cicada-off) by cicada-1loops ... cicada-<n>loops, in
// their place.
func sweepTargets(ts []string, n int) []string {
	var out []string
	swept := false
	for _, t := range ts {
		if t != targetCicada && t != targetCicada2 {
			out = append(out, t)
			continue
		}
		if !swept {
			for k := 1; k <= n; k++ {
				out = append(out, "cicada-"+strconv.Itoa(k)+"loops")
			}
			swept = true
		}
	}
	return out
}

// sweepLoops reads the loop count of a target sweepTargets named.
func sweepLoops(t string) (int, bool) {
	s, ok := strings.CutPrefix(t, "cicada-")
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, "loops")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n > 0
}

// ensureBare starts the bare server of target t with loops event loops and
// the further flags args.
func (s *servers) ensureBare(t string, loops int, args ...string) error {
	if s.bare[t] != nil {
		return nil
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	argv := append([]string{s.o.bare, "-addr", addr, "-loops", strconv.Itoa(loops)}, args...)
	p, err := start(t, addr, filepath.Join(s.o.workdir, t+".log"), argv...)
	if err != nil {
		return err
	}
	s.bare[t] = p
	return p.waitGET(hotKey)
}

// ensureBareFwd starts bare-forward target t with loops event loops,
// forwarding to the harness's Redis.
func (s *servers) ensureBareFwd(t string, loops int) error {
	return s.ensureBare(t, loops, "-upstream", s.redis.addr, "-local-keys", strconv.Itoa(s.o.localKeys),
		"-value-bytes", strconv.Itoa(skewValueBytes))
}

// stopCicadasBut stops every running Cicada that is not one of targets.
// Each Cicada subscribes to Redis's keyspace notifications, so an idle
// one left from an earlier scenario would cost Redis a notification per
// write and wake itself for each, in every target's rounds: with five
// idle Cicadas, Redis alone served scenario 4's load 20% slower
// (docs/performance.md). In a scenario that writes (scenario.Alone) each
// target also runs without the scenario's other Cicadas (alone).
func (s *servers) stopCicadasBut(targets []string) {
	for t, c := range s.cicada {
		if !slices.Contains(targets, t) {
			c.stop()
			delete(s.cicada, t)
		}
	}
}

// alone stops every Cicada but target t's and starts t's process if it
// is not running (scenario.Alone); started reports a Cicada just started.
func (s *servers) alone(t string, threshold uint32) (started bool, err error) {
	s.stopCicadasBut([]string{t})
	_, isCicada := s.o.cicadaFor(t, threshold)
	started = isCicada && s.cicada[t] == nil
	return started, s.ensure(t, threshold)
}

// ensureCicada runs Cicada target t with configuration cfg, restarting it
// if it runs with another.
func (s *servers) ensureCicada(t string, cfg cicadaConfig) error {
	if c := s.cicada[t]; c != nil {
		if c.cfg == cfg {
			return nil
		}
		c.stop()
		delete(s.cicada, t)
	}
	caddr, err := freeAddr()
	if err != nil {
		return err
	}
	admin, err := freeAddr()
	if err != nil {
		return err
	}
	bin := cmp.Or(cfg.bin, s.o.cicada)
	p, err := start(t, caddr, filepath.Join(s.o.workdir, t+".log"),
		bin, "--listen", caddr, "--admin", admin, "--local-admin", "", "--upstream", s.redis.addr,
		"--hot-threshold", strconv.FormatUint(uint64(cfg.threshold), 10), "--log-level", "warn",
		"--loops", strconv.Itoa(cfg.loops), "--cache-enabled="+strconv.FormatBool(!cfg.cacheOff),
		"--multiplex="+strconv.FormatBool(!cfg.dedicated))
	if err != nil {
		return err
	}
	if err := p.waitHTTP200("http://" + admin + "/readyz"); err != nil {
		return err
	}
	if err := p.waitGET(hotKey); err != nil {
		return err
	}
	s.cicada[t] = &cicadaProc{proc: p, admin: admin, cfg: cfg}
	return nil
}

// measure runs the scenario's load once against target t and reads the
// CPU time of the processes serving it around the run.
func (s *servers) measure(sc scenario, t string, round int, tick int64) (sample, error) {
	var proxy, redis *proc
	c := s.cicada[t]
	switch {
	case t == targetRedis:
		redis = s.redis
	case c != nil:
		proxy, redis = c.proc, s.redis
	case t == targetTwem:
		proxy, redis = s.twem, s.redis
	case t == targetBareFwd || t == targetBareFwd2:
		proxy, redis = s.bare[t], s.redis
	default:
		proxy = s.bare[t]
	}
	smp := sample{Scenario: sc.Name, Target: t, Round: round + 1, Args: sc.Load.Args(s.addr(t))}
	var hits0 float64
	if c != nil {
		var err error
		if hits0, err = fetchMetric(c.admin, "cicada_cache_hits_total"); err != nil {
			return smp, fmt.Errorf("harness: cicada metrics: %w", err)
		}
	}
	p0, r0, err := ticksOf(proxy, redis)
	if err != nil {
		return smp, err
	}
	stop, peak := make(chan struct{}), make(chan int64, 1)
	if redis != nil {
		go clientMemory(redis.addr, stop, peak)
	}
	begin := time.Now()
	res, raw, err := sc.Load.Run(s.addr(t))
	close(stop)
	if redis != nil {
		if b := <-peak; b >= 0 {
			mb := float64(b) / (1 << 20)
			smp.RedisClientMB = &mb
		}
	}
	if err != nil {
		return smp, fmt.Errorf("harness: %s on %s, round %d: %w", sc.Name, t, round+1, err)
	}
	smp.WallSeconds = time.Since(begin).Seconds()
	p1, r1, err := ticksOf(proxy, redis)
	if err != nil {
		return smp, err
	}
	smp.benchResult = res
	smp.Output = trimProgress(raw)
	smp.LoadCPUus = res.LoadCPUSeconds * 1e6 / float64(res.Requests)
	perReq := func(ticks int64) *float64 {
		v := float64(ticks) / float64(tick) * 1e6 / float64(res.Requests)
		return &v
	}
	if proxy != nil {
		smp.ProxyTicks = p1 - p0
		smp.ProxyCPUus = perReq(p1 - p0)
	}
	if redis != nil {
		smp.RedisTicks = r1 - r0
		smp.RedisCPUus = perReq(r1 - r0)
	}
	if c != nil {
		hits1, err := fetchMetric(c.admin, "cicada_cache_hits_total")
		if err != nil {
			return smp, fmt.Errorf("harness: cicada metrics: %w", err)
		}
		h := hits1 - hits0
		smp.CacheHits = &h
	}
	return smp, nil
}

// ticksOf reads the CPU ticks of proxy and redis; a nil process reads 0.
func ticksOf(proxy, redis *proc) (p, r int64, err error) {
	if proxy != nil {
		if p, err = cpuTicks(proxy.pid()); err != nil {
			return
		}
	}
	if redis != nil {
		r, err = cpuTicks(redis.pid())
	}
	return
}

// trimProgress drops redis-benchmark's '\r'-separated progress lines
// from the start of its output.
func trimProgress(out []byte) string {
	s := string(out)
	first, _, _ := strings.Cut(s, "\n")
	if i := strings.LastIndexByte(first, '\r'); i >= 0 {
		s = s[i+1:]
	}
	return s
}
