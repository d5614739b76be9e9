package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/cicada-proxy/cicada/resp"
	"github.com/cicada-proxy/cicada/test/bench/loadgen/report"
	"github.com/cicada-proxy/cicada/test/bench/zipf"
	"golang.org/x/sys/unix"
)

// Scenario names, as given to -scenario and reported in "scenario".
const (
	scenarioClosed = "closed"
	scenarioOpen   = "open"
)

// Histogram range: latencies are recorded in nanoseconds, 3 significant
// digits, up to maxLatency (longer ones are recorded as maxLatency).
const maxLatency = 10 * time.Second

// config is one run's parameters; see the flags in main.go for defaults.
type config struct {
	Addr      string
	Scenario  string        // scenarioClosed or scenarioOpen
	Conns     int           // connections
	Pipeline  int           // closed loop: requests per round trip (>= 1)
	Duration  time.Duration // measured run time
	Rate      float64       // open loop: target ops/s over all connections
	Keys      int           // key space: key:0 .. key:<Keys-1>
	ZipfS     float64       // Zipf exponent; key:0 is the hottest
	GetRatio  float64       // fraction of GET; the rest are SET
	ValueSize int           // SET value bytes
	SetTTL    int           // s: SETs are SET key value EX SetTTL (0: no option)
	LateSlack time.Duration // open loop: a send later than this after its intended time is "late"
	Seed      uint64
}

// worker is one connection's request generator, histograms and counters,
// and in the closed loop the connection itself (an open loop's is an
// openConn). Owned by the goroutine that runs it; the counters and hist
// are read by run only after it has finished.
type worker struct {
	conn net.Conn // closed loop and prefill
	br   *bufio.Reader
	out  []byte   // request bytes of one round trip, reused
	key  []byte   // "key:<i>", reused
	args [][]byte // command arguments, reused
	val  []byte   // SET value (shared, read-only)
	ttl  []byte   // SET's EX argument (-set-ttl), read-only
	rng  *rand.Rand
	zipf *zipf.Zipf
	cfg  *config
	hist *hdrhistogram.Histogram // latency from intended start (closed: from send)
	svc  *hdrhistogram.Histogram // open loop: latency from the actual send
	// byKind splits hist by command, GET ([0]) and SET ([1]), for round
	// trips of one request (the open loop, and the closed loop at -P 1).
	byKind [2]*hdrhistogram.Histogram

	ops, errs, late, missed int64
	ioErr                   error
}

var (
	cmdGET = []byte("GET")
	cmdSET = []byte("SET")
	cmdEX  = []byte("EX")
)

// newWorker returns a worker with a connection to cfg.Addr (closed loop,
// prefill); the caller closes it. Errors are the dial's.
func newWorker(cfg *config, id int, val []byte) (*worker, error) {
	c, err := net.DialTimeout("tcp", cfg.Addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("loadgen: dial %s: %w", cfg.Addr, err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	w := newGenerator(cfg, id, val)
	w.conn, w.br = c, bufio.NewReaderSize(c, 64<<10)
	return w, nil
}

// newGenerator returns a worker without a connection: connection id's
// request stream (PCG stream id of cfg.Seed) and empty histograms.
func newGenerator(cfg *config, id int, val []byte) *worker {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(id)))
	w := &worker{
		out:  make([]byte, 0, 4096),
		key:  append(make([]byte, 0, 32), "key:"...),
		args: make([][]byte, 3),
		val:  val,
		ttl:  strconv.AppendInt(nil, int64(cfg.SetTTL), 10),
		rng:  rng,
		zipf: zipf.New(rng, cfg.Keys, cfg.ZipfS),
		cfg:  cfg,
		hist: hdrhistogram.New(1, int64(maxLatency), 3),
		svc:  hdrhistogram.New(1, int64(maxLatency), 3),
	}
	for i := range w.byKind {
		w.byKind[i] = hdrhistogram.New(1, int64(maxLatency), 3)
	}
	return w
}

// Request kinds, the index of worker.byKind.
const (
	kindGET = iota
	kindSET
)

// appendRequest appends one GET (probability GetRatio) or SET of a
// Zipf-chosen key to w.out and returns its kind.
func (w *worker) appendRequest() int {
	i := w.zipf.Next() - 1
	w.key = strconv.AppendInt(w.key[:4], int64(i), 10)
	w.args[1] = w.key
	if w.rng.Float64() < w.cfg.GetRatio {
		w.args[0] = cmdGET
		w.out = resp.AppendCommand(w.out, w.args[:2]...)
		return kindGET
	}
	w.args[0] = cmdSET
	w.args[2] = w.val
	if w.cfg.SetTTL > 0 {
		w.out = resp.AppendCommand(w.out, w.args[0], w.args[1], w.args[2], cmdEX, w.ttl)
		return kindSET
	}
	w.out = resp.AppendCommand(w.out, w.args[:3]...)
	return kindSET
}

// roundTrip writes w.out and reads n replies, counting error replies.
func (w *worker) roundTrip(n int) error {
	if _, err := w.conn.Write(w.out); err != nil {
		return err
	}
	for range n {
		isErr, err := readReply(w.br)
		if err != nil {
			return err
		}
		if isErr {
			w.errs++
		}
	}
	return nil
}

func record(h *hdrhistogram.Histogram, d time.Duration, n int) {
	if d > maxLatency {
		d = maxLatency
	}
	_ = h.RecordValues(int64(d), int64(n))
}

// closedStep is one closed-loop round trip: Pipeline requests, then their
// replies; every request in it is charged the round trip's latency.
func (w *worker) closedStep() (time.Time, error) {
	w.out = w.out[:0]
	p := w.cfg.Pipeline
	kind := 0
	for range p {
		kind = w.appendRequest()
	}
	t0 := time.Now()
	if err := w.roundTrip(p); err != nil {
		return t0, err
	}
	now := time.Now()
	record(w.hist, now.Sub(t0), p)
	if p == 1 {
		record(w.byKind[kind], now.Sub(t0), 1)
	}
	w.ops += int64(p)
	return now, nil
}

func (w *worker) runClosed(end time.Time) {
	for {
		now, err := w.closedStep()
		if err != nil {
			w.ioErr = err
			return
		}
		if !now.Before(end) {
			return
		}
	}
}

// run opens cfg.Conns connections, runs the scenario for cfg.Duration and
// merges the per-connection histograms. The CPU figures are this process's
// user+system time over the run (connection setup excluded).
func run(cfg config) (report.Run, error) {
	val := make([]byte, cfg.ValueSize)
	for i := range val {
		val[i] = 'a' + byte(i%26)
	}
	runConns := runClosedConns
	if cfg.Scenario == scenarioOpen {
		runConns = runOpenConns
	}
	workers, wall, cpu, err := runConns(&cfg, val)
	if err != nil {
		return report.Run{}, err
	}
	elapsed := wall

	res := report.Run{Scenario: cfg.Scenario, Addr: cfg.Addr, Conns: cfg.Conns}
	if cfg.Scenario == scenarioOpen {
		res.TargetRate = cfg.Rate
		// Achieved rate over the scheduled window: missed requests lower it.
		elapsed = cfg.Duration
	} else {
		res.Pipeline = cfg.Pipeline
	}
	h := hdrhistogram.New(1, int64(maxLatency), 3)
	svc := hdrhistogram.New(1, int64(maxLatency), 3)
	byKind := [2]*hdrhistogram.Histogram{hdrhistogram.New(1, int64(maxLatency), 3), hdrhistogram.New(1, int64(maxLatency), 3)}
	var ioErrs []error
	for _, w := range workers {
		h.Merge(w.hist)
		svc.Merge(w.svc)
		for i, k := range w.byKind {
			byKind[i].Merge(k)
		}
		res.Ops += w.ops
		res.Errors += w.errs
		res.Late += w.late
		res.Missed += w.missed
		if w.ioErr != nil {
			res.Errors++
			ioErrs = append(ioErrs, w.ioErr)
		}
	}
	res.DurationS = elapsed.Seconds()
	res.OpsPerSec = float64(res.Ops) / res.DurationS
	res.P50us = float64(h.ValueAtQuantile(50)) / 1e3
	res.P99us = float64(h.ValueAtQuantile(99)) / 1e3
	res.P999us = float64(h.ValueAtQuantile(99.9)) / 1e3
	res.MaxUs = float64(h.Max()) / 1e3
	if cfg.Scenario == scenarioOpen {
		res.SvcP50us = float64(svc.ValueAtQuantile(50)) / 1e3
		res.SvcP99us = float64(svc.ValueAtQuantile(99)) / 1e3
	}
	if g := byKind[kindGET]; g.TotalCount() > 0 {
		res.GetP50us, res.GetP99us = float64(g.ValueAtQuantile(50))/1e3, float64(g.ValueAtQuantile(99))/1e3
	}
	if s := byKind[kindSET]; s.TotalCount() > 0 {
		res.SetP50us, res.SetP99us = float64(s.ValueAtQuantile(50))/1e3, float64(s.ValueAtQuantile(99))/1e3
	}
	res.CPUs = cpu.Seconds()
	if res.Ops > 0 {
		res.CPUsPer1M = res.CPUs / (float64(res.Ops) / 1e6)
	}
	res.CPUPct = 100 * cpu.Seconds() / wall.Seconds()
	if len(ioErrs) > 0 {
		return res, fmt.Errorf("loadgen: %d connection(s) failed, first: %w", len(ioErrs), ioErrs[0])
	}
	return res, nil
}

// runClosedConns runs the closed loop: a goroutine per connection. It
// returns the workers, the run's wall-clock time and this process's CPU
// time over it; errors are the dials'.
func runClosedConns(cfg *config, val []byte) ([]*worker, time.Duration, time.Duration, error) {
	workers := make([]*worker, 0, cfg.Conns)
	defer func() {
		for _, w := range workers {
			_ = w.conn.Close()
		}
	}()
	for i := range cfg.Conns {
		w, err := newWorker(cfg, i, val)
		if err != nil {
			return nil, 0, 0, err
		}
		workers = append(workers, w)
	}
	cpu0 := cpuTime()
	start := time.Now()
	end := start.Add(cfg.Duration)
	var wg sync.WaitGroup
	for _, w := range workers {
		// A stuck server must not hang the run.
		_ = w.conn.SetDeadline(end.Add(10 * time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.runClosed(end)
		}()
	}
	wg.Wait()
	return workers, time.Since(start), cpuTime() - cpu0, nil
}

// runOpenConns runs the open loop (runOpen) over cfg.Conns connections,
// staggered evenly inside one interval. Returns as runClosedConns; errors
// are the dials' and epoll's.
func runOpenConns(cfg *config, val []byte) ([]*worker, time.Duration, time.Duration, error) {
	conns := make([]*openConn, 0, cfg.Conns)
	defer func() {
		for _, c := range conns {
			_ = unix.Close(c.fd)
		}
	}()
	workers := make([]*worker, 0, cfg.Conns)
	offsets := make([]time.Duration, cfg.Conns)
	interval := time.Duration(float64(time.Second) * float64(cfg.Conns) / cfg.Rate)
	for i := range cfg.Conns {
		fd, err := dialRaw(cfg.Addr)
		if err != nil {
			return nil, 0, 0, err
		}
		w := newGenerator(cfg, i, val)
		conns = append(conns, &openConn{w: w, j: i, fd: fd})
		workers = append(workers, w)
		offsets[i] = interval * time.Duration(i) / time.Duration(cfg.Conns)
	}
	cpu0 := cpuTime()
	start := time.Now()
	err := runOpen(conns, start, start.Add(cfg.Duration), offsets, interval)
	return workers, time.Since(start), cpuTime() - cpu0, err
}

// prefill SETs every key once over a few pipelined connections, batches of
// 1000, so that GETs in the run find values.
func prefill(cfg config) error {
	const conns, batch = 4, 1000
	val := make([]byte, cfg.ValueSize)
	for i := range val {
		val[i] = 'a' + byte(i%26)
	}
	errc := make(chan error, conns)
	for c := range conns {
		go func() {
			w, err := newWorker(&cfg, c, val)
			if err != nil {
				errc <- err
				return
			}
			defer w.conn.Close()
			w.args[0], w.args[2] = cmdSET, val
			for lo := c * batch; lo < cfg.Keys; lo += conns * batch {
				w.out = w.out[:0]
				hi := min(lo+batch, cfg.Keys)
				for i := lo; i < hi; i++ {
					w.key = strconv.AppendInt(w.key[:4], int64(i), 10)
					w.args[1] = w.key
					w.out = resp.AppendCommand(w.out, w.args...)
				}
				if err := w.roundTrip(hi - lo); err != nil {
					errc <- err
					return
				}
				if w.errs > 0 {
					errc <- fmt.Errorf("loadgen: prefill: %d error replies", w.errs)
					return
				}
			}
			errc <- nil
		}()
	}
	var first error
	for range conns {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// cpuTime is this process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
