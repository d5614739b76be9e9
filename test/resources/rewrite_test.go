package resources

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cicada-proxy/cicada/resp"
	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// TestRewriteHeldBounded: with --cluster-address-map, Cicada holds error
// replies (to rewrite a -MOVED split across reads) and EXEC replies of
// transactions with a topology command (to rewrite it inside the array)
// until they are complete. Three clients that read nothing each make
// Redis answer 100 MB that way: Cicada must close them for
// --max-client-memory 64mb without holding much more (found by an attack:
// the held replies were outside every limit, 1 GB of RSS).
func TestRewriteHeldBounded(t *testing.T) {
	r := redistest.Start(t)
	const mb = 100
	for _, tc := range []struct {
		name string
		send func(c net.Conn) error
	}{
		{"error reply", func(c net.Conn) error {
			script := fmt.Sprintf("return redis.error_reply('ERR '..string.rep('x', %d))", mb<<20)
			_, err := c.Write(resp.AppendCommand(nil, []byte("EVAL"), []byte(script), []byte("0")))
			return err
		}},
		{"EXEC with CLUSTER NODES", func(c net.Conn) error {
			req := resp.AppendCommand(nil, []byte("MULTI"))
			req = resp.AppendCommand(req, []byte("CLUSTER"), []byte("NODES"))
			req = resp.AppendCommand(req, []byte("EVAL"), []byte(fmt.Sprintf("return string.rep('x', %d)", mb<<20)), []byte("0"))
			req = resp.AppendCommand(req, []byte("EXEC"))
			_, err := c.Write(req)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := cicadatest.StartBinary(t, r.Addr, "--max-client-memory", "64mb",
				"--cluster-address-map", "127.0.0.1:1=127.0.0.1:2")
			base := vmHWM(t, p.Pid)
			var conns []net.Conn
			defer func() { closeAll(conns) }()
			for range 3 {
				c, err := net.Dial("tcp", p.Addr)
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c)
				_ = c.(*net.TCPConn).SetReadBuffer(4096)
				if err := tc.send(c); err != nil {
					t.Fatal(err)
				}
			}
			closed := `cicada_clients_closed_total{reason="max-client-memory"}`
			deadline := time.Now().Add(30 * time.Second)
			for p.Metric(t, closed) < 3 {
				if time.Now().After(deadline) {
					t.Fatalf("%v clients closed for max-client-memory after 30 s", p.Metric(t, closed))
				}
				time.Sleep(50 * time.Millisecond)
			}
			peak := vmHWM(t, p.Pid)
			t.Logf("peak RSS %d MB (%d MB before)", peak>>20, base>>20)
			if grew := peak - base; grew > 250<<20 {
				t.Errorf("RSS grew by %d MB with --max-client-memory 64mb", grew>>20)
			}
		})
	}
}

// vmHWM is the peak resident set size of process pid in bytes
// (/proc/<pid>/status VmHWM).
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/<pid>/status")
	return 0
}

// TestRewriteGiveUpBytes: a reply held for rewriting and then passed on
// as it is (an error that is no redirect, an EXEC reply over the 16 MB
// that are held) reaches a reading client byte for byte as Redis sent it.
func TestRewriteGiveUpBytes(t *testing.T) {
	r := redistest.Start(t)
	p := cicadatest.StartBinary(t, r.Addr, "--cluster-address-map", "127.0.0.1:1=127.0.0.1:2")
	reqs := map[string][]byte{
		"error of 1 MB": resp.AppendCommand(nil, []byte("EVAL"),
			[]byte("return redis.error_reply('ERR '..string.rep('x', 1048576))"), []byte("0")),
		"short error": resp.AppendCommand(nil, []byte("GET")),
		"EXEC of 20 MB": resp.AppendCommand(resp.AppendCommand(resp.AppendCommand(resp.AppendCommand(nil,
			[]byte("MULTI")), []byte("CLUSTER"), []byte("NODES")),
			[]byte("EVAL"), []byte("return string.rep('y', 20971520)"), []byte("0")), []byte("EXEC")),
	}
	for name, req := range reqs {
		t.Run(name, func(t *testing.T) {
			want := exchange(t, r.Addr, req)
			if got := exchange(t, p.Addr, req); got != want {
				t.Fatalf("through Cicada %d bytes, from Redis %d; first differing at %d", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

// exchange sends req on a new connection and reads until the connection
// has been quiet for 500 ms after the first reply byte (at most 20 s in
// all): Redis itself takes about 500 ms to start the reply of a script
// building a 20 MB string.
func exchange(t *testing.T, addr string, req []byte) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	var out []byte
	buf := make([]byte, 1<<20)
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
		quiet := time.Until(end)
		if len(out) > 0 {
			quiet = 500 * time.Millisecond
		}
		_ = c.SetReadDeadline(time.Now().Add(quiet))
		n, err := c.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			break
		}
	}
	return string(out)
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
