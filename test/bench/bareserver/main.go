// Command bareserver is the physical floor of the benchmark harness
// (test/bench/harness): a gnet v2 server that answers RESP requests with
// fixed, pre-serialized bytes and does nothing else. What it costs per
// request is what any gnet-based proxy must pay at least on this machine:
// the read and write syscalls, the event loop, and a minimal framing pass.
//
// For each complete RESP array request in the inbound bytes it appends one
// reply to a single buffer and writes that buffer once, so a pipeline of 16
// requests read together is answered with one write:
//
//   - GET and HGET (any letter case): a 64-byte bulk string ($64\r\n...\r\n),
//     the value the harness stores in Redis;
//   - anything else (SET, CONFIG, PING, ...): +OK\r\n.
//
// What it skips, on purpose: inline commands, argument values (keys are
// not looked at), any storage, bounds on lengths beyond what is needed not
// to overflow (it is a benchmark fixture, run on loopback by the harness,
// not a server to expose), RESP3, and errors: a request that does not
// start with '*' closes the connection.
//
// With -upstream it is instead the least a caching proxy must do: it
// answers the GETs of the hottest keys itself and forwards everything else
// to Redis (forward.go).
//
// Usage: bareserver -addr 127.0.0.1:7000 -loops 1
//
//	bareserver -addr 127.0.0.1:7000 -loops 2 -upstream 127.0.0.1:6379 -local-keys 35000 -value-bytes 100
package main

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/panjf2000/gnet/v2"
)

// maxLen bounds an array or bulk length read from the wire, so that the
// arithmetic on it cannot overflow.
const maxLen = 1 << 30

// valueBytes is the size of the bulk string answered to GET and HGET.
const valueBytes = 64

var (
	bulkReply = []byte("$" + strconv.Itoa(valueBytes) + "\r\n" + string(bytes.Repeat([]byte{'v'}, valueBytes)) + "\r\n")
	okReply   = []byte("+OK\r\n")
)

// server answers every connection on its event loops. Its only state is
// each connection's reply buffer (the Conn's context), reused between
// OnTraffic calls and owned by the connection's event loop, so it needs no
// locks.
type server struct {
	gnet.BuiltinEventEngine
}

func (s *server) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	c.SetContext(new([]byte)) // the connection's reply buffer, owned by its loop
	return nil, gnet.None
}

func (s *server) OnTraffic(c gnet.Conn) gnet.Action {
	in, err := c.Peek(-1) // valid until Discard below
	if err != nil {
		return gnet.Close
	}
	outp := c.Context().(*[]byte)
	out := (*outp)[:0]
	used, ok := requests(in, func(_ []byte, isGet bool) {
		if isGet {
			out = append(out, bulkReply...)
		} else {
			out = append(out, okReply...)
		}
	})
	if !ok {
		return gnet.Close
	}
	if _, err := c.Discard(used); err != nil {
		return gnet.Close
	}
	*outp = out
	if len(out) > 0 {
		if _, err := c.Write(out); err != nil {
			return gnet.Close
		}
	}
	return gnet.None
}

// requests calls each for every complete request at the start of in, with
// the request's bytes and whether it is a GET or HGET. It returns the bytes
// those requests take, and false if in holds something that is not a RESP
// array request.
func requests(in []byte, each func(req []byte, isGet bool)) (used int, ok bool) {
	for {
		n, isGet, whole := frame(in[used:])
		if n < 0 {
			return used, false
		}
		if !whole {
			return used, true
		}
		each(in[used:used+n], isGet)
		used += n
	}
}

// frame reads one RESP array request at the start of b. It returns the
// request's length in bytes, whether its first argument is GET or HGET,
// and ok false when b holds only part of a request; n < 0 means b does
// not start with a RESP array of bulk strings.
func frame(b []byte) (n int, isGet, ok bool) {
	if len(b) == 0 {
		return 0, false, false
	}
	if b[0] != '*' {
		return -1, false, false
	}
	args, p, ok := number(b, 1)
	if !ok || args < 0 {
		return p, false, false
	}
	for i := 0; i < args; i++ {
		if p >= len(b) {
			return 0, false, false
		}
		if b[p] != '$' {
			return -1, false, false
		}
		size, q, ok := number(b, p+1)
		if !ok || size < 0 {
			return q, false, false
		}
		end := q + size + 2
		if end > len(b) {
			return 0, false, false
		}
		if i == 0 {
			arg := b[q : q+size]
			isGet = bytes.EqualFold(arg, []byte("GET")) || bytes.EqualFold(arg, []byte("HGET"))
		}
		p = end
	}
	return p, isGet, true
}

// number parses the decimal number starting at b[i] and ending with CRLF.
// It returns the number, the index after the CRLF, and ok false when the
// line is incomplete (then the index is 0) or malformed (then it is -1,
// reported as a negative number too).
func number(b []byte, i int) (v, next int, ok bool) {
	end := bytes.IndexByte(b[i:], '\n')
	if end < 0 {
		return 0, 0, false
	}
	end += i
	if end == i || b[end-1] != '\r' {
		return -1, -1, false
	}
	for _, d := range b[i : end-1] {
		if d < '0' || d > '9' || v > maxLen {
			return -1, -1, false
		}
		v = v*10 + int(d-'0')
	}
	if end-1 == i {
		return -1, -1, false
	}
	return v, end + 1, true
}

func main() {
	addr := flag.String("addr", "127.0.0.1:7000", "listen address (host:port)")
	loops := flag.Int("loops", 1, "gnet event loops")
	upstream := flag.String("upstream", "", "forward mode: Redis address (host:port); see forward.go")
	localKeys := flag.Int("local-keys", 0, "forward mode: GETs of key:<i> with i below this are answered here")
	flush := flag.String("flush", "tasks", "forward mode: when a busy lane writes, tasks (when the loop runs its queued tasks, as Cicada) or now")
	valueBytes := flag.Int("value-bytes", valueBytes, "forward mode: the size of the value answered to a local GET")
	flag.Parse()
	var h gnet.EventHandler = &server{}
	if *upstream != "" {
		ua, err := net.ResolveTCPAddr("tcp", *upstream)
		if err != nil || (*flush != "tasks" && *flush != "now") {
			fmt.Fprintln(os.Stderr, "bareserver: bad -upstream or -flush:", *upstream, *flush, err)
			os.Exit(2)
		}
		h = &forwarder{upstream: ua, localKeys: *localKeys, flushNow: *flush == "now",
			value: []byte("$" + strconv.Itoa(*valueBytes) + "\r\n" + strings.Repeat("v", *valueBytes) + "\r\n"),
			lanes: map[gnet.EventLoop]*fwdLane{}}
	}
	err := gnet.Run(h, "tcp://"+*addr,
		gnet.WithNumEventLoop(*loops),
		gnet.WithReuseAddr(true),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay))
	if err != nil {
		fmt.Fprintln(os.Stderr, "bareserver:", err)
		os.Exit(1)
	}
}
