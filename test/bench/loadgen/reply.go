package main

import (
	"bufio"
	"errors"
	"fmt"
)

// Limits on what the reply reader accepts from the server.
const (
	maxBulkLen   = 512 << 20 // bytes; Redis's proto-max-bulk-len default
	maxArrayLen  = 1 << 32
	maxReplyNest = 32
)

var errReply = errors.New("loadgen: malformed reply")

// readReply reads one whole RESP2/RESP3 reply from br and discards it
// without allocating (bulk payloads are skipped with Discard, lines are
// read with ReadSlice). isErr reports a top-level error reply ("-..." or a
// blob error "!..."). An attribute ("|") is read together with the reply
// it annotates. A line longer than br's buffer is an error.
func readReply(br *bufio.Reader) (isErr bool, err error) {
	return readReplyNested(br, 0)
}

func readReplyNested(br *bufio.Reader, depth int) (bool, error) {
	if depth > maxReplyNest {
		return false, fmt.Errorf("%w: nested deeper than %d", errReply, maxReplyNest)
	}
	line, err := br.ReadSlice('\n')
	if err != nil {
		return false, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return false, fmt.Errorf("%w: line %q", errReply, line)
	}
	typ, body := line[0], line[1:len(line)-2]
	switch typ {
	case '+', ':', '_', ',', '#', '(':
		return false, nil
	case '-':
		return true, nil
	case '$', '!', '=':
		n, ok := parseLen(body, maxBulkLen)
		if !ok {
			return false, fmt.Errorf("%w: bulk length %q", errReply, body)
		}
		if n < 0 {
			if typ != '$' || n != -1 {
				return false, fmt.Errorf("%w: bulk length %q", errReply, body)
			}
			return false, nil
		}
		if _, err := br.Discard(int(n)); err != nil {
			return false, err
		}
		crlf, err := br.Peek(2)
		if err != nil {
			return false, err
		}
		if crlf[0] != '\r' || crlf[1] != '\n' {
			return false, fmt.Errorf("%w: bulk not ended by CRLF", errReply)
		}
		_, _ = br.Discard(2)
		return typ == '!', nil
	case '*', '%', '~', '>', '|':
		n, ok := parseLen(body, maxArrayLen)
		if !ok || (n < 0 && (typ != '*' || n != -1)) {
			return false, fmt.Errorf("%w: aggregate length %q", errReply, body)
		}
		if typ == '%' || typ == '|' {
			n *= 2
		}
		for range n {
			if _, err := readReplyNested(br, depth+1); err != nil {
				return false, err
			}
		}
		if typ == '|' { // an attribute precedes the reply it annotates
			return readReplyNested(br, depth)
		}
		return false, nil
	}
	return false, fmt.Errorf("%w: type byte %q", errReply, typ)
}

// parseLen parses an optional '-' and 1-19 decimal digits, and accepts the
// result only in [-1, max]. No overflow: max is far below MaxInt64 / 10.
func parseLen(b []byte, max int64) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
		if n > max {
			return 0, false
		}
	}
	if neg {
		if n != 1 {
			return 0, false
		}
		return -1, true
	}
	return n, true
}
