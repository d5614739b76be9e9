package proxy

import (
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
//	forwarded    ──► an hkReq rides on its request; request bytes and the time
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

// The pool of spare hot-key records per loop: at most hkFreeMax records,
// each with a key buffer of at most hkFreeKeyMax bytes.
const (
	hkFreeMax    = 1024
	hkFreeKeyMax = 256
)

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
