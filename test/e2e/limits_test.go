package e2e

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/resp"
	"github.com/cicada-proxy/cicada/test/cicadatest"
)

// floodUnread opens a connection to addr, sends requests, reads nothing
// for hold, then reads until the connection ends or 10 s pass. It reports
// whether the server closed the connection and how many bytes arrived.
func floodUnread(t *testing.T, addr string, requests []byte, hold time.Duration) (closed bool, got int64) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err) // may run on another goroutine
		return false, 0
	}
	defer c.Close()
	go func() { _, _ = c.Write(requests) }()
	time.Sleep(hold)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err = io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false, got
	}
	return true, got // EOF or a reset
}

// metric reads one of Cicada's series from its collector: name, with
// reason="..." when reason is not empty; a gauge's or a counter's value.
func metric(t *testing.T, p *cicadatest.Proxy, name, reason string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.Server.Collector())
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if reason != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != reason) {
				continue
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s{reason=%q}", name, reason)
	return 0
}

// closedClients reads cicada_clients_closed_total{reason}.
func closedClients(t *testing.T, p *cicadatest.Proxy, reason string) float64 {
	return metric(t, p, "cicada_clients_closed_total", reason)
}

// TestOutputBufferLimit: a client that pipelines reads and does not read
// the replies is closed once they reach Redis's client-output-buffer-limit,
// directly and through Cicada, for a normal client (cached and forwarded
// replies) and a subscribed one; a client that reads them is not.
func TestOutputBufferLimit(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	direct := client(t, r.Addr, 2)
	mustDo(t, direct, "SET", "cached", strings.Repeat("c", 50<<10)) // under MaxValue: answered locally
	mustDo(t, direct, "SET", "large", strings.Repeat("l", 100<<10)) // over it: forwarded
	// A CONFIG SET made on Redis directly empties the cache once Cicada
	// sees it in INFO commandstats: wait for that flush (of a cached key)
	// before the key is cached for the flood.
	warmKey(t, p, client(t, p.Addr, 2), "GET", "cached")
	flushed := p.Cache.Stats().Evicted[hotcache.ReasonFlush]
	mustDo(t, direct, "CONFIG", "SET", "client-output-buffer-limit", "normal 4mb 0 0 pubsub 1mb 0 0")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if hard, _, _ := p.Sub.OutputLimit(false); hard == 4<<20 && p.Cache.Stats().Evicted[hotcache.ReasonFlush] > flushed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Cicada did not read client-output-buffer-limit, or did not see the CONFIG SET")
		}
	}
	warmKey(t, p, client(t, p.Addr, 2), "GET", "cached")

	pipeline := func(key string, n int) []byte {
		var b []byte
		for range n {
			b = resp.AppendCommand(b, []byte("GET"), []byte(key))
		}
		return b
	}
	// Cached replies are Cicada's to limit; for forwarded ones Redis may
	// be first, closing Cicada's upstream connection (and so the client's)
	// when it makes replies faster than Cicada reads them.
	for _, key := range []string{"cached", "large"} {
		for _, target := range []struct{ name, addr string }{{"Redis", r.Addr}, {"Cicada", p.Addr}} {
			// 4,000 replies of 50-100 KB: 200-400 MB unread.
			closed, got := floodUnread(t, target.addr, pipeline(key, 4000), 500*time.Millisecond)
			if !closed || got > 100<<20 {
				t.Errorf("GET %s x4000 unread via %s: closed %v after %d bytes; want closed, well before 200 MB", key, target.name, closed, got)
			}
		}
	}
	closedBefore := closedClients(t, p, "output-buffer-limit")
	if closedBefore < 1 {
		t.Errorf("cicada_clients_closed_total{reason=output-buffer-limit} = %v, want at least 1", closedBefore)
	}

	// A subscriber that does not read, while 400 messages of 50 KB (20 MB,
	// more than socket buffers take) are published: over the pubsub
	// class's 1 MB.
	for _, target := range []struct{ name, addr string }{{"Redis", r.Addr}, {"Cicada", p.Addr}} {
		c, err := net.Dial("tcp", target.addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(resp.AppendCommand(nil, []byte("SUBSCRIBE"), []byte("ch"))); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if _, err := io.ReadAtLeast(c, buf, len("*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n")); err != nil {
			t.Fatal(err)
		}
		msg := strings.Repeat("m", 50<<10)
		for range 400 {
			if err := direct.Publish(context.Background(), "ch", msg).Err(); err != nil {
				t.Fatal(err)
			}
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.Copy(io.Discard, c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("subscriber via %s not closed after %d bytes of 20 MB published", target.name, got)
		}
		c.Close()
	}
	if n := closedClients(t, p, "output-buffer-limit"); n != closedBefore+1 {
		t.Errorf("cicada_clients_closed_total{reason=output-buffer-limit} = %v, want %v", n, closedBefore+1)
	}

	// Replies under the limit, read as they come: 30 of 100 KB.
	for _, addr := range []string{r.Addr, p.Addr} {
		pipe := client(t, addr, 2).Pipeline()
		for range 30 {
			pipe.Get(context.Background(), "large")
		}
		if _, err := pipe.Exec(context.Background()); err != nil {
			t.Errorf("30 GETs of 100 KB via %s: %v", addr, err)
		}
	}
}

// TestMaxClientMemory: clients that pipeline reads and read nothing are
// closed, largest first, once Cicada holds more than max-client-memory for
// them (Redis's output limit for normal clients being none, its default),
// and a client that reads its replies is served throughout.
func TestMaxClientMemory(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{MaxClientMemory: 32 << 20})
	direct := client(t, r.Addr, 2)
	mustDo(t, direct, "SET", "v", strings.Repeat("v", 50<<10))
	reader := client(t, p.Addr, 2)
	warmKey(t, p, reader, "GET", "v")
	var req []byte
	for range 4000 {
		req = resp.AppendCommand(req, []byte("GET"), []byte("v"))
	}
	done := make(chan bool, 3)
	for range 3 {
		go func() {
			closed, _ := floodUnread(t, p.Addr, req, time.Second)
			done <- closed
		}()
	}
	for range 20 {
		if err := reader.Get(context.Background(), "v").Err(); err != nil {
			t.Fatalf("a reading client during the flood: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 3 {
		if !<-done {
			t.Error("a client holding 200 MB of unread replies was not closed")
		}
	}
	if n := closedClients(t, p, "max-client-memory"); n != 3 {
		t.Errorf("cicada_clients_closed_total{reason=max-client-memory} = %v, want 3", n)
	}
}
