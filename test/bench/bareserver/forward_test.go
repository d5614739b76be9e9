package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/cicada-proxy/cicada/resp"
	"github.com/cicada-proxy/cicada/test/redistest"
)

func TestReplyLen(t *testing.T) {
	tests := []struct {
		in string
		n  int
	}{
		{"+OK\r\n+OK\r\n", 5},
		{"-ERR x\r\n", 8},
		{":12\r\n", 5},
		{"$3\r\nabc\r\n:1\r\n", 9},
		{"$-1\r\n", 5},
		{"*2\r\n$1\r\na\r\n:1\r\n", 15},
		{"*-1\r\n", 5},
		{"$3\r\nab", 0},
		{"*2\r\n$1\r\na\r\n", 0},
		{"+OK", 0},
		{"", 0},
		{"%1\r\n", -1},
		{"$x\r\n", -1},
	}
	for _, tt := range tests {
		if n := replyLen([]byte(tt.in)); n != tt.n {
			t.Errorf("replyLen(%q) = %d; want %d", tt.in, n, tt.n)
		}
	}
}

// TestForward runs the forward mode in front of a real redis-server: GETs
// of the hottest keys are answered here, the rest by Redis, and each
// client gets its replies in its requests' order.
func TestForward(t *testing.T) {
	srv := redistest.Start(t)
	rc := dial(t, srv.Addr)
	roundTrip(t, rc, "+OK\r\n", "SET", "key:1", "real")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ua, _ := net.ResolveTCPAddr("tcp", srv.Addr)
	f := &forwarder{upstream: ua, localKeys: 10, value: []byte("$3\r\nvvv\r\n"), lanes: map[gnet.EventLoop]*fwdLane{}}
	done := make(chan error, 1)
	go func() { done <- gnet.Run(f, "tcp://"+addr, gnet.WithNumEventLoop(2)) }()
	t.Cleanup(func() {
		_ = gnet.Stop(context.Background(), "tcp://"+addr)
		<-done
	})
	var c net.Conn
	for deadline := time.Now().Add(5 * time.Second); ; {
		if c, err = net.Dial("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Cleanup(func() { c.Close() })

	// key:1 is local until a request of the same read goes to Redis; from
	// then on Redis answers, so the replies keep the requests' order.
	var req []byte
	req = resp.AppendCommand(req, []byte("GET"), []byte("key:1"))
	req = resp.AppendCommand(req, []byte("SET"), []byte("key:99"), []byte("abc"))
	req = resp.AppendCommand(req, []byte("GET"), []byte("key:1"))
	req = resp.AppendCommand(req, []byte("GET"), []byte("key:99"))
	want := "$3\r\nvvv\r\n+OK\r\n$4\r\nreal\r\n$3\r\nabc\r\n"
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	expect(t, c, want)
	roundTrip(t, c, "$3\r\nvvv\r\n", "GET", "key:1")
	// HGET is never answered here: Redis's WRONGTYPE comes back.
	roundTrip(t, c, "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n", "HGET", "key:1", "f")

	// Clients on both loops at once, each a pipeline of its own keys'
	// SETs and GETs between local GETs: each gets its own replies, in
	// order.
	errs := make(chan error, 4)
	for i := range 4 {
		go func() {
			cl, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer cl.Close()
			var req []byte
			var want strings.Builder
			for j := range 200 {
				k, v := []byte("key:c"+strconv.Itoa(i)+"-"+strconv.Itoa(j)), []byte(strconv.Itoa(j))
				req = resp.AppendCommand(req, []byte("SET"), k, v)
				req = resp.AppendCommand(req, []byte("GET"), k)
				want.WriteString("+OK\r\n$" + strconv.Itoa(len(v)) + "\r\n" + string(v) + "\r\n")
			}
			if _, err := cl.Write(req); err != nil {
				errs <- err
				return
			}
			cl.SetReadDeadline(time.Now().Add(5 * time.Second))
			got := make([]byte, want.Len())
			if _, err := io.ReadFull(cl, got); err != nil {
				errs <- err
				return
			}
			if string(got) != want.String() {
				errs <- fmt.Errorf("client %d got %q", i, got)
				return
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func dial(t *testing.T, addr string) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func roundTrip(t *testing.T, c net.Conn, want string, args ...string) {
	t.Helper()
	var b [][]byte
	for _, a := range args {
		b = append(b, []byte(a))
	}
	if _, err := c.Write(resp.AppendCommand(nil, b...)); err != nil {
		t.Fatal(err)
	}
	expect(t, c, want)
}

func expect(t *testing.T, c net.Conn, want string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read: %v (got %q)", err, got)
	}
	if string(got) != want {
		t.Fatalf("got %q; want %q", got, want)
	}
}
