package proxy

import (
	"cmp"
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

// untrack stops counting s against max-client-memory; at its client
// connection's OnClose, when gnet frees its buffers.
func (s *session) untrack() {
	l := s.el
	if _, ok := l.heavy[s]; ok {
		delete(l.heavy, s)
		l.addHeld(s.srv, -s.held)
	}
}
