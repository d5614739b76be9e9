package cicadatest

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cicada-proxy/cicada/test/redistest"
)

// Binary is a Cicada process started by StartBinary: the production
// binary, for figures a test process would distort (its goroutines share
// the Go scheduler with the load generator's) and for its RSS.
type Binary struct {
	Addr string // client address
	// Admin is the admin listener's address (/metrics, /healthz,
	// /readyz), to dial: a --admin with no host or a wildcard one
	// (":9121", "0.0.0.0:9121") is reached at 127.0.0.1.
	Admin string
	// LocalAdmin is the local admin listener's address (/debug/pprof/,
	// /debug/hotkeys, /config), to dial as Admin is; "" when
	// --local-admin "" turned it off.
	LocalAdmin string
	Pid        int
}

// adminClient closes each admin connection after its request, so a test
// counting Cicada's descriptors sees none of its own.
var adminClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

// StartBinary runs cmd/cicada (built once per test process, see
// BuiltBinary) in front of upstream with --hot-threshold 1, --log-level warn
// and args (later flags win), until the test ends, once /readyz says it is
// ready. A --listen, --admin or --local-admin in args (as two strings, or
// one with "=") is the address the Binary reports; otherwise each is a
// free loopback port. The process gets SIGKILL if the test process dies
// without its cleanup (a -timeout panic).
func StartBinary(t testing.TB, upstream string, args ...string) *Binary {
	t.Helper()
	return StartBinaryUnder(t, nil, upstream, args...)
}

// StartBinaryUnder is StartBinary with the binary run through the command
// line prefix (for example a shell that sets limits and execs it); nil
// for none.
func StartBinaryUnder(t testing.TB, prefix []string, upstream string, args ...string) *Binary {
	t.Helper()
	bin := BuiltBinary(t)
	p := &Binary{}
	var all []string
	for _, l := range []struct {
		flag string
		addr *string
	}{{"--listen", &p.Addr}, {"--admin", &p.Admin}, {"--local-admin", &p.LocalAdmin}} {
		v, set := flagValue(args, l.flag)
		if !set {
			v = "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
			all = append(all, l.flag, v)
		}
		*l.addr = dialAddr(v)
	}
	all = append(all, "--upstream", upstream, "--hot-threshold", "1", "--log-level", "warn")
	if _, set := flagValue(args, "--multiplex"); !set && !Multiplexed() {
		all = append(all, "--multiplex=false")
	}
	all = append(all, args...)
	line := append(append(append([]string{}, prefix...), bin), all...)
	cmd := exec.Command(line[0], line[1:]...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.Pid = cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := adminClient.Get("http://" + p.Admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case werr := <-exited:
			exited <- werr
			t.Fatalf("cicada %v exited before it was ready: %v", all, werr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("cicada not ready after 10 s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// flagValue returns the last value of flag name in args ("--name value"
// or "--name=value"), and whether args set it at all.
func flagValue(args []string, name string) (string, bool) {
	v, set := "", false
	for i, a := range args {
		if a == name && i+1 < len(args) {
			v, set = args[i+1], true
		} else if s, ok := strings.CutPrefix(a, name+"="); ok {
			v, set = s, true
		}
	}
	return v, set
}

// dialAddr turns a listen address into one to dial: an empty or wildcard
// host becomes 127.0.0.1. "" stays "".
func dialAddr(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return listen
}

// Get returns the body of an admin page (path with its query, e.g.
// "/metrics"), on a connection closed after it.
func (p *Binary) Get(t testing.TB, path string) string {
	t.Helper()
	return get(t, p.Admin, path)
}

// GetLocal returns the body of a local admin page (path with its query,
// e.g. "/debug/pprof/goroutine?debug=2"), on a connection closed after
// it. The test fails if the local admin listener is off.
func (p *Binary) GetLocal(t testing.TB, path string) string {
	t.Helper()
	if p.LocalAdmin == "" {
		t.Fatalf("GET %s: the local admin listener is off", path)
	}
	return get(t, p.LocalAdmin, path)
}

func get(t testing.TB, addr, path string) string {
	t.Helper()
	resp, err := adminClient.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Metric scrapes one sample from /metrics: name with labels written as
// in the exposition format (`cicada_cache_hits_total` or
// `cicada_clients_closed_total{reason="max-client-memory"}`).
func (p *Binary) Metric(t testing.TB, sample string) float64 {
	t.Helper()
	for _, line := range strings.Split(p.Get(t, "/metrics"), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	t.Fatalf("no metric %s", sample)
	return 0
}

// RSS returns the resident set size of process pid in bytes
// (/proc/<pid>/status VmRSS).
func RSS(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
