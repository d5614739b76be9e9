package difftest

import (
	"bytes"
	"errors"
	"strconv"
)

// Value is one RESP2/RESP3 value as a client received it.
//
// Raw holds its exact bytes (a RESP3 attribute that precedes a value is
// part of that value's Raw). Type is the first byte of the value itself
// ('+', '-', ':', '$', '*', '%', '~', '>', '_', ',', '#', '(', '=', '!').
// Elems holds an aggregate's elements (a map's keys and values
// alternate); it is nil for scalars and null aggregates.
type Value struct {
	Type  byte
	Raw   []byte
	Elems []Value
}

// Push reports whether v is a RESP3 push frame (out of band, not a reply).
func (v Value) Push() bool { return v.Type == '>' }

// errIncomplete means b ends inside a value: read more.
var errIncomplete = errors.New("incomplete RESP value")

// maxDepth bounds nesting; Redis's replies are far shallower.
const maxDepth = 64

// parseValue reads one value from the start of b and returns it and its
// length in bytes. It returns errIncomplete when b ends too early and
// another error when b is not RESP (a bug on one side of the comparison).
func parseValue(b []byte) (Value, int, error) { return parseAt(b, 0, 0) }

func parseAt(b []byte, off, depth int) (Value, int, error) {
	if depth > maxDepth {
		return Value{}, 0, errors.New("RESP nesting deeper than 64")
	}
	start := off
	line, next, err := readLine(b, off)
	if err != nil {
		return Value{}, 0, err
	}
	if len(line) == 0 {
		return Value{}, 0, errors.New("empty RESP line")
	}
	v := Value{Type: line[0]}
	switch v.Type {
	case '+', '-', ':', '_', ',', '#', '(':
		off = next
	case '$', '=', '!':
		n, err := strconv.Atoi(string(line[1:]))
		if err != nil || n < -1 {
			return Value{}, 0, errors.New("bad bulk length " + strconv.Quote(string(line)))
		}
		off = next
		if n >= 0 {
			if len(b) < off+n+2 {
				return Value{}, 0, errIncomplete
			}
			if b[off+n] != '\r' || b[off+n+1] != '\n' {
				return Value{}, 0, errors.New("bulk string without CRLF")
			}
			off += n + 2
		}
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(string(line[1:]))
		if err != nil || n < -1 {
			return Value{}, 0, errors.New("bad aggregate length " + strconv.Quote(string(line)))
		}
		if v.Type == '%' || v.Type == '|' {
			n *= 2
		}
		off = next
		for i := 0; i < n; i++ {
			e, m, err := parseAt(b, off, depth+1)
			if err != nil {
				return Value{}, 0, err
			}
			v.Elems = append(v.Elems, e)
			off += m
		}
		if v.Type == '|' { // an attribute belongs to the value after it
			inner, m, err := parseAt(b, off, depth+1)
			if err != nil {
				return Value{}, 0, err
			}
			off += m
			inner.Raw = b[start:off]
			return inner, off - start, nil
		}
	default:
		return Value{}, 0, errors.New("unknown RESP type " + strconv.Quote(string(line[:1])))
	}
	v.Raw = b[start:off]
	return v, off - start, nil
}

func readLine(b []byte, off int) ([]byte, int, error) {
	i := bytes.Index(b[off:], []byte("\r\n"))
	if i < 0 {
		if len(b)-off > 1<<20 {
			return nil, 0, errors.New("RESP line longer than 1 MiB")
		}
		return nil, 0, errIncomplete
	}
	return b[off : off+i], off + i + 2, nil
}

// shape renders v's structure without its scalar contents: types,
// aggregate sizes and null-ness.
func shape(v Value) string {
	var b []byte
	var walk func(v Value)
	walk = func(v Value) {
		b = append(b, v.Type)
		if v.Elems != nil {
			b = strconv.AppendInt(b, int64(len(v.Elems)), 10)
			b = append(b, '[')
			for _, e := range v.Elems {
				walk(e)
			}
			b = append(b, ']')
		} else if bytes.HasSuffix(v.Raw, []byte("-1\r\n")) && (v.Type == '$' || v.Type == '*') {
			b = append(b, "nil"...)
		}
	}
	walk(v)
	return string(b)
}
