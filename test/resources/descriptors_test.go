package resources

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/resp"
	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// pingWithin dials addr and wants +PONG within d.
func pingWithin(t *testing.T, addr string, d time.Duration) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		t.Fatalf("a new client after the attack: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(d))
	buf := make([]byte, 16)
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatalf("a new client after the attack: %v", err)
	}
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Fatalf("a new client after the attack got %q, %v; want +PONG", buf[:n], err)
	}
}

// TestACLLookupsWithinDescriptors: under a 768-descriptor limit, 250
// users (within maxclients) each send HOTKEYS while Redis is busy in a
// script, so that every ACL GETUSER lookup (a connection of its own) is
// in flight at once, with 32 idle connections on the admin port, and
// clients connect meanwhile. Lookups wait their turn beyond
// a few; they once took every descriptor, accept(2) failed and gnet's
// engine stopped. Cicada must serve a new client afterwards.
func TestACLLookupsWithinDescriptors(t *testing.T) {
	raiseFiles(t)
	r := redistest.Start(t)
	p := cicadatest.StartBinaryUnder(t, []string{"bash", "-c", `ulimit -n 768 && exec "$0" "$@"`}, r.Addr, "--loops", "1")
	ctx := context.Background()
	const users = 250
	direct := redis.NewClient(&redis.Options{Addr: r.Addr, DisableIdentity: true})
	defer direct.Close()
	var clients []net.Conn
	defer func() { closeAll(clients) }()
	for i := range users {
		name := fmt.Sprintf("u%d", i)
		if err := direct.Do(ctx, "ACL", "SETUSER", name, "on", ">pw", "~*", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		if _, err := c.Write(resp.AppendCommand(nil, []byte("AUTH"), []byte(name), []byte("pw"))); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 16)
		if n, err := c.Read(buf); err != nil || string(buf[:n]) != "+OK\r\n" {
			t.Fatalf("AUTH %s through Cicada: %q, %v", name, buf[:n], err)
		}
	}
	for range 32 {
		c, err := net.Dial("tcp", p.Admin)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	busy := make(chan error, 1)
	go func() { busy <- direct.Eval(ctx, "local n = 0 for i = 1, 3e8 do n = n + 1 end return n", nil).Err() }()
	time.Sleep(200 * time.Millisecond) // the script is running
	for _, c := range clients[:users] {
		if _, err := c.Write(resp.AppendCommand(nil, []byte("HOTKEYS"), []byte("GET"))); err != nil {
			t.Fatal(err)
		}
	}
	// Clients connecting while the lookups are in flight: each is an
	// accept(2), which must find a descriptor.
	for range 10 {
		time.Sleep(100 * time.Millisecond)
		if c, err := net.Dial("tcp", p.Addr); err == nil {
			clients = append(clients, c)
		}
	}
	if err := <-busy; err != nil {
		t.Fatalf("the busy script: %v", err)
	}
	pingWithin(t, p.Addr, 10*time.Second)
}

// TestAdminSlowClients: 200 clients, three times what the admin listener
// serves at once under 1024 descriptors, each with a request that
// promises a body and never sends it (they once held their place for
// good), delay /healthz by the read timeout (2 s) per 64 of them, not for
// ever.
func TestAdminSlowClients(t *testing.T) {
	r := redistest.Start(t)
	p := cicadatest.StartBinaryUnder(t, []string{"bash", "-c", `ulimit -n 1024 && exec "$0" "$@"`}, r.Addr, "--loops", "1")
	var slow []net.Conn
	defer func() { closeAll(slow) }()
	for range 200 { // more than the listener serves at once under 1024 descriptors
		c, err := net.Dial("tcp", p.Admin)
		if err != nil {
			t.Fatal(err)
		}
		slow = append(slow, c)
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	res, err := client.Get("http://" + p.Admin + "/healthz")
	if err != nil {
		t.Fatalf("/healthz behind 200 slow clients: %v after %v", err, time.Since(start))
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("/healthz behind 200 slow clients: %s, want 200", res.Status)
	}
	t.Logf("/healthz answered after %v behind 200 slow clients", time.Since(start).Round(time.Millisecond))
}
