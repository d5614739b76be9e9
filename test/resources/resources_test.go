// Package resources measures Cicada's memory under hostile clients: slow
// readers flooding it with pipelined reads, and many idle connections.
// Cicada runs as its own process (its RSS is what is measured).
package resources

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/resp"
	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// maxClientMemory is the bound TestSlowReaderFlood configures.
const maxClientMemory = 256 << 20

// TestSlowReaderFlood: 100 clients each pipeline 10,000 GETs of a 1 MB
// cached value and read nothing (10 GB of replies each). Cicada must close
// them (max-client-memory; Redis's normal clients have no output limit by
// default) while its RSS stays under the bound plus the cache and a
// baseline, and a client reading a small key meanwhile is served, its
// median GET within probeP50 during the flood. With one event loop and
// with two: one loop is where each client in turn could fill the whole
// bound before the last one's memory was collected (proxy, Server.collected).
// It logs RSS and the probe client's latency before and during the flood:
//
//	go test -run TestSlowReaderFlood -v ./test/resources/
func TestSlowReaderFlood(t *testing.T) {
	for _, loops := range []string{"1", "2"} {
		t.Run("loops="+loops, func(t *testing.T) { slowReaderFlood(t, loops) })
	}
}

// probeP50 bounds the median GET of a small cached key during the flood:
// it was 0.13-0.19 ms on the development machine (2026-12-07), 50 ms to 4
// s with one loop before Server.collected.
const probeP50 = 20 * time.Millisecond

func slowReaderFlood(t *testing.T, loops string) {
	r := redistest.Start(t)
	p := cicadatest.StartBinary(t, r.Addr, "--cache-max-value", "2mb", "--cache-max-bytes", "64mb",
		"--max-client-memory", fmt.Sprint(maxClientMemory), "--loops", loops)
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: p.Addr, DisableIdentity: true})
	defer rc.Close()
	if err := rc.Set(ctx, "big", strings.Repeat("b", 1<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.Set(ctx, "small", "s", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		_ = rc.Get(ctx, "big").Err()
		_ = rc.Get(ctx, "small").Err()
	}
	if hits := p.Metric(t, "cicada_cache_hits_total"); hits < 10 {
		t.Fatalf("big and small not answered from the cache (%v hits)", hits)
	}
	// The probe: one GET of the small key per ms.
	probe := func(d time.Duration) []time.Duration {
		var lat []time.Duration
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
			start := time.Now()
			if err := rc.Get(ctx, "small").Err(); err != nil {
				t.Errorf("probe GET during the flood: %v", err)
				return lat
			}
			lat = append(lat, time.Since(start))
		}
		return lat
	}
	quiet := probe(2 * time.Second)
	rssBefore := cicadatest.RSS(t, p.Pid)
	// Read big until two more hits: the flood below must be answered from
	// the cache, and one long pipeline of a key not cached never fills it
	// (a fill needs an empty queue).
	for hits := p.Metric(t, "cicada_cache_hits_total"); p.Metric(t, "cicada_cache_hits_total") < hits+2; {
		_ = rc.Get(ctx, "big").Err()
	}

	var req []byte
	for range 10000 {
		req = resp.AppendCommand(req, []byte("GET"), []byte("big"))
	}
	const clients = 100
	var wg sync.WaitGroup
	var mu sync.Mutex
	closed := 0
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := smallBuffers.Dial("tcp", p.Addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			go func() { _, _ = c.Write(req) }()
			// Read nothing for 3 s, then see whether Cicada closed us:
			// draining what the socket holds ends in EOF or a reset.
			time.Sleep(3 * time.Second)
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			buf := make([]byte, 1<<20)
			for {
				if _, err := c.Read(buf); err != nil {
					if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
						mu.Lock()
						closed++
						mu.Unlock()
					}
					return
				}
			}
		}()
	}
	var peak int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak = max(peak, cicadatest.RSS(t, p.Pid))
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	flood := probe(3 * time.Second)
	wg.Wait()
	close(stop)
	<-sampled
	evicted := p.Metric(t, `cicada_clients_closed_total{reason="max-client-memory"}`)
	t.Logf("hits %v, misses %v (hits forwarded: %v)", p.Metric(t, "cicada_cache_hits_total"),
		p.Metric(t, "cicada_cache_misses_total"), p.Metric(t, "cicada_cache_hits_forwarded_total"))
	// Bound: the clients' buffers, the cache, and what Cicada needs
	// without clients (measured before the flood) plus 64 MB for the
	// garbage collector's headroom over freed buffers.
	bound := int64(maxClientMemory) + 64<<20 + rssBefore + 64<<20
	t.Logf("%d clients x 10,000 GETs of 1 MB unread: %d closed (%v by max-client-memory); Cicada RSS %d MB before, peak %d MB (bound %d MB)",
		clients, closed, evicted, rssBefore>>20, peak>>20, bound>>20)
	t.Logf("probe GET of a cached key, 1 per ms: quiet p50 %v p99 %v max %v; during the flood p50 %v p99 %v max %v",
		pct(quiet, 50), pct(quiet, 99), pct(quiet, 100), pct(flood, 50), pct(flood, 99), pct(flood, 100))
	if closed != clients {
		t.Errorf("%d of %d flooding clients closed", closed, clients)
	}
	if peak > bound {
		t.Errorf("Cicada's RSS peaked at %d MB, over %d MB", peak>>20, bound>>20)
	}
	if p50 := pct(flood, 50); p50 > probeP50 {
		t.Errorf("probe GET's median during the flood %v, over %v", p50, probeP50)
	}
}

// smallBuffers dials with a 64 KB receive buffer. Loopback sockets that
// are not read otherwise grow theirs to tcp_rmem's maximum (32 MB here):
// 100 of them exhaust tcp_mem and stall every TCP connection on the
// machine, Redis's included, which measures the kernel, not Cicada.
var smallBuffers = net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10) })
	if err != nil {
		return err
	}
	return serr
}}

// pct returns the q-th percentile of d (q = 100: the maximum).
func pct(d []time.Duration, q int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*q/100)]
}

// raiseFiles raises this process's open-file limit (inherited by the
// servers it starts) to its hard limit and returns it.
func raiseFiles(t *testing.T) uint64 {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur < lim.Max {
		old := lim
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
	}
	return lim.Cur
}

// idleConns opens n connections to addr, each answered a PING, and
// returns them.
func idleConns(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 16)
			for i := w; i < n; i += 8 {
				c, err := net.Dial("tcp", addr)
				if err == nil {
					conns[i] = c
					_, err = c.Write([]byte("PING\r\n"))
				}
				if err == nil {
					_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
					var m int
					m, err = c.Read(buf)
					if err == nil && string(buf[:m]) != "+PONG\r\n" {
						err = fmt.Errorf("PING: %q", buf[:m])
					}
				}
				if err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return conns
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		if c != nil {
			_ = c.Close()
		}
	}
}

// TestIdleConnections holds 10,000 idle connections open through Cicada
// and directly to Redis (fewer if the open-file limit holds fewer: as
// many as Cicada's maxclients), and logs the RSS each costs; closing them
// must give back every client and upstream connection (no fd leak):
//
//	go test -run TestIdleConnections -v ./test/resources/
func TestIdleConnections(t *testing.T) {
	// Cicada needs two descriptors per client (client and upstream):
	// 10,000 clients, or as many as the hard limit allows.
	n := min(10000, int(raiseFiles(t)-200)/2)
	r := redistest.Start(t, "--maxclients", fmt.Sprint(2*n))
	p := cicadatest.StartBinary(t, r.Addr)
	n = min(n, int(p.Metric(t, "cicada_maxclients")))
	redisPid := r.Cmd.Process.Pid

	base := cicadatest.RSS(t, redisPid)
	conns := idleConns(t, r.Addr, n)
	direct := cicadatest.RSS(t, redisPid) - base
	closeAll(conns)

	fdsBefore := clientFiles(t, p)
	cicadaBase, redisBase := cicadatest.RSS(t, p.Pid), cicadatest.RSS(t, redisPid)
	conns = idleConns(t, p.Addr, n)
	cicada, upstream := cicadatest.RSS(t, p.Pid)-cicadaBase, cicadatest.RSS(t, redisPid)-redisBase
	if got := p.Metric(t, "cicada_client_connections"); got != float64(n) {
		t.Errorf("cicada_client_connections = %v with %d open", got, n)
	}
	t.Logf("%d idle connections: Redis direct %.1f KB each; through Cicada %.1f KB each in Cicada plus %.1f KB in Redis (%v upstream connections of their own, %v lanes)",
		n, kb(direct, n), kb(cicada, n), kb(upstream, n), p.Metric(t, "cicada_upstream_own_connections"), p.Metric(t, "cicada_upstream_lanes"))
	closeAll(conns)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		fds := clientFiles(t, p)
		if fds <= fdsBefore && p.Metric(t, "cicada_client_connections") == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after closing: %d open files in Cicada but its lanes (%d before), %v client connections",
				fds, fdsBefore, p.Metric(t, "cicada_client_connections"))
		}
	}
}

// clientFiles counts Cicada's open descriptors but its lanes', which
// outlive their clients (they close when idle, lane.go).
func clientFiles(t *testing.T, p *cicadatest.Binary) int {
	t.Helper()
	return openFiles(t, p.Pid) - int(p.Metric(t, "cicada_upstream_lanes"))
}

func kb(b int64, n int) float64 { return float64(b) / 1024 / float64(n) }

// openFiles counts process pid's open file descriptors.
func openFiles(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// goroutines counts Cicada's goroutines (from /debug/pprof) other than
// the workers of gnet's process-wide pool (ants), which runs the dials of
// upstream connections: an idle worker lives on for 10 to 20 s
// (ExpiryDuration), and the pool is bounded.
func goroutines(t *testing.T, p *cicadatest.Binary) int {
	t.Helper()
	n := 0
	for _, g := range strings.Split(goroutineProfile(t, p), "\n\n") {
		if strings.HasPrefix(g, "goroutine ") && !strings.Contains(g, "github.com/panjf2000/ants/") {
			n++
		}
	}
	return n
}

// goroutineProfile returns Cicada's goroutines, one stack each (debug=2).
func goroutineProfile(t *testing.T, p *cicadatest.Binary) string {
	t.Helper()
	return p.GetLocal(t, "/debug/pprof/goroutine?debug=2")
}

// waitClosed waits up to 10 s for Cicada to close every connection.
func waitClosed(t *testing.T, conns []net.Conn, why string) {
	t.Helper()
	buf := make([]byte, 64)
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			if _, err := c.Read(buf); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("connection %d still open 10 s after %s", i, why)
				}
				break
			}
		}
	}
}

// TestRedisRestartStorm: with 1,000 clients connected, Redis stops; Cicada
// closes them all, as Redis did (those on a lane at their next request:
// the lane died with nothing of theirs in flight). 1,000 more connect while
// Redis is down and are closed at once. Redis comes back on the same port:
// Cicada serves again, and holds exactly the descriptors (but its lanes')
// and goroutines it held before.
func TestRedisRestartStorm(t *testing.T) {
	raiseFiles(t)
	r := redistest.Start(t)
	p := cicadatest.StartBinary(t, r.Addr)
	ping := func() error {
		rc := redis.NewClient(&redis.Options{Addr: p.Addr, DisableIdentity: true, MaxRetries: -1})
		defer rc.Close()
		return rc.Ping(context.Background()).Err()
	}
	if err := ping(); err != nil {
		t.Fatal(err)
	}
	for p.Metric(t, "cicada_client_connections") != 0 {
		time.Sleep(10 * time.Millisecond)
	}
	fds, gs, before := clientFiles(t, p), goroutines(t, p), goroutineProfile(t, p)

	conns := idleConns(t, p.Addr, 1000)
	r.Stop()
	for _, c := range conns {
		_, _ = c.Write([]byte("PING\r\n")) // on a lane: closed without a reply (Redis is down)
	}
	waitClosed(t, conns, "Redis stopped")
	closeAll(conns)

	var storm []net.Conn
	for range 1000 {
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		storm = append(storm, c)
	}
	waitClosed(t, storm, "they connected with Redis down")
	closeAll(storm)

	redistest.StartPort(t, r.Port)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := ping(); err == nil && p.Metric(t, "cicada_keyspace_subscription_up") == 1 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("Cicada not serving 10 s after Redis came back: %v", err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		f, g := clientFiles(t, p), goroutines(t, p)
		if f <= fds && g <= gs {
			t.Logf("after 2,000 connections and a Redis restart: %d descriptors, %d goroutines (before: %d, %d)", f, g, fds, gs)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the storm: %d descriptors, %d goroutines; before it %d, %d. Goroutines before:\n%s\nafter:\n%s",
				f, g, fds, gs, before, goroutineProfile(t, p))
		}
	}
}

// TestMaxClientsOpenFileLimit: Cicada started with 256 open files allowed
// (ulimit -n) and one loop lowers maxclients to what fits
// (proxy.MaxClientsFor: two per client after its own), serves exactly
// that many, refuses the next
// client as Redis refuses one over its maxclients, and keeps serving:
// were it to run out of descriptors, accept(2) would fail and gnet would
// stop serving.
func TestMaxClientsOpenFileLimit(t *testing.T) {
	r := redistest.Start(t)
	// bash's ulimit -n lowers both limits; Go raises only the soft one.
	p := cicadatest.StartBinaryUnder(t, []string{"bash", "-c", `ulimit -n 256 && exec "$0" "$@"`}, r.Addr, "--loops", "1")
	limit := int(p.Metric(t, "cicada_maxclients"))
	if limit < 1 || limit >= 100 {
		t.Fatalf("cicada_maxclients = %d under 256 descriptors, want it lowered below the 100 clients to come", limit)
	}
	conns := make([]net.Conn, 0, 100)
	defer func() { closeAll(conns) }()
	replies := map[string]int{}
	buf := make([]byte, 64)
	for range 100 {
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			t.Fatal(err)
		}
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		replies[string(buf[:n])]++
	}
	if want := map[string]int{"+PONG\r\n": limit, "-ERR max number of clients reached\r\n": 100 - limit}; fmt.Sprint(replies) != fmt.Sprint(want) {
		t.Errorf("100 clients got %v, want %v", replies, want)
	}
	closeAll(conns)
	conns = conns[:0]
	for deadline := time.Now().Add(5 * time.Second); p.Metric(t, "cicada_client_connections") != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("connections not closed")
		}
	}
	conns = idleConns(t, p.Addr, limit)
	if got, want := p.Metric(t, `cicada_clients_closed_total{reason="maxclients"}`), float64(100-limit); got != want {
		t.Errorf(`cicada_clients_closed_total{reason="maxclients"} = %v, want %v`, got, want)
	}
}

// tcpTimers returns, from /proc/net/tcp, the timer kind ("tr": 0 none,
// 2 keepalive or another timer) of every established IPv4 socket whose
// local or remote port is port, keyed "local->remote" ports.
func tcpTimers(t *testing.T, port int, remote bool) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 6 || f[3] != "01" { // 01: ESTABLISHED
			continue
		}
		local, rem := f[1][strings.IndexByte(f[1], ':')+1:], f[2][strings.IndexByte(f[2], ':')+1:]
		want := fmt.Sprintf("%04X", port)
		if (!remote && local == want) || (remote && rem == want) {
			out[local+"->"+rem] = f[5][:strings.IndexByte(f[5], ':')]
		}
	}
	return out
}

// TestKeepAlive: Cicada's client connections and its upstream connections
// have TCP keepalive on (a peer that vanished is found), as Redis's
// tcp-keepalive does for its clients. A socket shows its keepalive timer
// only while it has nothing unacknowledged in flight (the retransmission
// timer, 01, takes its place), and the control connection sends a
// request every 100 ms: each socket must show 02 at least once within 3 s.
func TestKeepAlive(t *testing.T) {
	r := redistest.Start(t)
	p := cicadatest.StartBinary(t, r.Addr)
	conns := idleConns(t, p.Addr, 3)
	defer closeAll(conns)
	_, listen, _ := net.SplitHostPort(p.Addr)
	lp, _ := strconv.Atoi(listen)
	accepted, upstream := tcpTimers(t, lp, false), tcpTimers(t, r.Port, true)
	if len(accepted) != 3 || len(upstream) < 3 {
		t.Fatalf("found %d accepted and %d upstream sockets, want 3 and at least 3", len(accepted), len(upstream))
	}
	pending := map[string]bool{}
	for s := range accepted {
		pending["client "+s] = true
	}
	for s := range upstream {
		pending["upstream "+s] = true
	}
	for deadline := time.Now().Add(3 * time.Second); len(pending) > 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for s, timer := range tcpTimers(t, lp, false) {
			if timer == "02" {
				delete(pending, "client "+s)
			}
		}
		for s, timer := range tcpTimers(t, r.Port, true) {
			if timer == "02" {
				delete(pending, "upstream "+s)
			}
		}
	}
	for s := range pending {
		t.Errorf("%s connection: no keepalive timer (02) in 3 s", s)
	}
}
