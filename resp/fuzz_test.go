package resp

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
)

var requestSeeds = []string{
	"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", "GET k\r\n", "*-1\r\n", "*0\r\n", "*1\r\n$0\r\n\r\n",
	"*9223372036854775807\r\n", "*1\r\n$9223372036854775807\r\n", "*1\r\n$-1\r\n",
	"*12345678901234567890\r\n", "*2147483648\r\n", "*1\r\n$536870913\r\n",
	"*1\r\n$4\r\nPINGxx", "*1\rx$4\rxPING\r\n", "SET \"a\\x41\" 'b\\'c'\r\n", "GET \"a\r\n",
	"ECHO a\x00b\r\n", "\r\n\n", "*1\r\nx\r\n", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5000\r\n",
	"*1\r\n\r\n", "*1\r\n\x00abc\r\n", "*11\r\n$1\r\na\r\n", "*12\r\n$3\r\nfoo\r\nx\r\n", "*2\r\n$16385\r\n",
}

// FuzzRequestParser checks that the parser never panics, finds the same
// commands whether the input arrives whole or one byte at a time, held
// (SetHold) or not, consumes nothing of a held command early, and does
// work linear in the input when it arrives one byte at a time.
func FuzzRequestParser(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		whole, _ := drive(NewRequestParser(), [][]byte{in})
		var chunks [][]byte
		for i := range in {
			chunks = append(chunks, in[i:i+1])
		}
		sp := NewRequestParser()
		split, _ := drive(sp, chunks)
		if fmt.Sprint(whole) != fmt.Sprint(split) {
			t.Fatalf("whole %v != byte by byte %v", whole, split)
		}
		hp := NewRequestParser()
		hp.SetHold(1 << 20)
		held, early := drive(hp, chunks)
		want := whole
		if k := len(held) - 1; k >= 0 && held[k].kind == Oversize {
			held = held[:k] // a declared length over the limit: the commands before it agree
			want = whole[:min(k, len(whole))]
		}
		if early != 0 || fmt.Sprint(held) != fmt.Sprint(want) {
			t.Fatalf("held byte by byte: %v with %d bytes consumed early, want %v and 0", held, early, want)
		}
		if limit := 4*int64(len(in)) + 16; sp.scanned > limit {
			t.Fatalf("fed byte by byte, %d bytes searched for line ends in %d bytes", sp.scanned, len(in))
		}
		for _, e := range whole {
			if e.kind == Complete && e.argc <= 0 {
				t.Fatalf("complete command with argc %d", e.argc)
			}
		}
		reencodes(t, in)
		boundedAlloc(t, in)
	})
}

// reencodes checks that every command parsed whole from in (no argument
// streamed) is what AppendCommand encodes from its arguments: the same
// bytes for a multibulk request (but for its CRLFs, see
// sameButTerminators), the same arguments once parsed again for an inline
// one (those a multibulk request captures).
func reencodes(t *testing.T, in []byte) {
	p := NewRequestParser()
	for b := in; len(b) > 0; {
		n, r := p.Parse(b)
		if r == NeedMore || r == ProtocolError {
			return
		}
		if r == Complete && !slices.ContainsFunc(p.Args(), func(a []byte) bool { return a == nil }) {
			enc := AppendCommand(nil, p.Args()...)
			if !p.Inline() && !sameButTerminators(enc, b[:n]) {
				t.Fatalf("%q parsed to %q, which encodes as %q", b[:n], p.Args(), enc)
			}
			// An inline argument is captured whatever its length (the line
			// is at most MaxInlineSize); a bulk one only up to
			// DefaultCaptureArg bytes.
			captured := !slices.ContainsFunc(p.Args(), func(a []byte) bool { return len(a) > DefaultCaptureArg })
			q := NewRequestParser()
			if m, r2 := q.Parse(enc); r2 != Complete || m != len(enc) ||
				(captured && fmt.Sprint(q.Args()) != fmt.Sprint(p.Args())) {
				t.Fatalf("%q (from %q) parsed again: %d, %v, %q", enc, b[:n], m, r2, q.Args())
			}
		}
		b = b[n:]
	}
}

// sameButTerminators reports whether got is enc except for the bytes of
// enc's CRLFs: like Redis, the parser skips the two bytes after a header's
// CR and after a bulk payload without looking at them.
func sameButTerminators(enc, got []byte) bool {
	if len(enc) != len(got) {
		return false
	}
	for i := range enc {
		if enc[i] != got[i] && enc[i] != '\r' && enc[i] != '\n' {
			return false
		}
	}
	return true
}

// boundedAlloc checks that parsing in allocates at most 1 MiB plus 64
// bytes per input byte: declared lengths and counts must not be trusted
// with memory before their bytes arrive.
func boundedAlloc(t *testing.T, in []byte) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	p := NewRequestParser()
	for b := in; len(b) > 0; {
		n, r := p.Parse(b)
		if r == ProtocolError || (r == NeedMore && n == 0) {
			break
		}
		b = b[n:]
	}
	runtime.ReadMemStats(&after)
	if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(1<<20+64*len(in)); got > limit {
		t.Fatalf("parsing %d bytes allocated %d bytes", len(in), got)
	}
}

var replySeeds = []string{
	"+OK\r\n", "-ERR x\r\n", ":1\r\n", "$5\r\nhello\r\n", "$-1\r\n", "*-1\r\n", "_\r\n", "*0\r\n",
	"%1\r\n+a\r\n:1\r\n", ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n", "|1\r\n+a\r\n+b\r\n:2\r\n",
	"*1\r\n*1\r\n*1\r\n:1\r\n", "$9223372036854775807\r\n", "*-9223372036854775808\r\n",
	"$3\r\nabc", "=5\r\ntxt:x\r\n", "#t\r\n", ",inf\r\n", "(1\r\n", "!3\r\nERR\r\n", "$2\r\nab\n\n",
	"*4611686018427387905\r\n", "%2305843009213693953\r\n", "*1\r\n*4611686018427387904\r\n*2\r\n",
	// Deeper than Redis 7.0's Lua replies go (4097 levels), and the
	// deeper value first, where every level still has elements to come.
	strings.Repeat("*1\r\n", 4097) + "$1\r\nx\r\n",
	strings.Repeat("*2\r\n|1\r\n+a\r\n:1\r\n", 300) + ":1\r\n" + strings.Repeat("%1\r\n+k\r\n_\r\n", 300),
}

// FuzzReplyFramer checks that the framer never panics, that splitting the
// input does not change the replies it finds, and that accepted replies
// account for exactly the bytes consumed.
func FuzzReplyFramer(f *testing.F) {
	for _, s := range replySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		whole, errWhole := frameAll([][]byte{in})
		var chunks [][]byte
		for i := range in {
			chunks = append(chunks, in[i:i+1])
		}
		split, errSplit := frameAll(chunks)
		if fmt.Sprint(whole) != fmt.Sprint(split) || (errWhole == nil) != (errSplit == nil) {
			t.Fatalf("whole %v, %v != byte by byte %v, %v", whole, errWhole, split, errSplit)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _ = frameAll([][]byte{in})
		runtime.ReadMemStats(&after)
		if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(1<<20+64*len(in)); got > limit {
			t.Fatalf("framing %d bytes allocated %d bytes", len(in), got)
		}
		var sum int64
		for _, s := range whole {
			if s <= 0 {
				t.Fatalf("reply of size %d", s)
			}
			sum += s
		}
		if sum > int64(len(in)) {
			t.Fatalf("replies cover %d bytes of %d", sum, len(in))
		}
	})
}
