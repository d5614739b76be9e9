// Package redistest starts real redis-server processes for tests.
//
// Every server listens on a free loopback port, keeps no data on disk, and is
// stopped by t.Cleanup. Tests never talk to a Redis they did not start.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one running redis-server owned by a test.
//
// Addr is "127.0.0.1:<port>". Cmd is the process; Dir its working directory
// (a t.TempDir). Fields are set by Start and read-only afterwards.
type Server struct {
	Addr string
	Port int
	Dir  string
	Cmd  *exec.Cmd
}

// Binary returns the path of redis-server, or "" when it is not installed.
func Binary() string {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return ""
	}
	return p
}

// Require skips t when redis-server is missing outside CI, and fails it in CI
// (CI=true), where .ci/run installs redis-server and a skip would hide failures.
func Require(t testing.TB) string {
	t.Helper()
	p := Binary()
	if p != "" {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatal("redis-server not found in PATH; .ci/run must install it (apt-get install -y redis-server)")
	}
	t.Skip("needs redis-server (apt-get install -y redis-server); `make test` installs it")
	return ""
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// never one of the last 256 it returned in this process: two asked in turn
// could otherwise be the same one (the first listener was closed again),
// and a process given both would fail to listen on the second. A race
// with another process is possible; Start retries on bind failure.
func FreePort(t testing.TB) int {
	t.Helper()
	recent.Lock()
	defer recent.Unlock()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen for a free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !slices.Contains(recent.ports[:], port) {
			recent.ports[recent.next%len(recent.ports)] = port
			recent.next++
			return port
		}
	}
}

// recent is the ports FreePort returned last, a ring under its lock.
var recent struct {
	sync.Mutex
	ports [256]int
	next  int
}

// Start runs redis-server with the given extra configuration arguments
// (each "--name value" pair as two strings, e.g. "--requirepass", "pw") on a
// free loopback port, waits until it answers PING, and stops it at cleanup.
// It fails the test after 3 attempts or 10 s.
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return StartPort(t, 0, args...)
}

// StartPort is Start on a given port (0: a free one, retried on a bind
// race). For tests that need the address before the server runs.
func StartPort(t testing.TB, fixed int, args ...string) *Server {
	t.Helper()
	bin := Require(t)
	dir := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port := fixed
		if port == 0 {
			port = FreePort(t)
		}
		full := append([]string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
			"--logfile", filepath.Join(dir, fmt.Sprintf("redis-%d.log", port)),
		}, args...)
		cmd := exec.Command(bin, full...)
		// A test binary killed by its -timeout runs no cleanup: the
		// kernel stops the server with it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, Dir: dir, Cmd: cmd}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if lastErr = waitReady(s.Addr, exited, 10*time.Second); lastErr == nil {
			t.Cleanup(func() { s.stop(exited) })
			return s
		}
		_ = cmd.Process.Kill()
		<-exited
	}
	t.Fatalf("redis-server did not start: %v", lastErr)
	return nil
}

// Stop kills the server now (for tests of an upstream going away). Cleanup
// tolerates a server that is already stopped.
func (s *Server) Stop() {
	_ = s.Cmd.Process.Kill()
}

func (s *Server) stop(exited chan error) {
	_ = s.Cmd.Process.Kill()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
	}
}

// waitReady polls addr with PING until +PONG or -NOAUTH (a server with a
// password is up too), the process exits, or the timeout passes.
func waitReady(addr string, exited chan error, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("redis-server exited: %v", err)
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			_, _ = c.Write([]byte("PING\r\n"))
			line, rerr := bufio.NewReader(c).ReadString('\n')
			_ = c.Close()
			if rerr == nil && (strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH")) {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("no PONG from %s within %v", addr, timeout)
}

// Version is what a server says of itself in INFO server: Name "redis" or
// "valkey" and its version (Valkey's own, not the redis_version it reports
// for compatibility).
type Version struct {
	Name                string
	Major, Minor, Patch int
}

// String returns "redis 8.0.2".
func (v Version) String() string {
	return fmt.Sprintf("%s %d.%d.%d", v.Name, v.Major, v.Minor, v.Patch)
}

// AtLeast reports whether v is a Redis of at least major.minor; Valkey
// counts as the Redis 7.2 it was forked from, plus what it added since.
func (v Version) AtLeast(major, minor int) bool {
	m, n := v.Major, v.Minor
	if v.Name == "valkey" {
		m, n = 7, 2
	}
	return m > major || (m == major && n >= minor)
}

// binaryVersion caches BinaryVersion.
var binaryVersion = sync.OnceValues(func() (Version, error) {
	bin := Binary()
	if bin == "" {
		return Version{}, fmt.Errorf("redis-server not found in PATH")
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return Version{}, fmt.Errorf("%s --version: %w", bin, err)
	}
	// "Redis server v=8.0.2 sha=..." or "Valkey server v=8.1.1 sha=..."
	name, rest, _ := strings.Cut(string(out), " server v=")
	ver, _, _ := strings.Cut(rest, " ")
	v := Version{Name: strings.ToLower(name)}
	parts := strings.SplitN(ver, ".", 3)
	for i, dst := range []*int{&v.Major, &v.Minor, &v.Patch} {
		if i < len(parts) {
			*dst, _ = strconv.Atoi(parts[i])
		}
	}
	if v.Name != "redis" && v.Name != "valkey" || v.Major == 0 {
		return Version{}, fmt.Errorf("%s --version: unexpected %q", bin, out)
	}
	return v, nil
})

// BinaryVersion returns the Version of the redis-server in PATH (the one
// every Start runs), from its --version output.
func BinaryVersion(t testing.TB) Version {
	t.Helper()
	Require(t)
	v, err := binaryVersion()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
