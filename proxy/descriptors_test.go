package proxy

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestMaxClientsFor: two descriptors per client after the process's
// others and the proxy's own (per loop, and two per dial in flight),
// never less than 1.
func TestMaxClientsFor(t *testing.T) {
	for _, tt := range []struct {
		files         uint64
		loops, others int
		want          int
	}{
		{1024, 1, 64, (1024 - 64 - descriptorsPerLoop - 2*DialsInFlight) / 2},
		{1024, 8, 64, (1024 - 64 - 8*descriptorsPerLoop - 2*DialsInFlight) / 2},
		{1 << 20, 2, 0, (1<<20 - 2*descriptorsPerLoop - 2*DialsInFlight) / 2},
		{64, 1, 64, 1},
		{0, 1, 0, 1},
		{1 << 62, 1, 64, 1 << 30},
	} {
		if got := MaxClientsFor(tt.files, tt.loops, tt.others); got != tt.want {
			t.Errorf("MaxClientsFor(%d, %d, %d) = %d, want %d", tt.files, tt.loops, tt.others, got, tt.want)
		}
	}
}

// TestDialFailureReply: a dial that ran out of descriptors gets Redis's
// maxclients error; one refused by a Redis that is down gets nothing (the
// connection is closed).
func TestDialFailureReply(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, refused := net.Dial("tcp", addr)
	if !errors.Is(refused, syscall.ECONNREFUSED) {
		t.Fatalf("dial of a closed port: %v, want ECONNREFUSED", refused)
	}
	for _, tt := range []struct {
		err  error
		want string
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}, string(maxClientsReply)},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.ENFILE)}, string(maxClientsReply)},
		{os.NewSyscallError("dup", syscall.EMFILE), string(maxClientsReply)},
		{refused, ""},
	} {
		if got := string(dialFailureReply(tt.err)); got != tt.want {
			t.Errorf("dialFailureReply(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestBurstLog: a burst of failures is one line; one burstEvery later
// the next line counts every failure since.
func TestBurstLog(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	log := zap.New(core)
	var b burstLog
	start := time.Unix(1000, 0)
	fail := errors.New("connection refused")
	for i := range 100 {
		b.note(log, fail, start.Add(time.Duration(i)*time.Millisecond))
	}
	b.note(log, fail, start.Add(burstEvery))
	var got []int64
	for _, e := range logs.All() {
		got = append(got, e.ContextMap()["clients"].(int64))
	}
	if len(got) != 2 || got[0] != 1 || got[1] != 100 {
		t.Errorf("lines logged with clients = %v, want [1 100] (the first failure, then the 99 since and one more)", got)
	}
}

// TestNoDialForAClientThatLeft: a dial that waited its turn while its
// client closed is not made (a storm of clients connecting and closing
// queued 42,722 dials, 686 MB and 9 s of delay for new clients).
func TestNoDialForAClientThatLeft(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := &Server{cfg: Config{Upstream: ln.Addr().String()}, dials: make(chan struct{}, DialsInFlight)}
	s := &session{srv: srv}
	s.left.Store(true)
	s.dial() // returns before it needs the client's loop
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
	if c, err := ln.Accept(); err == nil {
		c.Close()
		t.Fatal("an upstream connection was made for a client that had left")
	}
	if len(srv.dials) != 0 {
		t.Errorf("%d dial tokens held after the dial returned, want 0", len(srv.dials))
	}
}
