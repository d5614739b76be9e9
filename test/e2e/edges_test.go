package e2e

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cicada-proxy/cicada/detector"
	"github.com/cicada-proxy/cicada/test/cicadatest"
)

// TestTransactionEdges compares transactions that go wrong in unusual ways
// with Redis: a refused DISCARD, SUBSCRIBE after a refused MULTI (RESP2 and
// RESP3), a script that returns the status QUEUED, HELLO with its AUTH past
// the captured arguments.
func TestTransactionEdges(t *testing.T) {
	p := newPair(t, nil, cicadatest.Options{})
	p.LoadSample(t)
	p.Both(t, []string{"ACL", "SETUSER", "nodiscard", "on", ">pw", "~*", "&*", "+@all", "-discard"})
	p.Both(t, []string{"ACL", "SETUSER", "nomulti", "on", ">pw", "~*", "&*", "+@all", "-multi"})
	p.Both(t, []string{"ACL", "SETUSER", "limited", "on", ">pw", "~public:*", "+@all"})
	hello := []string{"HELLO", "2"}
	for range 520 {
		hello = append(hello, "SETNAME", "n")
	}
	hello = append(hello, "AUTH", "limited", "pw")
	tests := []struct {
		name  string
		steps []step
	}{
		{"refused DISCARD", []step{send(cmds([]string{"AUTH", "nodiscard", "pw"}, []string{"MULTI"}, []string{"SET", "x", "1"},
			[]string{"DISCARD"}, []string{"GET", "hot"}, []string{"EXEC"}, []string{"GET", "hot"}))}},
		{"SUBSCRIBE after a refused MULTI", []step{send(cmds([]string{"AUTH", "nomulti", "pw"}, []string{"MULTI"},
			[]string{"SUBSCRIBE", "a"}, []string{"DISCARD"}, []string{"GET", "hot"}, []string{"UNSUBSCRIBE"}, []string{"GET", "hot"}))}},
		{"RESP3 SUBSCRIBE after a refused MULTI", []step{send(cmds([]string{"SUBSCRIBE", "x"}, []string{"MULTI"},
			[]string{"UNSUBSCRIBE"}, []string{"HELLO", "3"}, []string{"SUBSCRIBE", "a"}, []string{"SELECT", "0"}, []string{"PING"}))}},
		{"SUBSCRIBE queued in MULTI", []step{send(cmds([]string{"PING"}, []string{"MULTI"}, []string{"SUBSCRIBE", "a"},
			[]string{"EXEC"}, []string{"PING"})), sideCmd("PUBLISH", "a", "m"), send(cmds([]string{"UNSUBSCRIBE"}, []string{"GET", "hot"}))}},
		{"SUBSCRIBE queued then DISCARD", []step{send(cmds([]string{"PING"}, []string{"MULTI"}, []string{"SUBSCRIBE", "a"},
			[]string{"DISCARD"}, []string{"MULTI"}, []string{"GET", "hot"}, []string{"EXEC"}, []string{"GET", "hot"}))}},
		{"script status QUEUED", []step{send(cmds([]string{"PING"}, []string{"EVAL", "return {ok='QUEUED'}", "0"}, []string{"GET", "hot"}))}},
		{"HELLO AUTH past the captured arguments", []step{send(cmds(hello, []string{"GET", "hot"}))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.WarmSample(t)
			p.Compare(t, tt.steps...)
			if p.Proxy.Cache.Suspended() {
				waitFor(t, func() bool { return !p.Proxy.Cache.Suspended() })
			}
		})
	}
}

// TestNoLastingSuspension: whatever a connection does, the cache must not
// stay suspended for everyone: an open transaction with a queued script,
// CONFIG SET or a script on an opaque connection, a transaction that turns
// opaque.
func TestNoLastingSuspension(t *testing.T) {
	_, p := newProxied(t, cicadatest.Options{})
	rc := client(t, p.Addr, 2)
	mustDo(t, rc, "SET", "hot", "v")
	warmKey(t, p, rc, "GET", "hot")
	conversations := [][]string{
		{cmd("PING"), cmd("MULTI"), cmd("EVAL", "return 1", "0"), cmd("FLUSHDB"), cmd("CONFIG", "SET", "hz", "10")},
		{cmd("CLIENT", "REPLY", "OFF"), cmd("CONFIG", "SET", "hz", "10"), cmd("EVAL", "return 1", "0")},
		{cmd("PING"), cmd("MULTI"), cmd("EVAL", "return 1", "0"), cmd("CLIENT", "REPLY", "SKIP"), cmd("EXEC")},
	}
	for i, conv := range conversations {
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, b := range conv {
			if _, err := c.Write([]byte(b)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// The connection stays open; within a little over a second the
		// cache answers again.
		waitFor(t, func() bool { return !p.Cache.Suspended() })
		before := hits(p)
		warmKey(t, p, rc, "GET", "hot")
		if hits(p) == before {
			t.Fatalf("conversation %d: no cache answers afterwards", i)
		}
	}
}

// TestProtocolErrorWithMoreData: the error reaches the client even when it
// sent megabytes after the bad request (Redis would reset a connection
// closed with unread input).
func TestProtocolErrorWithMoreData(t *testing.T) {
	p := newPair(t, nil, cicadatest.Options{})
	for _, bad := range []string{"*x\r\n", "*2\r\n$3\r\nGET\r\n!3\r\n", strings.Repeat("a", 1<<20)} {
		name := bad
		if len(name) > 20 {
			name = name[:20]
		}
		t.Run(name, func(t *testing.T) {
			got, closed := converse(t, p.Proxy.Addr, []step{send(cmd("PING") + bad + strings.Repeat("x", 4<<20))}, time.Second)
			want, _ := converse(t, p.Direct.Addr, []step{send(cmd("PING") + bad)}, 300*time.Millisecond)
			if string(got) != string(want) || !closed {
				t.Fatalf("got %q closed=%v, want %q and a close", got, closed, want)
			}
		})
	}
}

// TestUnnotifiedDirectChanges: a CONFIG RESETSTAT that brings SWAPDB's
// counter back, and notification classes removed and restored between two
// checks, are both caught.
func TestUnnotifiedDirectChanges(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	ctx := context.Background()
	rc := client(t, p.Addr, 2)
	direct := client(t, r.Addr, 2)
	mustDo(t, direct, "SWAPDB", "0", "1")
	time.Sleep(300 * time.Millisecond) // a check reads SWAPDB's count
	mustDo(t, direct, "SET", "k", "db0")
	mustDo(t, direct, "EVAL", "redis.call('SELECT', 1) redis.call('SET', 'k', 'db1') return 1", "0")
	warmKey(t, p, rc, "GET", "k")
	mustDo(t, direct, "CONFIG", "RESETSTAT")
	mustDo(t, direct, "SWAPDB", "0", "1")
	waitFor(t, func() bool { return rc.Get(ctx, "k").Val() == "db1" })

	warmKey(t, p, rc, "GET", "k")
	mustDo(t, direct, "CONFIG", "SET", "notify-keyspace-events", "")
	mustDo(t, direct, "SET", "k", "unnotified")
	mustDo(t, direct, "CONFIG", "SET", "notify-keyspace-events", "KA")
	waitFor(t, func() bool { return rc.Get(ctx, "k").Val() == "unnotified" })
}

// TestSync: SYNC's replication stream is not a reply; it passes through.
func TestSync(t *testing.T) {
	_, p := newProxied(t, cicadatest.Options{})
	mustDo(t, client(t, p.Addr, 2), "SET", "k", "v")
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(cmd("SYNC"))); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	head := make([]byte, 6)
	if _, err := io.ReadFull(c, head); err != nil {
		t.Fatalf("reading the RDB transfer: %v", err)
	}
	if head[0] != '$' && head[0] != '\n' {
		t.Fatalf("SYNC began with %q, want an RDB transfer", head)
	}
}

// TestRedisClosesUnreadClient: when Redis has closed a connection whose
// client does not read, Cicada neither drops the pending reply nor spins.
func TestRedisClosesUnreadClient(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	mustDo(t, client(t, r.Addr, 2), "SET", "big", strings.Repeat("x", 16<<20))
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(cmd("GET", "big") + cmd("QUIT"))); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2000; i++ { // writes after the QUIT, nobody reads
		if _, err := c.Write([]byte("x")); err != nil {
			break
		}
	}
	time.Sleep(500 * time.Millisecond)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.ReadAll(c)
	if want := len("$16777216\r\n") + 16<<20 + 2 + len("+OK\r\n"); len(got) != want {
		t.Fatalf("read %d bytes, want %d", len(got), want)
	}

}

// TestDeepReplies: a script's reply nests as deep as Lua lets it, and
// Cicada passes it on whole, the connection still usable after it: a
// table 4097 levels deep (one past what Cicada once framed), a table that
// holds itself (7995 levels: Redis gives up at its Lua stack limit with an
// error as the innermost element), RESP3 maps of maps (2665 levels before
// the same limit), and each as an element of EXEC's reply.
func TestDeepReplies(t *testing.T) {
	p := newPair(t, nil, cicadatest.Options{})
	nest := "local t = {}; local c = t; for i=2,4097 do local n = {}; c[1] = n; c = n end; c[1] = 'x'; return t"
	self := "local t = {}; t[1] = t; return t"
	maps := "redis.setresp(3); local t = {map={}}; local c = t; for i=2,5000 do local n = {map={}}; c.map['k'] = n; c = n end; c.map['k'] = 'x'; return t"
	for _, tc := range []struct {
		name, script, hello string
	}{
		{"4097 levels", nest, ""},
		{"self-referencing", self, ""},
		{"RESP3 maps", maps, cmd("HELLO", "3")},
		{"RESP3 maps to RESP2", maps, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eval := cmd("EVAL", tc.script, "0")
			for _, steps := range [][]step{
				{send(tc.hello + eval + cmd("PING"))},
				{send(tc.hello + cmd("MULTI") + eval + cmd("GET", "hot") + cmd("EXEC") + cmd("PING"))},
			} {
				got := p.Compare(t, steps...)
				if !strings.HasSuffix(string(got), "+PONG\r\n") || len(got) < 4000*4 {
					t.Fatalf("through Cicada: %d bytes ending %q, want the deep reply then +PONG", len(got), got[max(0, len(got)-40):])
				}
			}
		})
	}
}

// TestInvalidUpstreamReply: when what comes from upstream stops being
// RESP (an upstream that is not Redis, or a broken one), the client gets
// the complete replies before it, then the close, as if Redis had closed
// the connection after them. On a dedicated connection;
// TestInvalidLaneReply is the same on a lane.
func TestInvalidUpstreamReply(t *testing.T) {
	// Whatever the first read, "+OK" then bytes that are not RESP.
	p := cicadatest.Start(t, fakeRedis(t, "+OK\r\n*-5\r\n"), cicadatest.Options{NoWait: true, Dedicated: true})
	if got, err := sendAndReadAll(t, p.Addr, "PING\r\n"); got != "+OK\r\n" || err != nil {
		t.Fatalf("through Cicada: %q then %v, want %q then the close", got, err, "+OK\r\n")
	}
}

// TestInvalidLaneReply: a lane whose Redis sends bytes that are not RESP
// is closed, and so is the client it owed a reply, after the replies
// before the bad bytes, as its own connection would have been.
func TestInvalidLaneReply(t *testing.T) {
	cicadatest.NeedLanes(t, "TestInvalidUpstreamReply")
	// The lane's setup (CLIENT SETNAME), then the client's two PINGs.
	p := cicadatest.Start(t, fakeRedis(t, "+OK\r\n", "+PONG\r\n*-5\r\n"), cicadatest.Options{NoWait: true, Loops: 1})
	if got, err := sendAndReadAll(t, p.Addr, "PING\r\nPING\r\n"); got != "+PONG\r\n" || err != nil {
		t.Fatalf("through a lane: %q then %v, want %q then the close", got, err, "+PONG\r\n")
	}
}

// fakeRedis listens on a loopback port until the test ends and answers
// each connection's reads with replies in turn (one per read), then
// reads on without answering; it returns its address.
func fakeRedis(t *testing.T, replies ...string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for _, reply := range replies {
					if _, err := c.Read(make([]byte, 4096)); err != nil {
						return
					}
					_, _ = c.Write([]byte(reply))
				}
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// sendAndReadAll sends req on a new connection to addr and returns what
// it reads until the connection closes (or 5 s pass: then the error).
func sendAndReadAll(t *testing.T, addr, req string) (string, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	return string(got), err
}

// TestManyFillsInOnePipeline: a pipeline that fills more keys than a
// writev takes slices (each fill sends its GET and a PTTL of Cicada's)
// reaches Redis whole, on a lane and on a connection of its own: more
// than IOV_MAX (1024) slices in one writev fail it, and gnet closes the
// connection.
func TestManyFillsInOnePipeline(t *testing.T) {
	const keys = 1500
	for _, dedicated := range []bool{false, true} {
		t.Run(map[bool]string{false: "lanes", true: "dedicated"}[dedicated], func(t *testing.T) {
			p := newPair(t, nil, cicadatest.Options{Dedicated: dedicated, Loops: 1})
			var gets [][]string
			for _, addr := range []string{p.Direct.Addr, p.Behind.Addr} {
				rc := client(t, addr, 2)
				pipe := rc.Pipeline()
				for i := range keys {
					pipe.Set(context.Background(), "k"+strconv.Itoa(i), i, 0)
				}
				if _, err := pipe.Exec(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			// Each key is read twice: admission remembers the prefill's
			// writes over its long horizon, and a key read once and
			// written once saves nothing (Redis 8 sends two notifications
			// for a new key's SET, one of which counts as a write; 7.0's
			// does not count), so on Redis 8 the second GET fills.
			for i := range keys {
				gets = append(gets, []string{"GET", "k" + strconv.Itoa(i)}, []string{"GET", "k" + strconv.Itoa(i)})
			}
			// The prefill's writes leave the admission's 1-s window first.
			time.Sleep(detector.Window + 100*time.Millisecond)
			// A pipeline during which the notification subscription was
			// lost fills nothing and is sent again.
			whileSubscribed(t, p.Proxy, 3, func(int) func() {
				before := metric(t, p.Proxy, "cicada_cache_fills_total", "")
				p.Compare(t, send(cmds(gets...)), send(cmds(gets...)))
				fills := metric(t, p.Proxy, "cicada_cache_fills_total", "") - before
				return func() {
					t.Logf("%d keys not cached, each read twice in one pipeline: %v fills", keys, fills)
					if fills < keys/2 {
						t.Errorf("%v fills, want most of the %d keys filled: the test did not fill them in one pipeline", fills, keys)
					}
				}
			})
		})
	}
}
