package upstream

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The notification connection's socket is read and written with system
// calls on a descriptor that the Go runtime's netpoller does not watch.
// In the netpoller, every notification Redis writes woke the thread
// waiting in the runtime's epoll_wait, whether or not a goroutine waited
// to read (an event loop may have taken the notification already): a
// thread woken and a context switch per write Redis notified. Instead an
// epoll instance of its own watches the socket, armed only while the
// reading goroutine waits for it (EPOLLONESHOT), and that instance is in
// the netpoller: the reader waits there while notifications are rare, and
// sleeps for pace between reads, the socket unwatched, while they flow
// (readOnce). No system call the reader makes blocks (one that did would keep
// the runtime's sysmon thread awake: about 1,900 nanosleeps a second in a
// build that waited in poll(2)).

// dialWatched is a go-redis Dialer that returns a watchedConn for s and
// publishes it as s.watch.
//
// It dials once: go-redis, when the connection fails, dials again and
// resubscribes at once, before the session sees the error and suspends the
// cache, and a fresh empty socket would make Unapplied report nothing
// unapplied for writes that were never notified. Refused, the dead
// connection stays published (closed: Unapplied reports all) and the
// session ends as it does for any receive error.
func dialWatched(d *net.Dialer, s *Subscriber) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var dialed atomic.Bool
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dialed.Swap(true) {
			return nil, errors.New("upstream: notification connection lost")
		}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tcp, ok := c.(*net.TCPConn)
		if !ok {
			_ = c.Close()
			return nil, errors.New("upstream: notification connection is not TCP")
		}
		w, err := detach(tcp, s)
		if err != nil {
			return nil, err
		}
		s.watch.Store(w)
		return w, nil
	}
}

// detach takes tcp's socket out of the netpoller: it duplicates the
// descriptor (close-on-exec, non-blocking like the original), closes tcp,
// which removes the original from the runtime's epoll set (the socket
// stays open through the duplicate), and puts the duplicate in an epoll
// instance of its own, registered in the netpoller (an os.File on a
// non-blocking descriptor is). It closes what it opened on any error.
func detach(tcp *net.TCPConn, s *Subscriber) (*watchedConn, error) {
	w := &watchedConn{sub: s, fd: -1, wake: make(chan struct{}, 1), laddr: tcp.LocalAddr(), raddr: tcp.RemoteAddr()}
	raw, err := tcp.SyscallConn()
	if err == nil {
		var derr error
		if err = raw.Control(func(fd uintptr) { w.fd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err == nil {
			err = derr
		}
	}
	_ = tcp.Close()
	epfd := -1
	if err == nil {
		err = unix.SetNonblock(w.fd, true)
	}
	if err == nil {
		epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	}
	if err == nil {
		err = unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, w.fd, &unix.EpollEvent{Events: unix.EPOLLONESHOT, Fd: int32(w.fd)})
	}
	if err == nil {
		err = unix.SetNonblock(epfd, true)
	}
	if err == nil {
		w.ep = os.NewFile(uintptr(epfd), "cicada-notifications-epoll")
		epfd = -1 // ep's now
		w.epRaw, err = w.ep.SyscallConn()
	}
	if err != nil {
		if w.ep != nil {
			_ = w.ep.Close()
		}
		if epfd >= 0 {
			_ = unix.Close(epfd)
		}
		if w.fd >= 0 {
			_ = unix.Close(w.fd)
		}
		return nil, err
	}
	return w, nil
}

// await waits in the netpoller until the socket has bytes, ep's read
// deadline (SetReadDeadline) passes or ep is closed (the caller then
// finds why). It arms the socket in ep for one event (EPOLL_CTL_MOD with
// EPOLLONESHOT) and takes the event, with raw non-blocking system calls
// made inside ep's descriptor's reference (Close cannot close it
// meanwhile). It returns os.ErrDeadlineExceeded once ep's deadline has
// passed (its clock, not the wall clock readOnce compares the deadline
// with: a wall clock stepped back must not leave the caller looping), and
// the error if the socket cannot be armed.
func (w *watchedConn) await() error {
	var armErr error
	err := w.epRaw.Read(func(epfd uintptr) bool {
		arm := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: int32(w.fd)}
		if _, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_CTL, epfd, unix.EPOLL_CTL_MOD, uintptr(w.fd),
			uintptr(unsafe.Pointer(&arm)), 0, 0); errno != 0 {
			armErr = errno
			return true
		}
		var ev [1]unix.EpollEvent
		n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, epfd, uintptr(unsafe.Pointer(&ev[0])), 1, 0, 0, 0)
		return n > 0 || (errno != 0 && errno != unix.EINTR)
	})
	if armErr == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return os.ErrDeadlineExceeded
	}
	return armErr
}

// sleep waits for d, or until signal is called (Write, Close).
func (w *watchedConn) sleep(d time.Duration) {
	if w.pacer == nil {
		w.pacer = time.NewTimer(d)
	} else {
		w.pacer.Reset(d)
	}
	select {
	case <-w.pacer.C:
	case <-w.wake:
		w.pacer.Stop()
	}
}

// signal ends the reading goroutine's sleep, or its next one; never
// blocks.
func (w *watchedConn) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Write writes b like net.Conn's Write (write deadline included), then
// counts it in asked and ends the reading goroutine's sleep: go-redis's
// request has a reply to wait for, which the reader then waits for
// without sleeping (readOnce). It waits in poll(2) while the socket's send buffer is full
// (go-redis's requests here are a few short commands a second).
func (w *watchedConn) Write(b []byte) (int, error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	n := 0
	for n < len(b) {
		if w.closed.Load() {
			return n, w.opErr("write", net.ErrClosed)
		}
		left := 100 * time.Millisecond // looks at closed again after this
		if dl := w.wdl.Load(); dl != 0 {
			d := time.Duration(dl - time.Now().UnixNano())
			if d <= 0 {
				return n, w.opErr("write", os.ErrDeadlineExceeded)
			}
			left = min(left, d)
		}
		m, _, errno := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(w.fd), uintptr(unsafe.Pointer(&b[n])), uintptr(len(b)-n),
			unix.MSG_NOSIGNAL, 0, 0)
		switch {
		case errno == 0:
			n += int(m)
		case errno == unix.EAGAIN:
			pfd := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLOUT}}
			_, _ = unix.Poll(pfd, int((left+time.Millisecond-1)/time.Millisecond))
		case errno != unix.EINTR:
			return n, w.opErr("write", errno)
		}
	}
	w.asked.Add(1)
	w.signal()
	return n, nil
}

// Close marks the connection closed, ends the reader's wait (closing ep
// wakes it in the netpoller; signal ends its sleep), waits until no event
// loop is taking bytes off the socket (an event loop's take that began
// before sees closed once it has mu; the descriptor may name another
// socket after the close) and the reader and Write are out, then closes
// the socket. It does not hold mu while it waits for the reader, which
// may itself wait for mu (readOnce): that deadlocked shutdown once (found
// by an attack on the change: TestAttackCloseDeadlockReadLoop). A second
// Close returns net.ErrClosed.
func (w *watchedConn) Close() error {
	if w.shut.Swap(true) {
		return w.opErr("close", net.ErrClosed)
	}
	w.closed.Store(true)
	w.signal()
	_ = w.ep.Close()
	w.mu.Lock()
	w.mu.Unlock() // a barrier: the takes that began before have ended
	w.rmu.Lock()
	w.wmu.Lock()
	err := unix.Close(w.fd)
	w.wmu.Unlock()
	w.rmu.Unlock()
	if err != nil {
		return w.opErr("close", err)
	}
	return nil
}

// opErr wraps err as net's connections do.
func (w *watchedConn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: w.laddr, Addr: w.raddr, Err: err}
}

// LocalAddr returns the socket's local address.
func (w *watchedConn) LocalAddr() net.Addr { return w.laddr }

// RemoteAddr returns Redis's address.
func (w *watchedConn) RemoteAddr() net.Addr { return w.raddr }

// SetDeadline sets both deadlines (net.Conn).
func (w *watchedConn) SetDeadline(t time.Time) error {
	w.wdl.Store(unixNano(t))
	return w.SetReadDeadline(t)
}

// SetReadDeadline sets the read deadline; a read waiting now sees it, as
// net.Conn's does (in the netpoller at once, asleep within pace).
func (w *watchedConn) SetReadDeadline(t time.Time) error {
	w.rdl.Store(unixNano(t))
	_ = w.ep.SetReadDeadline(t) // fails only once ep is closed
	return nil
}

// SetWriteDeadline sets the write deadline (net.Conn).
func (w *watchedConn) SetWriteDeadline(t time.Time) error {
	w.wdl.Store(unixNano(t))
	return nil
}

// unixNano is t in Unix ns, 0 for the zero time (no deadline).
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
