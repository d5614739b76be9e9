package main

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadReply(t *testing.T) {
	for _, tc := range []struct {
		in    string
		isErr bool
	}{
		{"+OK\r\n", false},
		{"-ERR wrong\r\n", true},
		{":42\r\n", false},
		{"$5\r\nhello\r\n", false},
		{"$0\r\n\r\n", false},
		{"$-1\r\n", false},
		{"*-1\r\n", false},
		{"*2\r\n$1\r\na\r\n:1\r\n", false},
		{"*1\r\n-ERR inner\r\n", false}, // only a top-level error counts
		{"%1\r\n+k\r\n$1\r\nv\r\n", false},
		{"_\r\n", false},
		{"!3\r\nERR\r\n", true},
		{"|1\r\n+a\r\n+b\r\n+OK\r\n", false}, // attribute, then its reply
		{"$100\r\n" + strings.Repeat("x", 100) + "\r\n", false},
	} {
		// Each reply is followed by a sentinel that must be the next read.
		br := bufio.NewReaderSize(strings.NewReader(tc.in+"+NEXT\r\n"), 16)
		isErr, err := readReply(br)
		if err != nil || isErr != tc.isErr {
			t.Errorf("readReply(%q) = %v, %v; want %v, nil", tc.in, isErr, err, tc.isErr)
			continue
		}
		if rest, _ := io.ReadAll(br); string(rest) != "+NEXT\r\n" {
			t.Errorf("readReply(%q) left %q, want %q", tc.in, rest, "+NEXT\r\n")
		}
	}
}

func TestReadReplyRejects(t *testing.T) {
	for _, in := range []string{
		"+OK\n",          // no CR
		"$5\r\nhelloXY",  // bulk not ended by CRLF
		"$-2\r\n",        // negative length other than -1
		"!-1\r\n",        // null only for $
		"$536870913\r\n", // above 512 MB
		"$9223372036854775807\r\n",
		"$99999999999999999999\r\n",
		"*12a\r\n",
		"?x\r\n", // unknown type
		"$\r\n",
		"*1\r\n",                                // truncated
		strings.Repeat("*1\r\n", 40) + ":1\r\n", // too deep
	} {
		br := bufio.NewReaderSize(strings.NewReader(in), 64)
		if _, err := readReply(br); err == nil {
			t.Errorf("readReply(%q): nil error, want one", in)
		} else if !errors.Is(err, errReply) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("readReply(%q): %v, want errReply or EOF", in, err)
		}
	}
}

func TestReadReplyNoAllocs(t *testing.T) {
	in := strings.Repeat("$100\r\n"+strings.Repeat("x", 100)+"\r\n+OK\r\n", 1000)
	r := strings.NewReader(in)
	br := bufio.NewReader(r)
	allocs := testing.AllocsPerRun(500, func() {
		if _, err := readReply(br); err != nil {
			r.Reset(in)
			br.Reset(r)
		}
	})
	if allocs != 0 {
		t.Errorf("readReply allocates %v times per reply, want 0", allocs)
	}
}
