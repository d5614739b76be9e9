package resp

import "bytes"

// ScanStatus is what Scanner.Next and Skip report.
type ScanStatus uint8

const (
	// ScanOK: a value was read.
	ScanOK ScanStatus = iota
	// ScanIncomplete: the bytes end before the value does; more may come.
	ScanIncomplete
	// ScanInvalid: the bytes are not RESP (an unknown type byte, a line
	// without CRLF, a bad length, a header line over maxHeaderLine).
	ScanInvalid
)

// Token is one value read by Scanner.Next: a scalar whole, an aggregate's
// header only (its N values follow).
type Token struct {
	Type byte
	Null bool // $-1, *-1, _
	// N is, for an aggregate, the values that follow: its elements, two
	// per pair for a map or an attribute (an attribute then annotates one
	// value more, see Scanner.SkipRest).
	N int
	// Data is a line type's text (without type byte and CRLF) or a bulk
	// type's payload; it aliases the scanned bytes.
	Data []byte
	// Start and End bound the token's bytes in the scanned buffer: the
	// whole value for a scalar, the header line for an aggregate.
	Start, End int
}

// Scanner reads RESP2 and RESP3 values from a buffer it does not own,
// trusting no length: every length goes through HeaderLength and is
// checked against the bytes left before it is used, every line and
// payload must end in CRLF, and a length or integer line longer than
// maxHeaderLine is invalid even before its CRLF arrives. It keeps no
// stack (aggregates are counted, not recursed into), so nesting depth
// costs nothing. The zero value scans an empty buffer; a Scanner is a
// value, not safe for concurrent use, valid while its buffer is.
//
// It is the whole-buffer counterpart of ReplyFramer, which frames a
// stream as it arrives: the cluster rewriter reads complete topology
// replies with it, the notification connection's reader peeked bytes.
type Scanner struct {
	b     []byte
	i     int
	only2 bool
}

// NewScanner returns a Scanner at the start of b.
func NewScanner(b []byte) Scanner { return Scanner{b: b} }

// OnlyRESP2 makes every RESP3 type byte invalid (a RESP2 connection).
func (s *Scanner) OnlyRESP2() { s.only2 = true }

// Offset is the index in the buffer of the next byte to read.
func (s *Scanner) Offset() int { return s.i }

// SetOffset moves the scanner to index i of its buffer (a value start it
// returned, to read a value again).
func (s *Scanner) SetOffset(i int) { s.i = i }

// Bytes returns the buffer being scanned.
func (s *Scanner) Bytes() []byte { return s.b }

// Next reads the value at Offset. On ScanIncomplete and ScanInvalid the
// offset does not move.
func (s *Scanner) Next() (Token, ScanStatus) {
	var t Token
	b := s.b[s.i:]
	if len(b) == 0 {
		return t, ScanIncomplete
	}
	t.Start, t.Type = s.i, b[0]
	lengthLine := false
	switch t.Type {
	case TypeSimple, TypeError:
	case TypeInteger, TypeBulk, TypeArray:
		lengthLine = true
	case TypeNull, TypeDouble, TypeBool, TypeBigNumber:
		if s.only2 {
			return t, ScanInvalid
		}
	case TypeBulkError, TypeVerbatim, TypeMap, TypeSet, TypePush, TypeAttribute:
		if s.only2 {
			return t, ScanInvalid
		}
		lengthLine = true
	default:
		return t, ScanInvalid
	}
	nl := bytes.IndexByte(b, '\n')
	if lengthLine && (nl < 0 && len(b) > maxHeaderLine || nl > maxHeaderLine) {
		return t, ScanInvalid
	}
	if nl < 0 {
		return t, ScanIncomplete
	}
	if nl < 2 || b[nl-1] != '\r' {
		return t, ScanInvalid
	}
	line := b[1 : nl-1]
	used := nl + 1
	switch t.Type {
	case TypeSimple, TypeError, TypeDouble, TypeBool, TypeBigNumber:
		t.Data = line
	case TypeInteger:
		if _, ok := ParseInt(line); !ok {
			return t, ScanInvalid
		}
		t.Data = line
	case TypeNull:
		if len(line) != 0 {
			return t, ScanInvalid
		}
		t.Null = true
	case TypeBulk, TypeBulkError, TypeVerbatim:
		n, ok := HeaderLength(t.Type, line)
		switch {
		case !ok:
			return t, ScanInvalid
		case n < 0:
			t.Null = true
		case n > int64(len(b)-used-2):
			return t, ScanIncomplete
		case b[used+int(n)] != '\r' || b[used+int(n)+1] != '\n':
			return t, ScanInvalid
		default:
			t.Data = b[used : used+int(n)]
			used += int(n) + 2
		}
	default: // aggregates
		n, ok := HeaderLength(t.Type, line)
		if !ok {
			return t, ScanInvalid
		}
		if n > int64(len(b)-used) {
			return t, ScanIncomplete // each value takes at least one byte
		}
		if t.Type == TypeMap || t.Type == TypeAttribute {
			n *= 2 // n <= len(b): no overflow
		}
		t.Null = n < 0
		t.N = int(max(n, 0))
	}
	s.i += used
	t.End = s.i
	return t, ScanOK
}

// Skip reads n whole values (aggregates with everything they hold). On a
// status other than ScanOK the offset is wherever reading stopped.
func (s *Scanner) Skip(n int) ScanStatus {
	for n > 0 {
		t, st := s.Next()
		if st != ScanOK {
			return st
		}
		n += t.N - 1
		if t.Type == TypeAttribute {
			n++
		}
		if n > len(s.b)-s.i {
			return ScanIncomplete
		}
	}
	return ScanOK
}

// SkipRest skips what follows t when t is an aggregate's header: its
// values and, for an attribute, the value it annotates.
func (s *Scanner) SkipRest(t Token) ScanStatus {
	n := t.N
	if t.Type == TypeAttribute {
		n++
	}
	return s.Skip(n)
}

// HeaderLength parses the length line of a bulk or aggregate value of
// type t (without the type byte and CRLF) in a reply: a ParseInt integer
// of at most 2^62, or -1 (a null) for a bulk string or an array only. The
// one length rule of ReplyFramer and Scanner.
func HeaderLength(t byte, line []byte) (int64, bool) {
	v, ok := ParseInt(line)
	if !ok || v < -1 || v > maxPending || (v == -1 && t != TypeBulk && t != TypeArray) {
		return 0, false
	}
	return v, true
}
