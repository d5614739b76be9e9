package cluster

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cicada-proxy/cicada/resp"
	"github.com/cicada-proxy/cicada/test/clustertest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// rawConn is a RESP2 connection that sends one command at a time and
// reads its whole reply as bytes. Used by its test's goroutine only.
type rawConn struct {
	t    *testing.T
	name string
	c    net.Conn
	br   *bufio.Reader
}

// dialRaw connects to addr (name is for messages); the test's cleanup
// closes the connection.
func dialRaw(t *testing.T, name, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s (%s): %v", name, addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{t: t, name: name, c: c, br: bufio.NewReader(c)}
}

// do sends args as one command and returns its reply's bytes, within 5 s.
func (r *rawConn) do(args ...string) string {
	r.t.Helper()
	b, err := r.try(args...)
	if err != nil {
		r.t.Fatalf("%s: %q: %v", r.name, args, err)
	}
	return b
}

// try is do returning the error instead of failing the test (for another
// goroutine than the test's).
func (r *rawConn) try(args ...string) (string, error) {
	bs := make([][]byte, len(args))
	for i, a := range args {
		bs[i] = []byte(a)
	}
	_ = r.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.c.Write(resp.AppendCommand(nil, bs...)); err != nil {
		return "", err
	}
	b, err := redistest.ReadReply(r.br)
	return string(b), err
}

// pair is one sidecar connection and one connection to the same node's
// redis-server, to send both the same commands.
type pair struct {
	t       *testing.T
	c       *clustertest.Cluster
	sidecar *rawConn
	direct  *rawConn
}

// newPair connects to n's sidecar and to its redis-server.
func newPair(t *testing.T, c *clustertest.Cluster, n *clustertest.Node) *pair {
	t.Helper()
	return &pair{t: t, c: c, sidecar: dialRaw(t, fmt.Sprintf("%v's sidecar", n), n.SidecarAddr),
		direct: dialRaw(t, fmt.Sprintf("%v's redis-server", n), n.RedisAddr)}
}

// expect sends args to the redis-server and then to the sidecar. Redis
// must reply want with each "{nodeN}" in it replaced by the address the
// cluster has for node N (the sidecar's in Announce mode, the
// redis-server's in Map mode); the sidecar must reply want with each
// "{nodeN}" the sidecar's address: Redis's reply in Announce mode, Redis's
// reply with the addresses mapped in Map mode. "{%}" in args is "d" for
// Redis and "s" for the sidecar, to keep their keys apart ("{t}{%}a" is
// "{t}da" and "{t}sa", in one slot).
func (p *pair) expect(want string, args ...string) {
	p.t.Helper()
	for _, side := range []struct {
		conn *rawConn
		mark string
		addr func(*clustertest.Node) string
	}{{p.direct, "d", p.c.Announced}, {p.sidecar, "s", func(n *clustertest.Node) string { return n.SidecarAddr }}} {
		a := make([]string, len(args))
		for i, s := range args {
			a[i] = strings.ReplaceAll(s, "{%}", side.mark)
		}
		w := want
		for _, n := range p.c.Nodes {
			w = strings.ReplaceAll(w, fmt.Sprintf("{node%d}", n.Index), side.addr(n))
		}
		if got := side.conn.do(a...); got != w {
			p.t.Errorf("%s: %q = %q, want %q", side.conn.name, a, got, w)
		}
	}
}

// bulk renders s as a RESP bulk string.
func bulk(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }
