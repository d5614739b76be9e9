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

// heavyBytes is how much a connection must hold (unread replies plus
// unparsed requests) to be counted against max-client-memory; lighter
// connections are not tracked.
const heavyBytes = 64 << 10

// sumEvery is how many bytes the loop's heavy connections may grow by
// before their holdings are summed again.
const sumEvery = 1 << 20

// closeFor closes the client for exceeding a limit, as Redis does: at
// once, unsent replies dropped, with a log line.
func (s *session) closeFor(why closeReason, held int) {
	if s.closed {
		return
	}
	s.srv.closedFor[why].Add(1)
	s.srv.log.Warn("closing client", zap.Stringer("reason", why),
		zap.String("client", s.client.RemoteAddr().String()), zap.Int("bytes", held))
	s.closed = true
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
	if out == 0 && s.held == 0 {
		s.softSince = 0
		return false // the common case: gnet wrote everything at once
	}
	if out > 0 {
		hard, soft, softFor := s.srv.fencer.OutputLimit(s.subscribed() || s.opaquePubsub)
		n := int64(out)
		switch {
		case hard > 0 && n >= hard:
			s.closeFor(closeOutputBuffer, out)
			return true
		case soft > 0 && n >= soft:
			now := s.srv.clock.Load() + 1 // never 0, which means unset
			if s.softSince == 0 {
				s.softSince = now
			} else if now-s.softSince > int64(softFor) {
				s.closeFor(closeOutputBuffer, out)
				return true
			}
		default:
			s.softSince = 0
		}
	}
	return s.chargeMemory()
}

// chargeMemory tracks the client's holdings (unread replies, unparsed
// requests) against max-client-memory, as Redis 7's client eviction does.
// When the loop's heavy connections have grown by sumEvery since they were
// last summed, it sums them (connections being closed too: gnet frees
// their buffers only once the close runs) into the server's total over
// all loops (clientHeld); over the bound, it closes this loop's open connections holding
// the most until the total fits. While the total is over the bound, a
// heavy connection that grows is closed at once. Reports whether s was
// closed.
func (s *session) chargeMemory() bool {
	budget := s.srv.cfg.MaxClientMemory
	if budget <= 0 || s.closed {
		return false
	}
	l := s.loop
	held := int64(s.client.OutboundBuffered() + s.inbound())
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
		s.closeFor(closeClientMemory, int(held))
		return true
	}
	if l.grown < sumEvery {
		return false
	}
	l.grown = 0
	var open []*session
	var sum int64
	for h := range l.heavy {
		if !h.closed {
			h.held = int64(h.client.OutboundBuffered() + h.inbound())
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
		h.closeFor(closeClientMemory, int(h.held))
	}
	return s.closed
}

// untrack stops counting s against max-client-memory; at its client
// connection's OnClose, when gnet frees its buffers.
func (s *session) untrack() {
	l := s.loop
	if _, ok := l.heavy[s]; ok {
		delete(l.heavy, s)
		l.addHeld(s.srv, -s.held)
	}
}

// addHeld changes what the loop's heavy clients hold by d bytes, in the
// loop's count and in the server's total over all loops.
func (l *loopState) addHeld(srv *Server, d int64) {
	l.held += d
	srv.clientHeld.Add(d)
}
