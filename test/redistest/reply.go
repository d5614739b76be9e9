package redistest

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
)

// ReadReply reads one whole RESP2 or RESP3 reply (an attribute counts as
// its own reply) from br and returns its bytes exactly as sent. Errors: a
// read error, or a first line without CRLF.
func ReadReply(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("bad reply line %q", line)
	}
	out := line
	n, _ := strconv.Atoi(string(line[1 : len(line)-2]))
	switch line[0] {
	case '$', '!', '=':
		if n >= 0 {
			b := make([]byte, n+2)
			if _, err := io.ReadFull(br, b); err != nil {
				return nil, err
			}
			out = append(out, b...)
		}
	case '*', '%', '~', '>', '|':
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for range n {
			b, err := ReadReply(br)
			if err != nil {
				return nil, err
			}
			out = append(out, b...)
		}
	}
	return out, nil
}
