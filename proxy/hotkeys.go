package proxy

import (
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/cicada-proxy/cicada/command"
	"github.com/cicada-proxy/cicada/hotkeys"
)

// HOTKEYS, answered by Cicada.
//
// While a session is active (hotkeys.Tracker.On, the request path's only
// question otherwise), every complete request with one key is counted on
// its event loop:
//
//	local answer ──► request bytes + reply bytes, event-loop time from the
//	                 parsed request to the appended reply ──► Tracker.Record
//	forwarded    ──► an hkReq rides on its slot; request bytes and the time
//	                 to decide, then the reply's bytes and the time to frame
//	                 and settle it (onUpstreamTraffic) ──► Tracker.Record
//
// Times are measured only on sampled requests (hotkeys.Ticket.Sampled):
// they are Cicada's own cost, not Redis's. Keys are GET's and HGET's and,
// from the command table, those of any command with exactly one key
// (First == Last); a key too long to capture (over 4 KiB) is not counted.
// Commands queued in MULTI count with their +QUEUED reply.

// hkReq is the hot-key record of one forwarded request: owned by its
// session's event loop, pooled in loopState.hkFree.
type hkReq struct {
	tk  hotkeys.Ticket
	key []byte // a copy: the parser's buffer is reused
	net uint64 // request and reply bytes so far
	ns  int64  // event-loop time so far (sampled only)
}

// hkKey returns the key a HOTKEYS session counts a request under, or nil:
// GET's and HGET's key, or the key of a command with exactly one (by its
// legacy key positions; cmds adds the server's commands the built-in table
// lacks, such as HSETEX).
func hkKey(cmds *command.Learned, args [][]byte, argc int64) []byte {
	if len(args) < 2 || int64(len(args)) != argc {
		return nil
	}
	if command.EqualFold(args[0], "get") || command.EqualFold(args[0], "hget") {
		return args[1]
	}
	spec := cmds.Resolve(args)
	if spec == nil || !spec.ArityOK(int(argc)) || spec.First <= 0 || spec.First != spec.Last || spec.First >= len(args) {
		return nil
	}
	if spec.Flags&command.FlagPubSub != 0 {
		return nil // SPUBLISH's shard channel: a key spec flagged not_key, which Redis does not count
	}
	return args[spec.First]
}

// onRequest decides a complete request: HOTKEYS, which Cicada answers
// itself (onHotkeys), or whatever the conversation decides (onCommand).
func (s *session) onRequest(n int) decision {
	if args := s.parser.Args(); len(args) > 0 && hotkeys.Is(args[0]) {
		if d, ok := s.onHotkeys(args, s.parser.Argc()); ok {
			return d
		}
	}
	return s.onCommand(n)
}

// onRequestCounted is onRequest while a HOTKEYS session is active: it
// counts the request (see above) around the same decision.
func (s *session) onRequestCounted(n int) decision {
	args, argc := s.parser.Args(), s.parser.Argc()
	key := hkKey(s.srv.settings.Commands(), args, argc)
	if key == nil {
		return s.onRequest(n)
	}
	l := s.loop
	tk, ok := s.srv.hk.Begin(l.idx)
	if !ok {
		return s.onRequest(n)
	}
	var t0 time.Time
	if tk.Sampled {
		t0 = time.Now()
	}
	outBefore, slotsBefore := len(l.out), s.slots.len()
	d := s.onRequest(n)
	var ns int64
	if tk.Sampled {
		ns = int64(time.Since(t0))
	}
	switch d {
	case decidePause:
		return d // counted when it is parsed again
	case decideLocal:
		s.srv.hk.Record(l.idx, tk, key, uint64(n+len(l.out)-outBefore), ns)
		return d
	}
	if s.slots.len() > slotsBefore {
		if sl := s.slots.at(slotsBefore); sl.kind == slotReply {
			var r *hkReq
			if k := len(l.hkFree); k > 0 {
				r, l.hkFree = l.hkFree[k-1], l.hkFree[:k-1]
			} else {
				r = &hkReq{}
			}
			r.tk, r.key, r.net, r.ns = tk, append(r.key[:0], key...), uint64(n), ns
			sl.hk = r
			return d
		}
	}
	// No reply Cicada follows (an opaque connection): the request only.
	s.srv.hk.Record(l.idx, tk, key, uint64(n), ns)
	return d
}

// hkFrameDone runs when a frame read while the head request had a record
// ends; t0 is when its last chunk started to be framed. If the frame
// settled the request, the request is recorded with the reply's bytes and
// time; if not (a RESP2 pub/sub message came first), the frame is not the
// key's and is forgotten.
func (s *session) hkFrameDone(r *hkReq, t0 time.Time) {
	if r.tk.Sampled {
		s.hkNs += int64(time.Since(t0))
	}
	bytes, ns := s.hkBytes, s.hkNs
	s.hkFrame, s.hkBytes, s.hkNs = nil, 0, 0
	if s.slots.len() > 0 && s.slots.front().hk == r {
		return // still waiting for its reply
	}
	r.net += bytes
	r.ns += ns
	l := s.loop
	s.srv.hk.Record(l.idx, r.tk, r.key, r.net, r.ns)
	// The pool keeps what a steady stream reuses, not what a burst of
	// requests in flight (or of long keys) once needed.
	if len(l.hkFree) < hkFreeMax && cap(r.key) <= hkFreeKeyMax {
		l.hkFree = append(l.hkFree, r)
	}
}

// The pool of spare hot-key records per loop: at most hkFreeMax records,
// each with a key buffer of at most hkFreeKeyMax bytes.
const (
	hkFreeMax    = 1024
	hkFreeKeyMax = 256
)

// onHotkeys answers HOTKEYS, or ok=false to forward it: inside MULTI
// (Cicada cannot put its reply inside EXEC's), in RESP2 subscribed mode
// (Redis refuses it there), on an opaque connection, when an argument is
// beyond what the parser captured, or when part of it already went to
// Redis (a header of more than 10 arguments, a streamed argument). A HOTKEYS behind unanswered replies
// waits for them, like a cached GET.
//
// Order of checks, as Redis's processCommand: subcommand and arity
// (hotkeys.Lookup), authentication and ACL (permission, answered from
// permCache or after an ACL GETUSER lookup that pauses the connection),
// then the subcommand itself.
func (s *session) onHotkeys(args [][]byte, argc int64) (decision, bool) {
	if int64(len(args)) != argc || (argc >= 2 && args[1] == nil) || s.parser.Consumed() ||
		s.sendMulti || s.opacity != framed || (s.proto == 2 && s.subscribed()) {
		return 0, false // Consumed: part of it went to Redis already
	}
	if s.slots.len() > 0 {
		return decidePause, true
	}
	l := s.loop
	sub, out, ok := hotkeys.Lookup(l.out, args, argc)
	l.out = out
	if !ok {
		return decideLocal, true
	}
	if s.srv.cfg.ACLUser != nil {
		if s.userAnon {
			l.out = append(l.out, "-ERR Cicada cannot check HOTKEYS against this connection's ACL user: its name was not seen\r\n"...)
			return decideLocal, true
		}
		name, fresh := s.user, s.user == ""
		if fresh {
			name = "default"
		}
		u, err, ready := s.srv.perms.lookup(s, name)
		if !ready {
			s.aclWait = true
			return decidePause, true
		}
		s.aclWait = false
		if err != nil {
			l.out = append(l.out, "-ERR Cicada could not check HOTKEYS against the connection's ACL user: "...)
			l.out = append(l.out, oneLine(err.Error())...)
			l.out = append(l.out, '\r', '\n')
			return decideLocal, true
		}
		if p := hotkeys.Check(u, fresh, sub); p != hotkeys.Allowed {
			l.out = hotkeys.AppendDenied(l.out, p, name, sub)
			return decideLocal, true
		}
	}
	l.out = s.srv.hk.Execute(l.out, sub, args, s.proto)
	return decideLocal, true
}

// aclLooked runs on the loop when the ACL lookup this connection waited
// for is done: it parses the HOTKEYS request again (answered from the
// cache now, or with the lookup's error).
func (s *session) aclLooked(gnet.Conn, error) error {
	if s.aclWait && s.paused && s.slots.len() == 0 && !s.closed && !s.gone && !s.srv.draining.Load() {
		s.paused = false
		if _, half := s.client.(*halfConn); half {
			s.halfProgress()
		} else {
			s.processClient()
		}
	}
	return nil
}

// oneLine replaces CR and LF, which an error reply cannot carry.
func oneLine(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '\r' || c == '\n' {
			b[i] = ' '
		}
	}
	return string(b)
}

// Hotkeys returns the process's HOTKEYS state (for the admin endpoint and
// tests). Safe from any goroutine.
func (srv *Server) Hotkeys() *hotkeys.Tracker { return srv.hk }
