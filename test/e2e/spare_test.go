package e2e

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// Spare upstream connections (proxy/spare.go): once a loop has moved a
// client from its lane to a connection of its own, it keeps one
// connection dialed ahead for the next such client, unless that
// connection is no longer what a new one would be.

// expectReplies sends req on c and reads one reply per want, failing on
// any other bytes.
func expectReplies(t *testing.T, c net.Conn, br *bufio.Reader, req string, want ...string) {
	t.Helper()
	sendBytes(t, c, req)
	for _, w := range want {
		if got, err := redistest.ReadReply(br); err != nil || string(got) != w {
			t.Fatalf("%q: got %q, %v; want %q", req, got, err, w)
		}
	}
}

// pinnedID makes a new client of p pin (MULTI) and returns the id Redis
// gives its own connection (CLIENT ID inside the transaction).
func pinnedID(t *testing.T, p *cicadatest.Proxy) int64 {
	t.Helper()
	c, br := readyConn(t, p.Addr)
	defer c.Close()
	sendBytes(t, c, cmd("MULTI")+cmd("CLIENT", "ID")+cmd("EXEC"))
	for _, w := range []string{"+OK\r\n", "+QUEUED\r\n"} {
		if got, err := redistest.ReadReply(br); err != nil || string(got) != w {
			t.Fatalf("MULTI, CLIENT ID: %q, %v; want %q", got, err, w)
		}
	}
	got, err := redistest.ReadReply(br)
	s := string(got)
	if err != nil || !strings.HasPrefix(s, "*1\r\n:") {
		t.Fatalf("EXEC: %q, %v; want the id", got, err)
	}
	id, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(s, "*1\r\n:"), "\r\n"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// spareReady waits until p's one loop has a spare open.
func spareReady(t *testing.T, p *cicadatest.Proxy) {
	t.Helper()
	waitFor(t, func() bool { return metric(t, p, "cicada_upstream_spare_connections", "") == 1 })
}

// TestSpareTaken: the second client pinned on a loop gets the connection
// dialed after the first one's pin, before the second client connected
// (Redis numbers connections in the order it accepts them), and a new
// spare is dialed behind it.
func TestSpareTaken(t *testing.T) {
	cicadatest.NeedLanes(t, "")
	r, p := newProxied(t, cicadatest.Options{Loops: 1})
	direct := client(t, r.Addr, 2)
	first := pinnedID(t, p)
	spareReady(t, p)
	mark := direct.ClientID(context.Background()).Val()
	if second := pinnedID(t, p); second <= first || second >= mark {
		t.Errorf("the second client's own connection is id %d, want one between %d (the first's) and %d (accepted after the spare)", second, first, mark)
	}
	spareReady(t, p)
	if third := pinnedID(t, p); third <= mark {
		t.Errorf("the third client's own connection is id %d, want one after %d: a spare dialed after the second took its own", third, mark)
	}
}

// TestSpareNotAfterRulesChange: a spare dialed before requirepass was set
// is authenticated as the default user, as Redis keeps the connections it
// had accepted; a client that connects after the change must get a
// connection Redis does not authenticate, and with it -NOAUTH.
func TestSpareNotAfterRulesChange(t *testing.T) {
	cicadatest.NeedLanes(t, "")
	r, p := newProxied(t, cicadatest.Options{Loops: 1})
	pinnedID(t, p)
	spareReady(t, p)
	a, abr := readyConn(t, p.Addr)
	defer a.Close()
	expectReplies(t, a, abr, cmd("CONFIG", "SET", "requirepass", "pw"), "+OK\r\n")
	c := dialPlain(t, p.Addr)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	expectReplies(t, c, bufio.NewReader(c), cmd("GET", "k"), "-NOAUTH Authentication required.\r\n")
	direct := redis.NewClient(&redis.Options{Addr: r.Addr, Password: "pw", DisableIdentity: true})
	defer direct.Close()
	mustDo(t, direct, "CONFIG", "SET", "requirepass", "")
}

// TestSpareNotPastHalfTimeout: a spare idle for half of Redis's timeout
// may be closed by Redis at any moment: the next client pinned dials a
// connection of its own instead.
func TestSpareNotPastHalfTimeout(t *testing.T) {
	cicadatest.NeedLanes(t, "")
	r, p := newProxied(t, cicadatest.Options{Loops: 1})
	a, abr := readyConn(t, p.Addr)
	defer a.Close()
	expectReplies(t, a, abr, cmd("CONFIG", "SET", "timeout", "2"), "+OK\r\n")
	// Cicada reads the timeout in its periodic check (once a second): a
	// busy machine delayed it past the spare's half timeout in CI.
	waitFor(t, func() bool { return p.Sub.IdleTimeout() == 2*time.Second })
	pinnedID(t, p)
	spareReady(t, p)
	// Past half the timeout by more than the coarse clock can lag, before
	// Redis closes the spare (if it has, the client dials all the same).
	time.Sleep(1500 * time.Millisecond)
	mark := client(t, r.Addr, 2).ClientID(context.Background()).Val()
	if id := pinnedID(t, p); id <= mark {
		t.Errorf("the client's own connection is id %d, want one after %d: the spare was past half the timeout", id, mark)
	}
}

// TestSpareKilled: a spare Redis has closed (CLIENT KILL) is not given to
// a client, whether Cicada has seen the close yet or not: the client's
// transaction runs on a connection of its own, as without spares.
func TestSpareKilled(t *testing.T) {
	cicadatest.NeedLanes(t, "")
	r, p := newProxied(t, cicadatest.Options{Loops: 1})
	direct := client(t, r.Addr, 2)
	ctx := context.Background()
	pinnedID(t, p)
	for i := range 5 {
		spareReady(t, p)
		var spare string
		for _, line := range strings.Split(direct.ClientList(ctx).Val(), "\n") {
			if strings.Contains(line, " cmd=NULL ") { // a connection that never sent a command
				spare, _, _ = strings.Cut(strings.TrimPrefix(line, "id="), " ")
			}
		}
		if spare == "" {
			t.Fatalf("no connection without a command in CLIENT LIST:\n%s", direct.ClientList(ctx).Val())
		}
		mustDo(t, direct, "CLIENT", "KILL", "ID", spare)
		c, br := readyConn(t, p.Addr)
		k := "k" + strconv.Itoa(i)
		expectReplies(t, c, br, cmd("MULTI")+cmd("SET", k, "v")+cmd("EXEC")+cmd("GET", k),
			"+OK\r\n", "+QUEUED\r\n", "*1\r\n+OK\r\n", "$1\r\nv\r\n")
		c.Close()
	}
}

// TestSpareNotForUnauthenticated: under requirepass a client's first
// request goes on a connection of its own, which Redis does not
// authenticate. Redis closes such a connection once more than 1 KB of
// replies wait beyond its reply buffer, and shrinks the reply buffer of an
// idle connection to 1 KB: 100 refused GETs in one pipeline, which a new
// connection holds (16 KB), closed the client on a spare dialed after an
// earlier client's first request. Such a client dials.
func TestSpareNotForUnauthenticated(t *testing.T) {
	cicadatest.NeedLanes(t, "")
	_, p := newProxied(t, cicadatest.Options{Loops: 1, Password: "pw"}, "--requirepass", "pw")
	want := make([]string, 100)
	for i := range want {
		want[i] = "-NOAUTH Authentication required.\r\n"
	}
	for range 2 {
		c := dialPlain(t, p.Addr)
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		expectReplies(t, c, bufio.NewReader(c), strings.Repeat(cmd("GET", "k"), 100), want...)
		c.Close()
		time.Sleep(1500 * time.Millisecond) // Redis shrinks an idle connection's reply buffer
	}
	if n := metric(t, p, "cicada_upstream_spare_connections", ""); n != 0 {
		t.Errorf("%v spares, want none: no client was accepted on a lane", n)
	}
}
