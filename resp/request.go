package resp

import (
	"bytes"
	"math"
)

// Request limits, as redis-server 7.0 applies them (server.h, networking.c).
const (
	// MaxInlineSize is PROTO_INLINE_MAX_SIZE (bytes): the longest inline
	// request, multibulk count line or bulk count line Redis waits for
	// before it replies "Protocol error: too big ...".
	MaxInlineSize = 64 * 1024
	// MaxInlineLine is how long an unterminated inline line may grow in
	// Cicada (bytes): a fresh Redis query buffer reads 16 KiB, then 48 KiB,
	// then 96 KiB, so by 160 KiB without a line end Redis has failed it.
	MaxInlineLine = 160 * 1024

	// MaxMultibulkLen is the largest argument count Redis 7.0 accepts in a
	// multibulk header (INT_MAX); larger is "invalid multibulk length".
	MaxMultibulkLen = math.MaxInt32

	// UnauthMultibulkLen and UnauthBulkLen are the largest argument count
	// and bulk length (bytes) Redis 7.0 accepts from a client it does not
	// count as authenticated (authRequired); larger is "unauthenticated
	// multibulk length" or "unauthenticated bulk length".
	UnauthMultibulkLen = 10
	UnauthBulkLen      = 16 * 1024
)

// Default capture limits of a RequestParser: arguments up to CaptureArgMax
// bytes are copied, at most DefaultCaptureArgs of them and
// DefaultCaptureTotal bytes per command; the rest are streamed.
const (
	DefaultCaptureArg   = 4096
	DefaultCaptureTotal = 64 * 1024
	DefaultCaptureArgs  = 1024
)

// Result says what RequestParser.Parse found.
type Result uint8

const (
	// NeedMore: no complete command yet. Parse consumed n bytes of the
	// command in progress that Redis must get now (a streamed command, see
	// RequestParser.Streaming, or a header Redis may refuse); the caller
	// must forward them and present the rest again with more data.
	NeedMore Result = iota
	// Complete: a whole command ended at n; Args and Argc describe it.
	Complete
	// Empty: n bytes formed no command (an empty inline line, "*0", "*-1").
	// Redis sends no reply for them.
	Empty
	// ProtocolError: the bytes at n are a request Redis rejects with
	// "-ERR " + Err() and then closes the connection.
	ProtocolError
	// Oversize (hold mode only, see SetHold): the command in progress
	// needs more than the hold limit, or is an inline line longer than
	// MaxInlineSize; n is 0 and none of its bytes were consumed. The
	// command has ended for the parser: the caller presents its first
	// byte again, after SetHold(0) if it is to be parsed whole.
	Oversize
)

// RequestParser frames client requests exactly as redis-server 7.0 does.
// The zero value is not usable; call NewRequestParser.
//
// A command whose arguments are all small is only consumed once it is
// complete, so a caller may still decide to answer it locally. As soon as an
// argument is too big to capture, the command is "streaming": Parse consumes
// its bytes as they arrive and the caller forwards them upstream.
//
// A header Redis may refuse depending on state the parser cannot see is
// consumed as soon as it is parsed, so that Redis sees it: a bulk over
// UnauthBulkLen bytes (refused if Redis does not count the connection as
// authenticated) or longer than proto-max-bulk-len (which CONFIG SET
// changes at any time, at least 1 MiB) makes the command streaming; a
// multibulk header of more than UnauthMultibulkLen arguments (refused
// before authentication too) is consumed alone, and the arguments after it
// are held as usual. Redis either refuses the command (a reply with no
// request of its own, then a close) or waits for the rest, as it would
// without Cicada. Such a command is never one Cicada answers locally.
//
// A command that arrives over many calls is parsed once: like Redis (which
// keeps multibulklen and bulklen), the parser keeps its place between calls
// (the arguments and header bytes it has checked, how far it has looked for
// a line end), so the work per call is proportional to the bytes that
// arrived since the previous one.
//
// In hold mode (SetHold) nothing of a command is consumed before it is
// complete, whatever its size, and a command larger than the hold limit
// is reported Oversize instead of streamed: for a connection whose bytes
// share an upstream connection with other clients' (a lane), where only
// whole commands may be written, and only commands Redis cannot refuse
// by their size.
//
// Owned by one connection's event loop; not safe for concurrent use.
type RequestParser struct {
	captureArg   int64
	captureTotal int
	captureArgs  int
	hold         int // bytes, for the command in progress; 0: streaming (see SetHold)
	holdNext     int // hold of the commands that start from now on

	// Command in progress: kept from the call that starts it to the one
	// that ends it (Complete, Empty, ProtocolError). Offsets are into the
	// next call's input, which starts at the command's first byte unless
	// the command is streaming (then at its first unconsumed byte).
	active    bool  // a command has started and not ended
	streaming bool  // bytes up to pos are consumed as they are parsed
	consumed  bool  // some of the command's bytes were consumed before it ended (Consumed)
	inline    bool  // an inline request
	pos       int   // where parsing resumes: bytes of the command already parsed
	scan      int   // the current line has no line end before scan; neverEnds after a NUL byte
	hdrEnd    int   // the multibulk header, to be consumed at once (UnauthMultibulkLen); 0 if none
	argsLeft  int64 // bulk arguments still to come (0 while the "*" line is awaited)
	bulkLeft  int64 // bytes of the current bulk still to come, 2 trailing bytes included; 0 = expecting a "$" line
	capturing bool  // the current bulk is being copied into buf
	argc      int64
	offs      []int // per captured argument: offset in buf, or -1 when not captured
	lens      []int
	buf       []byte
	args      [][]byte
	err       string
	errEnd    int // bytes of the failing Parse's input Redis must see to fail too

	scanned int64 // bytes searched for line ends, over the parser's life (tests: linear work)

	// nulVisible: a NUL byte does not hide a multibulk header line's end
	// (Valkey 8 searches it with memchr; Redis, and every server's inline
	// requests, with strchr). Set by SetNulVisible.
	nulVisible bool
}

// SetNulVisible makes a NUL byte in a multibulk header line (the "*" and
// "$" lines) not hide the line's end, as Valkey 8 parses them (memchr);
// the default is Redis's strchr, for which it does. Inline requests are
// parsed with strchr on both. Call before the first Parse.
func (p *RequestParser) SetNulVisible(on bool) { p.nulVisible = on }

// SetHold sets hold mode for the commands that start after the call (a
// command in progress keeps its mode until it ends): with
// max > 0 no byte of a command is consumed before it is complete
// (arguments too big to capture are skipped, not streamed, and a
// multibulk header is not consumed early), and a command of more than max
// bytes, or an inline line longer than MaxInlineSize, ends as Oversize.
// The caller is then a client Redis counts as authenticated, and max is
// at most proto-max-bulk-len's minimum (1 MiB), so Redis refuses none of
// the commands held by their size. max = 0 turns hold mode off
// (streaming, the default).
func (p *RequestParser) SetHold(max int) { p.holdNext = max }

// NewRequestParser returns a parser for one connection.
func NewRequestParser() *RequestParser {
	return &RequestParser{
		captureArg:   DefaultCaptureArg,
		captureTotal: DefaultCaptureTotal,
		captureArgs:  DefaultCaptureArgs,
		buf:          make([]byte, 0, initialBuf),
	}
}

// Args returns the arguments of the last Complete command, command name
// first. An argument that was too big to capture is nil (an empty argument
// is a non-nil empty slice). At most DefaultCaptureArgs entries: when Argc()
// is larger, the arguments past len(Args()) were not captured. The slices
// stay valid until the next call to Parse.
func (p *RequestParser) Args() [][]byte { return p.args }

// Argc returns the argument count of the last Complete command.
func (p *RequestParser) Argc() int64 { return p.argc }

// Inline reports whether the last Complete command was an inline request.
func (p *RequestParser) Inline() bool { return p.inline }

// InProgress reports whether the last Parse returned NeedMore in the
// middle of a command: the next call resumes it.
func (p *RequestParser) InProgress() bool { return p.active }

// Streaming reports whether a command is in progress whose consumed bytes
// must be forwarded before it completes. Such a command is never a
// candidate for a local answer.
func (p *RequestParser) Streaming() bool { return p.streaming }

// Consumed reports whether the command that just ended (or is in
// progress) had bytes consumed before its end: a streamed argument, or a
// header Redis must see at once. Those bytes have gone to Redis, so the
// command must go to Redis whole: it can never be answered locally.
func (p *RequestParser) Consumed() bool { return p.consumed }

// Err returns the Redis error text (without "-ERR ") of the last
// ProtocolError.
func (p *RequestParser) Err() string { return p.err }

// ErrEnd returns how many bytes of the input given to the Parse that
// returned ProtocolError Redis must receive to reach the same error: the
// bad line with its line end, or MaxInlineSize+1 bytes of a header line
// that is too long. It may exceed that input's length (send what there is).
func (p *RequestParser) ErrEnd() int { return p.errEnd }

// Parse frames the next request in b, which must start where the previous
// call's n ended (after the caller discarded those bytes) and hold every
// byte received since. See Result for what n means in each case.
func (p *RequestParser) Parse(b []byte) (n int, r Result) {
	if p.active {
		if p.inline {
			return p.parseInline(b)
		}
		n = p.pos
	} else {
		p.reset()
		p.hold = p.holdNext
		if len(b) == 0 {
			return 0, NeedMore
		}
		p.active = true
		if b[0] != '*' {
			p.inline = true
			return p.parseInline(b)
		}
	}
	// A multibulk request, parsed from n on (processMultibulkBuffer).
	if p.argc == 0 {
		line, ok, tooBig := p.crLine(b, 0)
		if !ok {
			if tooBig {
				return p.end(0, p.failAt(errTooBigMbulk, MaxInlineSize+1))
			}
			return 0, NeedMore
		}
		ll, valid := ParseInt(b[1:line])
		if !valid || ll > MaxMultibulkLen {
			return p.end(0, p.failAt(errInvalidMbulk, line+2))
		}
		n = line + 2
		if ll <= 0 {
			return p.end(n, Empty)
		}
		p.argsLeft = ll
		p.argc = ll
		if ll > UnauthMultibulkLen && p.hold == 0 {
			// Refused from a client Redis does not count as
			// authenticated: let Redis see the header now.
			p.hdrEnd = n
		}
	}
	for p.argsLeft > 0 {
		if p.bulkLeft == 0 {
			line, ok, tooBig := p.crLine(b, n)
			if !ok {
				if tooBig {
					return p.fail(n, errTooBigBulkCount, n+MaxInlineSize+1)
				}
				return p.wait(n)
			}
			if b[n] != '$' {
				return p.fail(n, expectedDollar(b[n]), line+2)
			}
			ll, valid := ParseInt(b[n+1 : line])
			if !valid || ll < 0 {
				return p.fail(n, errInvalidBulk, line+2)
			}
			// Over proto-max-bulk-len Redis refuses it ("invalid bulk
			// length"): such a bulk is not captured, so it streams and
			// Redis applies its limit of the moment.
			ll = min(ll, math.MaxInt64-2)
			n = line + 2
			if p.hold > 0 && int64(n)+ll+2 > int64(p.hold) {
				return p.end(0, Oversize)
			}
			p.bulkLeft = ll + 2
			// A bulk Redis may refuse before authentication is never held back.
			p.capturing = ll <= p.captureArg && ll <= UnauthBulkLen &&
				len(p.buf)+int(ll) <= p.captureTotal && len(p.offs) < p.captureArgs
			if !p.capturing {
				p.streaming = p.hold == 0 // held: skipped, consumed with the command
				if len(p.offs) < p.captureArgs {
					p.offs = append(p.offs, -1)
					p.lens = append(p.lens, 0)
				}
			}
		}
		if p.capturing {
			if int64(len(b)-n) < p.bulkLeft {
				return p.wait(n)
			}
			l := int(p.bulkLeft - 2)
			p.offs = append(p.offs, len(p.buf))
			p.lens = append(p.lens, l)
			p.buf = append(p.buf, b[n:n+l]...)
			n += int(p.bulkLeft) // Redis skips the 2 bytes after the payload unchecked.
		} else {
			take := int64(len(b) - n)
			if take < p.bulkLeft {
				p.bulkLeft -= take
				return p.wait(len(b))
			}
			n += int(p.bulkLeft)
		}
		p.bulkLeft = 0
		p.argsLeft--
	}
	p.buildArgs()
	return p.end(n, Complete)
}

// wait ends a call before the command is complete, parsed up to n: a
// streaming command reports those bytes consumed; any other keeps them, to
// be presented again. The next call resumes at n either way.
func (p *RequestParser) wait(n int) (int, Result) {
	consume := 0
	switch {
	case p.streaming:
		consume = n
	case p.hdrEnd > 0:
		consume = p.hdrEnd // the header alone, once
	}
	p.hdrEnd = 0
	p.consumed = p.consumed || consume > 0
	p.pos = n - consume
	if p.scan != neverEnds {
		p.scan = max(p.scan-consume, 0)
	}
	return consume, NeedMore
}

// fail ends the command with a protocol error found after it was parsed up
// to n; errEnd is relative to the input, whatever n is returned.
func (p *RequestParser) fail(n int, msg string, errEnd int) (int, Result) {
	if !p.streaming {
		n = 0
	}
	return p.end(n, p.failAt(msg, errEnd))
}

// end ends the command in progress with r.
func (p *RequestParser) end(n int, r Result) (int, Result) {
	p.active, p.streaming, p.hdrEnd = false, false, 0
	return n, r
}

// failAt records a protocol error that Redis reaches after the first end
// bytes of the input.
func (p *RequestParser) failAt(msg string, end int) Result {
	p.err, p.errEnd = msg, end
	return ProtocolError
}

// Initial and kept sizes of a parser's argument buffers: Shrink frees
// buffers grown past shrinkBuf bytes or shrinkArgs arguments.
const (
	initialBuf = 256
	shrinkBuf  = 4096
	shrinkArgs = 64
)

// Shrink lets go of argument buffers a large command grew (up to
// DefaultCaptureTotal bytes and DefaultCaptureArgs arguments, about
// 100 KB), for a connection gone idle; the next large command grows them
// again. It does nothing while a command is in progress (its parsed
// arguments index these buffers). Args of the last command are invalid
// after it. It reports whether it freed anything.
func (p *RequestParser) Shrink() bool {
	if p.active {
		return false // a command in progress indexes these buffers
	}
	freed := false
	if cap(p.buf) > shrinkBuf {
		p.buf, freed = make([]byte, 0, initialBuf), true
	}
	if cap(p.offs) > shrinkArgs || cap(p.args) > shrinkArgs {
		p.offs, p.lens, p.args, freed = nil, nil, nil, true
	}
	return freed
}

func (p *RequestParser) reset() {
	p.inline, p.streaming, p.consumed = false, false, false
	p.pos, p.scan, p.hdrEnd = 0, 0, 0
	p.argsLeft, p.bulkLeft, p.argc = 0, 0, 0
	p.capturing = false
	p.offs, p.lens = p.offs[:0], p.lens[:0]
	p.buf = p.buf[:0]
	p.args = p.args[:0]
}

func (p *RequestParser) buildArgs() {
	p.args = p.args[:0]
	for i, off := range p.offs {
		if off < 0 {
			p.args = append(p.args, nil)
			continue
		}
		p.args = append(p.args, p.buf[off:off+p.lens[i]:off+p.lens[i]])
	}
}

// parseInline handles a request that does not start with '*': one line up
// to '\n' (a '\r' before it is dropped), split like sdssplitargs.
func (p *RequestParser) parseInline(b []byte) (int, Result) {
	nl := p.lineEnd(b, 0, '\n')
	if p.hold > 0 && (nl > MaxInlineSize || nl < 0 && len(b) > MaxInlineSize) {
		return p.end(0, Oversize) // Redis may take it or fail it
	}
	if nl < 0 {
		// Redis fails ("too big inline request") once more than
		// MaxInlineSize bytes wait without a line end after one of its
		// reads, whose size grows with its buffer: whether a longer line
		// passes depends on timing. Cicada waits for MaxInlineLine, longer
		// than any line a fresh Redis buffer can take in, then sends Redis
		// just enough to fail the same way (more, left unread, would make
		// it reset the connection).
		if len(b) > MaxInlineLine {
			return p.end(0, p.failAt(errTooBigInline, MaxInlineSize+1))
		}
		return 0, NeedMore
	}
	if nl > MaxInlineSize {
		// Redis may take the line or fail it: forward it whole, unread.
		return p.end(nl+1, p.unknownInline())
	}
	line := b[:nl]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	argc, ok := p.splitArgs(line)
	if !ok {
		return p.end(0, p.failAt(errUnbalanced, nl+1))
	}
	if argc == 0 {
		return p.end(nl+1, Empty)
	}
	p.argc = int64(argc)
	p.buildArgs()
	return p.end(nl+1, Complete)
}

// unknownInline completes an inline line longer than MaxInlineSize without
// looking at it: one argument, not captured. Redis may reject the line.
func (p *RequestParser) unknownInline() Result {
	p.reset()
	p.inline = true
	p.argc = 1
	p.offs = append(p.offs, -1)
	p.lens = append(p.lens, 0)
	p.buildArgs()
	return Complete
}

// crLine finds the '\r' that ends a header line starting at start, as
// Redis does with strchr from the line's first byte: the first byte itself
// may be the '\r' (an empty line), and a NUL byte hides everything after
// it (unless nulVisible). ok requires one more byte after the '\r' (Redis skips it unchecked).
// tooBig reports that no line end was found and more than MaxInlineSize
// bytes are waiting. It goes on from where the last search of the same
// line stopped.
func (p *RequestParser) crLine(b []byte, start int) (cr int, ok, tooBig bool) {
	// lineEnd for '\r', written out: this runs for every header line.
	from := max(p.scan, start)
	if from < len(b) {
		if i := bytes.IndexByte(b[from:], '\r'); i >= 0 {
			cr = from + i
			p.scanned += int64(2*cr + 1 - from - start)
			if p.nulVisible || bytes.IndexByte(b[start:cr], 0) < 0 {
				if cr+1 < len(b) {
					p.scan = 0 // the next line starts after this one
					return cr, true, false
				}
				p.scan = cr // found again at once next time
				return -1, false, false
			}
			p.scan = neverEnds
		} else {
			p.scanned += int64(len(b) - from)
			p.scan = len(b)
		}
	}
	return -1, false, len(b)-start > MaxInlineSize
}

// lineEnd returns the index in b of the first c at or after start, or -1
// when there is none yet or a NUL byte comes first (Redis's strchr stops
// there, and will at every later try: the line never ends). It goes on
// from where the last search of the same line stopped (p.scan).
func (p *RequestParser) lineEnd(b []byte, start int, c byte) int {
	from := max(p.scan, start)
	if from >= len(b) {
		return -1
	}
	i := bytes.IndexByte(b[from:], c)
	if i < 0 {
		p.scanned += int64(len(b) - from)
		p.scan = len(b)
		return -1
	}
	i += from
	p.scanned += int64(2*i + 1 - from - start)
	if bytes.IndexByte(b[start:i], 0) >= 0 {
		p.scan = neverEnds
		return -1
	}
	return i
}

// neverEnds is p.scan for a line whose end a NUL byte hides.
const neverEnds = math.MaxInt

// expectedDollar is Redis's error for a bulk header that does not start
// with '$': the byte as it is, but a CR or LF, which Redis's error replies
// turn into a blank (addReplyErrorFormat).
func expectedDollar(c byte) string {
	if c == '\r' || c == '\n' {
		c = ' '
	}
	return errExpectedDollar + string([]byte{c}) + "'"
}
