package resp

import (
	"strings"
	"testing"
)

// TestScannerValues reads whole values of every type, then checks every
// proper prefix of each reports ScanIncomplete without moving.
func TestScannerValues(t *testing.T) {
	tests := []struct {
		in   string
		typ  byte
		null bool
		n    int
		data string
	}{
		{"+OK\r\n", '+', false, 0, "OK"},
		{"-ERR x\r\n", '-', false, 0, "ERR x"},
		{":-12\r\n", ':', false, 0, "-12"},
		{"$5\r\nhello\r\n", '$', false, 0, "hello"},
		{"$0\r\n\r\n", '$', false, 0, ""},
		{"$-1\r\n", '$', true, 0, ""},
		{"*-1\r\n", '*', true, 0, ""},
		{"*2\r\n$1\r\na\r\n:1\r\n", '*', false, 2, ""},
		{"%1\r\n+a\r\n+b\r\n", '%', false, 2, ""},
		{"|1\r\n+a\r\n+b\r\n+v\r\n", '|', false, 2, ""},
		{"~0\r\n", '~', false, 0, ""},
		{">1\r\n+m\r\n", '>', false, 1, ""},
		{"_\r\n", '_', true, 0, ""},
		{",1.5\r\n", ',', false, 0, "1.5"},
		{"#t\r\n", '#', false, 0, "t"},
		{"(123456789012345678901234567890\r\n", '(', false, 0, "123456789012345678901234567890"},
		{"!3\r\nerr\r\n", '!', false, 0, "err"},
		{"=7\r\ntxt:abc\r\n", '=', false, 0, "txt:abc"},
	}
	for _, tt := range tests {
		s := NewScanner([]byte(tt.in))
		tok, st := s.Next()
		if st != ScanOK || tok.Type != tt.typ || tok.Null != tt.null || tok.N != tt.n || string(tok.Data) != tt.data || tok.Start != 0 {
			t.Errorf("Next(%q): got %v %q null=%v n=%d data=%q start=%d, want ScanOK %q null=%v n=%d data=%q start=0",
				tt.in, st, tok.Type, tok.Null, tok.N, tok.Data, tok.Start, tt.typ, tt.null, tt.n, tt.data)
		}
		if st := s.SkipRest(tok); st != ScanOK || s.Offset() != len(tt.in) {
			t.Errorf("SkipRest(%q): got %v at %d, want ScanOK at %d", tt.in, st, s.Offset(), len(tt.in))
		}
		for i := range len(tt.in) {
			p := NewScanner([]byte(tt.in[:i]))
			if st := p.Skip(1); st != ScanIncomplete {
				t.Errorf("Skip(1) of %q (prefix of %q): got %v, want ScanIncomplete", tt.in[:i], tt.in, st)
			}
		}
	}
}

// TestScannerInvalid: what is not RESP, and lengths that cannot be.
func TestScannerInvalid(t *testing.T) {
	for _, in := range []string{
		"?x\r\n", "+OK\n", "$5\r\nhelloXY", "$-2\r\n", "%-1\r\n", "!-1\r\n", "$01\r\n", "$+1\r\n",
		"*9223372036854775807\r\n", "$9223372036854775808\r\n", "_x\r\n", ":1a\r\n", ":\r\n",
		"$" + strings.Repeat("1", maxHeaderLine+1), // no CRLF yet, but no length is that long
		"*" + strings.Repeat("1", maxHeaderLine) + "\r\n",
		"\r\n",
	} {
		s := NewScanner([]byte(in))
		if st := s.Skip(1); st != ScanInvalid {
			t.Errorf("Skip(1) of %q: got %v, want ScanInvalid", in, st)
		}
	}
	// A declared length beyond the bytes there is incomplete, not an
	// allocation or an overflow.
	for _, in := range []string{"*4611686018427387904\r\n", "%4611686018427387904\r\n", "$4611686018427387904\r\n"} {
		s := NewScanner([]byte(in))
		if st := s.Skip(1); st != ScanIncomplete {
			t.Errorf("Skip(1) of %q: got %v, want ScanIncomplete", in, st)
		}
	}
}

// TestScannerRESP2: OnlyRESP2 refuses RESP3 types anywhere in a value.
func TestScannerRESP2(t *testing.T) {
	for in, want := range map[string]ScanStatus{
		"*2\r\n$1\r\na\r\n:1\r\n": ScanOK,
		"*1\r\n_\r\n":             ScanInvalid,
		"%1\r\n+a\r\n+b\r\n":      ScanInvalid,
		"*1\r\n*1\r\n#t\r\n":      ScanInvalid,
	} {
		s := NewScanner([]byte(in))
		s.OnlyRESP2()
		if st := s.Skip(1); st != want {
			t.Errorf("RESP2 Skip(1) of %q: got %v, want %v", in, st, want)
		}
	}
}

// FuzzScanner: on any input the scanner never panics, and a value it
// reads whole re-reads the same from a copy holding only its bytes.
func FuzzScanner(f *testing.F) {
	for _, seed := range []string{"*2\r\n$1\r\na\r\n:1\r\n", "|1\r\n+a\r\n+b\r\n+v\r\n", "$-1\r\n", "*-1\r\n",
		"$9223372036854775807\r\n", "*3\r\n", "%2\r\n", "$4\r\nab\r\n\r\n"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := NewScanner(b)
		if s.Skip(1) != ScanOK {
			return
		}
		n := s.Offset()
		again := NewScanner(append([]byte(nil), b[:n]...))
		if st := again.Skip(1); st != ScanOK || again.Offset() != n {
			t.Fatalf("%q: value of %d bytes re-read: %v at %d", b, n, st, again.Offset())
		}
		if n > 0 {
			short := NewScanner(b[:n-1])
			if st := short.Skip(1); st == ScanOK {
				t.Fatalf("%q: value of %d bytes read whole without its last byte", b, n)
			}
		}
	})
}
