package e2e

import (
	"bufio"
	"context"
	"io"
	"net"
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
func TestFlashCrowd(t *testing.T) {
	const (
		conns     = 200
		pipeline  = 16
		rounds    = 10
		threshold = 1000
		loops     = 2
		value     = "crowd"
	)
	r := redistest.Start(t)
	p := cicadatest.Start(t, r.Addr, cicadatest.Options{HotThreshold: threshold, Loops: loops})
	rc := redis.NewClient(&redis.Options{Addr: r.Addr, DisableIdentity: true})
	defer rc.Close()
	if err := rc.Set(context.Background(), "crowd", value, 0).Err(); err != nil {
		t.Fatal(err)
	}
	cs := make([]net.Conn, conns)
	for i := range cs {
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 7)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "+PONG\r\n" {
			t.Fatalf("PING: %q, %v", buf, err)
		}
		cs[i] = c
	}
	getsBefore, pttlsBefore := commandCalls(t, r.Addr, "get"), commandCalls(t, r.Addr, "pttl")
	batch := []byte(strings.Repeat("*2\r\n$3\r\nGET\r\n$5\r\ncrowd\r\n", pipeline))
	want := strings.Repeat("$5\r\n"+value+"\r\n", pipeline)
	start := make(chan struct{})
	errs := make(chan string, conns)
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			br := bufio.NewReader(c)
			got := make([]byte, len(want))
			<-start
			for range rounds {
				if _, err := c.Write(batch); err != nil {
					errs <- err.Error()
					return
				}
				if _, err := io.ReadFull(br, got); err != nil || string(got) != want {
					errs <- "replies " + string(got) + " " + errString(err)
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
	gets := commandCalls(t, r.Addr, "get") - getsBefore
	pttls := commandCalls(t, r.Addr, "pttl") - pttlsBefore
	t.Logf("%d GETs through Cicada: Redis got %d GETs and %d PTTLs; %d answered from the cache",
		conns*pipeline*rounds, gets, pttls, hits(p))
	if gets > threshold+2*loops || pttls > 2*loops {
		t.Errorf("Redis got %d GETs and %d PTTLs, want at most %d and %d: the threshold's worth, then one fill per loop (a flash crowd must not send a batch per connection)",
			gets, pttls, threshold+2*loops, 2*loops)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
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
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
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
