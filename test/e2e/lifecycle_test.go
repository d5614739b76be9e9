package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/difftest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// TestAdminEndpoints checks /healthz, /readyz (following the subscription)
// and /metrics, and that no admin page (of either handler) shows a cached
// value.
func TestAdminEndpoints(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	admin := httptest.NewServer(p.Server.AdminHandler())
	defer admin.Close()
	local := httptest.NewServer(p.Server.LocalAdminHandler())
	defer local.Close()
	getFrom := func(base, path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	get := func(path string) (int, string) { return getFrom(admin.URL, path) }
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d, want 200", code)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz with the subscription up = %d, want 200", code)
	}
	rc := client(t, p.Addr, 2)
	mustDo(t, rc, "SET", "k", "secret-value")
	warmKey(t, p, rc, "GET", "k")
	_, metrics := get("/metrics")
	for _, want := range []string{"cicada_cache_hits_total ", "cicada_cache_fills_total ", "cicada_cache_replies 1",
		`cicada_cache_evictions_total{reason="write"}`, "cicada_keyspace_subscription_up 1", "cicada_client_connections 1"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// SET, GETs and fills went to Redis: their round trips were timed.
	if m := regexp.MustCompile(`(?m)^cicada_upstream_request_duration_seconds_count (\d+)$`).FindStringSubmatch(metrics); m == nil || m[1] == "0" {
		t.Errorf("/metrics has no upstream latency observations: %v", m)
	}
	// The value appears on no page; pprof's pages show stacks, sizes and
	// counts, never memory contents.
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if _, body := get(path); strings.Contains(body, "secret-value") {
			t.Errorf("%s shows a key value", path)
		}
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=2", "/debug/pprof/heap?debug=1",
		"/debug/pprof/allocs?debug=1", "/debug/pprof/cmdline", "/debug/pprof/k", "/debug/hotkeys"} {
		code, body := getFrom(local.URL, path)
		if code != 200 && path != "/debug/pprof/k" || strings.Contains(body, "secret-value") {
			t.Errorf("local %s: %d, shows a key value: %v", path, code, strings.Contains(body, "secret-value"))
		}
		if code, _ := get(path); code != http.StatusNotFound {
			t.Errorf("admin %s = %d, want 404 (local admin only)", path, code)
		}
	}
	r.Stop()
	waitFor(t, func() bool { code, _ := get("/readyz"); return code == 503 })
}

// TestGracefulShutdown: after Shutdown starts, an outstanding reply (a
// blocked BLPOP) still reaches its client, new connections are refused,
// then connections close.
func TestGracefulShutdown(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(cmd("BLPOP", "q", "0"))); err != nil {
		t.Fatal(err)
	}
	// (INFO commandstats counts a blocked command only once it returns
	// from Redis 7.2 on; blocked_clients counts it while it waits.)
	direct := client(t, r.Addr, 2)
	waitFor(t, func() bool {
		return strings.Contains(direct.Info(context.Background(), "clients").Val(), "\r\nblocked_clients:1\r\n")
	})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- p.Server.Shutdown(ctx)
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) while a reply was outstanding", err)
	default:
	}
	if nc, err := net.Dial("tcp", p.Addr); err == nil {
		_ = nc.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := nc.Read(make([]byte, 1)); err == nil {
			t.Error("a new connection during shutdown was served")
		}
		nc.Close()
	}
	difftest.SideRun(t, r.Addr, "RPUSH", "q", "job")
	expectBytes(t, c, "*2\r\n$1\r\nq\r\n$3\r\njob\r\n")
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("connection still open after Shutdown")
	}
}

// TestConfigSetNotifications: removing the notification classes with
// CONFIG SET through Cicada stops cache answers at once; Cicada restores
// the classes and answers again.
func TestConfigSetNotifications(t *testing.T) {
	r := redistest.Start(t)
	p := cicadatest.Start(t, r.Addr, cicadatest.Options{})
	rc := client(t, p.Addr, 2)
	mustDo(t, rc, "SET", "k", "v1")
	warmKey(t, p, rc, "GET", "k")
	mustDo(t, rc, "CONFIG", "SET", "notify-keyspace-events", "")
	// A direct write right away must be seen: either the cache is
	// suspended or the classes are back and its event evicts.
	mustDo(t, client(t, r.Addr, 2), "SET", "k", "v2")
	waitFor(t, func() bool { return rc.Get(context.Background(), "k").Val() == "v2" })
	waitFor(t, p.Sub.Ready)
	warmKey(t, p, rc, "GET", "k")
}
