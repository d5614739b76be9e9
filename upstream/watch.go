package upstream

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cicada-proxy/cicada/hotcache"
)

// watchedConn is the notification connection as go-redis sees it: a TCP
// connection that applies each keyspace notification and flush to the cache
// in the read that takes it off the socket, and lets an event loop ask at
// any moment which notifications have arrived but are not applied yet
// (Subscriber.Unapplied). go-redis gets only the other replies (the
// subscription's confirmations, pongs, errors): it does not parse again
// what was applied.
//
// Why: a write another client sent to Redis directly was acknowledged at
// about the moment its notification reached this socket. Until it is
// applied, the cache may answer with the value before the write; on a busy
// machine the goroutine that reads the socket can wait milliseconds to run,
// and while notifications flow it reads only every pace.
// An event loop that knows which keys are in that gap forwards their reads
// to Redis instead.
//
// A notification is in one of three places: the socket's receive queue
// (peeked by unapplied), a read in progress (inRead is set around the read
// system call and the applying of what it returned), or applied. reads
// counts the reads that returned bytes; unapplied trusts its peek only if no
// read ran while it looked.
//
// Bytes leave the socket under mu: in Read, on go-redis's goroutines (one
// at a time: the subscriber's session owns the connection), and in
// unapplied, on an event loop that finds whole keyspace notifications at
// the head of the queue and takes them off (never anything after the
// first other reply, which is go-redis's). Under load the reading
// goroutine waits to run while the loops peek: each peek scanned the same
// queued notifications again, 8% of Cicada's CPU in scenario 4 against
// 1% for applying them (issue 18); now the first loop that sees them
// applies them. pend and partial change only under mu. unapplied may run
// on any goroutine; it only tries mu, and without it peeks as before.
type watchedConn struct {
	sub          *Subscriber
	fd           int             // the socket (watchsock.go), valid until closed is set
	ep           *os.File        // an epoll instance watching fd, itself in the netpoller (watchsock.go)
	epRaw        syscall.RawConn // ep's
	wake         chan struct{}   // ends the reader's sleep (signal)
	laddr, raddr net.Addr
	pend         []byte // the start of a reply whose end has not been read yet
	out          []byte // complete replies for go-redis that its last Read had no room for

	// mu is held while bytes are taken off the socket and applied, and
	// while it is closed: an event loop that holds it may read the socket.
	mu sync.Mutex
	// rmu is held by the reading goroutine in readOnce, wmu by Write:
	// Close waits for both before it closes the descriptors, so that
	// neither is used once its number may name another file.
	rmu, wmu sync.Mutex

	closed  atomic.Bool   // set before the socket is closed
	shut    atomic.Bool   // Close has been called
	broken  atomic.Bool   // the stream is not RESP2: nothing can be trusted
	inRead  atomic.Bool   // a read is taking bytes off the socket and applying them
	partial atomic.Bool   // len(pend) > 0: the socket's bytes start mid-reply
	reads   atomic.Uint64 // reads that returned bytes

	rdl, wdl atomic.Int64 // read and write deadlines in Unix ns; 0 means none

	// asked counts go-redis's requests (Write); answered (the reading
	// goroutine's) is asked as it was before the last read that handed
	// go-redis a reply. While they differ a request may wait for its
	// reply, and the reader does not sleep. Two requests in flight whose
	// replies arrive in two reads can let the second wait up to pace.
	asked    atomic.Uint64
	answered uint64

	// flowing (the reading goroutine's) is set by a read that returned
	// bytes: the next read that finds the queue empty sleeps for pace
	// instead of waiting for the socket, unless it stopped mid-reply
	// (readOnce).
	flowing bool
	pacer   *time.Timer // the reading goroutine's, for the sleep
}

// pace is how long the goroutine reading the notification connection
// sleeps, while notifications keep arriving, before it reads again:
// waiting for the socket instead, it woke for every notification (a
// thread woken and a context switch per write Redis notified). Asleep for
// pace it wakes at most 200 times a second whatever the write rate: an
// idle Cicada beside 20,000 writes/s to Redis used 38-51 ms of CPU a
// second instead of 230-265 (docs/performance.md, "Writes Cicada does
// not see"). What it delays is not a reply's freshness: a hit asks
// Unapplied which notifications are in the socket, and the event loops
// apply those at the head of the queue; only the eviction of keys nobody
// reads, and the Invalidated calls, wait up to pace. go-redis's replies
// (pongs, which release fences, and confirmations) do not: a request it
// writes ends the sleep, and the reader waits for the socket until a
// reply has been handed on (asked, answered).
const pace = 5 * time.Millisecond

// Read reads like net.Conn's Read (deadlines included), applies the
// keyspace notifications and flushes among the bytes it takes off the
// socket, and returns the other complete replies only (confirmations,
// pongs, errors, tracking messages): go-redis parsing each notification
// again after it was applied cost about 10 µs of CPU per write that
// Redis notified (issue 18). It reads on until it has a reply to return,
// an error or a deadline; the session hears of a live connection from the
// pongs of the control goroutine's pings.
func (w *watchedConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if len(w.out) > 0 {
			n := copy(p, w.out)
			if w.out = w.out[n:]; len(w.out) == 0 {
				w.out = nil
			}
			return n, nil
		}
		if n, err := w.readOnce(p); n > 0 || err != nil {
			return n, err
		}
	}
}

// readOnce takes one read(2)'s bytes off the socket and applies them; it
// returns how many bytes of replies for go-redis it left at the start of p
// (0 when the bytes were notifications or part of a reply, or when it
// slept; more may wait in out). On an empty queue it waits in the
// netpoller for the socket (await), or, when the last read returned bytes,
// did not stop mid-reply and no request of go-redis's waits for its reply,
// sleeps for pace (Write and Close end the sleep) and returns. Once the
// read deadline has passed it returns the deadline's error before it
// reads, and once closed is set net.ErrClosed (both in a *net.OpError).
func (w *watchedConn) readOnce(p []byte) (int, error) {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	for {
		if w.closed.Load() {
			return 0, w.opErr("read", net.ErrClosed)
		}
		left := time.Duration(-1)
		if dl := w.rdl.Load(); dl != 0 {
			if left = time.Duration(dl - time.Now().UnixNano()); left <= 0 {
				return 0, w.opErr("read", os.ErrDeadlineExceeded)
			}
		}
		var n, kept int
		asked := w.asked.Load()
		w.mu.Lock()
		w.inRead.Store(true)
		n, rerr := read(w.fd, p)
		if n > 0 {
			kept = w.apply(p, n)
			w.reads.Add(1)
		}
		w.inRead.Store(false)
		w.mu.Unlock()
		switch {
		case w.broken.Load():
			// Not RESP2: stop here rather than count on go-redis failing on
			// the same bytes. The session ends and the cache is suspended.
			w.closed.Store(true)
			return 0, errNotRESP2
		case n > 0:
			w.flowing = true
			if kept > 0 || len(w.out) > 0 {
				w.answered = asked
			}
			return kept, nil
		case rerr == nil:
			return 0, io.EOF
		case errors.Is(rerr, unix.EINTR):
			continue
		case !errors.Is(rerr, unix.EAGAIN):
			return 0, w.opErr("read", rerr)
		}
		// Mid-reply, the loops cannot tell which keys are queued
		// (Unapplied reports all) until the rest is read; and a request's
		// reply holds a fence (Subscriber.Fence): both wait for the
		// socket, not for pace.
		if w.flowing && !w.partial.Load() && w.answered == w.asked.Load() {
			w.flowing = false
			if left < 0 || left > pace {
				left = pace
			}
			w.sleep(left)
			return 0, nil
		}
		if err := w.await(); err != nil { // ep's deadline, or the socket cannot be armed
			return 0, w.opErr("read", err)
		}
	}
}

// apply applies every complete reply in pend+p[:n], keeps the start of an
// incomplete one in pend, and hands on the complete replies that are not
// notifications or flushes: the first len(p) bytes of them compacted at
// the start of p (it returns how many), the rest appended to out.
func (w *watchedConn) apply(p []byte, n int) (kept int) {
	if w.broken.Load() {
		return 0
	}
	b := p[:n]
	if len(w.pend) > 0 {
		w.pend = append(w.pend, b...)
		b = w.pend // p is free: its bytes are in pend
	}
	var f frame
	for len(b) > 0 {
		m, err := scanFrame(b, &f)
		if err != nil {
			w.broken.Store(true) // Read ends the connection
			return 0
		}
		if m == 0 {
			break
		}
		db, key, isKey, isFlush := f.notification()
		switch {
		case isKey:
			w.sub.events.Add(1)
			k := hotcache.KeyOf(db, key)
			w.sub.cache.Invalidate(&k, hotcache.ReasonNotification)
			if f := w.sub.cfg.Invalidated; f != nil {
				f(k.Hash())
			}
		case isFlush:
			w.sub.flushes.Add(1)
			w.sub.cache.Flush()
		default:
			// Where b is p, p[kept:] starts at or before b: copy moves
			// bytes already scanned.
			c := copy(p[kept:], b[:m])
			w.out = append(w.out, b[c:m]...)
			kept += c
		}
		b = b[m:]
	}
	switch {
	case len(b) == 0 && cap(w.pend) > 64<<10:
		w.pend = nil // a big notification has passed: let its buffer go
	default:
		w.pend = append(w.pend[:0], b...) // copy handles the overlap when b is in pend
	}
	w.partial.Store(len(w.pend) > 0)
	return kept
}

// errNotRESP2 ends a notification connection whose bytes are not RESP2.
var errNotRESP2 = errors.New("upstream: notification connection sent bytes that are not RESP2")

// unapplied appends to dst the hotcache.Hash of every key whose keyspace
// notification is in the socket's receive queue, not yet applied. all=true
// means it cannot tell which keys are concerned: a read is applying, a flush
// is queued, the queue holds more than scratch or starts mid-reply, the
// connection is closed or broken. scratch bounds the peek. When it gets mu,
// it first applies the whole keyspace notifications at the head of the
// queue (take), so that those are not reported, nor scanned again by the
// next call.
func (w *watchedConn) unapplied(dst []uint64, scratch []byte) (hashes []uint64, all bool) {
	if w.mu.TryLock() {
		hashes, all = w.take(dst, scratch)
		w.mu.Unlock()
		return hashes, all
	}
	r := w.reads.Load()
	if w.closed.Load() || w.broken.Load() || w.inRead.Load() {
		return dst, true
	}
	midReply := w.partial.Load()
	n, errno := peek(w.fd, scratch)
	// A read that ran meanwhile may have moved the queue's start; once
	// closed is set the descriptor may name another socket. Either way
	// what was peeked means nothing.
	if w.inRead.Load() || w.reads.Load() != r || w.closed.Load() {
		return dst, true
	}
	if midReply {
		return dst, true // a notification may be half read, its key unknown
	}
	if errno == unix.EAGAIN || errno == unix.EWOULDBLOCK {
		return dst, false
	}
	if errno != 0 || n <= 0 || n == len(scratch) {
		return dst, true
	}
	var f frame
	for b := scratch[:n]; len(b) > 0; {
		m, err := scanFrame(b, &f)
		if m == 0 || err != nil {
			return dst, true // incomplete: a notification Redis is still writing
		}
		switch db, key, isKey, isFlush := f.notification(); {
		case isKey:
			dst = append(dst, hotcache.Hash(db, key))
		case isFlush:
			return dst, true
		}
		b = b[m:]
	}
	return dst, false
}

// take is unapplied with mu held: no read runs meanwhile, so the queue's
// head stays as peeked. It peeks, takes off the socket the keyspace
// notifications that come before any other reply (they are whole: a reply
// Redis is still writing is at the queue's end) and applies them as Read
// does, then reports the keys of those queued behind the other reply.
func (w *watchedConn) take(dst []uint64, scratch []byte) (hashes []uint64, all bool) {
	if w.closed.Load() || w.broken.Load() || w.partial.Load() {
		return dst, true
	}
	n, errno := peek(w.fd, scratch)
	if errno == unix.EAGAIN || errno == unix.EWOULDBLOCK {
		return dst, false
	}
	if errno != 0 || n <= 0 {
		return dst, true
	}
	all = n == len(scratch) // more may be queued than was peeked
	var f frame
	head, ahead := 0, true // ahead: no other reply scanned yet
scan:
	for b := scratch[:n]; len(b) > 0; {
		m, err := scanFrame(b, &f)
		if m == 0 || err != nil {
			all = true // incomplete: a notification Redis is still writing
			break
		}
		switch db, key, isKey, isFlush := f.notification(); {
		case isFlush:
			all = true
			break scan
		case isKey && ahead:
			head += m
		case isKey:
			dst = append(dst, hotcache.Hash(db, key))
		default:
			ahead = false
		}
		b = b[m:]
	}
	if head > 0 {
		w.inRead.Store(true)
		// The same bytes as peeked: read(2) overwrites them with themselves.
		got, err := read(w.fd, scratch[:head])
		if got > 0 {
			w.apply(scratch, got)
			w.reads.Add(1)
		}
		w.inRead.Store(false)
		if got != head || err != nil {
			return dst, true // not what was peeked: Read will see why
		}
	}
	return dst, all
}

// read is read(2) on the non-blocking socket fd as a raw system call: it
// never blocks (on EAGAIN the reader waits: readOnce), and
// unix.Read's entersyscall wakes a sleeping sysmon thread, which is two
// futex calls and a nanosleep per notification when nothing else runs
// (strace -c and perf: 31-36 µs of CPU per notification at 2,000/s, now
// 12-15; docs/performance.md). On an error it returns 0 bytes and the
// errno (unix.Errno), where unix.Read returns -1.
func read(fd int, p []byte) (int, error) {
	n, _, errno := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// peek copies the start of fd's receive queue into b without taking it off
// (recv with MSG_PEEK|MSG_DONTWAIT). A raw system call: unix.Recvfrom
// allocates for the sender's address, and this runs on the hit path.
func peek(fd int, b []byte) (int, unix.Errno) {
	if len(b) == 0 {
		return 0, unix.EINVAL
	}
	n, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	return int(n), errno
}
