package main

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"github.com/cicada-proxy/cicada/resp"
	"golang.org/x/sys/unix"
)

// The open loop runs on one OS thread with an epoll instance of its own
// (not Go's netpoller): the next intended time is the epoll_pwait2
// timeout, each reply is read when its socket turns readable, and the
// sockets are nonblocking descriptors the Go runtime never sees. A
// goroutine per connection parked on a timerfd cost 31-39 µs of CPU per
// request at 20,000/s (every request two netpoller wake-ups, each a
// thread handed a goroutine), more than the proxies it measured, on the
// two cores it shares with them.

// openConn is one open-loop connection. Owned by the open loop's thread.
type openConn struct {
	w  *worker // request generator, histograms and counters
	j  int     // index: its intended times are start + offsets[j] + k*interval
	fd int
	in []byte // reply bytes read and not yet framed
	// next is the index k of the connection's next intended time
	// (start + offset + k*interval); busy: a request is in flight, sent
	// at sent for the intended time intended, of kind kind.
	next     int64
	busy     bool
	intended time.Time
	sent     time.Time
	kind     int
	done     bool // failed, or no intended time left before the end
}

// inBuf is an open connection's read buffer, bytes: far more than the
// one reply it waits for.
const inBuf = 16 << 10

// dialRaw opens a blocking TCP connection to addr outside Go's runtime,
// then makes it nonblocking with TCP_NODELAY set. Errors are the
// resolver's and the socket calls'.
func dialRaw(addr string) (int, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return -1, fmt.Errorf("loadgen: resolve %s: %w", addr, err)
	}
	var sa unix.Sockaddr
	family := unix.AF_INET
	if ip4 := ta.IP.To4(); ip4 != nil {
		sa4 := &unix.SockaddrInet4{Port: ta.Port}
		copy(sa4.Addr[:], ip4)
		sa = sa4
	} else {
		family = unix.AF_INET6
		sa6 := &unix.SockaddrInet6{Port: ta.Port}
		copy(sa6.Addr[:], ta.IP.To16())
		sa = sa6
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("loadgen: socket: %w", err)
	}
	for {
		err = unix.Connect(fd, sa)
		if err != unix.EINTR {
			break
		}
	}
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("loadgen: dial %s: %w", addr, err)
	}
	return fd, nil
}

// epollWait is epoll_pwait2 (Linux 5.11): it waits at most d, to the
// nanosecond, where epoll_wait takes whole milliseconds. EINTR (the Go
// runtime's preemption signal) returns 0 events.
func epollWait(epfd int, events []unix.EpollEvent, d time.Duration) (int, error) {
	ts := unix.NsecToTimespec(int64(max(d, 0)))
	n, _, e := syscall.Syscall6(unix.SYS_EPOLL_PWAIT2, uintptr(epfd),
		uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
	switch e {
	case 0:
		return int(n), nil
	case unix.EINTR:
		return 0, nil
	}
	return 0, fmt.Errorf("loadgen: epoll_pwait2: %w", e)
}

// errStuck: a reply did not come within the grace period after the end.
var errStuck = errors.New("loadgen: no reply 10s after the run's end")

// runOpen sends, on each connection j, one request at each intended
// time start + offsets[j] + k*interval before end, never more than one
// in flight per connection: a request whose time comes while its
// connection waits for a reply is sent when the reply arrives, its
// latency still timed from its intended time. Intended times still
// unsent when the clock passes end are counted as missed. It returns
// when every connection has its last reply (or failed), its errors in
// each worker's ioErr; the error returned is one that stops the whole
// loop (epoll's).
func runOpen(conns []*openConn, start, end time.Time, offsets []time.Duration, interval time.Duration) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The wait for the next intended time is an hrtimer, which the kernel
	// lets fire up to the thread's timer slack late (50 µs by default).
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("loadgen: epoll_create1: %w", err)
	}
	defer unix.Close(epfd)
	for i, c := range conns {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(i)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
			return fmt.Errorf("loadgen: epoll_ctl: %w", err)
		}
		c.in = make([]byte, 0, inBuf)
	}
	at := func(j int, k int64) time.Time {
		return start.Add(offsets[j] + time.Duration(k)*interval)
	}
	// The timer's cursor walks the intended times in order: round k, then
	// connection j within it (offsets rise within one interval).
	var k int64
	j, live := 0, len(conns)
	timerOn := true
	events := make([]unix.EpollEvent, len(conns))
	fail := func(c *openConn, err error) {
		c.w.ioErr, c.done, c.busy = err, true, false
		live--
		_ = unix.EpollCtl(epfd, unix.EPOLL_CTL_DEL, c.fd, nil)
	}
	// sendDue sends c's next request if its intended time has come and
	// the run has not ended; it marks c done when no intended time is left.
	sendDue := func(c *openConn, now time.Time) {
		if c.done || c.busy {
			return
		}
		t := at(c.j, c.next)
		switch {
		case !t.Before(end):
			c.done = true
			live--
			return
		case !now.Before(end):
			c.w.missed += int64((end.Sub(t) + interval - 1) / interval) // intended times in [t, end)
			c.done = true
			live--
			return
		case t.After(now):
			return // the timer sends it
		}
		if now.Sub(t) > c.w.cfg.LateSlack {
			c.w.late++
		}
		c.w.out = c.w.out[:0]
		c.kind = c.w.appendRequest()
		c.intended, c.sent = t, time.Now()
		if n, err := unix.Write(c.fd, c.w.out); err != nil || n != len(c.w.out) {
			if err == nil {
				err = fmt.Errorf("loadgen: short write, %d of %d bytes", n, len(c.w.out))
			}
			fail(c, err)
			return
		}
		c.busy = true
		c.next++
	}
loop:
	for live > 0 {
		now := time.Now()
		for timerOn {
			t := at(j, k)
			if !t.Before(end) {
				timerOn = false
				break
			}
			if t.After(now) {
				break
			}
			if c := conns[j]; c.next == k {
				sendDue(c, now)
			}
			if j++; j == len(conns) {
				j, k = 0, k+1
			}
		}
		var wait time.Duration
		switch {
		case timerOn:
			wait = at(j, k).Sub(now)
		case now.Before(end):
			wait = end.Sub(now)
		default:
			wait = end.Add(10 * time.Second).Sub(now)
			// Past the end: connections waiting for no reply are done.
			for _, c := range conns {
				sendDue(c, now)
			}
			if live == 0 {
				break loop
			}
			if wait <= 0 {
				for _, c := range conns {
					if c.busy {
						fail(c, errStuck)
					}
				}
				break loop
			}
		}
		n, err := epollWait(epfd, events, wait)
		if err != nil {
			return err
		}
		if n == 0 {
			continue
		}
		for _, ev := range events[:n] {
			c := conns[ev.Fd]
			if c.done && !c.busy {
				continue
			}
			now := time.Now()
			c.readReplies(now, fail)
			sendDue(c, now)
		}
	}
	return nil
}

// readReplies reads what c's socket holds and records each whole reply
// in it as answered at now.
func (c *openConn) readReplies(now time.Time, fail func(*openConn, error)) {
	m, err := unix.Read(c.fd, c.in[len(c.in):cap(c.in)])
	switch {
	case err == unix.EAGAIN || err == unix.EINTR:
		return
	case err != nil:
		fail(c, err)
		return
	case m == 0:
		fail(c, errors.New("loadgen: connection closed by the server"))
		return
	}
	c.in = c.in[:len(c.in)+m]
	sc := resp.NewScanner(c.in)
	for {
		from := sc.Offset()
		switch sc.Skip(1) {
		case resp.ScanInvalid:
			fail(c, fmt.Errorf("%w: %q", errReply, c.in[from:min(len(c.in), from+64)]))
			return
		case resp.ScanIncomplete:
			if from == 0 && len(c.in) == cap(c.in) {
				fail(c, fmt.Errorf("%w: a reply over %d bytes", errReply, cap(c.in)))
				return
			}
			c.in = c.in[:copy(c.in, c.in[from:])]
			return
		}
		if !c.busy {
			fail(c, fmt.Errorf("%w: a reply nothing asked for", errReply))
			return
		}
		if t := c.in[from]; t == resp.TypeError || t == resp.TypeBulkError {
			c.w.errs++
		}
		c.busy = false
		w := c.w
		record(w.hist, now.Sub(c.intended), 1)
		record(w.byKind[c.kind], now.Sub(c.intended), 1)
		record(w.svc, now.Sub(c.sent), 1)
		w.ops++
	}
}
