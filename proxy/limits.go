package proxy

import (
	"cmp"
	"runtime"
	"slices"

	"go.uber.org/zap"
)

// closeReason is why Cicada closed a client connection itself.
type closeReason int

const (
	closeQueryBuffer  closeReason = iota // client-query-buffer-limit
	closeOutputBuffer                    // Redis's client-output-buffer-limit
	closeClientMemory                    // max-client-memory
	closeMaxClients                      // maxclients, at accept
	closeReasons
)

var closeReasonNames = [closeReasons]string{"query-buffer-limit", "output-buffer-limit", "max-client-memory", "maxclients"}

func (r closeReason) String() string { return closeReasonNames[r] }

// heavyBytes is how much a connection must hold (see holding) to be
// counted against max-client-memory; lighter connections are not tracked.
const heavyBytes = 64 << 10

// backlog is what the client's requests hold in Cicada once parsed and
// until Redis answers them: the bytes queued on its upstream connection
// (gnet's outbound buffer, which grows while Redis does not read, as
// during a long script), or those it wrote on a lane that owes it replies
// (laneSent), and the bookkeeping of every request forwarded
// and not yet answered (its request, 72 bytes, and what it follows). Redis
// would hold those requests unread in its socket, or read and not yet
// processed in its query buffer: the backlog counts towards
// client-query-buffer-limit as well as max-client-memory.
func (s *session) backlog() int64 {
	b := int64(s.sent.cap())*requestBytes + int64(s.writes.cap())*stripeBytes + s.readBytes +
		int64(cap(s.tx.effects))*txEffectBytes + s.tx.keyBytes + int64(cap(s.tx.acts))*queuedActBytes +
		int64(cap(s.tx.stripes))*stripeBytes + int64(cap(s.rewriteBuf))
	if s.up != nil && s.upLife != upClosed {
		b += int64(s.up.OutboundBuffered())
	}
	return b + s.laneSent
}

// holding is everything Cicada holds for the client: replies it has not
// read, requests not yet parsed, and the backlog.
func (s *session) holding() int64 {
	return int64(s.client.OutboundBuffered()+s.inbound()) + s.backlog()
}

// sumEvery is how many bytes the loop's heavy connections may grow by
// before their holdings are summed again.
const sumEvery = 1 << 20

// closeFor closes the client for exceeding a limit, as Redis does: at
// once, unsent replies dropped, with a log line.
//
// Redis drops the replies it has not written (it evicts or applies an
// output limit before it writes a batch's replies, so an evicted client
// of a pipeline gets none). Cicada has written some to the socket by
// then: up to the send buffer the kernel grew for it (4 MB on loopback),
// and gnet writes what it can of its own buffer when it closes. A
// graceful close would deliver all of that; an abortive one (SO_LINGER
// 0, so close sends a reset) discards it, and the client gets only what
// had already reached its own receive buffer, then ECONNRESET.
func (s *session) closeFor(why closeReason, held int64) {
	if s.closing() {
		return
	}
	s.srv.closedFor[why].Add(1)
	s.evicted = why == closeClientMemory
	s.srv.log.Warn("closing client", zap.Stringer("reason", why),
		zap.String("client", s.client.RemoteAddr().String()), zap.Int64("bytes", held))
	s.life = clientClosing
	_ = s.client.SetLinger(0)
	_ = s.client.Close() // its buffers stay counted in loop.heavy until release
}

// checkOutput applies Redis's client-output-buffer-limit of the client's
// class to the replies it has not read (Cicada's outbound buffer for it,
// where Redis's own output buffer would hold them had it sent them to the
// client directly), after a write. Redis's rule (networking.c,
// checkClientOutputBufferLimits): at or over the hard limit, close; at or
// over the soft limit for longer than its seconds, close. It then charges
// the client's holdings to max-client-memory. Reports whether the client
// was closed.
func (s *session) checkOutput() bool {
	out := s.client.OutboundBuffered()
	if out == 0 && s.held == 0 && cap(s.rewriteBuf) < heavyBytes {
		s.softSince = 0
		return false // the common case: gnet wrote everything at once
	}
	if out > 0 {
		hard, soft, softFor := s.srv.settings.OutputLimit(s.subscribed() || s.opaquePubsub)
		n := int64(out)
		switch {
		case hard > 0 && n >= hard:
			s.closeFor(closeOutputBuffer, n)
			return true
		case soft > 0 && n >= soft:
			now := s.srv.clock.Load() + 1 // never 0, which means unset
			if s.softSince == 0 {
				s.softSince = now
			} else if now-s.softSince > int64(softFor) {
				s.closeFor(closeOutputBuffer, n)
				return true
			}
		default:
			s.softSince = 0
		}
	}
	return s.chargeMemory()
}

// chargeMemory tracks the client's holdings (see holding) against
// max-client-memory, as Redis 7's client eviction does.
// When the loop's heavy connections have grown by sumEvery since they were
// last summed, it sums them (connections being closed too: gnet frees
// their buffers only once the close runs) into the server's total over
// all loops (clientHeld); over the bound, it closes this loop's open connections holding
// the most until the total fits. While the total is over the bound, a
// heavy connection that grows is closed at once. Reports whether s was
// closed.
func (s *session) chargeMemory() bool {
	budget := s.srv.cfg.MaxClientMemory
	if budget <= 0 || s.closing() {
		return false
	}
	l := s.el
	held := s.holding()
	grew := held > s.held
	if grew {
		l.grown += held - s.held
	}
	if _, ok := l.heavy[s]; ok {
		l.addHeld(s.srv, held-s.held)
	} else if held >= heavyBytes {
		l.heavy[s] = struct{}{}
		l.addHeld(s.srv, held)
	}
	s.held = held
	if held < heavyBytes {
		return false
	}
	if grew && s.srv.clientHeld.Load() > budget {
		s.closeFor(closeClientMemory, held)
		return true
	}
	if l.grown < sumEvery {
		return false
	}
	l.grown = 0
	var open []*session
	var sum int64
	for h := range l.heavy {
		if !h.closing() {
			h.held = h.holding()
			if h.held < heavyBytes {
				delete(l.heavy, h)
				continue
			}
			open = append(open, h)
		}
		sum += h.held
	}
	l.addHeld(s.srv, sum-l.held)
	total := s.srv.clientHeld.Load()
	if total <= budget {
		return false
	}
	slices.SortFunc(open, func(a, b *session) int { return cmp.Compare(b.held, a.held) })
	for _, h := range open {
		if total <= budget {
			break
		}
		total -= h.held
		h.closeFor(closeClientMemory, h.held)
	}
	return s.closing()
}

// untrack stops counting s against max-client-memory in its loop; at its
// client connection's OnClose, when gnet releases its buffers. What a
// client closed for max-client-memory held stays in the server's total
// until collected (Server.collected).
func (s *session) untrack() {
	l := s.el
	if _, ok := l.heavy[s]; ok {
		delete(l.heavy, s)
		if s.evicted && s.held >= sumEvery {
			l.held -= s.held
			s.srv.collected(s.held)
		} else {
			l.addHeld(s.srv, -s.held)
		}
	}
}

// collected keeps n bytes, released by a client closed for
// max-client-memory, in clientHeld until a garbage collection started
// after their release has ended, on a goroutine of its own (one at a
// time; bytes released meanwhile wait for the next).
//
// Go frees nothing at a close: the released buffers are garbage, or
// parked in gnet's buffer pools (sync.Pool, emptied by collections),
// until a collection, and the next is due when the heap has doubled. Let
// go at once, the bytes let the next client that reads nothing fill the
// whole bound again on top of them: with one loop, RSS peaked at 387-561
// MB against a 256 MB bound (TestSlowReaderFlood, CICADA_LOOPS=1), and
// each client in turn grew to the bound, the loop copying 256 MB for it
// while a client reading a small key waited 50 ms to 4 s. Kept until
// collected, every heavy client that grows meanwhile is closed at once
// (chargeMemory): RSS 285-303 MB, the small key's p50 0.11-0.14 ms, one
// loop or two (test/resources, 2026-12-07). A client that closes on its
// own, or held less than sumEvery, is let go at once: a collection per
// close would cost more than its bytes.
//
// Safe from any goroutine.
func (srv *Server) collected(n int64) {
	srv.uncollected.Add(n)
	if !srv.collecting.CompareAndSwap(false, true) {
		return
	}
	go func() {
		for {
			n := srv.uncollected.Swap(0)
			runtime.GC()
			srv.clientHeld.Add(-n)
			srv.collecting.Store(false)
			if srv.uncollected.Load() == 0 || !srv.collecting.CompareAndSwap(false, true) {
				return
			}
		}
	}()
}
