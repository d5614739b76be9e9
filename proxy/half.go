package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"time"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// A client that shuts down its sending side (shutdown(SHUT_WR), what
// `printf ... | nc -N` does) gets from Redis the replies to everything it
// sent: Redis processes what it read, writes the replies, and frees the
// client when it reads the EOF, dropping only replies its socket could
// not take. gnet closes a connection as soon as a read returns EOF (and
// has no half-close option), so the session would end with requests
// still unforwarded (a dial in progress, a paused pipeline) and replies
// in flight: through Cicada 4-5 of 100 such clients got their replies
// and 15-21 of 100 writes executed.
//
// When the client's close is the peer's (a read EOF or an error) and the
// session still has work Redis would do, it goes on without the gnet
// connection (halfClose): the socket is kept open for writing through a
// duplicate of its descriptor (gnet.Conn.Dup: gnet closes its own), the
// unprocessed bytes are copied out of gnet's buffer, and a halfConn
// stands in for the client. Every request is forwarded as usual, then
// any incomplete one, and the upstream connection is shut down for
// writing (halfConn.progress): Redis sees exactly what a direct client would
// have sent, EOF included, processes it, answers, and closes the
// connection when it reads the EOF, which ends the session
// (onUpstreamClose). Replies are written to the socket as they come, as
// gnet would; what the socket cannot take waits in the halfConn (counted
// against the client's limits) and is retried on a timer, gnet having no
// poller for a descriptor it does not own. When Redis closes, what is
// still waiting is dropped, as Redis drops the unsent replies of a
// client it frees.

// halfConn stands in for the client connection of a session whose client
// shut down its sending side. Owned by the session's event loop. A
// session still waiting for its upstream connection when the engine
// stops keeps its descriptor until the process exits.
type halfConn struct {
	s    *session
	el   gnet.EventLoop
	addr net.Addr
	fd   int // duplicate of the client's socket; -1 once replies are dropped

	in  []byte // requests read and not yet processed
	off int    // processed bytes of in
	out []byte // replies the socket did not take yet

	polling bool          // a flush retry is scheduled
	wait    time.Duration // its current delay
	abort   bool          // SetLinger(0): close with a reset, nothing more written
	closing bool          // Close was called
}

// readEOF reports whether err is gnet's report of a read that returned
// EOF: the peer shut down its sending side (or closed the connection).
func readEOF(err error) bool {
	var se *os.SyscallError
	return errors.As(err, &se) && se.Syscall == "read" && errors.Is(err, io.EOF)
}

// halfClose is called from the client connection of s's OnClose when the peer
// ended it (err is the reason gnet gives). If the session has work Redis
// would still do (requests unprocessed or unanswered, bytes queued for
// Redis, an opaque connection whose replies Cicada does not count), it
// replaces the client connection by a halfConn and reports true: the
// session lives on until Redis closes the upstream connection. Replies
// reach the client only after a read EOF, and only if gnet had written
// every earlier reply (Redis too drops what a client has not taken when
// it frees it).
func halfClose(s *session, c gnet.Conn, err error) bool {
	if s.closing() || s.released() || s.srv.draining.Load() {
		return false
	}
	s.settleNow() // a hit held for the settle pass: answered now, or pending
	in := c.InboundBuffered()
	pending := in > 0 || s.sent.len() > 0 || s.opacity != framed || (s.up != nil && s.up.OutboundBuffered() > 0)
	if !pending {
		return false
	}
	h := &halfConn{s: s, el: c.EventLoop(), addr: c.RemoteAddr(), fd: -1}
	if readEOF(err) {
		_ = c.Flush() // what gnet still holds for the client; it drops the rest
		if c.OutboundBuffered() == 0 {
			if fd, derr := c.Dup(); derr == nil {
				h.fd = fd
			}
		}
	}
	if in > 0 {
		buf, _ := c.Peek(-1)
		h.in = append([]byte(nil), buf...)
	}
	s.client, s.life = h, clientHalf
	h.progress()
	return true
}

// progress forwards what the half-closed client sent, once the
// upstream connection is up: requests as usual until one would pause,
// then the rest of its bytes unframed (a paused request, an incomplete
// one, which Redis sees incomplete too), and shuts the upstream
// connection down for writing: Redis reads the EOF the client sent.
//
// A client on a lane waits for its replies on the lane. If it has
// nothing more to send, the session ends then (Redis frees a client
// once it has read its EOF); otherwise it gets a connection of its own,
// which takes the rest and reads the EOF, as the client's own would have.
func (h *halfConn) progress() {
	s := h.s
	s.sticky = true // it stays on its own connection, which reads the EOF
	if s.shared {
		if s.closing() || s.released() || s.sent.len() > 0 || s.pause == pauseRoute {
			return // its replies on the lane first: repliesIn comes back here
		}
		if s.upLife == upNone && s.pause == pauseNone && h.off == len(h.in) && s.partial == nil {
			// Every request was answered and nothing is left to send: a
			// connection of its own would read the EOF now, and Redis free
			// the client, dropping the replies its socket did not take.
			// Dialing one just to shut it would leave the client reading
			// the rest meanwhile.
			s.upstreamEnded()
			return
		}
		s.el.pin(s) // onUpstreamOpen, or the setup's replies, come back here
	}
	if s.closing() || s.upLife != upOpen || s.srv.draining.Load() || s.pause == pauseSetup || s.pause == pauseRoute {
		return
	}
	if s.pause == pauseNone {
		s.processClient()
	}
	if s.closing() || s.upLife != upOpen {
		return
	}
	if s.pause != pauseNone {
		// The pause waits for a reply that may never come (a BLPOP 0
		// before a SELECT), or for an ACL lookup; Redis would read the EOF
		// meanwhile and free the client. So the rest goes now, unframed:
		// replies to what was sent before it are framed as usual, the
		// rest pass through (no cache answers for this client any more).
		s.pause = pauseNone
		s.pushOpaque()
	}
	rest := h.in[h.off:]
	if s.partial != nil { // a request in progress moved out of the buffer
		rest = s.partial
	}
	if len(rest) > 0 && s.input == inputOpen {
		// Redis reads nothing after QUIT or a protocol error.
		s.lastForward = s.srv.clock.Load()
		_, _ = s.up.Write(rest)
	}
	h.in, h.off, s.partial = nil, 0, nil
	h.shutUpstream()
}

// shutUpstream shuts the upstream connection down for writing once gnet
// has sent Redis every byte queued for it, polling until then (gnet has
// no "drained" callback): a byte written after the shutdown would fail
// and close the connection.
func (h *halfConn) shutUpstream() {
	s := h.s
	if s.released() || s.upLife != upOpen {
		return
	}
	if s.up.OutboundBuffered() > 0 {
		h.after(h.shutUpstream)
		return
	}
	s.upLife = upShut
	_ = unix.Shutdown(s.up.Fd(), unix.SHUT_WR)
}

// after runs f on the event loop after a delay that doubles from 1 ms to
// 100 ms with each call, for polls.
func (h *halfConn) after(f func()) {
	h.wait = min(max(2*h.wait, time.Millisecond), 100*time.Millisecond)
	time.AfterFunc(h.wait, func() {
		_ = h.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			f()
			return nil
		}))
	})
}

// Peek returns the unprocessed requests (n is ignored: the session asks
// for everything). Valid until Discard.
func (h *halfConn) Peek(int) ([]byte, error) { return h.in[h.off:], nil }

// Discard marks n bytes of the requests processed.
func (h *halfConn) Discard(n int) (int, error) {
	h.off = min(h.off+n, len(h.in))
	return n, nil
}

// InboundBuffered is how many bytes of requests are not processed yet.
func (h *halfConn) InboundBuffered() int { return len(h.in) - h.off }

// OutboundBuffered is how many bytes of replies wait for the socket.
func (h *halfConn) OutboundBuffered() int { return len(h.out) }

// Write sends p to the client, or queues it behind replies still waiting.
func (h *halfConn) Write(p []byte) (int, error) {
	if h.fd < 0 || h.abort {
		return len(p), nil // replies are dropped
	}
	h.out = append(h.out, p...)
	h.flush()
	return len(p), nil
}

// Writev is Write of each slice in turn.
func (h *halfConn) Writev(bs [][]byte) (int, error) {
	n := 0
	for _, b := range bs {
		m, _ := h.Write(b)
		n += m
	}
	return n, nil
}

// flush writes the waiting replies until the socket takes no more; then
// it retries on a timer. A failed write (the client is gone) drops them
// and every later reply.
func (h *halfConn) flush() {
	for len(h.out) > 0 && h.fd >= 0 {
		n, err := unix.Write(h.fd, h.out)
		if n > 0 {
			h.out = h.out[n:]
		}
		switch {
		case err == unix.EAGAIN:
			if !h.polling {
				h.polling = true
				h.after(func() { h.polling = false; h.flush() })
			}
			return
		case err != nil:
			h.closeFD()
			return
		}
	}
	if len(h.out) == 0 {
		h.out, h.wait = nil, 0
	}
}

// SetLinger sets SO_LINGER on the client's socket; 0 (a limit closes the
// client) also drops every waiting and later reply.
func (h *halfConn) SetLinger(sec int) error {
	if sec == 0 {
		h.abort = true
	}
	if h.fd < 0 {
		return nil
	}
	return unix.SetsockoptLinger(h.fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: int32(sec)})
}

// Close ends the session on the loop, after the current callback (as
// gnet's Close does): one last attempt to write what waits unless
// aborted, the socket closed, and the session torn down.
func (h *halfConn) Close() error {
	if h.closing {
		return nil
	}
	h.closing = true
	finish := func() {
		if !h.abort {
			h.polling = true // no more retries
			h.flush()
		}
		h.closeFD()
		h.s.finishClose()
	}
	err := h.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		finish()
		return nil
	}))
	if err != nil {
		finish() // the engine is stopping: on the loop already, in its last callbacks
	}
	return nil
}

// closeFD closes the duplicate descriptor once; later replies are
// dropped.
func (h *halfConn) closeFD() {
	if h.fd >= 0 {
		_ = unix.Close(h.fd)
	}
	h.fd, h.out = -1, nil
}

// Wake runs callback on the loop, as gnet.Conn.Wake does (without an
// OnTraffic: nothing more is read from this client).
func (h *halfConn) Wake(callback gnet.AsyncCallback) error {
	return h.el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
		return callback(nil, nil)
	}))
}

// RemoteAddr is the client's address.
func (h *halfConn) RemoteAddr() net.Addr { return h.addr }
