package main

// Forward mode (-upstream): the least a caching proxy must do. GETs of
// "key:<i>" with i < -local-keys are answered here, as cache hits would
// be; every other request goes to Redis on one shared upstream connection
// per event loop (a lane), and Redis's replies go back to their clients in
// order. It keeps no cache, counts no key, watches no write and parses no
// reply beyond its length: what it costs per request, and the latency it
// gives, are the floor under any proxy that answers the same share of
// requests itself and forwards the rest through gnet, on this machine.
//
// Its lane batches as Cicada's does (proxy/lane.go): a request goes out at
// once when the lane owes no reply, else with every request gathered
// until the loop runs its queued tasks (-flush tasks), or at once
// (-flush now), for comparison.
//
// Order: a client's requests after its first forwarded one are forwarded
// too while any of its replies is owed, so its replies keep its
// requests' order. What it skips, as the rest of the bare server does:
// errors beyond closing, RESP3, and any bound on what a client may pile up.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/panjf2000/gnet/v2"
)

// forwarder is the forward mode's server. lanes maps each event loop to
// its lane; it is written once per loop, from that loop, under mu.
type forwarder struct {
	gnet.BuiltinEventEngine
	upstream  *net.TCPAddr
	localKeys int
	flushNow  bool
	value     []byte // the reply to a local GET

	mu    sync.Mutex
	lanes map[gnet.EventLoop]*fwdLane

	stopping atomic.Bool // set by OnShutdown: lanes close with the engine
}

func (f *forwarder) OnShutdown(gnet.Engine) { f.stopping.Store(true) }

// fwdClient is a client connection's state, owned by its event loop.
type fwdClient struct {
	c      gnet.Conn
	out    []byte // replies answered here, written at the end of OnTraffic
	owed   int    // replies owed by the lane
	closed bool
}

// fwdLane is one event loop's upstream connection, owned by that loop.
type fwdLane struct {
	f        *forwarder
	el       gnet.EventLoop
	conn     gnet.Conn // nil until gnet opens it
	out      []byte    // requests gathered since the last write
	owed     []owedTo  // clients owed replies, in request order (a queue from head)
	head     int
	flushing bool
	flushFn  gnet.RunnableFunc
	reply    []byte // the replies to the client at the front, gathered
}

// owedTo is n replies owed to client c.
type owedTo struct {
	c *fwdClient
	n int
}

func (f *forwarder) laneOf(el gnet.EventLoop) *fwdLane {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ln := f.lanes[el]; ln != nil {
		return ln
	}
	ln := &fwdLane{f: f, el: el}
	ln.flushFn = func(context.Context) error {
		ln.flushing = false
		ln.flush()
		return nil
	}
	f.lanes[el] = ln
	ch, err := el.Register(gnet.NewContext(context.Background(), ln), f.upstream)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bareserver: lane:", err)
		os.Exit(1)
	}
	go func() {
		if r := <-ch; r.Err != nil {
			fmt.Fprintln(os.Stderr, "bareserver: lane:", r.Err)
			os.Exit(1)
		}
	}()
	return ln
}

func (f *forwarder) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	if ln, ok := c.Context().(*fwdLane); ok {
		ln.conn = c
		ln.flush()
		return nil, gnet.None
	}
	f.laneOf(c.EventLoop())
	c.SetContext(&fwdClient{c: c})
	return nil, gnet.None
}

func (f *forwarder) OnClose(c gnet.Conn, _ error) gnet.Action {
	switch x := c.Context().(type) {
	case *fwdLane:
		if !f.stopping.Load() {
			fmt.Fprintln(os.Stderr, "bareserver: Redis closed a lane")
			os.Exit(1)
		}
	case *fwdClient:
		x.closed = true
	}
	return gnet.None
}

func (f *forwarder) OnTraffic(c gnet.Conn) gnet.Action {
	switch x := c.Context().(type) {
	case *fwdLane:
		return x.onTraffic()
	case *fwdClient:
		return f.onClient(x)
	}
	return gnet.Close
}

// onClient answers or forwards each complete request the client sent.
func (f *forwarder) onClient(cl *fwdClient) gnet.Action {
	in, err := cl.c.Peek(-1)
	if err != nil {
		return gnet.Close
	}
	var ln *fwdLane
	sent := 0
	used, ok := requests(in, func(req []byte, isGet bool) {
		if cl.owed == 0 && isGet && f.local(req) {
			cl.out = append(cl.out, f.value...)
			return
		}
		if ln == nil {
			ln = f.laneOf(cl.c.EventLoop())
		}
		ln.out = append(ln.out, req...)
		cl.owed++
		sent++
	})
	if !ok {
		return gnet.Close
	}
	if len(cl.out) > 0 {
		_, err = cl.c.Write(cl.out)
		cl.out = cl.out[:0]
	}
	if sent > 0 {
		ln.send(cl, sent)
	}
	if _, err2 := cl.c.Discard(used); err != nil || err2 != nil {
		return gnet.Close
	}
	return gnet.None
}

// local reports whether req, a GET or HGET, is a GET of key:<i> with
// i < localKeys.
func (f *forwarder) local(req []byte) bool {
	const get = "*2\r\n$3\r\n"
	if !bytes.HasPrefix(req, []byte(get)) {
		return false
	}
	i := bytes.Index(req, []byte("key:"))
	if i < 0 {
		return false
	}
	end := bytes.IndexByte(req[i:], '\r')
	if end < 0 {
		return false
	}
	k, err := strconv.Atoi(string(req[i+4 : i+end]))
	return err == nil && k < f.localKeys
}

// send records n replies owed to cl and writes the gathered requests, at
// once or when the loop runs its tasks.
func (ln *fwdLane) send(cl *fwdClient, n int) {
	idle := len(ln.owed) == ln.head
	if k := len(ln.owed); k > ln.head && ln.owed[k-1].c == cl {
		ln.owed[k-1].n += n
	} else {
		ln.owed = append(ln.owed, owedTo{c: cl, n: n})
	}
	switch {
	case idle || ln.f.flushNow:
		ln.flush()
	case !ln.flushing:
		ln.flushing = true
		_ = ln.el.Execute(context.Background(), ln.flushFn)
	}
}

func (ln *fwdLane) flush() {
	if ln.conn == nil || len(ln.out) == 0 {
		return
	}
	if _, err := ln.conn.Write(ln.out); err != nil {
		fmt.Fprintln(os.Stderr, "bareserver: lane write:", err)
		os.Exit(1)
	}
	ln.out = ln.out[:0]
}

// onTraffic passes each whole reply to the client it is owed to, one write
// per client per read.
func (ln *fwdLane) onTraffic() gnet.Action {
	in, err := ln.conn.Peek(-1)
	if err != nil {
		return gnet.Close
	}
	used := 0
	for used < len(in) && ln.head < len(ln.owed) {
		n := replyLen(in[used:])
		if n < 0 {
			return gnet.Close
		}
		if n == 0 {
			break
		}
		o := &ln.owed[ln.head]
		ln.reply = append(ln.reply, in[used:used+n]...)
		used += n
		o.n--
		o.c.owed--
		if o.n == 0 {
			if !o.c.closed {
				_, _ = o.c.c.Write(ln.reply)
			}
			ln.reply = ln.reply[:0]
			ln.owed[ln.head] = owedTo{}
			ln.head++
		}
	}
	if ln.head == len(ln.owed) {
		ln.owed, ln.head = ln.owed[:0], 0
	}
	if _, err := ln.conn.Discard(used); err != nil {
		return gnet.Close
	}
	return gnet.None
}

// replyLen is the length of the whole RESP2 reply at the start of b, 0 if
// b holds only part of one, -1 if b does not start with one.
func replyLen(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	eol := bytes.IndexByte(b, '\n')
	if eol < 0 {
		return 0
	}
	switch b[0] {
	case '+', '-', ':':
		return eol + 1
	case '$':
		size, err := strconv.Atoi(string(b[1 : eol-1]))
		if err != nil {
			return -1
		}
		if size < 0 {
			return eol + 1
		}
		if end := eol + 1 + size + 2; end <= len(b) {
			return end
		}
		return 0
	case '*':
		count, err := strconv.Atoi(string(b[1 : eol-1]))
		if err != nil {
			return -1
		}
		p := eol + 1
		for range max(count, 0) {
			n := replyLen(b[p:])
			if n <= 0 {
				return n
			}
			p += n
		}
		return p
	}
	return -1
}
