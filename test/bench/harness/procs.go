package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// errNotReady reports a server that did not answer within readyTimeout.
var errNotReady = errors.New("harness: server not ready")

// readyTimeout bounds how long a started server may take to answer.
const readyTimeout = 15 * time.Second

// proc is a server process the harness started. Its fields are set by
// start and not changed afterwards, except through stop.
type proc struct {
	name   string
	addr   string // RESP address, host:port
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has been reaped
}

// procs are all the processes started and not yet stopped; stopAll (on
// exit, on failure and on SIGINT/SIGTERM) kills them. mu guards the list.
var procs struct {
	mu   sync.Mutex
	list []*proc
}

// start runs a server process whose stdout and stderr go to logPath. It
// dies with the harness (Pdeathsig SIGKILL) if the harness is killed
// without its cleanup.
func start(name, addr, logPath string, argv ...string) (*proc, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("harness: start %s: %w", name, err)
	}
	p := &proc{name: name, addr: addr, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); log.Close(); close(p.exited) }()
	procs.mu.Lock()
	procs.list = append(procs.list, p)
	procs.mu.Unlock()
	return p, nil
}

// pid is the process id, for /proc/<pid>/stat.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop kills the process and waits until it is reaped.
func (p *proc) stop() {
	_ = p.cmd.Process.Kill()
	<-p.exited
	procs.mu.Lock()
	defer procs.mu.Unlock()
	for i, q := range procs.list {
		if q == p {
			procs.list = append(procs.list[:i], procs.list[i+1:]...)
			break
		}
	}
}

// stopAll kills every process started and not yet stopped.
func stopAll() {
	procs.mu.Lock()
	list := append([]*proc(nil), procs.list...)
	procs.mu.Unlock()
	for _, p := range list {
		p.stop()
	}
}

// freeAddr returns a loopback address with a port that was free a moment
// ago (the kernel picked it for a listener that is closed again).
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitGET waits until addr answers "GET key" with a bulk string (nil or
// not): for Redis and the proxies this also means the path to Redis works.
func (p *proc) waitGET(key string) error {
	return p.waitFor(func() (bool, string) {
		reply, err := roundTrip(p.addr, command("GET", key))
		return err == nil && strings.HasPrefix(reply, "$"), fmt.Sprintf("at %s: last reply %q, error %v", p.addr, reply, err)
	})
}

// waitHTTP200 waits until url answers 200 (Cicada's /readyz).
func (p *proc) waitHTTP200(url string) error {
	return p.waitFor(func() (bool, string) {
		resp, err := httpClient.Get(url)
		if err != nil {
			return false, fmt.Sprintf("%s: %v", url, err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("%s: %s", url, resp.Status)
	})
}

// waitFor polls ready every 50 ms until it reports true; it returns an
// errNotReady error when the process exits or readyTimeout passes, with
// the last poll's description.
func (p *proc) waitFor(ready func() (ok bool, last string)) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		ok, last := ready()
		if ok {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%w: %s exited (see its log)", errNotReady, p.name)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s %s", errNotReady, p.name, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}

// command encodes a RESP request.
func command(args ...string) []byte {
	b := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, "$"+strconv.Itoa(len(a))+"\r\n"+a+"\r\n"...)
	}
	return b
}

// roundTrip sends one request on a new connection and returns the first
// line of the reply (without CRLF).
func roundTrip(addr string, req []byte) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(req); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// ownsRedis checks that the Redis answering at p.addr is p, by INFO
// server's process_id: a redis-server that failed to bind a port in use
// exits, and another Redis listening there answers (and would be written
// to) in its place.
func (p *proc) ownsRedis() error {
	body, err := info(p.addr, "server")
	if err != nil {
		return err
	}
	if !strings.Contains(body, "\r\nprocess_id:"+strconv.Itoa(p.pid())+"\r\n") {
		return fmt.Errorf("harness: the Redis at %s is not the redis-server the harness started (port in use? see its log)", p.addr)
	}
	return nil
}

// info returns the text of INFO section from the Redis at addr.
func info(addr, section string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(command("INFO", section)); err != nil {
		return "", err
	}
	br := bufio.NewReader(c)
	head, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if err != nil || n < 0 {
		return "", fmt.Errorf("harness: INFO %s at %s: reply %q", section, addr, head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		return "", err
	}
	return string(body), nil
}

// infoInt returns the integer field name of INFO section at addr.
func infoInt(addr, section, name string) (int64, error) {
	body, err := info(addr, section)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(body, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("harness: INFO %s at %s has no %s", section, addr, name)
}

// clientMemory samples Redis's mem_clients_normal (bytes: the memory Redis
// holds for its normal clients, buffers included) every 100 ms until stop
// is closed, and sends the largest value read (-1 if none could be).
func clientMemory(addr string, stop <-chan struct{}, peak chan<- int64) {
	best := int64(-1)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			peak <- best
			return
		case <-t.C:
			if v, err := infoInt(addr, "memory", "mem_clients_normal"); err == nil && v > best {
				best = v
			}
		}
	}
}

// pipeline sends reqs on one connection, a batch at a time, and checks
// that every reply's first line starts with want (e.g. "+OK" for SET).
func pipeline(addr string, reqs [][]byte, want string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	br := bufio.NewReader(c)
	const batch = 1000
	for len(reqs) > 0 {
		n := min(batch, len(reqs))
		var buf []byte
		for _, r := range reqs[:n] {
			buf = append(buf, r...)
		}
		if _, err := c.Write(buf); err != nil {
			return err
		}
		for range n {
			line, err := br.ReadString('\n')
			if err != nil {
				return err
			}
			if !strings.HasPrefix(line, want) {
				return fmt.Errorf("harness: prefill: got %q, want %q...", line, want)
			}
		}
		reqs = reqs[n:]
	}
	return nil
}

// cpuTicks returns the user+system CPU time of process pid (all its
// threads) in clock ticks, fields 14 and 15 of /proc/<pid>/stat.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseStatTicks(string(b))
}

// parseStatTicks reads utime+stime from the text of /proc/<pid>/stat. The
// command name (field 2) is in parentheses and may hold spaces, so fields
// are counted after its last ')'.
func parseStatTicks(stat string) (int64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("harness: /proc stat %q: no ')'", stat)
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("harness: /proc stat %q: %d fields after the name", stat, len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("harness: /proc stat: %w", err)
	}
	return u + s, nil
}

// clockTicks is sysconf(_SC_CLK_TCK) as `getconf CLK_TCK` prints it; 100
// if getconf fails.
func clockTicks() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && v > 0 {
			return v
		}
	}
	return 100
}

// metricSum adds the values of every series of one metric in a
// Prometheus text exposition.
func metricSum(r io.Reader, name string) (float64, error) {
	var sum float64
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("harness: metric line %q: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// fetchMetric reads one metric's sum from Cicada's admin /metrics.
func fetchMetric(admin, name string) (float64, error) {
	resp, err := httpClient.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return metricSum(resp.Body, name)
}

// nutcrackerConf is the twemproxy configuration: one pool, the benchmark's
// Redis its only server, connected at start. server_connections 1 (one
// connection to Redis that carries every client's requests) is
// twemproxy's default and how it is usually run; timeout and ejection are
// set as its README's examples do, but ejection is off, so they only
// bound a stuck Redis.
func nutcrackerConf(listen, redis string) string {
	return fmt.Sprintf(`bench:
  listen: %s
  hash: fnv1a_64
  distribution: ketama
  redis: true
  preconnect: true
  auto_eject_hosts: false
  server_retry_timeout: 2000
  server_failure_limit: 1
  server_connections: 1
  timeout: 5000
  backlog: 1024
  servers:
   - %s:1
`, listen, redis)
}

// writeFile writes a file in dir and returns its path.
func writeFile(dir, name, text string) (string, error) {
	p := filepath.Join(dir, name)
	return p, os.WriteFile(p, []byte(text), 0o644)
}
