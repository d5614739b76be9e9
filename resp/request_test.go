package resp

import (
	"bytes"
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

// event is one observable outcome of parsing, for comparing feed patterns.
type event struct {
	kind Result
	args string // args joined with "|", "<nil>" for uncaptured ones
	argc int64
	err  string
}

func (e event) String() string {
	return fmt.Sprintf("{%d %q argc=%d %q}", e.kind, e.args, e.argc, e.err)
}

// drive feeds chunks to p the way the proxy does (a buffer that keeps every
// unconsumed byte) and returns the events and the streamed byte count.
func drive(p *RequestParser, chunks [][]byte) (evs []event, streamed int) {
	var buf []byte
	for _, c := range chunks {
		buf = append(buf, c...)
		for {
			n, r := p.Parse(buf)
			switch r {
			case NeedMore:
				streamed += n
			case Complete:
				var parts []string
				for _, a := range p.Args() {
					if a == nil {
						parts = append(parts, "<nil>")
					} else {
						parts = append(parts, string(a))
					}
				}
				evs = append(evs, event{kind: Complete, args: strings.Join(parts, "|"), argc: p.Argc()})
			case Empty:
				evs = append(evs, event{kind: Empty})
			case ProtocolError:
				return append(evs, event{kind: ProtocolError, err: p.Err()}), streamed
			case Oversize:
				return append(evs, event{kind: Oversize}), streamed
			}
			buf = buf[n:]
			if r == NeedMore {
				break
			}
		}
	}
	return evs, streamed
}

func TestRequestParserTable(t *testing.T) {
	big := strings.Repeat("v", DefaultCaptureArg+1)
	tests := []struct {
		name string
		in   string
		want []event
	}{
		{"multibulk", "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", []event{{kind: Complete, args: "GET|k", argc: 2}}},
		{"pipeline", "*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nget\r\n$0\r\n\r\n", []event{{kind: Complete, args: "PING", argc: 1}, {kind: Complete, args: "get|", argc: 2}}},
		{"inline", "GET k\r\n", []event{{kind: Complete, args: "GET|k", argc: 2}}},
		{"inline LF only", "GET k\n", []event{{kind: Complete, args: "GET|k", argc: 2}}},
		{"inline CR is a blank", "PING\rxx\n", []event{{kind: Complete, args: "PING|xx", argc: 2}}},
		{"inline quotes", "SET \"a b\" 'c\\'d' \"\\x41\\n\"\r\n", []event{{kind: Complete, args: "SET|a b|c'd|A\n", argc: 4}}},
		{"empty lines", "\r\n\n   \r\n", []event{{kind: Empty}, {kind: Empty}, {kind: Empty}}},
		{"star zero and negative", "*0\r\n*-5\r\n", []event{{kind: Empty}, {kind: Empty}}},
		{"unchecked trailing bytes", "*1\r\n$4\r\nPINGxx*1\rx$4\rxPING\r\n", []event{{kind: Complete, args: "PING", argc: 1}, {kind: Complete, args: "PING", argc: 1}}},
		{"big argument streamed", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$" + fmt.Sprint(len(big)) + "\r\n" + big + "\r\n", []event{{kind: Complete, args: "SET|k|<nil>", argc: 3}}},
		{"leading zero count", "*03\r\n", []event{{kind: ProtocolError, err: "Protocol error: invalid multibulk length"}}},
		{"plus sign count", "*+1\r\n", []event{{kind: ProtocolError, err: "Protocol error: invalid multibulk length"}}},
		{"count too big", "*2147483648\r\n", []event{{kind: ProtocolError, err: "Protocol error: invalid multibulk length"}}},
		{"20 digits", "*99999999999999999999\r\n", []event{{kind: ProtocolError, err: "Protocol error: invalid multibulk length"}}},
		{"bulk leading zero", "*1\r\n$04\r\nPING\r\n", []event{{kind: ProtocolError, err: "Protocol error: invalid bulk length"}}},
		{"bulk negative", "*1\r\n$-1\r\n", []event{{kind: ProtocolError, err: "Protocol error: invalid bulk length"}}},
		{"bulk over the default limit streams", "*1\r\n$536870913\r\n", nil},
		{"bulk max int64 streams", "*1\r\n$9223372036854775807\r\nxyz", nil},
		{"expected dollar", "*1\r\nx4\r\n", []event{{kind: ProtocolError, err: "Protocol error: expected '$', got 'x'"}}},
		{"bulk header is a line end", "*1\r\n\r\n", []event{{kind: ProtocolError, err: "Protocol error: expected '$', got ' '"}}},
		{"bulk header is an LF", "*2\r\n$1\r\na\r\n\nx\r\n", []event{{kind: ProtocolError, err: "Protocol error: expected '$', got ' '"}}},
		{"bulk header byte as is", "*1\r\n\xff\r\n", []event{{kind: ProtocolError, err: "Protocol error: expected '$', got '\xff'"}}},
		{"NUL starts a bulk header", "*1\r\n\x00abc\r\n", nil},
		{"unbalanced quotes", "GET \"a\r\n", []event{{kind: ProtocolError, err: "Protocol error: unbalanced quotes in request"}}},
		{"closing quote glued", "SET \"a\"b c\r\n", []event{{kind: ProtocolError, err: "Protocol error: unbalanced quotes in request"}}},
		{"NUL hides newline", "ECHO a\x00b\r\n", nil},
		{"NUL hides CR", "*1\x00\r\n", nil},
		{"waiting", "*2\r\n$3\r\nGET\r\n$1\r\n", nil},
		{"valid after error is not reached", "PING\r\n*x\r\nPING\r\n", []event{{kind: Complete, args: "PING", argc: 1}, {kind: ProtocolError, err: "Protocol error: invalid multibulk length"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, split := range []string{"whole", "bytes"} {
				var chunks [][]byte
				if split == "whole" {
					chunks = [][]byte{[]byte(tt.in)}
				} else {
					for i := 0; i < len(tt.in); i++ {
						chunks = append(chunks, []byte{tt.in[i]})
					}
				}
				got, _ := drive(NewRequestParser(), chunks)
				if fmt.Sprint(got) != fmt.Sprint(tt.want) {
					t.Errorf("%s: got %v, want %v", split, got, tt.want)
				}
			}
		})
	}
}

func TestRequestParserTooBig(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"mbulk count", "*" + strings.Repeat("1", MaxInlineSize), "Protocol error: too big mbulk count string"},
		{"bulk count", "*1\r\n$" + strings.Repeat("1", MaxInlineSize), "Protocol error: too big bulk count string"},
		{"NUL bulk count", "*1\r\n\x00\r\n" + strings.Repeat("\r\n", MaxInlineSize/2-1), "Protocol error: too big bulk count string"},
	}
	for _, tt := range tests {
		got, _ := drive(NewRequestParser(), [][]byte{[]byte(tt.in)})
		if len(got) != 1 || got[0].err != tt.want {
			t.Errorf("%s: got %v, want error %q", tt.name, got, tt.want)
		}
		// One byte less is still waiting.
		got, _ = drive(NewRequestParser(), [][]byte{[]byte(tt.in[:len(tt.in)-1])})
		if len(got) != 0 {
			t.Errorf("%s minus one byte: got %v, want nothing yet", tt.name, got)
		}
	}
}

// TestRequestParserSplits feeds one pipeline at every split point and in
// random chunks and expects the same commands each time.
func TestRequestParserSplits(t *testing.T) {
	big := bytes.Repeat([]byte{0, '\r', '\n', 'x'}, 5000)
	var stream []byte
	stream = AppendCommand(stream, []byte("SET"), []byte("k"), big)
	stream = append(stream, "GET k\r\n\r\n"...)
	stream = AppendCommand(stream, []byte("HGET"), []byte("h"), []byte("f\r\n"))
	stream = append(stream, "*0\r\n"...)
	stream = AppendCommand(stream, []byte("MSET"), []byte("a"), big, []byte("b"), []byte("2"))
	want, _ := drive(NewRequestParser(), [][]byte{stream})
	if len(want) != 6 {
		t.Fatalf("whole stream: got %v, want 6 events", want)
	}
	check := func(name string, chunks [][]byte) {
		got, streamed := drive(NewRequestParser(), chunks)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: got %v, want %v", name, got, want)
		}
		if streamed > len(stream) {
			t.Fatalf("%s: streamed %d bytes of a %d-byte stream", name, streamed, len(stream))
		}
	}
	for i := 0; i <= len(stream); i += 7 {
		check(fmt.Sprintf("split at %d", i), [][]byte{stream[:i], stream[i:]})
	}
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 50; round++ {
		var chunks [][]byte
		for rest := stream; len(rest) > 0; {
			n := 1 + rng.Intn(300)
			if n > len(rest) {
				n = len(rest)
			}
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		check(fmt.Sprintf("random round %d", round), chunks)
	}
}

// TestRequestParserHold: in hold mode the same stream gives the same
// commands at every split, and not a byte of any is consumed before it
// is complete, the arguments too big to capture included.
func TestRequestParserHold(t *testing.T) {
	big := bytes.Repeat([]byte{0, '\r', '\n', 'x'}, 5000)
	var stream []byte
	stream = AppendCommand(stream, []byte("SET"), []byte("k"), big)
	stream = append(stream, "GET k\r\n\r\n"...)
	args := [][]byte{[]byte("MSET")}
	for range 20 { // more than UnauthMultibulkLen: not consumed early when held
		args = append(args, []byte("a"), big)
	}
	stream = AppendCommand(stream, args...)
	want, _ := drive(NewRequestParser(), [][]byte{stream})
	held := func() *RequestParser {
		p := NewRequestParser()
		p.SetHold(1 << 20)
		return p
	}
	for i := 0; i <= len(stream); i += 101 {
		got, streamed := drive(held(), [][]byte{stream[:i], stream[i:]})
		if fmt.Sprint(got) != fmt.Sprint(want) || streamed != 0 {
			t.Fatalf("split at %d: got %v with %d bytes consumed early, want %v and 0", i, got, streamed, want)
		}
	}
	var chunks [][]byte
	for i := range stream {
		chunks = append(chunks, stream[i:i+1])
	}
	if got, streamed := drive(held(), chunks); fmt.Sprint(got) != fmt.Sprint(want) || streamed != 0 {
		t.Fatalf("byte by byte: got %v with %d bytes consumed early, want %v and 0", got, streamed, want)
	}
}

// TestRequestParserOversize: a held command over the hold limit, or an
// inline line over MaxInlineSize, ends as Oversize with nothing consumed;
// with hold mode off it parses again from its first byte.
func TestRequestParserOversize(t *testing.T) {
	const limit = 64 << 10
	tests := map[string][]byte{
		"one big bulk":   AppendCommand(nil, []byte("SET"), []byte("k"), bytes.Repeat([]byte("v"), limit)),
		"many bulks":     AppendCommand(nil, append([][]byte{[]byte("MSET")}, bytes.Split(bytes.Repeat([]byte("k v "), limit/4), []byte(" "))...)...),
		"long inline":    append(bytes.Repeat([]byte("x"), MaxInlineSize+1), '\n'),
		"unended inline": bytes.Repeat([]byte("x"), MaxInlineSize+1),
	}
	for name, in := range tests {
		p := NewRequestParser()
		p.SetHold(limit)
		if n, r := p.Parse(AppendCommand(nil, []byte("PING"))); r != Complete || n != 14 {
			t.Fatalf("%s: PING gave (%d, %d)", name, n, r)
		}
		var n int
		r := NeedMore
		for end := 1; end <= len(in) && r == NeedMore; end += 4093 {
			n, r = p.Parse(in[:end])
			if n != 0 {
				t.Fatalf("%s: %d bytes consumed of a held command", name, n)
			}
		}
		if n, r = p.Parse(in); r != Oversize || n != 0 {
			t.Fatalf("%s: got (%d, %d), want (0, Oversize)", name, n, r)
		}
		if p.InProgress() {
			t.Fatalf("%s: a command is still in progress after Oversize", name)
		}
		p.SetHold(0)
		if name == "unended inline" {
			continue // waits for its line end (or MaxInlineLine) unheld
		}
		want, _ := drive(NewRequestParser(), [][]byte{in})
		if got, _ := drive(p, [][]byte{in}); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: parsed again unheld: got %v, want %v", name, got, want)
		}
	}
}

// TestRequestParserReencodes checks that captured arguments of well-formed
// multibulk commands re-encode to the original bytes.
func TestRequestParserReencodes(t *testing.T) {
	cmds := [][][]byte{
		{[]byte("GET"), []byte("k")},
		{[]byte("SET"), []byte("\x00\xff"), []byte("")},
		{[]byte("HSET"), []byte("h"), []byte("f"), []byte("v")},
	}
	for _, args := range cmds {
		in := AppendCommand(nil, args...)
		p := NewRequestParser()
		n, r := p.Parse(in)
		if r != Complete || n != len(in) {
			t.Fatalf("%q: got (%d, %d), want (%d, Complete)", in, n, r, len(in))
		}
		if out := AppendCommand(nil, p.Args()...); !bytes.Equal(out, in) {
			t.Errorf("re-encoded %q, want %q", out, in)
		}
	}
}

func TestRequestParserCaptureLimits(t *testing.T) {
	args := [][]byte{[]byte("DEL")}
	for i := 0; i < DefaultCaptureArgs+10; i++ {
		args = append(args, []byte("k"))
	}
	in := AppendCommand(nil, args...)
	p := NewRequestParser()
	n, r := p.Parse(in)
	if r != Complete || n != len(in) {
		t.Fatalf("got (%d, %d), want (%d, Complete)", n, r, len(in))
	}
	if got, want := len(p.Args()), DefaultCaptureArgs; got != want {
		t.Errorf("captured %d args, want %d", got, want)
	}
	if got, want := p.Argc(), int64(len(args)); got != want {
		t.Errorf("argc %d, want %d", got, want)
	}
}

func TestRequestParserAllocs(t *testing.T) {
	in := AppendCommand(nil, []byte("GET"), []byte("some:key"))
	p := NewRequestParser()
	p.Parse(in)
	allocs := testing.AllocsPerRun(1000, func() { p.Parse(in) })
	if allocs != 0 {
		t.Errorf("Parse allocates %v times per GET, want 0", allocs)
	}
}

// TestRequestParserUnauthLimits: a header Redis refuses from a client it
// does not count as authenticated is consumed (forwarded) at once, so that
// Redis can refuse it (the arguments after a multibulk header are held);
// one Redis takes from anyone is held until the command is complete.
func TestRequestParserUnauthLimits(t *testing.T) {
	tests := []struct {
		in           string
		wantStreamed int
	}{
		{"*11\r\n", 5},
		{"*11\r\n$4\r\nMSET\r\n$1\r\n", 5},
		{"*10\r\n$4\r\nMSET\r\n$1\r\n", 0},
		{"*2\r\n$3\r\nGET\r\n$16385\r\n", 21},
	}
	for _, tt := range tests {
		for _, split := range []bool{false, true} {
			chunks := [][]byte{[]byte(tt.in)}
			if split {
				chunks = nil
				for i := range len(tt.in) {
					chunks = append(chunks, []byte(tt.in[i:i+1]))
				}
			}
			evs, streamed := drive(NewRequestParser(), chunks)
			if len(evs) != 0 || streamed != tt.wantStreamed {
				t.Errorf("%q (byte by byte %v): got %v, %d bytes streamed; want none, %d", tt.in, split, evs, streamed, tt.wantStreamed)
			}
		}
	}
}

// TestRequestParserErrEnd: after a protocol error, Redis needs to see the
// bad line (or MaxInlineSize+1 bytes of a line too long), no more.
func TestRequestParserErrEnd(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"*x\r\nGARBAGE", 4},
		{"*1\r\n$-5\r\nGARBAGE", 9},
		{"*1\r\nx4\r\nGARBAGE", 8},
		{"GET \"a\r\nGARBAGE", 8},
		{"*1\r\n$" + strings.Repeat("1", MaxInlineSize+5), 4 + MaxInlineSize + 1},
	}
	for _, tt := range tests {
		p := NewRequestParser()
		if _, r := p.Parse([]byte(tt.in)); r != ProtocolError || p.ErrEnd() != tt.want {
			t.Errorf("%.20q: got %d end %d, want ProtocolError end %d", tt.in, r, p.ErrEnd(), tt.want)
		}
	}
}

// TestRequestParserLongInline: an inline line longer than MaxInlineSize
// completes as one uncaptured argument (Redis decides whether it takes
// it); an unterminated one fails past MaxInlineLine, with just enough sent
// for Redis to fail it too.
func TestRequestParserLongInline(t *testing.T) {
	line := "GET " + strings.Repeat("a", MaxInlineSize+100) + "\r\n"
	for _, chunks := range [][]string{{line + "PING\r\n"}, {line[:MaxInlineSize+10], line[MaxInlineSize+10:] + "PING\r\n"}} {
		var parts [][]byte
		for _, c := range chunks {
			parts = append(parts, []byte(c))
		}
		got, _ := drive(NewRequestParser(), parts)
		if fmt.Sprint(got) != "[{1 \"<nil>\" argc=1 \"\"} {1 \"PING\" argc=1 \"\"}]" {
			t.Errorf("%d chunks: got %v", len(chunks), got)
		}
	}
	p := NewRequestParser()
	if _, r := p.Parse([]byte(strings.Repeat("a", MaxInlineLine))); r != NeedMore {
		t.Errorf("unterminated line of MaxInlineLine bytes: %d, want NeedMore", r)
	}
	if _, r := p.Parse([]byte(strings.Repeat("a", MaxInlineLine+1))); r != ProtocolError ||
		p.Err() != "Protocol error: too big inline request" || p.ErrEnd() != MaxInlineSize+1 {
		t.Errorf("unterminated line past MaxInlineLine: %d %q end %d", r, p.Err(), p.ErrEnd())
	}
}

// TestRequestParserLinear feeds requests one byte per Parse call, as a
// client sending one byte per TCP segment makes the proxy do, and checks
// that the parser searched each byte for a line end a bounded number of
// times: a command in progress is resumed where it stopped, not parsed
// again from its start (which made this quadratic).
func TestRequestParserLinear(t *testing.T) {
	tenArgs := [][]byte{[]byte("MSET")}
	for i := 0; i < 9; i++ {
		tenArgs = append(tenArgs, bytes.Repeat([]byte{'k'}, DefaultCaptureArg))
	}
	tests := []struct {
		name string
		in   []byte
	}{
		{"1,000 arguments", thousandArgs()},
		{"10 arguments of 4 KiB", AppendCommand(nil, tenArgs...)},
		{"GET", AppendCommand(nil, []byte("GET"), bytes.Repeat([]byte{'k'}, DefaultCaptureArg))},
		{"inline line of 100 KB", []byte("ECHO " + strings.Repeat("x", 100_000) + "\r\n")},
		{"unfinished bulk count line", []byte("*1\r\n$" + strings.Repeat("1", MaxInlineSize-10))},
		{"unfinished multibulk count line", []byte("*" + strings.Repeat("1", MaxInlineSize-10))},
		{"bulk count line hidden by a NUL", []byte("*1\r\n\x00" + strings.Repeat("\r\n", MaxInlineSize/2-10))},
		{"inline line hidden by a NUL", []byte("ECHO \x00" + strings.Repeat("\n", MaxInlineSize))},
	}
	for _, tt := range tests {
		var chunks [][]byte
		for i := range tt.in {
			chunks = append(chunks, tt.in[i:i+1])
		}
		p := NewRequestParser()
		want, _ := drive(NewRequestParser(), [][]byte{tt.in})
		got, _ := drive(p, chunks)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: byte by byte %v, whole %v", tt.name, got, want)
		}
		if limit := 3 * int64(len(tt.in)); p.scanned > limit {
			t.Errorf("%s: %d bytes searched for line ends in a %d-byte input fed byte by byte, want at most %d",
				tt.name, p.scanned, len(tt.in), limit)
		}
	}
}

// TestRequestParserShrink: after a command of 1,000 arguments, Shrink
// lets the argument buffers go and parsing goes on; in the middle of a
// streamed command it keeps them.
func TestRequestParserShrink(t *testing.T) {
	p := NewRequestParser()
	args := [][]byte{[]byte("SADD"), []byte("s")}
	for i := range 998 {
		args = append(args, []byte(fmt.Sprintf("member-%050d", i)))
	}
	big := AppendCommand(nil, args...)
	if n, r := p.Parse(big); r != Complete || n != len(big) || p.Argc() != 1000 {
		t.Fatalf("Parse(1,000 arguments) = %d, %v, argc %d", n, r, p.Argc())
	}
	if !p.Shrink() || cap(p.buf) > shrinkBuf || cap(p.offs) > shrinkArgs {
		t.Fatalf("Shrink after 1,000 arguments: buf %d, offs %d", cap(p.buf), cap(p.offs))
	}
	if p.Shrink() {
		t.Fatal("a second Shrink reported freeing something")
	}
	small := AppendCommand(nil, []byte("GET"), []byte("k"))
	if n, r := p.Parse(small); r != Complete || n != len(small) || string(bytes.Join(p.Args(), []byte(" "))) != "GET k" {
		t.Fatalf("Parse(GET k) after Shrink = %d, %v, %q", n, r, p.Args())
	}
	// Streamed: an argument over the capture limit, half sent.
	streamed := AppendCommand(nil, []byte("SET"), []byte("k"), bytes.Repeat([]byte("v"), DefaultCaptureArg+1))
	half := len(streamed) - 100
	n, r := p.Parse(streamed[:half])
	if r != NeedMore || !p.Streaming() {
		t.Fatalf("Parse(half a streamed SET) = %d, %v, streaming %v", n, r, p.Streaming())
	}
	if p.Shrink() {
		t.Fatal("Shrink freed buffers of a streamed command in progress")
	}
	if m, r := p.Parse(streamed[n:]); r != Complete || n+m != len(streamed) || string(p.Args()[0]) != "SET" || string(p.Args()[1]) != "k" {
		t.Fatalf("the rest of the streamed SET = %d, %v, %q", m, r, p.Args())
	}
}

// TestRequestParserNulVisible: with SetNulVisible (Valkey 8's memchr), a
// NUL byte no longer hides a multibulk header line's end, and the line is
// judged as Valkey judges it (replies checked against valkey-server 8.1.1);
// inline requests still wait, as on every server.
func TestRequestParserNulVisible(t *testing.T) {
	for _, tt := range []struct{ in, redis, valkey string }{
		{"*1\r\n$\x00\r\n", "", "Protocol error: invalid bulk length"},
		{"*1\r\n\x00abc\r\n", "", "Protocol error: expected '$', got '\x00'"},
		{"*\x001\r\n", "", "Protocol error: invalid multibulk length"},
		{"*1\r\n$3\x00\r\nabc\r\n", "", "Protocol error: invalid bulk length"},
		{"ECHO a\x00b\r\n", "", ""},
	} {
		for _, visible := range []bool{false, true} {
			p := NewRequestParser()
			p.SetNulVisible(visible)
			evs, _ := drive(p, [][]byte{[]byte(tt.in)})
			got := ""
			if len(evs) > 0 {
				got = evs[len(evs)-1].err
			}
			want := tt.redis
			if visible {
				want = tt.valkey
			}
			if got != want {
				t.Errorf("%q (NUL visible %v): got error %q, want %q (events %v)", tt.in, visible, got, want, evs)
			}
		}
	}
}
