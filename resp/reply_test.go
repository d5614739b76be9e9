package resp

import (
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
)

// frameAll feeds chunks to a fresh framer and returns the sizes of the
// replies it found, or the error.
func frameAll(chunks [][]byte) (sizes []int64, err error) {
	var f ReplyFramer
	var buf []byte
	for _, c := range chunks {
		buf = append(buf, c...)
		for len(buf) > 0 {
			n, done, ferr := f.Feed(buf)
			if ferr != nil {
				return sizes, ferr
			}
			buf = buf[n:]
			if done {
				sizes = append(sizes, f.Frame().Size)
			} else if n == 0 || len(buf) == 0 {
				break
			}
		}
	}
	return sizes, nil
}

func TestReplyFramerTable(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // fmt of the Frame summary fields checked below
	}{
		{"simple", "+OK\r\n", "+ OK 2 null=false"},
		{"error", "-ERR bad thing\r\n", "- ERR bad thing 13 null=false"},
		{"integer", ":-42\r\n", ": -42 3 null=false"},
		{"bulk", "$5\r\nhello\r\n", "$ hello 5 null=false"},
		{"empty bulk", "$0\r\n\r\n", "$  0 null=false"},
		{"null bulk", "$-1\r\n", "$  -1 null=true"},
		{"null array", "*-1\r\n", "*  -1 null=true"},
		{"resp3 null", "_\r\n", "_  0 null=true"},
		{"bool", "#t\r\n", "# t 1 null=false"},
		{"double", ",3.14\r\n", ", 3.14 4 null=false"},
		{"big number", "(123456789012345678901234567890\r\n", "( 123456789012345678901234567890 30 null=false"},
		{"verbatim", "=8\r\ntxt:abcd\r\n", "= txt:abcd 8 null=false"},
		{"bulk error", "!3\r\nERR\r\n", "! ERR 3 null=false"},
		{"array", "*2\r\n$1\r\na\r\n:1\r\n", "*  2 null=false"},
		{"map", "%1\r\n+k\r\n*1\r\n+v\r\n", "%  1 null=false"},
		{"set", "~0\r\n", "~  0 null=false"},
		{"push", ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n", ">  3 null=false"},
		{"attribute first", "|1\r\n+ttl\r\n:3\r\n$2\r\nhi\r\n", "$ hi 2 null=false"},
		{"nested attribute", "*1\r\n|1\r\n+a\r\n+b\r\n:7\r\n", "*  1 null=false"},
	}
	for _, tt := range tests {
		for _, split := range []int{0, 1} {
			var chunks [][]byte
			if split == 0 {
				chunks = [][]byte{[]byte(tt.in)}
			} else {
				for i := range len(tt.in) {
					chunks = append(chunks, []byte{tt.in[i]})
				}
			}
			var f ReplyFramer
			var buf []byte
			var got string
			for _, c := range chunks {
				buf = append(buf, c...)
				n, done, err := f.Feed(buf)
				if err != nil {
					t.Fatalf("%s: Feed error %v", tt.name, err)
				}
				buf = buf[n:]
				if done {
					fr := f.Frame()
					got = fmt.Sprintf("%c %s %d null=%v", fr.Value.Type, fr.Value.Head(), fr.Value.Len, fr.Value.Null)
					if fr.Size != int64(len(tt.in)) {
						t.Errorf("%s: size %d, want %d", tt.name, fr.Size, len(tt.in))
					}
				}
			}
			if got != tt.want {
				t.Errorf("%s (split %d): got %q, want %q", tt.name, split, got, tt.want)
			}
		}
	}
}

func TestReplyFramerElems(t *testing.T) {
	in := ">3\r\n$9\r\nsubscribe\r\n$3\r\nfoo\r\n:2\r\n"
	var f ReplyFramer
	n, done, err := f.Feed([]byte(in))
	if err != nil || !done || n != len(in) {
		t.Fatalf("Feed = %d, %v, %v; want %d, true, nil", n, done, err, len(in))
	}
	fr := f.Frame()
	got := fmt.Sprintf("%s %s %s %c", fr.Elems[0].Head(), fr.Elems[1].Head(), fr.Elems[2].Head(), fr.Elems[2].Type)
	if want := "subscribe foo 2 :"; got != want {
		t.Errorf("elems %q, want %q", got, want)
	}
	// An attribute before the first element is skipped.
	in = "*2\r\n|1\r\n+x\r\n+y\r\n$7\r\nmessage\r\n:5\r\n"
	f = ReplyFramer{}
	if _, done, err = f.Feed([]byte(in)); !done || err != nil {
		t.Fatalf("Feed = %v, %v", done, err)
	}
	fr = f.Frame()
	if got := string(fr.Elems[0].Head()) + "," + string(fr.Elems[1].Head()); got != "message,5" {
		t.Errorf("elems after attribute %q, want %q", got, "message,5")
	}
}

func TestReplyFramerElemTypes(t *testing.T) {
	in := "*4\r\n+OK\r\n|1\r\n+a\r\n+b\r\n-ERR x\r\n*1\r\n:1\r\n$1\r\nv\r\n"
	var f ReplyFramer
	if _, done, err := f.Feed([]byte(in)); !done || err != nil {
		t.Fatalf("Feed = %v, %v", done, err)
	}
	var got []byte
	for i := 0; ; i++ {
		ty, ok := f.ElemType(i)
		if !ok {
			break
		}
		got = append(got, ty)
	}
	if string(got) != "+-*$" {
		t.Errorf("element types %q, want %q", got, "+-*$")
	}
}

func TestReplyFramerErrors(t *testing.T) {
	bad := []string{
		"x\r\n", "+OK\n", "$3\r\nabcXX", "$-2\r\n", "*-2\r\n", "%-1\r\n", ":12a\r\n", "#x\r\n", "_x\r\n",
		"$" + strings.Repeat("1", 40) + "\r\n", "$9223372036854775807\r\n", "*?\r\n", ":" + strings.Repeat("9", 25) + "\r\n",
		"*4611686018427387905\r\n", "*1\r\n*4611686018427387904\r\n*4611686018427387904\r\n",
	}
	for _, in := range bad {
		if _, err := frameAll([][]byte{[]byte(in)}); err == nil {
			t.Errorf("%q: no error, want ErrReplyProtocol", in)
		}
	}
}

// genDeep appends one value nested depth levels deep: each level is a
// random aggregate (array, map, set, push, or an attribute before one)
// holding the deeper value at a random position among short scalars, so
// that no two levels need look alike.
func genDeep(rng *rand.Rand, dst []byte, depth int) []byte {
	if depth == 0 {
		return genValue(rng, dst, 0)
	}
	if rng.Intn(8) == 0 {
		dst = append(dst, "|1\r\n+a\r\n"...)
		if rng.Intn(2) == 0 {
			// The attribute's value is the deeper one.
			dst = genDeep(rng, dst, depth-1)
			return genValue(rng, dst, 1)
		}
		dst = append(dst, ":1\r\n"...)
	}
	t := "*%~>"[rng.Intn(4)]
	n := 1 + rng.Intn(3)
	dst = append(append(append(dst, t), strconv.Itoa(n)...), "\r\n"...)
	if t == '%' {
		n *= 2
	}
	at := rng.Intn(n)
	for i := range n {
		if i == at {
			dst = genDeep(rng, dst, depth-1)
		} else {
			dst = genValue(rng, dst, 0)
		}
	}
	return dst
}

// TestReplyFramerDeep: replies nested deeper than any stack of levels
// would hold (Redis sends 4097 levels for a Lua table that deep, and 7995
// then an error for a table that holds itself) are framed whole, at any
// split, in constant memory: framing one allocates nothing.
func TestReplyFramerDeep(t *testing.T) {
	chain := func(n int, header, leaf string) string { return strings.Repeat(header, n) + leaf }
	replies := []string{
		chain(4097, "*1\r\n", "$1\r\nx\r\n"),
		chain(7995, "*1\r\n", "-ERR reached lua stack limit\r\n"),
		chain(100000, "*2\r\n:1\r\n", ":2\r\n"), // the deeper value last
		chain(100000, "%1\r\n+k\r\n", "_\r\n"),  // RESP3 maps of maps
		chain(100000, "|1\r\n+a\r\n:1\r\n*1\r\n", "#t\r\n"),
	}
	// The deeper value first: every level still waits for its other
	// elements when the innermost one arrives.
	first := chain(100000, "*2\r\n", ":1\r\n") + strings.Repeat(":2\r\n", 100000)
	replies = append(replies, first)
	rng := rand.New(rand.NewSource(3))
	for range 5 {
		replies = append(replies, string(genDeep(rng, nil, 20000+rng.Intn(20000))))
	}
	for i, r := range replies {
		stream := []byte(r + "+PONG\r\n")
		want := fmt.Sprint([]int64{int64(len(r)), 7})
		if got, err := frameAll([][]byte{stream}); err != nil || fmt.Sprint(got) != want {
			t.Errorf("reply %d (%d bytes): got %v, %v; want %v, nil", i, len(r), got, err, want)
		}
		var chunks [][]byte
		for rest := stream; len(rest) > 0; {
			n := min(1+rng.Intn(7), len(rest))
			chunks, rest = append(chunks, rest[:n]), rest[n:]
		}
		if got, err := frameAll(chunks); err != nil || fmt.Sprint(got) != want {
			t.Errorf("reply %d in pieces: got %v, %v; want %v, nil", i, got, err, want)
		}
	}
	var f ReplyFramer
	in := []byte(first)
	allocs := testing.AllocsPerRun(3, func() {
		if n, done, err := f.Feed(in); n != len(in) || !done || err != nil {
			t.Fatalf("Feed = %d, %v, %v; want %d, true, nil", n, done, err, len(in))
		}
	})
	if allocs != 0 {
		t.Errorf("framing a reply 100,000 levels deep allocated %v times, want 0", allocs)
	}
	fr := f.Frame()
	if got := fmt.Sprintf("%c %d %c %d %c", fr.Value.Type, fr.Value.Len, fr.Elems[0].Type, fr.Elems[0].Len, fr.Elems[1].Type); got != "* 2 * 2 :" {
		t.Errorf("summary of the deep reply %q, want %q", got, "* 2 * 2 :")
	}
}

// genValue appends one random RESP2/RESP3 value of nesting depth <= d.
func genValue(rng *rand.Rand, dst []byte, d int) []byte {
	k := rng.Intn(14)
	if d == 0 && k >= 9 {
		k = rng.Intn(9)
	}
	switch k {
	case 0:
		return append(dst, "+OK\r\n"...)
	case 1:
		return append(dst, "-ERR x y\r\n"...)
	case 2:
		return append(append(append(dst, ':'), strconv.Itoa(rng.Intn(2000)-1000)...), "\r\n"...)
	case 3:
		b := make([]byte, rng.Intn(70))
		rng.Read(b)
		return AppendBulk(dst, b)
	case 4:
		return append(dst, "$-1\r\n"...)
	case 5:
		return append(dst, "_\r\n"...)
	case 6:
		return append(dst, "#f\r\n"...)
	case 7:
		return append(dst, ",1.5e3\r\n"...)
	case 8:
		return append(dst, "=7\r\ntxt:a\r\n\r\n"...)
	case 9, 10, 11, 12:
		n := rng.Intn(4)
		dst = append(append(append(dst, "*%~>"[k-9]), strconv.Itoa(n)...), "\r\n"...)
		if k == 10 {
			n *= 2
		}
		for range n {
			dst = genValue(rng, dst, d-1)
		}
		return dst
	default:
		dst = append(dst, "|1\r\n+a\r\n"...)
		dst = genValue(rng, dst, d-1)
		return genValue(rng, dst, d-1)
	}
}

// TestReplyFramerRandom frames random replies at random split points and
// expects exactly the generated boundaries.
func TestReplyFramerRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for round := range 300 {
		var stream []byte
		var want []int64
		for range 1 + rng.Intn(8) {
			before := len(stream)
			stream = genValue(rng, stream, 4)
			want = append(want, int64(len(stream)-before))
		}
		var chunks [][]byte
		for rest := stream; len(rest) > 0; {
			n := 1 + rng.Intn(20)
			if n > len(rest) {
				n = len(rest)
			}
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		got, err := frameAll(chunks)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("round %d: %q: got %v, %v; want %v", round, stream, got, err, want)
		}
	}
}

func BenchmarkFrameBulk(b *testing.B) {
	in := AppendBulk(nil, []byte(strings.Repeat("x", 64)))
	var f ReplyFramer
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for i := 0; i < b.N; i++ {
		f.Feed(in)
	}
}

// BenchmarkFrameArray frames an array of 16 bulk strings of 16 bytes, an
// MGET or LRANGE reply.
func BenchmarkFrameArray(b *testing.B) {
	var in []byte
	in = append(in, "*16\r\n"...)
	for range 16 {
		in = AppendBulk(in, []byte(strings.Repeat("v", 16)))
	}
	var f ReplyFramer
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for i := 0; i < b.N; i++ {
		f.Feed(in)
	}
}
