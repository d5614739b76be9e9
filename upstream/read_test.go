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
		go srv.Write([]byte(m))
		got := 0
		buf := make([]byte, 4096)
		w.SetReadDeadline(time.Now().Add(5 * time.Second))
		for got < len(m) {
			n, err := w.Read(buf)
			if err != nil {
				t.Fatal(got, err)
			}
			if got += n; got < len(m) && s.Events() != 0 {
				t.Fatal("applied before complete")
			}
		}
		if s.Events() != 1 {
			t.Fatalf("events %d", s.Events())
		}
	})
	t.Run("empty key and many in one read", func(t *testing.T) {
		w, srv, s := fakeWatched(t)
		var b strings.Builder
		b.WriteString(pmsg("0", ""))
		for i := range 5000 {
			b.WriteString(pmsg("15", "key:"+itoa(i)))
		}
		go srv.Write([]byte(b.String()))
		buf := make([]byte, 1<<20)
		w.SetReadDeadline(time.Now().Add(5 * time.Second))
		for got := 0; got < b.Len(); {
			n, err := w.Read(buf)
			if err != nil {
				t.Fatal(got, err)
			}
			got += n
		}
		if s.Events() != 5001 {
			t.Fatalf("events %d", s.Events())
		}
	})
}
