package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/cicada-proxy/cicada/test/bench/loadgen/report"
)

func main() {
	var cfg config
	var asJSON, doPrefill bool
	flag.StringVar(&cfg.Addr, "addr", "127.0.0.1:6379", "Redis or proxy address `host:port`")
	flag.StringVar(&cfg.Scenario, "scenario", scenarioClosed, "closed (each connection waits for its reply) or open (fixed -rate)")
	flag.IntVar(&cfg.Conns, "c", 200, "connections (closed loop: a goroutine each; open loop: one thread for all)")
	flag.IntVar(&cfg.Pipeline, "P", 1, "closed loop: requests per round trip")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measured run time (0 with -prefill: prefill only)")
	flag.Float64Var(&cfg.Rate, "rate", 20000, "open loop: target ops/s over all connections")
	flag.IntVar(&cfg.Keys, "keys", 1_000_000, "key space key:0..key:<keys-1>")
	flag.Float64Var(&cfg.ZipfS, "zipf", 0.99, "Zipf exponent s > 0 (key:0 hottest)")
	flag.Float64Var(&cfg.GetRatio, "get-ratio", 0.9, "fraction of GET; the rest are SET")
	flag.IntVar(&cfg.ValueSize, "value-size", 100, "SET value size in bytes")
	flag.IntVar(&cfg.SetTTL, "set-ttl", 0, "if > 0, SETs are SET key value EX <set-ttl> (seconds), the cache-aside write")
	flag.DurationVar(&cfg.LateSlack, "late-slack", time.Millisecond, "open loop: a send more than this after its intended time counts as late")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "random seed (connection i uses stream i)")
	flag.BoolVar(&doPrefill, "prefill", false, "SET every key (pipelined) before the run")
	flag.BoolVar(&asJSON, "json", false, "print one JSON object per run instead of a human line")
	flag.Parse()

	if err := check(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if doPrefill {
		t0 := time.Now()
		if err := prefill(cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "prefill: %d keys of %d bytes in %.1fs\n", cfg.Keys, cfg.ValueSize, time.Since(t0).Seconds())
		if cfg.Duration == 0 {
			return
		}
	}
	res, err := run(cfg)
	if asJSON {
		b, _ := json.Marshal(res)
		fmt.Println(string(b))
	} else {
		fmt.Println(human(res))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func check(cfg *config) error {
	switch {
	case cfg.Scenario != scenarioClosed && cfg.Scenario != scenarioOpen:
		return fmt.Errorf("loadgen: -scenario %q: want closed or open", cfg.Scenario)
	case cfg.Conns < 1, cfg.Pipeline < 1, cfg.Keys < 1, cfg.ValueSize < 0:
		return fmt.Errorf("loadgen: -c, -P and -keys must be >= 1, -value-size >= 0")
	case !(cfg.ZipfS > 0):
		return fmt.Errorf("loadgen: -zipf %v: want s > 0", cfg.ZipfS)
	case cfg.Duration < 0:
		return fmt.Errorf("loadgen: -duration %v: want >= 0", cfg.Duration)
	case cfg.Scenario == scenarioOpen && !(cfg.Rate > 0):
		return fmt.Errorf("loadgen: -rate %v: want > 0", cfg.Rate)
	case cfg.Scenario == scenarioOpen && cfg.Pipeline != 1:
		return fmt.Errorf("loadgen: -P applies to the closed loop only")
	}
	return nil
}

func human(r report.Run) string {
	mode := fmt.Sprintf("closed c=%d P=%d", r.Conns, r.Pipeline)
	if r.Scenario == scenarioOpen {
		mode = fmt.Sprintf("open c=%d rate=%.0f/s", r.Conns, r.TargetRate)
	}
	svc := ""
	if r.Scenario == scenarioOpen {
		svc = fmt.Sprintf(" (from send: p50 %.1fµs p99 %.1fµs)", r.SvcP50us, r.SvcP99us)
	}
	if r.GetP99us > 0 || r.SetP99us > 0 {
		svc += fmt.Sprintf(" (GET p50 %.1fµs p99 %.1fµs, SET p50 %.1fµs p99 %.1fµs)", r.GetP50us, r.GetP99us, r.SetP50us, r.SetP99us)
	}
	return fmt.Sprintf("%s %s: %d ops in %.2fs = %.0f ops/s; latency p50 %.1fµs p99 %.1fµs p99.9 %.1fµs max %.1fµs%s; errors %d late %d missed %d; loadgen CPU %.2fs (%.2fs per 1M ops, %.0f%% of one core)",
		mode, r.Addr, r.Ops, r.DurationS, r.OpsPerSec, r.P50us, r.P99us, r.P999us, r.MaxUs, svc,
		r.Errors, r.Late, r.Missed, r.CPUs, r.CPUsPer1M, r.CPUPct)
}
