package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// TestFlashCrowd: 200 connections, each ready (a PING answered, as a
// client's connect sequence leaves it), start pipelining GETs of one cold
// key at once. Until the key is hot every GET goes to Redis; from then on
// one fill per event loop (a GET and a PTTL) serves them all: the GETs a
// connection sends behind its own wait for their replies, and a
// connection with nothing in flight waits for the fill another one sent.
// Redis gets at most the threshold's worth of GETs (the detector calls a
// key hot at 91% to 100% of it, detector's doc) and two per loop more.
// A crowd during which the notification subscription was lost (the cache
// suspended and flushed: on a CPU-starved machine its 200-ms check can go
// unanswered) measures nothing and is run again with another key.
func TestFlashCrowd(t *testing.T) {
	const (
		threshold = 1000
		loops     = 2
		attempts  = 3
	)
	r := redistest.Start(t)
	p := cicadatest.Start(t, r.Addr, cicadatest.Options{HotThreshold: threshold, Loops: loops})
	whileSubscribed(t, p, attempts, func(i int) func() {
		gets, pttls := flashCrowd(t, r.Addr, p, "crowd"+strconv.Itoa(i))
		return func() {
			if gets > threshold+2*loops || pttls > 2*loops {
				t.Errorf("Redis got %d GETs and %d PTTLs, want at most %d and %d: the threshold's worth, then one fill per loop (a flash crowd must not send a batch per connection)",
					gets, pttls, threshold+2*loops, 2*loops)
			}
		}
	})
}

// whileSubscribed runs attempt (0, 1, ...) until one ran with the keyspace
// notification subscription up from start to end, then runs the checks
// that attempt returned; it fails the test after the given number of
// attempts. An attempt during which the subscription was lost measures
// nothing: the cache was suspended and flushed (on a CPU-starved machine
// the subscriber's 200-ms check can go unanswered).
func whileSubscribed(t *testing.T, p *cicadatest.Proxy, attempts int, attempt func(i int) (checks func())) {
	t.Helper()
	for i := range attempts {
		p.WaitReady(t)
		reconnects := p.Sub.Reconnects()
		checks := attempt(i)
		if p.Sub.Reconnects() != reconnects || !p.Sub.Ready() {
			t.Logf("attempt %d: keyspace notifications were lost meanwhile (the cache was suspended); again", i)
			continue
		}
		checks()
		return
	}
	t.Fatalf("keyspace notifications were lost during each of %d attempts", attempts)
}

// flashCrowd runs one crowd of TestFlashCrowd on the cold key and returns
// the GETs and PTTLs Redis got meanwhile.
func flashCrowd(t *testing.T, redisAddr string, p *cicadatest.Proxy, key string) (gets, pttls int64) {
	const (
		conns    = 200
		pipeline = 16
		rounds   = 10
		value    = "crowd"
	)
	rc := redis.NewClient(&redis.Options{Addr: redisAddr, DisableIdentity: true})
	defer rc.Close()
	events := p.Sub.Events()
	if err := rc.Set(context.Background(), key, value, 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Until the SET's notification is in, no fill of the key may be kept
	// (it could be older than the write): a starved machine delays it.
	waitFor(t, func() bool { return p.Sub.Events() > events })
	cs := make([]net.Conn, conns)
	brs := make([]*bufio.Reader, conns)
	for i := range cs {
		cs[i], brs[i] = readyConn(t, p.Addr)
		defer cs[i].Close()
	}
	getsBefore, pttlsBefore := commandCalls(t, redisAddr, "get"), commandCalls(t, redisAddr, "pttl")
	hitsBefore, unsettledBefore := hits(p), metric(t, p, "cicada_cache_hits_forwarded_total", "")
	batch := []byte(strings.Repeat(cmd("GET", key), pipeline))
	want := strings.Repeat("$5\r\n"+value+"\r\n", pipeline)
	start := make(chan struct{})
	errs := make(chan string, conns)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			br := brs[i]
			got := make([]byte, len(want))
			<-start
			for range rounds {
				if _, err := c.Write(batch); err != nil {
					errs <- err.Error()
					return
				}
				if _, err := io.ReadFull(br, got); err != nil || string(got) != want {
					errs <- fmt.Sprintf("replies %q, %v", got, err)
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	gets = commandCalls(t, redisAddr, "get") - getsBefore
	pttls = commandCalls(t, redisAddr, "pttl") - pttlsBefore
	t.Logf("%d GETs of %s through Cicada: Redis got %d GETs and %d PTTLs; %d answered from the cache, %v forwarded for an unapplied notification",
		conns*pipeline*rounds, key, gets, pttls, hits(p)-hitsBefore, metric(t, p, "cicada_cache_hits_forwarded_total", "")-unsettledBefore)
	return gets, pttls
}

// TestHotInsideBatch: a key that turns hot inside a pipeline is filled by
// the first GET after it did, and the GETs behind that one wait for the
// fill instead of going to Redis; the next pipeline is answered from the
// cache whole.
func TestHotInsideBatch(t *testing.T) {
	const threshold = 50
	r := redistest.Start(t)
	p := cicadatest.Start(t, r.Addr, cicadatest.Options{HotThreshold: threshold, Loops: 1})
	rc := redis.NewClient(&redis.Options{Addr: r.Addr, DisableIdentity: true})
	defer rc.Close()
	if err := rc.Set(context.Background(), "warm", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c, br := readyConn(t, p.Addr)
	send := func(n int) {
		t.Helper()
		if _, err := c.Write([]byte(strings.Repeat("*2\r\n$3\r\nGET\r\n$4\r\nwarm\r\n", n))); err != nil {
			t.Fatal(err)
		}
		want := strings.Repeat("$1\r\nv\r\n", n)
		got := make([]byte, len(want))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != want {
			t.Fatalf("%d GETs: got %q (%v)", n, got, err)
		}
	}
	send(1) // accepted: Redis answered this connection
	gets0, pttls0 := commandCalls(t, r.Addr, "get"), commandCalls(t, r.Addr, "pttl")
	send(100)
	gets1, pttls1 := commandCalls(t, r.Addr, "get"), commandCalls(t, r.Addr, "pttl")
	send(256)
	gets2, pttls2 := commandCalls(t, r.Addr, "get"), commandCalls(t, r.Addr, "pttl")
	t.Logf("100 GETs: Redis got %d GETs, %d PTTLs; then 256: %d, %d", gets1-gets0, pttls1-pttls0, gets2-gets1, pttls2-pttls1)
	if gets1-gets0 > threshold || pttls1-pttls0 != 1 {
		t.Errorf("pipeline of 100 GETs at threshold %d: Redis got %d GETs and %d PTTLs, want at most %d and exactly 1 (one fill once hot, the rest wait for it)",
			threshold, gets1-gets0, pttls1-pttls0, threshold)
	}
	if gets2 != gets1 || pttls2 != pttls1 {
		t.Errorf("next pipeline of 256: Redis got %d GETs and %d PTTLs, want none", gets2-gets1, pttls2-pttls1)
	}
}

// readyConn dials addr and sends a PING, so that Redis has answered the
// connection (until then nothing on it is answered from the cache).
func readyConn(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := dialPlain(t, addr)
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	if r, err := redistest.ReadReply(br); err != nil || string(r) != "+PONG\r\n" {
		t.Fatalf("PING: %q, %v", r, err)
	}
	return c, br
}

// TestNoWaitForHeldBackFill: another connection never waits for a fill
// whose reply Redis may hold back, behind a request ahead of it on its
// connection: WAIT, which blocks without replicas (the command table does
// not flag it blocking), or a write held by CLIENT PAUSE WRITE, while
// Redis serves reads. Found by the adversarial review of the fill change:
// the second GET hung for as long as the first connection's WAIT.
// Dedicated connections: on a lane, a write CLIENT PAUSE WRITE holds
// holds every request behind it, another client's too (docs/limits.md,
// cross-client timing).
func TestNoWaitForHeldBackFill(t *testing.T) {
	r := redistest.Start(t)
	p := cicadatest.Start(t, r.Addr, cicadatest.Options{Loops: 1, Dedicated: true})
	rc := redis.NewClient(&redis.Options{Addr: r.Addr, DisableIdentity: true})
	defer rc.Close()
	ctx := context.Background()
	for _, k := range []string{"w1", "w2"} {
		if err := rc.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	get := func(t *testing.T, key string) {
		t.Helper()
		b, br := readyConn(t, p.Addr)
		_ = b.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := b.Write([]byte("*2\r\n$3\r\nGET\r\n$2\r\n" + key + "\r\n")); err != nil {
			t.Fatal(err)
		}
		if got, err := redistest.ReadReply(br); err != nil || string(got) != "$1\r\nv\r\n" {
			t.Fatalf("GET %s on another connection: %q, %v; want Redis's $1 v at once", key, got, err)
		}
	}
	t.Run("behind WAIT", func(t *testing.T) {
		a, _ := readyConn(t, p.Addr)
		sent := forwardedGets(t, p)
		if _, err := a.Write([]byte("*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$1\r\n0\r\n*2\r\n$3\r\nGET\r\n$2\r\nw1\r\n")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return forwardedGets(t, p) > sent }) // the GET behind WAIT went to Redis
		get(t, "w1")
	})
	t.Run("behind a write CLIENT PAUSE WRITE holds", func(t *testing.T) {
		if err := rc.Do(ctx, "CLIENT", "PAUSE", "3000", "WRITE").Err(); err != nil {
			t.Fatal(err)
		}
		defer rc.Do(ctx, "CLIENT", "UNPAUSE")
		a, abr := readyConn(t, p.Addr)
		sent := forwardedGets(t, p)
		if _, err := a.Write([]byte("*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$1\r\n1\r\n*2\r\n$3\r\nGET\r\n$2\r\nw2\r\n")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return forwardedGets(t, p) > sent })
		get(t, "w2")
		_ = a.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if r, err := redistest.ReadReply(abr); err == nil {
			t.Fatalf("the paused SET was answered (%q) before the other GET: the test did not hold it", r)
		}
	})
}

// forwardedGets is how many GETs and HGETs Cicada has sent to Redis.
func forwardedGets(t *testing.T, p *cicadatest.Proxy) float64 {
	return metric(t, p, "cicada_cache_misses_total", "")
}

// TestNoFillBehindTracking: a GET pipelined behind CLIENT TRACKING ON
// OPTOUT and CLIENT CACHING no is not filled: Cicada's PTTL right behind
// it would be the command CLIENT CACHING no does not exempt, and Redis
// would track the key and send an invalidation it never sends the client
// (found by the adversarial review of the fill change).
func TestNoFillBehindTracking(t *testing.T) {
	r := redistest.Start(t)
	p := cicadatest.Start(t, r.Addr, cicadatest.Options{Loops: 1})
	direct := redistest.Start(t)
	for _, addr := range []string{r.Addr, direct.Addr} {
		rc := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
		if err := rc.Set(context.Background(), "tk", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		_ = rc.Close()
	}
	run := func(addr, redisAddr string) string {
		c, br := readyConn(t, addr)
		send := func(b string, replies int) string {
			if _, err := c.Write([]byte(b)); err != nil {
				t.Fatal(err)
			}
			var out []byte
			for range replies {
				rep, err := redistest.ReadReply(br)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, rep...)
			}
			return string(out)
		}
		send("*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n", 1)
		got := send("*4\r\n$6\r\nCLIENT\r\n$8\r\nTRACKING\r\n$2\r\nON\r\n$6\r\nOPTOUT\r\n"+
			"*3\r\n$6\r\nCLIENT\r\n$7\r\nCACHING\r\n$2\r\nno\r\n*2\r\n$3\r\nGET\r\n$2\r\ntk\r\n", 3)
		rc := redis.NewClient(&redis.Options{Addr: redisAddr, DisableIdentity: true})
		defer rc.Close()
		if err := rc.Set(context.Background(), "tk", "v2", 0).Err(); err != nil {
			t.Fatal(err)
		}
		// A push for the SET would come before the reply to this PING.
		return got + send("*1\r\n$4\r\nPING\r\n", 1)
	}
	want := run(direct.Addr, direct.Addr)
	if got := run(p.Addr, r.Addr); got != want {
		t.Errorf("through Cicada %q, want Redis's %q", got, want)
	}
}
