// Package e2e drives Cicada with raw sockets and go-redis against real
// redis-servers and compares what clients get with what Redis sends.
package e2e

import (
	"bytes"
	"context"
	"errors"

	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// step is one part of a conversation: bytes to send, or a side action
// (run with side, a direct connection to the same Redis) before the next
// send. wait pauses before the step.
type step struct {
	send string
	side []string // a command run on a separate connection to the same address
	wait time.Duration
}

func send(s string) step                { return step{send: s} }
func sideCmd(args ...string) step       { return step{side: args, wait: 50 * time.Millisecond} }
func pause(d time.Duration) step        { return step{wait: d} }
func cmd(args ...string) string         { return string(encode(args...)) }
func cmds(lines ...[]string) (s string) { return joinCmds(lines) }

func joinCmds(lines [][]string) string {
	var b strings.Builder
	for _, l := range lines {
		b.Write(encode(l...))
	}
	return b.String()
}

func encode(args ...string) []byte {
	b := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, "$"+strconv.Itoa(len(a))+"\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}

// converse runs steps on a new connection to addr and returns every byte
// received until the connection has been quiet for quiet, and whether the
// server closed it.
func converse(t *testing.T, addr string, steps []step, quiet time.Duration) ([]byte, bool) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	got := make(chan []byte, 64)
	closed := make(chan bool, 1)
	go func() {
		buf := make([]byte, 1<<16)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				got <- append([]byte(nil), buf[:n]...)
			}
			if err != nil {
				closed <- !errors.Is(err, net.ErrClosed)
				close(got)
				return
			}
		}
	}()
	for _, s := range steps {
		if s.wait > 0 {
			time.Sleep(s.wait)
		}
		if s.side != nil {
			sideRun(t, addr, s.side)
			continue
		}
		if _, err := c.Write([]byte(s.send)); err != nil {
			break // the server closed the connection; what it sent is what counts
		}
	}
	var out []byte
	for {
		select {
		case b, ok := <-got:
			if !ok {
				return out, <-closed
			}
			out = append(out, b...)
		case <-time.After(quiet):
			return out, false
		}
	}
}

// sideRun runs one command on its own connection and discards the reply.
func sideRun(t *testing.T, addr string, args []string) {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	defer rc.Close()
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	if err := rc.Do(context.Background(), a...).Err(); err != nil && !errors.Is(err, redis.Nil) {
		t.Logf("side command %q: %v", args, err)
	}
}

// pair is a direct Redis and a Cicada in front of another Redis that holds
// the same data.
type pair struct {
	direct, behind *redistest.Server
	proxy          *cicadatest.Proxy
}

func newPair(t *testing.T, redisArgs []string, o cicadatest.Options) *pair {
	t.Helper()
	p := &pair{direct: redistest.Start(t, redisArgs...), behind: redistest.Start(t, redisArgs...)}
	p.proxy = cicadatest.Start(t, p.behind.Addr, o)
	return p
}

// both runs a command on both Redis servers directly (setup data).
func (p *pair) both(t *testing.T, args ...string) {
	t.Helper()
	sideRun(t, p.direct.Addr, args)
	sideRun(t, p.behind.Addr, args)
}

// warm reads key (GET) or key field (HGET) through Cicada until Cicada
// answers it locally, and runs the same reads on the direct Redis.
func (p *pair) warm(t *testing.T, args ...string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		before := hits(p.proxy)
		sideRun(t, p.proxy.Addr, args)
		sideRun(t, p.direct.Addr, args)
		if hits(p.proxy) > before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q never answered from the cache", args)
		}
	}
}

// compare runs the same conversation directly and through Cicada and fails
// unless the bytes and the close are identical. It returns the bytes.
func (p *pair) compare(t *testing.T, steps ...step) []byte {
	t.Helper()
	want, wantClosed := converse(t, p.direct.Addr, steps, 200*time.Millisecond)
	got, gotClosed := converse(t, p.proxy.Addr, steps, 300*time.Millisecond)
	// Client IDs differ between two servers (Cicada has connections of
	// its own); everything else must be identical.
	want, got = clientIDs.ReplaceAll(want, []byte("id\r\n:ID")), clientIDs.ReplaceAll(got, []byte("id\r\n:ID"))
	if !bytes.Equal(got, want) || gotClosed != wantClosed {
		t.Fatalf("through Cicada:\n got %q closed=%v\nwant %q closed=%v", got, gotClosed, want, wantClosed)
	}
	return got
}

var clientIDs = regexp.MustCompile(`id\r\n:[0-9]+`)

// hits returns Cicada's local answers so far.
func hits(p *cicadatest.Proxy) uint64 { return p.Server.Hits() }

// commandCalls returns Redis's INFO commandstats calls of a command.
func commandCalls(t *testing.T, addr, name string) int64 {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	defer rc.Close()
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	prefix := "cmdstat_" + name + ":calls="
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}

// readReply reads one whole reply line set from a raw connection: enough
// for simple tests that know the exact bytes to expect.
func expectBytes(t *testing.T, c net.Conn, want string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != want {
		t.Fatalf("got %q (%v), want %q", buf, err, want)
	}
}

func client(t *testing.T, addr string, proto int) *redis.Client {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

func mustDo(t *testing.T, rc *redis.Client, args ...any) any {
	t.Helper()
	v, err := rc.Do(context.Background(), args...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("%v: %v", args, err)
	}
	return v
}

// segmentingRelay forwards connections to upstream, writing each chunk of
// Redis's replies as its first byte, a 2-ms pause, then the rest: the way a
// slow network may deliver them. It returns the relay's address.
func segmentingRelay(t *testing.T, upstream string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = c.Close()
				continue
			}
			go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
			go func() {
				defer c.Close()
				buf := make([]byte, 1<<16)
				for {
					n, err := u.Read(buf)
					if n > 0 {
						if _, err := c.Write(buf[:1]); err != nil {
							return
						}
						time.Sleep(2 * time.Millisecond)
						if _, err := c.Write(buf[1:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}
