package hotkeys

import (
	"strconv"
	"time"

	"github.com/cicada-proxy/cicada/resp"
)

// Sub is a HOTKEYS subcommand.
type Sub uint8

// The subcommands of Redis 8.6's HOTKEYS (HELP since 8.6.1).
const (
	SubStart Sub = iota + 1
	SubStop
	SubGet
	SubReset
	SubHelp
)

var subNames = [...]string{SubStart: "start", SubStop: "stop", SubGet: "get", SubReset: "reset", SubHelp: "help"}

// FullName is the subcommand's name as Redis reports it in errors:
// "hotkeys|start" and so on.
func (s Sub) FullName() string { return "hotkeys|" + subNames[s] }

// Categories are the subcommand's ACL categories in Redis 8.6: START,
// STOP, GET and RESET are @admin @slow @dangerous (the ADMIN flag implies
// @admin and @dangerous, no FAST flag implies @slow); HELP is @slow.
func (s Sub) Categories() []string {
	if s == SubHelp {
		return []string{"slow"}
	}
	return []string{"admin", "slow", "dangerous"}
}

// Is reports whether args[0] is HOTKEYS (any case). Cheap; no allocation.
func Is(arg0 []byte) bool { return len(arg0) == 7 && equalFold(arg0, "hotkeys") }

// Lookup resolves a HOTKEYS command as Redis 8.6's command table does,
// before anything else looks at it. It returns the subcommand, or the
// error reply Redis gives (bytes appended to dst, ok=false): a bare
// HOTKEYS and a subcommand with the wrong number of arguments get
// "-ERR wrong number of arguments for 'hotkeys|get' command" (arity: START
// -2, the others 2; the container -2), an unknown subcommand gets
// "-ERR unknown subcommand '<sub>'. Try HOTKEYS HELP." (server.c
// commandCheckExistence: the name cut at 128 bytes, CR and LF made spaces,
// argv[0] upper-cased as the client wrote it). args[0] and args[1] must be
// captured (non-nil); argc counts all arguments.
func Lookup(dst []byte, args [][]byte, argc int64) (sub Sub, reply []byte, ok bool) {
	if argc < 2 {
		return 0, appendErr(dst, "ERR wrong number of arguments for 'hotkeys' command"), false
	}
	for s := SubStart; s <= SubHelp; s++ {
		if equalFold(args[1], subNames[s]) {
			sub = s
		}
	}
	if sub == 0 {
		name := args[1]
		if len(name) > 128 {
			name = name[:128]
		}
		dst = append(dst, "-ERR unknown subcommand '"...)
		for _, c := range name {
			if c == '\r' || c == '\n' {
				c = ' '
			}
			dst = append(dst, c)
		}
		dst = append(dst, "'. Try "...)
		for _, c := range args[0] {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
		}
		return 0, append(dst, " HELP.\r\n"...), false
	}
	if sub != SubStart && argc != 2 {
		return 0, appendErr(dst, "ERR wrong number of arguments for '"+sub.FullName()+"' command"), false
	}
	return sub, dst, true
}

// Execute runs a resolved HOTKEYS subcommand and appends its reply in the
// connection's protocol (2 or 3): what hotkeysCommand in Redis 8.6's
// src/hotkeys.c replies, in the same order of checks. args are the whole
// command (args[0] = "HOTKEYS"); an argument too long to capture is nil and
// matches no keyword or number (none of them is that long).
func (t *Tracker) Execute(dst []byte, sub Sub, args [][]byte, proto int) []byte {
	switch sub {
	case SubHelp:
		return appendHelp(dst, args[0])
	case SubStart:
		// The session check comes before the arguments', as in Redis.
		if t.On() {
			return appendErr(dst, "ERR "+ErrActive.Error())
		}
		o, msg := ParseStart(args)
		if msg != "" {
			return appendErr(dst, "ERR "+msg)
		}
		if err := t.Start(o); err != nil {
			return appendErr(dst, "ERR "+err.Error())
		}
		return append(dst, "+OK\r\n"...)
	case SubStop:
		if !t.Stop() {
			return appendNull(dst, proto)
		}
		return append(dst, "+OK\r\n"...)
	case SubReset:
		if err := t.Reset(); err != nil {
			return appendErr(dst, "ERR "+err.Error())
		}
		return append(dst, "+OK\r\n"...)
	case SubGet:
		r, ok := t.Report()
		if !ok {
			return appendNull(dst, proto)
		}
		return AppendReport(dst, &r, proto)
	}
	return dst
}

// ParseStart validates the arguments of HOTKEYS START (args[2:]) in Redis
// 8.6's order, with its messages (without "ERR "): METRICS first, its count
// 1..2, each counted token CPU or NET at most once (an unknown token counts
// but is not a metric), then COUNT, DURATION, SAMPLE and SLOTS in any order
// (a later one wins; each needs a value). A non-cluster server refuses
// SLOTS, and Cicada is not in cluster mode. Numbers are parsed like
// Redis's string2ll: no sign but '-', no leading zeros, at most 20 bytes.
func ParseStart(args [][]byte) (Options, string) {
	o := Options{Count: DefaultCount, Sample: 1}
	argc := len(args)
	if argc < 4 || !equalFold(args[2], "metrics") {
		return o, "METRICS parameter is required"
	}
	n, ok := resp.ParseInt(args[3])
	if !ok || n < 1 || n > 2 {
		return o, "METRICS count must be > 0 and <= 2"
	}
	j, parsed := 4, int64(0)
	for ; j < argc && parsed < n; j, parsed = j+1, parsed+1 {
		switch {
		case equalFold(args[j], "cpu"):
			if o.Metrics&CPU != 0 {
				return o, "METRICS CPU defined more than once!"
			}
			o.Metrics |= CPU
		case equalFold(args[j], "net"):
			if o.Metrics&NET != 0 {
				return o, "METRICS NET defined more than once!"
			}
			o.Metrics |= NET
		}
	}
	if parsed != n {
		return o, "METRICS count does not match number of metric types provided"
	}
	if o.Metrics == 0 {
		return o, "METRICS no valid metrics passed. Supported: CPU|NET"
	}
	for j < argc {
		more := j+1 < argc
		switch {
		case more && equalFold(args[j], "count"):
			v, ok := resp.ParseInt(args[j+1])
			if !ok || v < 1 || v > MaxCount {
				return o, "COUNT must be between 1 and 64"
			}
			o.Count = int(v)
		case more && equalFold(args[j], "duration"):
			v, ok := resp.ParseInt(args[j+1])
			if !ok || v < 1 || v > MaxDuration {
				return o, "DURATION must be between 1 and 1000000"
			}
			o.Duration = time.Duration(v) * time.Second
		case more && equalFold(args[j], "sample"):
			v, ok := resp.ParseInt(args[j+1])
			if !ok || v < 1 || v > 1<<31-1 {
				return o, "SAMPLE ratio must be positive"
			}
			o.Sample = int(v)
		case more && equalFold(args[j], "slots"):
			return o, "SLOTS parameter cannot be used in non-cluster mode"
		default:
			return o, "syntax error"
		}
		j += 2
	}
	return o, ""
}

// AppendReport appends r as Redis 8.6 encodes HOTKEYS GET: an array of one
// map (a RESP3 map, or in RESP2 a flat array of names and values), fields
// in this order: tracking-active, sample-ratio, selected-slots (a
// non-cluster server owns every slot: [[0, 16383]]),
// all-commands-all-slots-us, net-bytes-all-commands-all-slots,
// collection-start-time-unix-ms, collection-duration-ms, then with CPU
// total-cpu-time-user-ms and total-cpu-time-sys-ms, with NET
// total-net-bytes, with CPU by-cpu-time-us, with NET by-net-bytes; each
// ranking a flat array of key, amount pairs. The fields of SLOTS are never
// present (SLOTS is refused outside cluster mode).
func AppendReport(dst []byte, r *Report, proto int) []byte {
	n := 7
	cpu, net := r.Metrics&CPU != 0, r.Metrics&NET != 0
	if cpu {
		n += 3
	}
	if net {
		n += 2
	}
	dst = append(dst, "*1\r\n"...)
	if proto >= 3 {
		dst = appendLen(dst, '%', n)
	} else {
		dst = appendLen(dst, '*', 2*n)
	}
	active := int64(0)
	if r.Active {
		active = 1
	}
	dst = appendField(dst, "tracking-active", active)
	dst = appendField(dst, "sample-ratio", int64(r.Sample))
	dst = appendBulk(dst, "selected-slots")
	dst = append(dst, "*1\r\n*2\r\n:0\r\n:16383\r\n"...)
	dst = appendField(dst, "all-commands-all-slots-us", int64(r.AllCommandsUs))
	dst = appendField(dst, "net-bytes-all-commands-all-slots", int64(r.AllNetBytes))
	dst = appendField(dst, "collection-start-time-unix-ms", r.StartUnixMs)
	dst = appendField(dst, "collection-duration-ms", r.DurationMs)
	if cpu {
		dst = appendField(dst, "total-cpu-time-user-ms", r.CPUUserMs)
		dst = appendField(dst, "total-cpu-time-sys-ms", r.CPUSysMs)
	}
	if net {
		dst = appendField(dst, "total-net-bytes", int64(r.TotalNetBytes))
	}
	if cpu {
		dst = appendRanking(dst, "by-cpu-time-us", r.ByCPU)
	}
	if net {
		dst = appendRanking(dst, "by-net-bytes", r.ByNet)
	}
	return dst
}

func appendRanking(dst []byte, name string, es []Entry) []byte {
	dst = appendBulk(dst, name)
	dst = appendLen(dst, '*', 2*len(es))
	for _, e := range es {
		dst = appendBulk(dst, e.Key)
		dst = appendInt(dst, int64(e.Value))
	}
	return dst
}

// helpLines are Cicada's own words for HOTKEYS HELP, in Redis's help
// layout (addReplyHelp: a header, the lines, then HELP).
var helpLines = []string{
	"START METRICS <count> [CPU] [NET] [COUNT <k>] [DURATION <seconds>] [SAMPLE <ratio>] [SLOTS <count> <slot> ...]",
	"    Start a hot-key session in Cicada (one at a time, shared by all connections).",
	"    * NET: bytes of each key's requests and replies through Cicada.",
	"    * CPU: time Cicada's event loops spend on each key's requests (microseconds),",
	"      not Redis's time.",
	"    * COUNT: keys reported per metric, 1 to 64. Default: 10.",
	"    * DURATION: stop by itself after this many seconds. Default: until STOP.",
	"    * SAMPLE: rank 1 in <ratio> requests. Default: 1 (every request).",
	"    * SLOTS: cluster mode only; Cicada is not in cluster mode.",
	"STOP",
	"    Stop the session; GET still reports it.",
	"GET",
	"    Report the session: totals and the top keys by each metric.",
	"RESET",
	"    Forget a stopped session.",
}

func appendHelp(dst, arg0 []byte) []byte {
	dst = appendLen(dst, '*', len(helpLines)+3)
	dst = append(dst, '+')
	for _, c := range arg0 {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		dst = append(dst, c)
	}
	dst = append(dst, " <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n"...)
	for _, l := range helpLines {
		dst = append(append(append(dst, '+'), l...), '\r', '\n')
	}
	return append(dst, "+HELP\r\n+    Print this help.\r\n"...)
}

func appendErr(dst []byte, msg string) []byte {
	return append(append(append(dst, '-'), msg...), '\r', '\n')
}

func appendNull(dst []byte, proto int) []byte {
	if proto >= 3 {
		return append(dst, "_\r\n"...)
	}
	return append(dst, "$-1\r\n"...)
}

func appendLen(dst []byte, kind byte, n int) []byte {
	dst = strconv.AppendInt(append(dst, kind), int64(n), 10)
	return append(dst, '\r', '\n')
}

func appendBulk(dst []byte, s string) []byte {
	dst = appendLen(dst, '$', len(s))
	return append(append(dst, s...), '\r', '\n')
}

func appendInt(dst []byte, v int64) []byte {
	dst = strconv.AppendInt(append(dst, ':'), v, 10)
	return append(dst, '\r', '\n')
}

func appendField(dst []byte, name string, v int64) []byte {
	return appendInt(appendBulk(dst, name), v)
}

// equalFold reports whether b is lower (ASCII lower case) in any case.
func equalFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
