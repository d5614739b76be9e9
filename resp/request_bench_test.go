package resp

import (
	"bytes"
	"strconv"
	"testing"
)

// benchParse parses in, a whole number of requests, until it is consumed.
func benchParse(b *testing.B, in []byte) {
	p := NewRequestParser()
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for rest := in; len(rest) > 0; {
			n, r := p.Parse(rest)
			if r == NeedMore || r == ProtocolError {
				b.Fatalf("Parse: %d", r)
			}
			rest = rest[n:]
		}
	}
}

func BenchmarkParseGet(b *testing.B) {
	benchParse(b, AppendCommand(nil, []byte("GET"), []byte("some:key")))
}

func BenchmarkParseGetPipeline16(b *testing.B) {
	var in []byte
	for i := 0; i < 16; i++ {
		in = AppendCommand(in, []byte("GET"), []byte("key:"+strconv.Itoa(i)))
	}
	benchParse(b, in)
}

func BenchmarkParseSet64(b *testing.B) {
	benchParse(b, AppendCommand(nil, []byte("SET"), []byte("some:key"), bytes.Repeat([]byte("v"), 64)))
}

func BenchmarkParseMSet100(b *testing.B) {
	args := [][]byte{[]byte("MSET")}
	for i := 0; i < 50; i++ {
		args = append(args, []byte("key:"+strconv.Itoa(i)), []byte("value"))
	}
	benchParse(b, AppendCommand(nil, args...))
}

func BenchmarkParseInlineGet(b *testing.B) {
	benchParse(b, []byte("GET some:key\r\n"))
}

// thousandArgs is a 1,000-argument command of about 58 KB, all arguments
// small enough to be captured.
func thousandArgs() []byte {
	args := [][]byte{[]byte("RPUSH")}
	for i := 0; i < 999; i++ {
		args = append(args, bytes.Repeat([]byte{'a' + byte(i%26)}, 50))
	}
	return AppendCommand(nil, args...)
}

// BenchmarkParseByteAtATime feeds a 58 KB command one byte per Parse call,
// as a client sending one byte per TCP segment makes the proxy do: the
// time per byte must not grow with the command's size.
func BenchmarkParseByteAtATime(b *testing.B) {
	in := thousandArgs()
	p := NewRequestParser()
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := 0
		for end := 1; end <= len(in); end++ {
			n, r := p.Parse(in[start:end])
			if r == ProtocolError {
				b.Fatal("protocol error")
			}
			start += n
		}
		if start != len(in) {
			b.Fatalf("consumed %d of %d bytes", start, len(in))
		}
	}
}
