// Command harness is Cicada's benchmark harness (`make bench`): it starts,
// on loopback ports it picks, a redis-server, Cicada in front of it,
// twemproxy (nutcracker) in front of the same Redis as the peer proxy, and
// the bare gnet server (test/bench/bareserver) as the physical floor. For
// each scenario it runs the load against direct Redis, Cicada, twemproxy
// and the bare server in alternation (R C T B R C T B ..., -rounds times,
// after one unrecorded warm-up run each), reads each server process's
// user+system CPU time from /proc/<pid>/stat around every run, and prints
// a table of medians and ratios. -json writes every raw sample.
//
// Flow per scenario: (re)start Cicada with the scenario's --hot-threshold,
// prefill Redis directly, warm up each target, then the rounds.
//
// Loopback figures: client, proxy and Redis share this machine's cores,
// so a proxy's figures include the contention it adds; they are not
// network latencies.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
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
	cicada      string
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
	openRate    float64
}

func main() {
	var o options
	var only string
	flag.IntVar(&o.rounds, "rounds", 5, "measured runs per scenario and target (alternating targets)")
	flag.IntVar(&o.np1, "n-p1", 100000, "requests per run without pipelining (-P 1)")
	flag.IntVar(&o.np16, "n-p16", 1000000, "requests per run with -P 16")
	flag.IntVar(&o.clients, "clients", 50, "redis-benchmark connections (-c)")
	flag.IntVar(&o.loops, "loops", 1, "Cicada's --loops and the bare server's -loops (1: the single-core comparison with Redis and twemproxy)")
	flag.StringVar(&o.cicada, "cicada", "bin/cicada", "Cicada binary")
	flag.StringVar(&o.bare, "bare", "bin/bareserver", "bare gnet server binary (test/bench/bareserver)")
	flag.StringVar(&o.nutcracker, "nutcracker", "nutcracker", "twemproxy binary")
	flag.StringVar(&o.redisServer, "redis-server", "redis-server", "redis-server binary")
	flag.StringVar(&o.bench, "redis-benchmark", "redis-benchmark", "redis-benchmark binary")
	flag.IntVar(&o.redisPort, "redis-port", 0, "Redis port on 127.0.0.1 (0: a free port)")
	flag.StringVar(&o.jsonPath, "json", "", "write every raw sample to this file as JSON")
	flag.StringVar(&only, "only", "", "run only the scenarios whose name matches this regexp")
	flag.StringVar(&o.loadgen, "loadgen", "bin/loadgen", "load generator binary for scenarios 4 and 5 (test/bench/loadgen); empty leaves them out")
	flag.DurationVar(&o.goDuration, "go-duration", 5*time.Second, "one run of scenarios 4 and 5")
	flag.Float64Var(&o.openRate, "open-rate", 20000, "scenario 5's fixed rate in ops/s")
	flag.Parse()
	var err error
	if o.only, err = regexp.Compile(only); err != nil {
		fatal(err)
	}
	if o.rounds < 1 || o.np1 < 1 || o.np16 < 1 || o.clients < 1 || o.loops < 1 {
		fatal(fmt.Errorf("harness: -rounds, -n-p1, -n-p16, -clients and -loops must be >= 1"))
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		stopAll()
		fmt.Fprintln(os.Stderr, "harness: stopped by", s)
		os.Exit(130)
	}()

	o.workdir, err = os.MkdirTemp("", "cicada-bench-")
	if err != nil {
		fatal(err)
	}
	err = run(o)
	stopAll()
	if err != nil {
		fatal(fmt.Errorf("%w (logs in %s)", err, o.workdir))
	}
	_ = os.RemoveAll(o.workdir)
}

func fatal(err error) {
	stopAll()
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// Target names, in the order of each round.
const (
	targetRedis  = "redis"
	targetCicada = "cicada"
	targetTwem   = "twemproxy"
	targetBare   = "bare"
)

var targetOrder = []string{targetRedis, targetCicada, targetTwem, targetBare}

// servers are the processes of one run of the harness.
type servers struct {
	o         options
	redis     *proc
	twem      *proc
	bare      *proc
	cicada    *proc  // restarted per scenario
	admin     string // Cicada's admin address
	threshold uint32 // Cicada's current --hot-threshold
}

func run(o options) error {
	tick := clockTicks()
	s := &servers{o: o}
	if err := s.startFixed(); err != nil {
		return err
	}
	rep := report{ClockTicksPerSecond: tick, Rounds: o.rounds, Loops: o.loops, Clients: o.clients, Started: time.Now()}
	cfg := scenarioConfig{NP1: o.np1, NP16: o.np16, Clients: o.clients, Bench: o.bench,
		Loadgen: o.loadgen, GoDuration: o.goDuration, OpenRate: o.openRate}
	for _, sc := range scenarios(cfg) {
		if !o.only.MatchString(sc.Name) {
			continue
		}
		if err := s.ensureCicada(sc.HotThreshold); err != nil {
			return err
		}
		if err := sc.Prefill(s.redis.addr); err != nil {
			return fmt.Errorf("harness: %s: prefill: %w", sc.Name, err)
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", sc.Name, sc.Load.Args("HOST:PORT")[1:])
		for _, t := range targetOrder { // warm-up: connections, hot detection, cache fill
			if err := sc.Load.WarmUp(s.addr(t)); err != nil {
				return fmt.Errorf("harness: %s: warm-up on %s: %w", sc.Name, t, err)
			}
		}
		for r := 0; r < o.rounds; r++ {
			for _, t := range targetOrder {
				smp, err := s.measure(sc, t, r, tick)
				if err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "  round %d %-9s %10.0f ops/s  p50 %.3f  p99 %.3f  p99.9 %.3f ms\n",
					r+1, t, smp.RPS, smp.P50Ms, smp.P99Ms, smp.P999Ms)
				rep.Samples = append(rep.Samples, smp)
			}
		}
	}
	rep.Finished = time.Now()
	printTable(os.Stdout, rep)
	if o.jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonPath, b, 0o644); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "raw samples in", o.jsonPath)
	}
	return nil
}

// addr is where the load for target t goes.
func (s *servers) addr(t string) string {
	switch t {
	case targetCicada:
		return s.cicada.addr
	case targetTwem:
		return s.twem.addr
	case targetBare:
		return s.bare.addr
	}
	return s.redis.addr
}

// startFixed starts the processes that live for the whole run: Redis,
// twemproxy and the bare server.
func (s *servers) startFixed() error {
	o := s.o
	for _, bin := range []string{o.cicada, o.bare, o.nutcracker, o.redisServer, o.bench} {
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

	baddr, err := freeAddr()
	if err != nil {
		return err
	}
	s.bare, err = start("bareserver", baddr, filepath.Join(o.workdir, "bare.log"),
		o.bare, "-addr", baddr, "-loops", strconv.Itoa(o.loops))
	if err != nil {
		return err
	}
	return s.bare.waitGET(hotKey)
}

// ensureCicada runs Cicada with --hot-threshold threshold, restarting it
// if it runs with another.
func (s *servers) ensureCicada(threshold uint32) error {
	if s.cicada != nil && s.threshold == threshold {
		return nil
	}
	if s.cicada != nil {
		s.cicada.stop()
		s.cicada = nil
	}
	caddr, err := freeAddr()
	if err != nil {
		return err
	}
	if s.admin, err = freeAddr(); err != nil {
		return err
	}
	p, err := start("cicada", caddr, filepath.Join(s.o.workdir, "cicada.log"),
		s.o.cicada, "--listen", caddr, "--admin", s.admin, "--upstream", s.redis.addr,
		"--hot-threshold", strconv.FormatUint(uint64(threshold), 10), "--log-level", "warn",
		"--loops", strconv.Itoa(s.o.loops))
	if err != nil {
		return err
	}
	if err := p.waitHTTP200("http://" + s.admin + "/readyz"); err != nil {
		return err
	}
	if err := p.waitGET(hotKey); err != nil {
		return err
	}
	s.cicada, s.threshold = p, threshold
	return nil
}

// measure runs the scenario's load once against target t and reads the
// CPU time of the processes serving it around the run.
func (s *servers) measure(sc scenario, t string, round int, tick int64) (sample, error) {
	var proxy, redis *proc
	switch t {
	case targetRedis:
		redis = s.redis
	case targetCicada:
		proxy, redis = s.cicada, s.redis
	case targetTwem:
		proxy, redis = s.twem, s.redis
	case targetBare:
		proxy = s.bare
	}
	smp := sample{Scenario: sc.Name, Target: t, Round: round + 1, Args: sc.Load.Args(s.addr(t))}
	var hits0 float64
	if t == targetCicada {
		var err error
		if hits0, err = fetchMetric(s.admin, "cicada_cache_hits_total"); err != nil {
			return smp, fmt.Errorf("harness: cicada metrics: %w", err)
		}
	}
	p0, r0, err := ticksOf(proxy, redis)
	if err != nil {
		return smp, err
	}
	begin := time.Now()
	res, raw, err := sc.Load.Run(s.addr(t))
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
	if t == targetCicada {
		hits1, err := fetchMetric(s.admin, "cicada_cache_hits_total")
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
