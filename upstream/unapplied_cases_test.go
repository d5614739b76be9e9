package upstream

import (
	"net"
	"slices"
	"sync"
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
	w, srv, s := dialFake(t)
	t.Cleanup(func() { w.Close() })
	return w, srv, s
}

// dialFake is fakeWatched without closing the watchedConn at the test's
// end (the server's end is closed).
func dialFake(t *testing.T) (*watchedConn, net.Conn, *Subscriber) {
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
	t.Cleanup(func() { srv.Close() })
	return c.(*watchedConn), srv, s
}

// spinLoops starts n goroutines that each run step in a tight loop with its
// own 16 KiB scratch, as n event loops checking before their batches of
// hits would. The returned stop ends them and waits for them.
func spinLoops(n int, step func(scratch []byte)) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := make([]byte, 16<<10)
			for {
				select {
				case <-quit:
					return
				default:
					step(sc)
				}
			}
		}()
	}
	return func() { close(quit); wg.Wait() }
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
// Unapplied reports in each state: a frame split at an element boundary,
// notifications before and after a reply for go-redis, a read in
// progress, the connection held by another event loop, closed, closed by the peer, an incomplete frame queued,
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
	t.Run("notifications at the head are applied, those behind a reply named", func(t *testing.T) {
		w, srv, s := fakeWatched(t)
		var seen []uint64
		s.cfg.Invalidated = func(h uint64) { seen = append(seen, h) }
		hA := hotcache.Hash(0, []byte("kA"))
		pong := "+PONG\r\n"
		head, rest := pmsg("0", "kA")+pmsg("0", "kB"), pong+pmsg("0", "kC")
		srv.Write([]byte(head + rest))
		queued(t, w, len(head+rest))
		if h, all := w.unapplied(nil, scratch); all || !slices.Equal(h, []uint64{hC}) {
			t.Fatalf("Unapplied = %x, %v; want [kC=%x], false", h, all, hC)
		}
		if !slices.Equal(seen, []uint64{hA, hB}) || s.Events() != 2 {
			t.Fatalf("applied %x (%d events); want kA=%x, kB=%x", seen, s.Events(), hA, hB)
		}
		queued(t, w, len(rest)) // the reply and what follows it stay for go-redis
		p := make([]byte, 256)
		if n, err := w.readOnce(p); err != nil || string(p[:n]) != pong || s.Events() != 3 {
			t.Fatalf("go-redis read %q, %v (%d events); want %q, kC applied", p[:n], err, s.Events(), pong)
		}
	})
	t.Run("read in progress", func(t *testing.T) {
		w, _, _ := fakeWatched(t)
		w.mu.Lock() // as readOnce holds it
		defer w.mu.Unlock()
		w.inRead.Store(true)
		if _, all := w.unapplied(nil, scratch); !all {
			t.Error("inRead set: all=false")
		}
	})
	t.Run("held by another event loop", func(t *testing.T) {
		w, srv, _ := fakeWatched(t)
		w.mu.Lock() // another loop's take, before its read
		defer w.mu.Unlock()
		b := pmsg("0", "kB")
		srv.Write([]byte(b))
		queued(t, w, len(b))
		if h, all := w.unapplied(nil, scratch); all || !slices.Equal(h, []uint64{hB}) {
			t.Errorf("Unapplied without the lock = %x, %v; want [kB=%x], false", h, all, hB)
		}
		queued(t, w, len(b)) // named, not taken
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

// TestUnappliedTakesConcurrently streams notifications and other replies
// while go-redis's reader and two event loops take bytes off the socket at
// once: every notification must be applied once and in the stream's order,
// and go-redis must get every other reply, whole and in order.
func TestUnappliedTakesConcurrently(t *testing.T) {
	w, srv, s := fakeWatched(t)
	var seen []uint64 // under w.mu, as Invalidated is called
	s.cfg.Invalidated = func(h uint64) { seen = append(seen, h) }
	const frames = 5000
	var stream, replies []byte
	var want []uint64
	for i := range frames {
		if i%7 == 3 {
			r := "+PONG " + itoa(i) + "\r\n"
			stream, replies = append(stream, r...), append(replies, r...)
			continue
		}
		k := "k" + itoa(i)
		stream = append(stream, pmsg("0", k)...)
		want = append(want, hotcache.Hash(0, []byte(k)))
	}
	go func() {
		for b := stream; len(b) > 0; { // in uneven pieces, so frames split
			n := min(len(b), 1+len(b)%997)
			if _, err := srv.Write(b[:n]); err != nil {
				return
			}
			b = b[n:]
		}
	}()
	stop := spinLoops(2, func(sc []byte) { w.unapplied(nil, sc) })
	var got []byte
	p := make([]byte, 512)
	for len(got) < len(replies) {
		n, err := w.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p[:n]...)
	}
	stop()
	if string(got) != string(replies) {
		t.Fatalf("go-redis got %d bytes of replies, not the %d sent in order", len(got), len(replies))
	}
	// The last notifications may be still to come after the last reply.
	for {
		w.mu.Lock()
		n := len(seen)
		w.mu.Unlock()
		if n >= len(want) {
			break
		}
		if _, err := w.readOnce(p); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("applied %d notifications; want the %d sent, once each, in order", len(seen), len(want))
	}
}
