package upstream

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWatchedReadErrors: watchedConn.Read, a raw read(2), reports what
// go-redis and the session rely on as net.Conn's Read does (a deadline,
// EOF, a reset, a close from another goroutine, a zero-length buffer), and
// applies notifications of any size and any number per read.
func TestWatchedReadErrors(t *testing.T) {
	t.Run("deadline fires with nothing queued", func(t *testing.T) {
		w, _, _ := fakeWatched(t)
		w.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		t0 := time.Now()
		n, err := w.Read(make([]byte, 64))
		var ne net.Error
		if n != 0 || !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("got %d, %v; want a timeout", n, err)
		}
		if d := time.Since(t0); d < 90*time.Millisecond || d > time.Second {
			t.Fatalf("timed out after %v", d)
		}
	})
	t.Run("deadline past with bytes queued", func(t *testing.T) {
		w, srv, s := fakeWatched(t)
		m := pmsg("0", "k")
		srv.Write([]byte(m))
		queued(t, w, len(m))
		w.SetReadDeadline(time.Now().Add(-time.Second))
		if _, err := w.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("got %v", err)
		}
		if s.Events() != 0 {
			t.Fatal("applied despite the deadline")
		}
	})
	t.Run("EOF", func(t *testing.T) {
		w, srv, _ := fakeWatched(t)
		srv.Close()
		if n, err := w.Read(make([]byte, 64)); n != 0 || err != io.EOF {
			t.Fatalf("got %d, %v", n, err)
		}
	})
	t.Run("reset", func(t *testing.T) {
		w, srv, _ := fakeWatched(t)
		srv.(*net.TCPConn).SetLinger(0)
		srv.Close()
		time.Sleep(50 * time.Millisecond)
		n, err := w.Read(make([]byte, 64))
		var oe *net.OpError
		if n != 0 || !errors.As(err, &oe) || !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("got %d, %v (%T)", n, err, err)
		}
		// After the reset has been reported: EOF.
		if n, err := w.Read(make([]byte, 64)); n != 0 || err != io.EOF {
			t.Fatalf("second read: %d, %v", n, err)
		}
	})
	t.Run("closed while blocked", func(t *testing.T) {
		w, _, _ := fakeWatched(t)
		go func() { time.Sleep(50 * time.Millisecond); w.Close() }()
		if _, err := w.Read(make([]byte, 64)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("zero-length buffer", func(t *testing.T) {
		w, srv, s := fakeWatched(t)
		srv.Write([]byte(pmsg("0", "k")))
		if n, err := w.Read(nil); n != 0 || err != nil {
			t.Fatalf("got %d, %v", n, err)
		}
		if s.Events() != 0 {
			t.Fatal("applied")
		}
	})
	t.Run("1 MB key, small reads", func(t *testing.T) {
		w, srv, s := fakeWatched(t)
		m := pmsg("0", strings.Repeat("x", 1<<20))
		go srv.Write([]byte(m + pong))
		w.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 4096)
		rest := ""
		for s.Events() == 0 {
			n, err := w.readOnce(buf)
			if err != nil {
				t.Fatal(err)
			}
			if s.Events() == 0 && (n != 0 || len(w.pend) == 0) {
				t.Fatalf("before the notification is complete: %d bytes handed on, %d pending", n, len(w.pend))
			}
			rest = string(buf[:n])
		}
		if got := rest + readAll(t, w, len(pong)-len(rest), 4096); got != pong || s.Events() != 1 {
			t.Fatalf("go-redis got %q; events %d, want only the pong and 1", got, s.Events())
		}
	})
	t.Run("empty key and many in one read", func(t *testing.T) {
		w, srv, s := fakeWatched(t)
		var b strings.Builder
		b.WriteString(pmsg("0", ""))
		for i := range 5000 {
			b.WriteString(pmsg("15", "key:"+itoa(i)))
		}
		go srv.Write([]byte(b.String() + pong))
		w.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got := readAll(t, w, len(pong), 1<<20); got != pong || s.Events() != 5001 {
			t.Fatalf("go-redis got %q; events %d, want only the pong and 5001", got, s.Events())
		}
	})
}

// pong is a subscribed connection's reply to PING.
const pong = "*2\r\n$4\r\npong\r\n$0\r\n\r\n"

// readAll reads n bytes through w.Read with a buffer of size.
func readAll(t *testing.T, w *watchedConn, n, size int) string {
	t.Helper()
	var got []byte
	buf := make([]byte, size)
	for len(got) < n {
		m, err := w.Read(buf)
		if err != nil {
			t.Fatal(len(got), err)
		}
		got = append(got, buf[:m]...)
	}
	return string(got)
}

// TestReadHandsOnOnlyReplies: go-redis gets every reply but keyspace
// notifications and flushes, whole and in order, however the bytes are
// split between reads and whatever its buffer's size (the rest waits in
// out); the notifications are applied.
func TestReadHandsOnOnlyReplies(t *testing.T) {
	flush := "*3\r\n$7\r\nmessage\r\n$" + itoa(len(TrackingChannel)) + "\r\n" + TrackingChannel + "\r\n*-1\r\n"
	sub := "*3\r\n$10\r\npsubscribe\r\n$16\r\n__keyspace@*__:*\r\n:1\r\n"
	long := "-ERR " + strings.Repeat("e", 5000) + "\r\n"
	var in, want strings.Builder
	for i := range 300 {
		switch i % 5 {
		case 0:
			in.WriteString(sub)
			want.WriteString(sub)
		case 1:
			in.WriteString(pmsg("3", "k"+itoa(i)))
		case 2:
			in.WriteString(flush)
		case 3:
			in.WriteString(long)
			want.WriteString(long)
		case 4:
			in.WriteString(pmsg("0", strings.Repeat("x", i*10)) + pong)
			want.WriteString(pong)
		}
	}
	for _, size := range []int{7, 100, 4096, 1 << 20} {
		w, srv, s := fakeWatched(t)
		go func() {
			b := in.String()
			for len(b) > 0 { // writes of odd sizes, so reads split anywhere
				n := min(len(b), 1+len(b)%4093)
				_, _ = srv.Write([]byte(b[:n]))
				b = b[n:]
			}
		}()
		w.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got := readAll(t, w, want.Len(), size); got != want.String() {
			t.Fatalf("buffer of %d: go-redis got %d bytes, want %d: the replies but notifications and flushes", size, len(got), want.Len())
		}
		if s.Events() != 120 || s.Flushes() != 60 {
			t.Errorf("buffer of %d: %d notifications and %d flushes applied, want 120 and 60", size, s.Events(), s.Flushes())
		}
	}
}

// TestReadPaced: a read that returned bytes makes the next read that finds
// the queue empty sleep (it returns nothing and no error) instead of
// waiting for the socket; the read after that waits for it (it returns at
// the deadline). A request written on the connection leaves a wake that
// ends the reader's sleep.
func TestReadPaced(t *testing.T) {
	w, srv, s := fakeWatched(t)
	buf := make([]byte, 4096)
	w.SetReadDeadline(time.Now().Add(5 * time.Second))
	m := pmsg("0", "k")
	srv.Write([]byte(m))
	queued(t, w, len(m))
	if n, err := w.readOnce(buf); n != 0 || err != nil || s.Events() != 1 || !w.flowing {
		t.Fatalf("got %d, %v, %d events, flowing %v; want 0, nil, 1, true", n, err, s.Events(), w.flowing)
	}
	if n, err := w.readOnce(buf); n != 0 || err != nil || w.flowing {
		t.Fatalf("empty queue while flowing: got %d, %v, flowing %v; want a sleep: 0, nil, false", n, err, w.flowing)
	}
	w.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := w.readOnce(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("empty queue, not flowing: got %v; want to park until the deadline", err)
	}

	if _, err := w.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	if len(w.wake) != 1 {
		t.Fatal("Write left no wake for the reader")
	}
	w.sleep(10 * time.Second) // returns at once: the wake is there
	if len(w.wake) != 0 {
		t.Fatal("the sleep did not take the wake")
	}
	got := make([]byte, 6)
	if _, err := io.ReadFull(srv, got); err != nil || string(got) != "PING\r\n" {
		t.Fatalf("Redis got %q, %v", got, err)
	}

	// Until the PING's reply is handed on, notifications flowing do not
	// make the reader sleep: it waits for the socket (found by an attack:
	// the wake was spent on a notification and the pong waited for pace).
	w.SetReadDeadline(time.Now().Add(5 * time.Second))
	srv.Write([]byte(m))
	queued(t, w, len(m))
	if n, err := w.readOnce(buf); n != 0 || err != nil || !w.flowing {
		t.Fatalf("got %d, %v, flowing %v; want 0, nil, true", n, err, w.flowing)
	}
	w.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := w.readOnce(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("empty queue, a reply owed: got %v; want to wait for the socket until the deadline", err)
	}
	w.SetReadDeadline(time.Now().Add(5 * time.Second))
	srv.Write([]byte(m + pong))
	if got := readAll(t, w, len(pong), 4096); got != pong {
		t.Fatalf("go-redis got %q, want the pong", got)
	}
	if n, err := w.readOnce(buf); n != 0 || err != nil || w.flowing {
		t.Fatalf("reply handed on, queue empty: got %d, %v, flowing %v; want a sleep: 0, nil, false", n, err, w.flowing)
	}
}

// TestReadDeadlineClockStep: a read waiting for the socket returns at the
// deadline by the netpoller's clock even when the wall clock, which the
// stored deadline is compared with, says it has not passed (a wall clock
// stepped back): it does not loop until the wall clock catches up (found by
// an attack; simulated by storing a later wall-clock deadline).
func TestReadDeadlineClockStep(t *testing.T) {
	w, _, _ := fakeWatched(t)
	w.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	w.rdl.Store(time.Now().Add(time.Minute).UnixNano())
	t0 := time.Now()
	_, err := w.Read(make([]byte, 64))
	if !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(t0) > 30*time.Second {
		t.Fatalf("got %v after %v; want the deadline's error at the netpoller's deadline", err, time.Since(t0))
	}
}
