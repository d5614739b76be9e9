package resp

import "bytes"

// Reply framing limits.
const (
	// maxPending bounds the values an aggregate may declare, and the
	// values still to come in a nested part of a reply: a map or attribute
	// of n pairs declares 2n. Far beyond any reply Redis can build (each
	// value takes at least 3 bytes), it keeps the count from overflowing.
	maxPending = 1 << 62
	// maxHeaderLine bounds a length header line ("$123\r\n"): a sign, 20
	// digits and the CRLF fit with room to spare.
	maxHeaderLine = 32
	// HeadSize is how many bytes of a line, payload or element Frame keeps.
	HeadSize = 32
	// FrameElems is how many leading elements of a top-level aggregate
	// Frame summarizes.
	FrameElems = 3
	// MaxElemTypes is how many element types of a top-level aggregate
	// ElemType can report.
	MaxElemTypes = 4096
)

// RESP type bytes (RESP2 and RESP3).
const (
	TypeSimple    = '+'
	TypeError     = '-'
	TypeInteger   = ':'
	TypeBulk      = '$'
	TypeArray     = '*'
	TypeNull      = '_'
	TypeDouble    = ','
	TypeBool      = '#'
	TypeBigNumber = '('
	TypeBulkError = '!'
	TypeVerbatim  = '='
	TypeMap       = '%'
	TypeSet       = '~'
	TypeAttribute = '|'
	TypePush      = '>'
)

// Elem summarizes one value: its type byte, whether it is a null, its
// length (payload bytes for bulk types, line bytes for line types, element
// count for aggregates), and its first HeadSize bytes of content.
type Elem struct {
	Type    byte
	Null    bool
	Len     int64
	head    [HeadSize]byte
	headLen uint8
}

// Head returns up to HeadSize leading content bytes (a line without its
// CRLF, a bulk payload). Valid until the next ReplyFramer.Feed.
func (e *Elem) Head() []byte { return e.head[:e.headLen] }

// Frame summarizes the last complete top-level reply of a ReplyFramer.
type Frame struct {
	// Size is the whole reply's length in bytes, attribute included.
	Size int64
	// Attr reports that the reply was preceded by a RESP3 attribute.
	Attr bool
	// Value is the top-level value (after the attribute, if any).
	Value Elem
	// Elems are the first min(FrameElems, Value.Len) elements of a
	// top-level aggregate, attributes skipped.
	Elems [FrameElems]Elem
}

// level is an open aggregate that the framer follows exactly: the
// top-level aggregate (or the attribute before the top-level value), and
// an attribute annotating one of its elements.
type level struct {
	left  int64 // children still to come
	count int64 // declared children
	attr  bool  // an attribute: when it ends, the value it annotates follows
}

// ReplyFramer finds reply boundaries in a stream of RESP2/RESP3 replies from
// Redis. It is resumable at any byte: Feed consumes as much as it can and
// keeps its state, so replies of any size pass through without being held
// in memory. Only a partial length header line ("$123\r\n") is left
// unconsumed.
//
// Its memory is constant, whatever the nesting: only the top-level
// aggregate and an attribute on one of its elements are followed as levels
// (the summary in Frame needs no more); a value nested deeper is an
// element of one of them, and within it the framer counts only how many
// values are still to come (each aggregate header adds its element count,
// each value read ends one). A Lua script's reply may nest as deep as
// Lua's stack allows (about 8,000 levels in Redis 7), a module's deeper.
//
// Owned by one connection's event loop; not safe for concurrent use.
type ReplyFramer struct {
	open     [2]level // the levels followed exactly, outermost first
	depth    int      // how many of open are in use
	nested   int64    // values still to come in an element nested below open[depth-1]; 0 = not inside one
	bulkLeft int64    // payload bytes + 2 (CRLF) still to come of the current bulk; 0 = none
	inLine   bool     // inside a line-typed value, waiting for its '\n'
	lastCR   bool     // the last line byte seen was '\r'
	cur      *Elem    // the value being read, when it is summarized; else nil
	started  bool     // a top-level reply is in progress
	frame    Frame
	types    []byte // type bytes of the top-level aggregate's elements
}

// ElemType returns the type byte of element i of the last complete
// top-level aggregate (attributes skipped); ok=false past its end or past
// MaxElemTypes.
func (f *ReplyFramer) ElemType(i int) (t byte, ok bool) {
	if i < 0 || i >= len(f.types) {
		return 0, false
	}
	return f.types[i], true
}

// Frame returns the summary of the reply that the last Feed completed.
// Valid until the next Feed.
func (f *ReplyFramer) Frame() *Frame { return &f.frame }

// InProgress reports whether a reply has started but not ended.
func (f *ReplyFramer) InProgress() bool { return f.started }

// Feed consumes bytes of b up to the end of the current top-level reply.
// It returns the count consumed and done=true when a reply ended at b[n]
// (its summary is then in Frame). With done=false every byte was consumed
// except a partial length header line, which must be presented again with
// more data. err is ErrReplyProtocol for a stream that is not RESP; the
// framer is then unusable.
func (f *ReplyFramer) Feed(b []byte) (n int, done bool, err error) {
	defer func() { f.frame.Size += int64(n) }()
	for n < len(b) {
		if !f.started {
			f.started = true
			f.frame = Frame{}
			f.types = f.types[:0]
		}
		var valueEnded bool
		switch {
		case f.bulkLeft > 0:
			take := int64(len(b) - n)
			if take > f.bulkLeft {
				take = f.bulkLeft
			}
			if f.cur != nil && f.bulkLeft > 2 {
				payload := take
				if payload > f.bulkLeft-2 {
					payload = f.bulkLeft - 2
				}
				f.capture(b[n : n+int(payload)])
			}
			f.bulkLeft -= take
			n += int(take)
			if f.bulkLeft > 0 {
				// The CRLF may straddle reads: check what has arrived.
				if f.bulkLeft == 1 && b[n-1] != '\r' {
					return n, false, ErrReplyProtocol
				}
				return n, false, nil
			}
			if b[n-1] != '\n' || (take >= 2 && b[n-2] != '\r') {
				return n, false, ErrReplyProtocol
			}
			valueEnded = true
		case f.inLine:
			rest := b[n:]
			nl := bytes.IndexByte(rest, '\n')
			chunk := rest
			if nl >= 0 {
				chunk = rest[:nl]
			}
			if len(chunk) > 0 {
				f.lastCR = chunk[len(chunk)-1] == '\r'
				if f.cur != nil {
					f.capture(chunk)
				}
			}
			if nl < 0 {
				n = len(b)
				return n, false, nil
			}
			n += nl + 1
			if !f.lastCR {
				return n, false, ErrReplyProtocol
			}
			f.inLine = false
			if f.cur != nil && !f.cur.endLine() {
				return n, false, ErrReplyProtocol
			}
			valueEnded = true
		default:
			used, ended, ok, herr := f.header(b[n:])
			if herr != nil {
				return n, false, herr
			}
			if !ok {
				return n, false, nil
			}
			n += used
			valueEnded = ended
		}
		if valueEnded && f.valueDone() {
			f.started = false
			return n, true, nil
		}
	}
	return n, false, nil
}

// header reads a type byte and, for bulk and aggregate types, its length
// line. It returns the bytes used, whether the value already ended (null,
// empty aggregate), and ok=false when the header line is incomplete.
func (f *ReplyFramer) header(b []byte) (used int, ended, ok bool, err error) {
	t := b[0]
	f.cur = f.summaryTarget()
	if f.nested == 0 && f.depth == 1 && !f.open[0].attr && t != TypeAttribute && len(f.types) < MaxElemTypes &&
		int64(len(f.types)) == f.open[0].count-f.open[0].left {
		f.types = append(f.types, t)
	}
	switch t {
	case TypeSimple, TypeError, TypeInteger, TypeNull, TypeDouble, TypeBool, TypeBigNumber:
		f.startElem(t)
		f.inLine, f.lastCR = true, false
		return 1, false, true, nil
	case TypeBulk, TypeBulkError, TypeVerbatim, TypeArray, TypeMap, TypeSet, TypePush, TypeAttribute:
	default:
		return 0, false, false, ErrReplyProtocol
	}
	cr := bytes.IndexByte(b, '\r')
	if cr < 0 || cr+1 >= len(b) {
		if len(b) > maxHeaderLine {
			return 0, false, false, ErrReplyProtocol
		}
		return 0, false, false, nil
	}
	if b[cr+1] != '\n' || cr > maxHeaderLine {
		return 0, false, false, ErrReplyProtocol
	}
	v, valid := HeaderLength(t, b[1:cr])
	if !valid {
		return 0, false, false, ErrReplyProtocol
	}
	used = cr + 2
	if t == TypeAttribute {
		f.frame.Attr = f.frame.Attr || f.depth == 0
		f.cur = nil
	} else {
		f.startElem(t)
		if f.cur != nil {
			f.cur.Null = v == -1
			f.cur.Len = v
		}
	}
	switch t {
	case TypeBulk, TypeBulkError, TypeVerbatim:
		if v == -1 {
			return used, true, true, nil
		}
		f.bulkLeft = v + 2 // HeaderLength: v <= 2^62
		return used, false, true, nil
	}
	if v == -1 {
		return used, true, true, nil
	}
	children := v
	if t == TypeMap || t == TypeAttribute {
		if v > maxPending/2 {
			return 0, false, false, ErrReplyProtocol
		}
		children = 2 * v
	}
	attr := t == TypeAttribute
	switch {
	case f.nested > 0:
		// Inside a nested element: its values are only counted. The
		// header itself is one of them (read in valueDone), except an
		// attribute's, which the value it annotates follows.
		if children > maxPending-f.nested {
			return 0, false, false, ErrReplyProtocol
		}
		f.nested += children
		return used, !attr, true, nil
	case f.depth == 0 || f.depth == 1 && attr && !f.open[0].attr:
		if children > maxPending {
			return 0, false, false, ErrReplyProtocol
		}
		if children == 0 {
			// An empty attribute annotates the value that follows it.
			return used, !attr, true, nil
		}
		f.open[f.depth] = level{left: children, count: children, attr: attr}
		f.depth++
		return used, false, true, nil
	}
	// An aggregate element of a followed level: count what it holds (an
	// attribute's pairs and the value it annotates).
	if attr {
		children++
	}
	if children > maxPending {
		return 0, false, false, ErrReplyProtocol
	}
	f.nested = children
	return used, children == 0, true, nil
}

// summaryTarget returns the Elem that the value starting now fills in, or
// nil when the value is not summarized.
func (f *ReplyFramer) summaryTarget() *Elem {
	switch {
	case f.nested > 0:
		return nil
	case f.depth == 0:
		return &f.frame.Value
	case f.depth == 1:
		top := f.open[0]
		if top.attr {
			return nil
		}
		if i := top.count - top.left; i < FrameElems {
			return &f.frame.Elems[i]
		}
	}
	return nil
}

func (f *ReplyFramer) startElem(t byte) {
	if f.cur != nil {
		*f.cur = Elem{Type: t}
	}
}

// valueDone records the end of a value and reports whether it ended the
// top-level reply. In a nested element it counts one value off; the
// element itself ends when none is left.
func (f *ReplyFramer) valueDone() bool {
	f.cur = nil
	if f.nested > 0 {
		if f.nested--; f.nested > 0 {
			return false
		}
	}
	for f.depth > 0 {
		top := &f.open[f.depth-1]
		if top.left--; top.left > 0 {
			return false
		}
		f.depth--
		if top.attr {
			// The annotated value follows; it counts in the parent.
			return false
		}
	}
	return true
}

func (f *ReplyFramer) capture(p []byte) {
	e := f.cur
	room := HeadSize - int(e.headLen)
	if room > len(p) {
		room = len(p)
	}
	if room > 0 {
		copy(e.head[e.headLen:], p[:room])
		e.headLen += uint8(room)
	}
	if e.Type != TypeBulk && e.Type != TypeBulkError && e.Type != TypeVerbatim {
		e.Len += int64(len(p))
	}
}

// endLine finishes a line-typed value: drops the '\r' from the counted
// length and the head, and checks the line types that have a fixed syntax.
func (e *Elem) endLine() bool {
	e.Len--
	if int64(e.headLen) > e.Len {
		e.headLen = uint8(e.Len)
	}
	h := e.Head()
	switch e.Type {
	case TypeNull:
		e.Null = true
		return e.Len == 0
	case TypeBool:
		return e.Len == 1 && (h[0] == 't' || h[0] == 'f')
	case TypeInteger:
		if e.Len > 20 {
			return false
		}
		_, ok := ParseInt(h)
		return ok
	}
	return true
}
