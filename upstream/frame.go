package upstream

import (
	"bytes"
	"errors"

	"github.com/cicada-proxy/cicada/resp"
)

// errFrame is returned by scanFrame for bytes that are not RESP2.
var errFrame = errors.New("upstream: not a RESP2 reply")

// maxFrameDepth bounds array nesting (Redis sends at most 2 here).
const maxFrameDepth = 8

// elem is one top-level element of a scanned array.
type elem struct {
	typ  byte   // '$', '*', ':', '+' or '-'
	null bool   // $-1 or *-1
	val  []byte // a bulk string's payload or a line's text; aliases the input
}

// frame is a scanned reply: a line, a bulk string, or an array whose first
// len(elems) elements (at most 4) are kept.
type frame struct {
	elems [4]elem
	n     int // elements kept
	array bool
}

// scanFrame reads one RESP2 reply from the start of b. (proxy/resp's
// ReplyFramer is resumable but keeps only a head of each element; a
// notification's channel holds a key of any length, and the event loops
// scan a peeked copy from its start, so a stateless scan fits better.) It returns the
// reply's length in bytes, or 0 when b holds only part of it; the elements
// kept in f alias b. err is errFrame for bytes that are not RESP2.
func scanFrame(b []byte, f *frame) (int, error) {
	f.n, f.array = 0, len(b) > 0 && b[0] == '*'
	return scanValue(b, f, 0)
}

// scanValue scans one value at the start of b; top-level array elements
// (depth 1) are recorded in f.
func scanValue(b []byte, f *frame, depth int) (int, error) {
	if depth > maxFrameDepth {
		return 0, errFrame
	}
	line, n, err := scanLine(b)
	if n == 0 || err != nil {
		return 0, err
	}
	if len(line) == 0 {
		return 0, errFrame
	}
	typ, text := line[0], line[1:]
	e := elem{typ: typ, val: text}
	switch typ {
	case '+', '-', ':':
	case '$':
		size64, ok := resp.ParseInt(text)
		size := int(size64)
		switch {
		case !ok || size < -1:
			return 0, errFrame
		case size == -1:
			e.null, e.val = true, nil
		case size > len(b)-n-2:
			return 0, nil
		case b[n+size] != '\r' || b[n+size+1] != '\n':
			return 0, errFrame
		default:
			e.val = b[n : n+size]
			n += size + 2
		}
	case '*':
		count64, ok := resp.ParseInt(text)
		count := int(count64)
		if !ok || count < -1 {
			return 0, errFrame
		}
		e.null, e.val = count == -1, nil
		for range count {
			m, err := scanValue(b[n:], f, depth+1)
			if m == 0 || err != nil {
				return 0, err
			}
			n += m
		}
	default:
		return 0, errFrame
	}
	if depth == 1 && f.n < len(f.elems) {
		f.elems[f.n] = e
		f.n++
	}
	return n, nil
}

// scanLine returns the line at the start of b without its CRLF and the
// bytes it takes with it; n = 0 when the CRLF has not arrived.
func scanLine(b []byte) (line []byte, n int, err error) {
	i := bytes.IndexByte(b, '\n')
	end := i
	if i < 0 {
		end = len(b)
	}
	if end > 32 && (b[0] == '$' || b[0] == '*' || b[0] == ':') {
		return nil, 0, errFrame // no length or integer is that long
	}
	if i < 0 {
		return nil, 0, nil
	}
	if i == 0 || b[i-1] != '\r' {
		return nil, 0, errFrame
	}
	return b[:i-1], i + 1, nil
}

// is reports whether element i is the bulk string s.
func (f *frame) is(i int, s string) bool {
	return i < f.n && f.elems[i].typ == '$' && string(f.elems[i].val) == s
}

// notification classifies a scanned reply on the notification connection:
// a keyspace notification (key in db), a flush (a tracking invalidation
// with a null payload), or neither (confirmations, pongs, tracking messages
// for keys under trackingPrefix, replies to the connection's setup).
func (f *frame) notification() (db int, key []byte, isKey, isFlush bool) {
	switch {
	case f.array && f.n == 4 && f.is(0, "pmessage"):
		db, key, isKey = parseChannel(f.elems[2].val)
		return db, key, isKey, false
	case f.array && f.n == 3 && f.is(0, "message") && f.is(1, TrackingChannel):
		return 0, nil, false, f.elems[2].null
	}
	return 0, nil, false, false
}
