package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// laneIDs returns the ids of Cicada's lanes, as Redis lists them.
func laneIDs(t *testing.T, direct *redis.Client) []string {
	t.Helper()
	var ids []string
	for _, line := range strings.Split(direct.ClientList(context.Background()).Val(), "\n") {
		if strings.Contains(line, " name=cicada-lane ") {
			id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
			ids = append(ids, id)
		}
	}
	return ids
}

// TestLaneKilledMidPipeline: a lane killed while it carries a client's
// pipeline (its write held by CLIENT PAUSE WRITE) closes that client after
// the replies Redis sent, and the held write never runs, as with the
// client's own connection; a client idle on the lane carries on, on a new
// one.
func TestLaneKilledMidPipeline(t *testing.T) {
	cicadatest.NeedLanes(t, "")
	r, p := newProxied(t, cicadatest.Options{Loops: 1})
	direct := client(t, r.Addr, 2)
	ctx := context.Background()
	mustDo(t, direct, "SET", "a", "va")
	a, abr := readyConn(t, p.Addr)
	b, bbr := readyConn(t, p.Addr)
	lanes := laneIDs(t, direct)
	if len(lanes) != 1 {
		t.Fatalf("lanes: %v, want one for both clients", lanes)
	}
	mustDo(t, direct, "CLIENT", "PAUSE", "10000", "WRITE")
	defer direct.Do(ctx, "CLIENT", "UNPAUSE")
	sendBytes(t, a, cmd("GET", "a")+cmd("SET", "x", "1")+cmd("GET", "a"))
	if got, err := redistest.ReadReply(abr); err != nil || string(got) != "$2\r\nva\r\n" {
		t.Fatalf("GET before the held SET: %q, %v", got, err)
	}
	mustDo(t, direct, "CLIENT", "KILL", "ID", lanes[0])
	_ = a.SetReadDeadline(time.Now().Add(5 * time.Second))
	if rest, err := io.ReadAll(abr); len(rest) != 0 || err != nil {
		t.Fatalf("the client with requests in flight on the killed lane got %q then %v, want nothing then the close", rest, err)
	}
	mustDo(t, direct, "CLIENT", "UNPAUSE")
	sendBytes(t, b, cmd("GET", "a"))
	if got, err := redistest.ReadReply(bbr); err != nil || string(got) != "$2\r\nva\r\n" {
		t.Fatalf("the idle client after the kill: %q, %v; want the value on a new lane", got, err)
	}
	if err := direct.Get(ctx, "x").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET x: %v, want nil: the held SET of the killed lane ran", err)
	}
	if ids := laneIDs(t, direct); len(ids) != 1 || ids[0] == lanes[0] {
		t.Errorf("lanes after the kill: %v, want one new one", ids)
	}
}

// TestLaneClientStates: clients of every state the lanes carry share them
// (one lane per state per loop, however many clients), and a client that
// needs a connection of its own gets it with its db, protocol and name.
func TestLaneClientStates(t *testing.T) {
	cicadatest.NeedLanes(t, "")
	p := newPair(t, nil, cicadatest.Options{Loops: 1})
	direct := client(t, p.Behind.Addr, 2)
	const clients = 20
	for i := range clients {
		// Each client: a db, a protocol, a name, reads and writes on
		// lanes, then a transaction and CLIENT GETNAME on its own
		// connection, in the state it had.
		db := strconv.Itoa(i % 3)
		p.Compare(t,
			send(cmds([]string{"SELECT", db}, []string{"HELLO", "3"}, []string{"CLIENT", "SETNAME", "c" + db},
				[]string{"SET", "k", db}, []string{"GET", "k"}, []string{"GET", "k"})),
			send(cmds([]string{"MULTI"}, []string{"INCR", "n"}, []string{"EXEC"}, []string{"CLIENT", "GETNAME"}, []string{"GET", "k"})),
		)
	}
	if got := len(laneIDs(t, direct)); got != 6 {
		t.Errorf("%d lanes, want 6 (dbs 0, 1 and 2, each in RESP2 then RESP3)", got)
	}
	if got := metric(t, p.Proxy, "cicada_upstream_pins_total", ""); got != clients {
		t.Errorf("cicada_upstream_pins_total %v, want %d (one per client, at its MULTI)", got, clients)
	}
}

// TestLanesUnderRequirepass: under requirepass, a client gets a
// connection of its own for its AUTH, then goes back to a lane
// authenticated as its user (with the password Redis accepted from it);
// the connection of its own stays, idle, for what needs it. ACL users
// get lanes of their own.
func TestLanesUnderRequirepass(t *testing.T) {
	cicadatest.NeedLanes(t, "")
	p := newPair(t, []string{"--requirepass", "pw"}, cicadatest.Options{Password: "pw", Loops: 1})
	for _, addr := range []string{p.Direct.Addr, p.Behind.Addr} {
		rc := redis.NewClient(&redis.Options{Addr: addr, Password: "pw", DisableIdentity: true})
		mustDo(t, rc, "ACL", "SETUSER", "alice", "on", ">apw", "~*", "+@all")
		rc.Close()
	}
	const clients = 10
	for i := range clients {
		auth := []string{"AUTH", "pw"}
		if i%2 == 1 {
			auth = []string{"AUTH", "alice", "apw"}
		}
		k := "k" + strconv.Itoa(i)
		p.Compare(t, send(cmds([]string{"GET", k}, auth)), // refused until AUTH
			send(cmds([]string{"SET", k, "v"}, []string{"GET", k}, []string{"GET", k}, []string{"INCR", "n"})))
	}
	// Clients that stay: their own connections last ran AUTH; everything
	// after it went on the lanes.
	for i := range clients {
		c, br := readyAuthConn(t, p.Proxy.Addr, i%2 == 1)
		defer c.Close()
		sendBytes(t, c, cmd("SET", "x", "1")+cmd("GET", "x"))
		for _, want := range []string{"+OK\r\n", "$1\r\n1\r\n"} {
			if got, err := redistest.ReadReply(br); err != nil || string(got) != want {
				t.Fatalf("client %d: %q, %v; want %q", i, got, err, want)
			}
		}
	}
	direct := redis.NewClient(&redis.Options{Addr: p.Behind.Addr, Password: "pw", DisableIdentity: true})
	defer direct.Close()
	lanes, parked := map[string]int{}, 0
	for _, line := range strings.Split(direct.ClientList(context.Background()).Val(), "\n") {
		_, u, _ := strings.Cut(line, " user=")
		u, _, _ = strings.Cut(u, " ")
		switch {
		case strings.Contains(line, " name=cicada-lane "):
			lanes[u]++
		case strings.Contains(line, " name= ") && strings.Contains(line, " cmd=auth "):
			parked++
		}
	}
	if lanes["default"] != 1 || lanes["alice"] != 1 {
		t.Errorf("lanes by user: %v, want one for default and one for alice", lanes)
	}
	if parked != clients {
		t.Errorf("%d connections whose last command is AUTH, want %d: the clients' own, idle since", parked, clients)
	}
}

// readyAuthConn dials addr and authenticates, as alice or with
// requirepass's password.
func readyAuthConn(t *testing.T, addr string, alice bool) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := dialPlain(t, addr)
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	auth := cmd("AUTH", "pw")
	if alice {
		auth = cmd("AUTH", "alice", "apw")
	}
	sendBytes(t, c, auth)
	if r, err := redistest.ReadReply(br); err != nil || string(r) != "+OK\r\n" {
		t.Fatalf("AUTH: %q, %v", r, err)
	}
	return c, br
}

// TestLaneAuthFailsAfterPasswordChange: a password changed on Redis
// directly, before Cicada has seen the change, makes the next lane's AUTH
// fail: its clients stay on their own connections, still authenticated as
// Redis keeps them, and get what Redis gives them there; a client that
// authenticates with the new password gets lanes again.
func TestLaneAuthFailsAfterPasswordChange(t *testing.T) {
	cicadatest.NeedLanes(t, "")
	// Rules changes are checked once a minute: unseen during the test.
	r, p := newProxied(t, cicadatest.Options{Password: "pw", Loops: 1, CheckInterval: time.Minute}, "--requirepass", "pw")
	a, abr := readyAuthConn(t, p.Addr, false)
	defer a.Close()
	expectReplies(t, a, abr, cmd("SET", "k", "v")+cmd("GET", "k"), "+OK\r\n", "$1\r\nv\r\n") // on the lane of db 0
	direct := redis.NewClient(&redis.Options{Addr: r.Addr, Password: "pw", DisableIdentity: true})
	defer direct.Close()
	mustDo(t, direct, "CONFIG", "SET", "requirepass", "pw2")
	lanesBefore := metric(t, p, "cicada_upstream_lanes", "")
	// The lane of db 1 authenticates with the old password and fails: the
	// client goes on, on its own connection.
	expectReplies(t, a, abr, cmd("SELECT", "1"), "+OK\r\n")
	expectReplies(t, a, abr, cmd("SET", "k", "w")+cmd("GET", "k"), "+OK\r\n", "$1\r\nw\r\n")
	if got := metric(t, p, "cicada_upstream_lanes", ""); got != lanesBefore {
		t.Errorf("lanes %v, want %v: the lane of db 1 should have failed", got, lanesBefore)
	}
	if got := direct.Do(context.Background(), "GET", "k").Val(); got != "v" {
		t.Errorf("db 0's k: %v, want v", got)
	}
	// A client with the new password: lanes again, db 1's among them.
	b := dialPlain(t, p.Addr)
	defer b.Close()
	bbr := bufio.NewReader(b)
	_ = b.SetDeadline(time.Now().Add(30 * time.Second))
	expectReplies(t, b, bbr, cmd("AUTH", "pw")+cmd("AUTH", "pw2"), "-WRONGPASS invalid username-password pair or user is disabled.\r\n", "+OK\r\n")
	expectReplies(t, b, bbr, cmd("SELECT", "1")+cmd("GET", "k"), "+OK\r\n", "$1\r\nw\r\n")
	if got := metric(t, p, "cicada_upstream_lanes", ""); got != lanesBefore+1 {
		t.Errorf("lanes %v, want %v: one more for db 1, with the new password", got, lanesBefore+1)
	}
}

// TestWaitAfterLaneWrites: WAIT counts the writes of the connection it is
// sent on; a client's WAIT after writes on a lane goes on its own
// connection behind a PUBLISH that moves that connection's replication
// offset past them, so it waits for them as on Redis: with the replica
// stopped, both answer 0 after the timeout.
func TestWaitAfterLaneWrites(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	p := cicadatest.Start(t, master.Addr, cicadatest.Options{Loops: 1})
	direct := client(t, master.Addr, 2)
	ctx := context.Background()
	waitFor(t, func() bool { return strings.Contains(direct.Info(ctx, "replication").Val(), ",state=online,") })
	mustDo(t, direct, "SET", "warm", "1")
	if n, err := direct.Do(ctx, "WAIT", "1", "2000").Int64(); n != 1 {
		t.Fatalf("WAIT with the replica up: %v, %v; want 1", n, err)
	}
	_ = replica.Cmd.Process.Signal(syscall.SIGSTOP)
	defer func() { _ = replica.Cmd.Process.Signal(syscall.SIGCONT) }()
	for _, addr := range []string{master.Addr, p.Addr} {
		c, br := readyConn(t, addr)
		defer c.Close()
		sendBytes(t, c, cmd("SET", "k", "v")+cmd("WAIT", "1", "300"))
		for _, want := range []string{"+OK\r\n", ":0\r\n"} {
			if got, err := redistest.ReadReply(br); err != nil || string(got) != want {
				t.Fatalf("through %s: SET then WAIT 1 300 with the replica stopped: %q, %v; want %q", addr, got, err, want)
			}
		}
	}
}

// TestLaneLargeRequests: a request too large for a lane (over 512 KiB)
// goes on its client's own connection, whether it is the client's first
// request or follows others, arrives whole or in pieces; found by the
// adversarial review: arrived whole, it was routed back to the lane and
// refused there forever, the loop spinning.
func TestLaneLargeRequests(t *testing.T) {
	p := newPair(t, nil, cicadatest.Options{Loops: 1})
	big := cmd("SET", "big", strings.Repeat("b", 600<<10))
	p.Compare(t, send(big+cmd("STRLEN", "big")))
	p.Compare(t, send(cmd("GET", "a")), send(big+cmd("GET", "a")+cmd("STRLEN", "big")))
	p.Compare(t, send(big[:1000]), send(big[1000:]+cmd("STRLEN", "big")))
	p.Compare(t, send(cmd("CLIENT", "SETNAME", strings.Repeat("n", 5000))+cmd("GET", "a")+cmd("CLIENT", "GETNAME")))
}

// TestLaneHalfCloseInFlight: a client that shuts down its sending side
// while its requests are on a lane (behind another client's write that
// CLIENT PAUSE WRITE holds) gets its replies, then EOF, and the lane goes
// on serving the others; found by the adversarial review: the rest of its
// input went on its own connection meanwhile, and the lane stopped for
// everyone.
func TestLaneHalfCloseInFlight(t *testing.T) {
	cicadatest.NeedLanes(t, "")
	r, p := newProxied(t, cicadatest.Options{Loops: 1})
	direct := client(t, r.Addr, 2)
	ctx := context.Background()
	mustDo(t, direct, "SET", "k", "kval")
	mustDo(t, direct, "SET", "secret", "TOPSECRET")
	a, abr := readyConn(t, p.Addr)
	sendBytes(t, a, cmd("CLIENT", "GETNAME")+cmd("GET", "k")) // its own connection, then back to the lane
	for _, want := range []string{"$-1\r\n", "$4\r\nkval\r\n"} {
		if got, err := redistest.ReadReply(abr); err != nil || string(got) != want {
			t.Fatalf("A: %q, %v; want %q", got, err, want)
		}
	}
	b, bbr := readyConn(t, p.Addr)
	c, cbr := readyConn(t, p.Addr)
	defer b.Close()
	defer c.Close()
	mustDo(t, direct, "CLIENT", "PAUSE", "1000", "WRITE")
	defer direct.Do(ctx, "CLIENT", "UNPAUSE")
	sendBytes(t, b, cmd("SET", "x", "1"))
	time.Sleep(50 * time.Millisecond)
	sendBytes(t, a, cmd("GET", "k")+cmd("CLIENT", "GETNAME"))
	time.Sleep(50 * time.Millisecond)
	_ = a.(*net.TCPConn).CloseWrite()
	sendBytes(t, c, cmd("GET", "secret"))
	_ = a.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := io.ReadAll(abr); string(got) != "$4\r\nkval\r\n$-1\r\n" || err != nil {
		t.Errorf("A, half-closed: %q then %v, want its two replies then EOF", got, err)
	}
	for _, tc := range []struct {
		br   *bufio.Reader
		want string
	}{{bbr, "+OK\r\n"}, {cbr, "$9\r\nTOPSECRET\r\n"}} {
		if got, err := redistest.ReadReply(tc.br); err != nil || string(got) != tc.want {
			t.Errorf("another client of the lane: %q, %v; want %q", got, err, tc.want)
		}
	}
}

// TestLanePushToLane: an invalidation another client REDIRECTs to a lane
// (HELLO gives the lane's id) belongs to none of its clients: it is
// dropped, and every client still gets its own replies; found by the
// adversarial review: it was counted as the head client's reply, and the
// next client got another's value.
func TestLanePushToLane(t *testing.T) {
	cicadatest.NeedLanes(t, "")
	r, p := newProxied(t, cicadatest.Options{Loops: 1})
	direct := client(t, r.Addr, 2)
	mustDo(t, direct, "SET", "a", "secretA")
	mustDo(t, direct, "SET", "c", "C")
	b, bbr := readyConn(t, p.Addr)
	c, cbr := readyConn(t, p.Addr)
	a, abr := readyConn(t, p.Addr)
	defer b.Close()
	defer c.Close()
	defer a.Close()
	sendBytes(t, b, cmd("HELLO", "3"))
	hello, err := redistest.ReadReply(bbr)
	if err != nil {
		t.Fatal(err)
	}
	_, id, _ := strings.Cut(string(hello), "id\r\n:")
	id, _, _ = strings.Cut(id, "\r\n")
	sendBytes(t, c, cmd("HELLO", "3"))
	if _, err := redistest.ReadReply(cbr); err != nil {
		t.Fatal(err)
	}
	sendBytes(t, a, cmd("CLIENT", "TRACKING", "ON", "REDIRECT", id)+cmd("GET", "x"))
	for range 2 {
		if _, err := redistest.ReadReply(abr); err != nil {
			t.Fatal(err)
		}
	}
	busy := "local t=redis.call('TIME'); local s=t[1]*1000000+t[2]; while true do t=redis.call('TIME'); if t[1]*1000000+t[2]-s>300000 then break end end return 1"
	sendBytes(t, b, cmd("EVAL", busy, "0")+cmd("SET", "x", "1")+cmd("GET", "a"))
	time.Sleep(100 * time.Millisecond)
	sendBytes(t, c, cmd("GET", "c"))
	for _, want := range []string{":1\r\n", "+OK\r\n", "$7\r\nsecretA\r\n"} {
		if got, err := redistest.ReadReply(bbr); err != nil || string(got) != want {
			t.Fatalf("B: %q, %v; want %q", got, err, want)
		}
	}
	if got, err := redistest.ReadReply(cbr); err != nil || string(got) != "$1\r\nC\r\n" {
		t.Fatalf("C: %q, %v; want its own value", got, err)
	}
}

// TestLaneQueryBufferLimit: clients whose writes CLIENT PAUSE WRITE holds
// do not add up, on their lane, to more than Redis's smallest
// client-query-buffer-limit (1mb): Redis would close the lane, and every
// client on it; found by the adversarial review.
func TestLaneQueryBufferLimit(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{Loops: 1})
	direct := client(t, r.Addr, 2)
	ctx := context.Background()
	mustDo(t, direct, "CONFIG", "SET", "client-query-buffer-limit", "1mb")
	var conns []net.Conn
	var brs []*bufio.Reader
	for range 4 {
		c, br := readyConn(t, p.Addr)
		defer c.Close()
		conns, brs = append(conns, c), append(brs, br)
	}
	mustDo(t, direct, "CLIENT", "PAUSE", "1000", "WRITE")
	defer direct.Do(ctx, "CLIENT", "UNPAUSE")
	for i, c := range conns {
		var b strings.Builder
		for j := range 3 {
			b.WriteString(cmd("SET", fmt.Sprintf("k%d-%d", i, j), strings.Repeat("x", 100000)))
		}
		sendBytes(t, c, b.String())
	}
	for i, br := range brs {
		for j := range 3 {
			if got, err := redistest.ReadReply(br); err != nil || string(got) != "+OK\r\n" {
				t.Fatalf("client %d, SET %d: %q, %v; want +OK", i, j, got, err)
			}
		}
	}
}

// TestLaneClosedAfterLastClientLeft: a lane whose last client closed its
// connection while on it is closed once idle (half Redis's timeout here),
// as documented; before, a client that left while on a lane kept it
// counted, and the lane stayed open for good, PINGed every half timeout
// (found by a new user's trial: lanes of db 1 and 3 still open minutes
// after their clients had quit).
func TestLaneClosedAfterLastClientLeft(t *testing.T) {
	cicadatest.NeedLanes(t, "")
	r, p := newProxied(t, cicadatest.Options{Loops: 1})
	direct := client(t, r.Addr, 2)
	mustDo(t, direct, "CONFIG", "SET", "timeout", "2")
	ctx := context.Background()
	db3Lanes := func() int {
		n := 0
		for _, line := range strings.Split(direct.ClientList(ctx).Val(), "\n") {
			if strings.Contains(line, " name=cicada-lane ") && strings.Contains(line, " db=3 ") {
				n++
			}
		}
		return n
	}
	c, br := readyConn(t, p.Addr)
	sendBytes(t, c, cmd("SELECT", "3")+cmd("GET", "x"))
	for _, want := range []string{"+OK\r\n", "$-1\r\n"} {
		if got, err := redistest.ReadReply(br); err != nil || string(got) != want {
			t.Fatalf("%q, %v; want %q", got, err, want)
		}
	}
	if n := db3Lanes(); n != 1 {
		t.Fatalf("%d lanes of db 3, want the client's", n)
	}
	c.Close()
	waitFor(t, func() bool { return db3Lanes() == 0 })
}
