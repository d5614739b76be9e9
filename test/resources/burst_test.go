package resources

import (
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// burst connects n clients to addr one right after another, each sending
// PING as soon as it is connected, as a connection pool warming up does,
// and only then reads their replies. It returns how many got each reply;
// "EOF" counts clients closed without one. The connections are closed
// when the test ends.
func burst(t *testing.T, addr string, n int) map[string]int {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() { closeAll(conns) })
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d of %d: %v", len(conns)+1, n, err)
		}
		conns = append(conns, c)
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			t.Fatalf("connection %d of %d: %v", len(conns), n, err)
		}
	}
	got := map[string]int{}
	buf := make([]byte, 64)
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		m, err := c.Read(buf)
		switch {
		case err == nil:
			got[string(buf[:m])]++
		case errors.Is(err, io.EOF):
			got["EOF"]++
		default:
			got[err.Error()]++
		}
	}
	return got
}

// TestMaxClientsBurst: under a 1024-descriptor limit (one loop), with 100
// idle connections held open on the admin listener (it serves a bounded
// number at once, the rest wait unaccepted, so they cannot take the
// clients' descriptors), 520 clients connect in a burst, as a pool
// warming up does. Every one inside
// the maxclients Cicada announces gets +PONG and every one past it Redis's
// error, none a bare close (their upstream dials once ran out of
// descriptors: 93 to 157 of 520 got nothing). With those held, bursts of
// 3000 more are all refused with the error and Cicada keeps serving:
// refused clients must not exhaust descriptors either, or accept(2) fails
// and stops gnet's engine. Redis with the same maxclients, given the same
// burst, is logged beside it:
//
//	go test -run TestMaxClientsBurst -v ./test/resources/
func TestMaxClientsBurst(t *testing.T) {
	raiseFiles(t)
	limited := []string{"bash", "-c", `ulimit -n 1024 && exec "$0" "$@"`}
	r := redistest.Start(t)
	p := cicadatest.StartBinaryUnder(t, limited, r.Addr, "--loops", "1")
	limit := int(p.Metric(t, "cicada_maxclients"))
	if limit >= 520 {
		t.Fatalf("cicada_maxclients = %d under 1024 descriptors; the burst must pass it", limit)
	}
	var admin []net.Conn
	for range 100 {
		c, err := net.Dial("tcp", p.Admin)
		if err != nil {
			t.Fatal(err)
		}
		admin = append(admin, c)
	}
	refused := "-ERR max number of clients reached\r\n"
	got := burst(t, p.Addr, 520)
	if want := map[string]int{"+PONG\r\n": limit, refused: 520 - limit}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("520 clients in a burst through Cicada (maxclients %d) got %v, want %v", limit, got, want)
	}
	for i := range 3 {
		if got := burst(t, p.Addr, 3000); fmt.Sprint(got) != fmt.Sprint(map[string]int{refused: 3000}) {
			t.Fatalf("burst %d of 3000 more clients got %v, want all %q", i+1, got, refused)
		}
	}
	closeAll(admin) // they hold what the admin listener serves at once
	if got := p.Metric(t, "cicada_upstream_errors_total"); got != 0 {
		t.Errorf("cicada_upstream_errors_total = %v, want 0", got)
	}
	direct := redistest.Start(t, "--maxclients", fmt.Sprint(limit))
	t.Logf("520 clients in a burst: through Cicada (maxclients %d, 1024 descriptors) %v; Redis with maxclients %d %v",
		limit, got, limit, burst(t, direct.Addr, 520))
}
