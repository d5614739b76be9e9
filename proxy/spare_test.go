package proxy

import (
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
