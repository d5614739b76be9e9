package proxy

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// fdConn is a gnet.Conn whose only method in use is Fd.
type fdConn struct {
	gnet.Conn
	fd int
}

func (c fdConn) Fd() int { return c.fd }

// TestUntouched: a spare is untouched while its peer has neither written
// nor closed, whatever gnet has seen: a peek at the socket decides, and
// leaves what it finds for gnet to read.
func TestUntouched(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	open := func() (fdConn, *net.TCPConn, net.Conn) {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		peer, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		raw, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var fd int
		_ = raw.Control(func(f uintptr) { fd = int(f) })
		return fdConn{fd: fd}, c.(*net.TCPConn), peer
	}

	c, own, peer := open()
	if !untouched(c) {
		t.Error("a connection nothing was sent on: not untouched")
	}
	if _, err := peer.Write([]byte("-ERR max number of clients reached\r\n")); err != nil {
		t.Fatal(err)
	}
	waitTouched(t, c)
	buf := make([]byte, 64)
	if n, err := own.Read(buf); err != nil || string(buf[:n]) != "-ERR max number of clients reached\r\n" {
		t.Errorf("after the peek the socket holds %q, %v; want the reply unread", buf[:n], err)
	}
	own.Close()
	peer.Close()

	c, own, peer = open()
	defer own.Close()
	peer.Close()
	waitTouched(t, c)
}

// waitTouched waits until untouched(c) is false: bytes or the peer's
// close travel through loopback asynchronously.
func waitTouched(t *testing.T, c fdConn) {
	t.Helper()
	for i := 0; untouched(c); i++ {
		if i == 1000 {
			t.Fatal("untouched after the peer wrote or closed")
		}
		time.Sleep(time.Millisecond)
	}
}

// queueLoop is a gnet.EventLoop whose Execute only queues the task, as a
// busy loop does until it has handled its round's events.
type queueLoop struct {
	gnet.EventLoop
	queued []gnet.Runnable
}

func (q *queueLoop) Execute(_ context.Context, r gnet.Runnable) error {
	q.queued = append(q.queued, r)
	return nil
}

// ctxConn is a gnet.Conn with a context, which records Close.
type ctxConn struct {
	gnet.Conn
	ctx    any
	closed bool
}

func (c *ctxConn) Context() any     { return c.ctx }
func (c *ctxConn) SetContext(v any) { c.ctx = v }
func (c *ctxConn) Close() error     { c.closed = true; return nil }

// TestSpareWrittenBeforeGiven: Redis's bytes on a spare whose handover to
// a session is queued (gnet runs the round's events before its tasks) are
// not the session's: the spare is closed, never given (before, the
// session framed them with no connection and the loop panicked; found by
// review).
func TestSpareWrittenBeforeGiven(t *testing.T) {
	q := &queueLoop{}
	l := &loopState{evl: q}
	srv := &Server{}
	s := &session{srv: srv, el: l, upLife: upDialing}
	s.pause = pauseRoute
	s.upLink = &upstreamLink{s: s}
	c := &ctxConn{ctx: &spare{l: l}}
	l.giveSpare(s, c)
	if len(q.queued) != 1 {
		t.Fatalf("%d tasks queued, want the handover's", len(q.queued))
	}
	if a := srv.OnTraffic(c); a != gnet.Close {
		t.Errorf("OnTraffic on the spare being given: %v, want Close", a)
	}
	srv.OnClose(c, nil)
	s.life = clientClosing // the client left too: nothing to dial
	_ = q.queued[0].Run(context.Background())
	if s.up != nil || !c.closed {
		t.Errorf("after the handover: session's connection %v, spare closed %v; want none and closed", s.up, c.closed)
	}
}
