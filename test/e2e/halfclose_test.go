package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cicada-proxy/cicada/test/cicadatest"
)

// halfClosed connects to addr, sends req, shuts its sending side down
// (what `printf ... | nc -N` does), waits wait, and reads until the server
// closes the connection. It returns what it read, and err if the server
// did not close within 5 s.
func halfClosed(addr, req string, wait time.Duration) ([]byte, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := c.Write([]byte(req)); err != nil {
		return nil, err
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return nil, err
	}
	time.Sleep(wait)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	return io.ReadAll(c)
}

// TestHalfCloseHeldHit: a client that sends one cached GET and shuts
// down its side is answered from the cache and opens nothing on Redis,
// as when the hit was answered the moment it was read. Held for the
// loop's settle pass (proxy/settle.go), its request used to count as work
// left for Redis at the EOF: the client was given a connection of its own
// (761 Redis connections for 1,000 such clients), and where Redis refused
// it (maxclients) its refusal followed the cached reply.
func TestHalfCloseHeldHit(t *testing.T) {
	pair := newPair(t, nil, cicadatest.Options{})
	pair.LoadSample(t)
	rc := client(t, pair.Behind.Addr, 2)
	conns := func() int64 {
		info, err := rc.Info(context.Background(), "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "total_connections_received:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatalf("no total_connections_received in %q", info)
		return 0
	}
	before, hitsBefore := conns(), hits(pair.Proxy)
	const n = 100
	for range n {
		got, err := halfClosed(pair.Proxy.Addr, cmd("GET", "hot"), 0)
		if err != nil || string(got) != "$9\r\nhot-value\r\n" {
			t.Fatalf("GET hot, then the client's side shut down: %q (%v), want the cached value then EOF", got, err)
		}
	}
	// A lane or spare may be dialed again meanwhile; a connection per
	// client is what the test is after.
	if more, h := conns()-before, hits(pair.Proxy)-hitsBefore; more > n/10 || h != n {
		t.Errorf("%d clients sent a cached GET and shut down their side: Redis accepted %d connections, Cicada answered %d; want at most %d and %d",
			n, more, h, n/10, n)
	}
}

// TestHalfClose: a client that sends requests and shuts down its sending
// side gets, through Cicada as from Redis, the replies to everything it
// sent, then EOF; and every write it sent executes. Redis processes what
// it read and frees the client when it reads the EOF, so a blocking
// command's reply, a transaction never EXECed and an incomplete request
// are dropped. A regression: Cicada closed the session at the client's
// EOF, and of 100 clients sending a SET and an ECHO, 4-5 got their
// replies and 15-21 SETs executed.
func TestHalfClose(t *testing.T) {
	pair := newPair(t, nil, cicadatest.Options{})
	pair.LoadSample(t)

	// 100 at once, as many arriving while Cicada still dials Redis.
	const n = 100
	for _, target := range []struct{ name, addr, redis string }{
		{"Redis", pair.Direct.Addr, pair.Direct.Addr}, {"Cicada", pair.Proxy.Addr, pair.Behind.Addr},
	} {
		var wg sync.WaitGroup
		var mu sync.Mutex
		full := 0
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := halfClosed(target.addr, fmt.Sprintf("SET hc%d w\r\nECHO reply\r\n", i), 0)
				if err == nil && string(got) == "+OK\r\n$5\r\nreply\r\n" {
					mu.Lock()
					full++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		keys := 0
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			ks, err := client(t, target.redis, 2).Keys(context.Background(), "hc*").Result()
			if err != nil {
				t.Fatal(err)
			}
			if keys = len(ks); keys == n || time.Now().After(deadline) {
				break
			}
		}
		if full != n || keys != n {
			t.Errorf("via %s: %d clients sent SET and ECHO and shut down their side: %d got both replies, %d SETs executed; want %d and %d",
				target.name, n, full, keys, n, n)
		}
	}

	// One connection at a time, byte for byte against Redis.
	for _, tc := range []struct{ name, req string }{
		{"blocking command dropped", "PING\r\nBLPOP nolist 0\r\n"},
		{"cached read behind a forwarded one", cmds([]string{"INCR", "counter"}, []string{"GET", "hot"}, []string{"GET", "hot"})},
		{"incomplete request", "PING\r\n*2\r\n$3\r\nGET\r\n$3\r\nho"},
		{"subscribe", cmd("SUBSCRIBE", "ch")},
		{"QUIT", "PING\r\nQUIT\r\nPING\r\n"},
		{"protocol error", "PING\r\n*abc\r\nPING\r\n"},
		{"transaction never executed", cmds([]string{"MULTI"}, []string{"SET", "tx", "1"}) + cmd("GET", "tx")},
		{"SELECT then cached read", cmds([]string{"SELECT", "0"}, []string{"GET", "hot"}, []string{"HGET", "h", "f"})},
		// A hit that ends its batch waits for the loop's settle pass
		// (proxy/settle.go), which may run after the EOF is read.
		{"cached read alone", cmd("GET", "hot")},
		{"cached reads", cmds([]string{"GET", "hot"}, []string{"HGET", "h", "f"})},
	} {
		want, werr := halfClosed(pair.Direct.Addr, tc.req, 0)
		got, gerr := halfClosed(pair.Proxy.Addr, tc.req, 0)
		if werr != nil || gerr != nil || string(got) != string(want) {
			t.Errorf("%s, then the client's side shut down: via Cicada %q (%v), Redis %q (%v)", tc.name, got, gerr, want, werr)
		}
	}
	if v := mustDo(t, client(t, pair.Behind.Addr, 2), "EXISTS", "tx"); v != int64(0) {
		t.Errorf("a transaction never EXECed ran through Cicada: EXISTS tx = %v", v)
	}

	// Replies larger than the sockets take, the client reading late:
	// Redis frees the client at its EOF and drops what it had not
	// written; so must Cicada, rather than keep them.
	big := strings.Repeat("b", 1<<20)
	pair.Both(t, []string{"SET", "big", big})
	req := strings.Repeat(cmd("GET", "big"), 20)
	want, werr := halfClosed(pair.Direct.Addr, req, 500*time.Millisecond)
	got, gerr := halfClosed(pair.Proxy.Addr, req, 500*time.Millisecond)
	all := strings.Repeat("$1048576\r\n"+big+"\r\n", 20)
	t.Logf("20 GETs of 1 MB, the client's side shut down, read after 500 ms: Redis sent %d bytes, Cicada %d (of %d)", len(want), len(got), len(all))
	for _, side := range []struct {
		name string
		got  []byte
		err  error
	}{{"Redis", want, werr}, {"Cicada", got, gerr}} {
		if side.err != nil || len(side.got) == 0 || len(side.got) >= len(all) || !strings.HasPrefix(all, string(side.got)) {
			t.Errorf("20 GETs of 1 MB then EOF: via %s %d bytes (%v); want some of the replies, not all, then EOF", side.name, len(side.got), side.err)
		}
	}

	// Every half-closed session ended.
	waitFor(t, func() bool { return metric(t, pair.Proxy, "cicada_client_connections", "") == 0 })
}

// TestShrinkMidCommand: the idle sweep must not free the parser's buffers
// under a command half received (it crashed Cicada, or read the rest as
// another command): a command paused past the sweep completes as on Redis.
func TestShrinkMidCommand(t *testing.T) {
	_, p := newProxied(t, cicadatest.Options{})
	c := dialPlain(t, p.Addr)
	sendBytes(t, c, "*4\r\n$4\r\nECHO\r\n$2500\r\n"+strings.Repeat("a", 2500)+"\r\n$2500\r\n"+strings.Repeat("b", 2500)+"\r\n")
	time.Sleep(3500 * time.Millisecond) // idle past shrinkIdleAfter (2 s) and a sweep (1 s)
	sendBytes(t, c, "$1\r\nc\r\n"+cmd("PING"))
	expectBytes(t, c, "-ERR wrong number of arguments for 'echo' command\r\n+PONG\r\n")
}

// TestHalfCloseWhilePaused: a half-closed client whose requests wait
// behind a reply that never comes (a BLPOP 0, then a SELECT whose reply
// Cicada waits for before it reads on) is freed as Redis frees it when it
// reads the EOF, and leaves no session, descriptor or blocked Redis
// client behind. A regression: every such session stayed for good, with
// two descriptors and a blocked client in Redis.
func TestHalfCloseWhilePaused(t *testing.T) {
	pair := newPair(t, nil, cicadatest.Options{})
	req := cmd("BLPOP", "nolist", "0") + cmd("SELECT", "0") + cmd("PING")
	for _, target := range []struct{ name, addr string }{{"Redis", pair.Direct.Addr}, {"Cicada", pair.Proxy.Addr}} {
		got, err := halfClosed(target.addr, req, 0)
		if err != nil || len(got) != 0 {
			t.Errorf("%s: read %q, %v; want nothing, then EOF", target.name, got, err)
		}
	}
	waitFor(t, func() bool { return metric(t, pair.Proxy, "cicada_client_connections", "") == 0 })
	waitFor(t, func() bool { return metric(t, pair.Proxy, "cicada_inflight_requests", "") == 0 })
}
