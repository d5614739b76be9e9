// Package e2e drives Cicada with raw sockets and go-redis against real
// redis-servers and compares what clients get with what Redis sends.
package e2e

import (
	"context"
	"errors"

	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/difftest"
)

// Conversation steps and encoders (see difftest).
var (
	send, sideCmd, pause = difftest.Send, difftest.SideCmd, difftest.Pause
	cmd, cmds            = difftest.Command, difftest.Commands
)

type step = difftest.Step

// converse runs steps on a new connection to addr and returns every byte
// received until the connection has been quiet for quiet, and whether the
// server closed it.
func converse(t *testing.T, addr string, steps []step, quiet time.Duration) ([]byte, bool) {
	t.Helper()
	tr, err := difftest.Run(addr, difftest.Conversation{Steps: steps, Quiet: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Clients[0].Bytes, tr.Clients[0].Closed
}

// newPair starts a direct Redis and a Cicada in front of another.
func newPair(t *testing.T, redisArgs []string, o cicadatest.Options) *difftest.Pair {
	t.Helper()
	return difftest.NewPair(t, redisArgs, o)
}

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
