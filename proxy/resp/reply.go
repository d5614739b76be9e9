package resp

import "bytes"

// Reply framing limits.
const (
	// MaxReplyDepth bounds the nesting of aggregates (arrays, maps, sets,
	// pushes, attributes) in one reply. Deeper is ErrReplyProtocol.
	MaxReplyDepth = 4096
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
// Owned by one connection's event loop; not safe for concurrent use.
type ReplyFramer struct {
	stack    []level
	bulkLeft int64 // payload bytes + 2 (CRLF) still to come of the current bulk; 0 = none
	inLine   bool  // inside a line-typed value, waiting for its '\n'
	lastCR   bool  // the last line byte seen was '\r'
	cur      *Elem // the value being read, when it is summarized; else nil
	started  bool  // a top-level reply is in progress
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
	if len(f.stack) == 1 && !f.stack[0].attr && t != TypeAttribute && len(f.types) < MaxElemTypes &&
		int64(len(f.types)) == f.stack[0].count-f.stack[0].left {
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
	v, valid := string2ll(b[1:cr])
	if !valid || v < -1 || (v == -1 && t != TypeBulk && t != TypeArray) {
		return 0, false, false, ErrReplyProtocol
	}
	used = cr + 2
	if t == TypeAttribute {
		f.frame.Attr = f.frame.Attr || len(f.stack) == 0
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
		if v > 1<<62 {
			return 0, false, false, ErrReplyProtocol
		}
		f.bulkLeft = v + 2
		return used, false, true, nil
	}
	if v == -1 {
		return used, true, true, nil
	}
	children := v
	if t == TypeMap || t == TypeAttribute {
		if v > 1<<61 {
			return 0, false, false, ErrReplyProtocol
		}
		children = 2 * v
	}
	if len(f.stack) >= MaxReplyDepth {
		return 0, false, false, ErrReplyProtocol
	}
	f.stack = append(f.stack, level{left: children, count: children, attr: t == TypeAttribute})
	if children == 0 {
		f.stack = f.stack[:len(f.stack)-1]
		// An empty attribute annotates the value that follows it.
		return used, t != TypeAttribute, true, nil
	}
	return used, false, true, nil
}

// summaryTarget returns the Elem that the value starting now fills in, or
// nil when the value is not summarized.
func (f *ReplyFramer) summaryTarget() *Elem {
	switch len(f.stack) {
	case 0:
		return &f.frame.Value
	case 1:
		top := f.stack[0]
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
// top-level reply.
func (f *ReplyFramer) valueDone() bool {
	f.cur = nil
	for len(f.stack) > 0 {
		top := &f.stack[len(f.stack)-1]
		top.left--
		if top.left > 0 {
			return false
		}
		attr := top.attr
		f.stack = f.stack[:len(f.stack)-1]
		if attr {
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
		_, ok := string2ll(h)
		return ok
	}
	return true
}
