package upstream

import (
	"net"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cicada-proxy/cicada/hotcache"
)

func pmsg(db, key string) string {
	ch := "__keyspace@" + db + "__:" + key
	return "*4\r\n$8\r\npmessage\r\n$16\r\n__keyspace@*__:*\r\n$" + itoa(len(ch)) + "\r\n" + ch + "\r\n$3\r\nset\r\n"
}

func itoa(n int) string { return string(appendInt(nil, n)) }
func appendInt(b []byte, n int) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

// fakeWatched returns a watchedConn dialled to a local server whose end is
// returned, for tests that feed exact bytes.
func fakeWatched(t *testing.T) (*watchedConn, net.Conn, *Subscriber) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cache, _ := hotcache.New(hotcache.Config{Capacity: 100, MaxBytes: 1 << 20, MaxValue: 100, StrictHolds: true})
	s := New(Config{}, cache)
	acc := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); acc <- c }()
	c, err := dialWatched(&net.Dialer{}, s)(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv := <-acc
	t.Cleanup(func() { c.Close(); srv.Close() })
	return c.(*watchedConn), srv, s
}

// queued waits until the socket holds n bytes.
func queued(t *testing.T, w *watchedConn, n int) {
	b := make([]byte, n+1)
	for deadline := time.Now().Add(2 * time.Second); ; {
		if m, _ := peek(w.fd, b); m == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue never reached %d bytes", n)
		}
	}
}

// TestUnappliedCases feeds exact bytes to a watchedConn and checks what
// Unapplied reports in each state: a frame split at an element boundary, a
// read in progress, closed, closed by the peer, an incomplete frame queued,
// a reused descriptor after close, and a queue larger than the scratch.
func TestUnappliedCases(t *testing.T) {
	hB, hC := hotcache.Hash(0, []byte("kB")), hotcache.Hash(0, []byte("kC"))
	scratch := make([]byte, 16<<10)

	t.Run("split at an element boundary", func(t *testing.T) {
		w, srv, _ := fakeWatched(t)
		a, b, c := pmsg("0", "kA"), pmsg("0", "kB"), pmsg("0", "kC")
		srv.Write([]byte(a + b + c))
		queued(t, w, len(a+b+c))
		// Read A and B's first two elements: pend holds "*4 $8 pmessage",
		// the queue starts at B's third element, a valid bulk string.
		cut := len(a) + len("*4\r\n$8\r\npmessage\r\n")
		if n, err := w.readOnce(make([]byte, cut)); n != 0 || err != nil || w.reads.Load() != 1 {
			t.Fatal(n, err, w.reads.Load())
		}
		h, all := w.unapplied(nil, scratch)
		if !all && !slices.Contains(h, hB) {
			t.Errorf("kB half read, half queued: Unapplied = %x (kC=%x), all=false; kB is neither applied nor named", h, hC)
		}
	})
	t.Run("read in progress", func(t *testing.T) {
		w, _, _ := fakeWatched(t)
		w.inRead.Store(true)
		if _, all := w.unapplied(nil, scratch); !all {
			t.Error("inRead set: all=false")
		}
	})
	t.Run("closed", func(t *testing.T) {
		w, _, _ := fakeWatched(t)
		w.Close()
		if _, all := w.unapplied(nil, scratch); !all {
			t.Error("closed: all=false")
		}
	})
	t.Run("peer closed", func(t *testing.T) {
		w, srv, _ := fakeWatched(t)
		srv.Close()
		time.Sleep(20 * time.Millisecond)
		if _, all := w.unapplied(nil, scratch); !all {
			t.Error("EOF queued: all=false")
		}
	})
	t.Run("incomplete frame queued", func(t *testing.T) {
		w, srv, _ := fakeWatched(t)
		b := pmsg("0", "kB")
		srv.Write([]byte(b[:len(b)-3]))
		queued(t, w, len(b)-3)
		if h, all := w.unapplied(nil, scratch); !all && !slices.Contains(h, hB) {
			t.Error("half a notification queued: not named, all=false")
		}
	})
	t.Run("closed, descriptor reused", func(t *testing.T) {
		w, _, _ := fakeWatched(t)
		fd := w.fd
		w.Close()
		// Make the old number name another socket, one with bytes queued.
		other, srv, _ := fakeWatched(t)
		if _, err := srv.Write([]byte("+x\r\n")); err != nil {
			t.Fatal(err)
		}
		queued(t, other, 4)
		if other.fd != fd { // else the kernel reused the number already
			if err := unix.Dup2(other.fd, fd); err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
		}
		if _, all := w.unapplied(nil, scratch); !all {
			t.Error("closed, its descriptor now another socket: all=false")
		}
	})
	t.Run("queue fills scratch", func(t *testing.T) {
		w, srv, _ := fakeWatched(t)
		// Complete frames fill the scratch exactly; kC follows.
		var all string
		for len(all)+2*len(pmsg("0", "kB")) < len(scratch) {
			all += pmsg("0", "kB")
		}
		pad := len(scratch) - len(all) - len(pmsg("0", ""))
		for len(pmsg("0", string(make([]byte, pad)))) > len(scratch)-len(all) {
			pad--
		}
		all += pmsg("0", string(make([]byte, pad)))
		if len(all) != len(scratch) {
			t.Fatalf("built %d bytes", len(all))
		}
		all += pmsg("0", "kC")
		srv.Write([]byte(all))
		queued(t, w, len(all))
		if h, a := w.unapplied(nil, scratch); !a && !slices.Contains(h, hC) {
			t.Error("more queued than the scratch holds, kC beyond it: kC not named, all=false")
		}
	})
}
