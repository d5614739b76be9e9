package command

import "strings"

// Share says whether a request may travel on an upstream connection
// shared by clients whose connections are in one state (a lane of the
// proxy): whether it reads or changes state that belongs to the
// connection that sends it.
type Share uint8

const (
	// ShareAny: it reads and changes no state of its connection (data
	// commands that cannot block, PING, INFO, CONFIG, scripts, ...): any
	// connection in the client's state answers it as the client's own
	// would.
	ShareAny Share = iota
	// ShareSwitch: SELECT db and HELLO protover (no option) change only
	// the db or the protocol; sent on a connection already in the state
	// they ask for, they change nothing there and get the reply the
	// client's own connection would give.
	ShareSwitch
	// ShareNone: it needs or creates state of its own connection
	// (transactions, WATCH, subscriptions, blocking, AUTH, RESET, CLIENT
	// subcommands, READONLY, ASKING, WAIT, MONITOR, replication, QUIT, an
	// unknown command): only the client's own connection carries it.
	ShareNone
)

// ownNames are commands with no ConnEffect that still belong to their
// connection: WATCH and UNWATCH (watched keys), ASKING (a flag for the
// next command), WAIT and WAITAOF (they wait for the connection's own
// writes), SCRIPT DEBUG (the connection's scripts run in the debugger;
// SYNC blocks Redis until it ends), DEBUG (PROTOCOL answers with a push,
// SLEEP blocks, and the rest is for a debugging connection).
var ownNames = map[string]bool{"watch": true, "unwatch": true, "asking": true, "wait": true, "waitaof": true,
	"script|debug": true, "debug": true}

// Sharing says whether the request args (argc arguments; args as the
// parser captured them, nil where not captured) with spec s (nil: a
// command the table cannot classify) may travel on a shared connection.
// Wrong arity and invalid arguments that Redis refuses without a state
// change are ShareAny where the command could change its connection's
// state only when valid (SELECT, HELLO).
func (s *Spec) Sharing(args [][]byte, argc int64) Share {
	if s == nil {
		return ShareNone
	}
	switch s.Conn {
	case ConnNone, ConnAuthRules, ConnClusterChange:
	case ConnSetName, ConnSetInfo:
		// What the connection reports of its client (CLIENT LIST, CLIENT
		// INFO): the proxy keeps it for the client and sets it on the
		// client's own connection when it gets one, if it could capture it.
		if int64(len(args)) != argc || args[len(args)-1] == nil {
			return ShareNone
		}
		return ShareAny
	case ConnSelect:
		if !s.ArityOK(int(argc)) || len(args) < 2 || args[1] == nil {
			return ShareAny
		}
		return ShareSwitch
	case ConnHello:
		switch {
		case argc == 1:
			return ShareAny // the connection's own protocol, unchanged
		case argc == 2 && len(args) == 2 && args[1] != nil:
			return ShareSwitch
		}
		return ShareNone // AUTH or SETNAME options
	default:
		return ShareNone
	}
	switch {
	case ownNames[s.Name]:
		return ShareNone
	case strings.HasPrefix(s.Name, "client|") || s.Name == "client":
		return ShareNone
	case s.Flags&FlagBlocking != 0:
		if (s.Name == "xread" || s.Name == "xreadgroup") && !mayBlock(args, argc) {
			return ShareAny // no BLOCK option: answered at once
		}
		return ShareNone
	}
	return ShareAny
}

// UnknownSharing says whether a request the table cannot resolve (nil
// spec) may travel on a shared connection: a subcommand unknown to a
// command with subcommands (CLIENT SETINFO before Redis 7.2, say) is
// refused by Redis without a state change, ShareAny; anything else may be
// a module's and may do anything, ShareNone.
func UnknownSharing(args [][]byte) Share {
	if len(args) > 1 {
		if s := Resolve(args[:1]); s != nil && s.container {
			return ShareAny
		}
	}
	return ShareNone
}

// mayBlock reports whether an XREAD or XREADGROUP may have a BLOCK
// option before STREAMS: its options (XREADGROUP's GROUP group consumer
// first, then COUNT n, BLOCK ms, NOACK) are read in order as Redis reads
// them; an argument not captured, or one that is no option, may be
// anything.
func mayBlock(args [][]byte, argc int64) bool {
	arg := func(i int) []byte {
		if i >= len(args) || i >= int(argc) {
			return nil
		}
		return args[i]
	}
	i := 1
	if EqualFold(args[0], "xreadgroup") {
		if a := arg(1); a == nil || !EqualFold(a, "group") || arg(2) == nil || arg(3) == nil {
			return true
		}
		i = 4
	}
	for ; i < int(argc); i++ {
		a := arg(i)
		switch {
		case a == nil:
			return true
		case EqualFold(a, "streams"):
			return false
		case EqualFold(a, "count"):
			i++ // its value
		case EqualFold(a, "noack"):
		default:
			return true // BLOCK, or nothing Redis takes before STREAMS
		}
	}
	return true // no STREAMS: refused, but it may be anything
}
