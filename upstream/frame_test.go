package upstream

import (
	"testing"
)

func TestScanFrame(t *testing.T) {
	const pmsg = "*4\r\n$8\r\npmessage\r\n$16\r\n__keyspace@*__:*\r\n$17\r\n__keyspace@3__:k1\r\n$3\r\nset\r\n"
	const flush = "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*-1\r\n"
	const keys = "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$2\r\nab\r\n"
	tests := []struct {
		in      string
		n       int // 0: incomplete, -1: len(in)
		bad     bool
		db      int
		key     string
		isKey   bool
		isFlush bool
	}{
		{in: pmsg, n: len(pmsg), db: 3, key: "k1", isKey: true},
		{in: pmsg + "*2\r\n", n: len(pmsg), db: 3, key: "k1", isKey: true},
		{in: flush, n: len(flush), isFlush: true},
		{in: keys, n: len(keys)},
		{in: "*3\r\n$10\r\npsubscribe\r\n$16\r\n__keyspace@*__:*\r\n:1\r\n", n: -1},
		{in: "*2\r\n$4\r\npong\r\n$2\r\n17\r\n", n: -1},
		{in: "+OK\r\n", n: -1},
		{in: ":42\r\n", n: -1},
		{in: "-ERR unknown command\r\n", n: -1},
		{in: "$-1\r\n", n: -1},
		{in: "*-1\r\n", n: -1},
		{in: "*0\r\n", n: -1},
		{in: "*2\r\n*1\r\n:1\r\n$0\r\n\r\n", n: -1},
		// A channel that is not a keyspace one is neither.
		{in: "*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$4\r\nchan\r\n$1\r\nx\r\n", n: -1},
		// Every proper prefix is incomplete.
		{in: pmsg[:len(pmsg)-1]},
		{in: pmsg[:30]},
		{in: "$5\r\nab"},
		{in: "-ERR a long error that has not ended yet, longer than any length header"},
		{in: ""},
		// Not RESP2.
		{in: "hello\r\n", bad: true},
		{in: "$5\r\nabcdefg\r\n", bad: true},
		{in: "$x\r\n", bad: true},
		{in: "*-2\r\n", bad: true},
		{in: "+OK\n", bad: true},
		{in: "\r\n", bad: true},
		{in: "$123456789012345678901234567890123", bad: true},
		{in: "_\r\n", bad: true},        // RESP3 on a RESP2 connection
		{in: "*1\r\n%0\r\n", bad: true}, // ... at any depth
		// Deep nesting costs nothing (resp.Scanner counts, never recurses).
		{in: "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", n: -1},
	}
	for _, tt := range tests {
		if tt.n == -1 {
			tt.n = len(tt.in) // complete
		}
		var f frame
		n, err := scanFrame([]byte(tt.in), &f)
		if (err != nil) != tt.bad || n != tt.n {
			t.Errorf("scanFrame(%q) = %d, %v; want %d, bad=%v", tt.in, n, err, tt.n, tt.bad)
			continue
		}
		if n == 0 {
			continue
		}
		db, key, isKey, isFlush := f.notification()
		if isKey != tt.isKey || isFlush != tt.isFlush || (isKey && (db != tt.db || string(key) != tt.key)) {
			t.Errorf("notification of %q = %d, %q, %v, %v; want %d, %q, %v, %v",
				tt.in, db, key, isKey, isFlush, tt.db, tt.key, tt.isKey, tt.isFlush)
		}
	}
}

// FuzzScanFrame checks that scanFrame never panics, and that a reply it
// accepts is accepted whole from any split point: a prefix is incomplete
// and the reply followed by anything has the same length.
func FuzzScanFrame(f *testing.F) {
	f.Add([]byte("*4\r\n$8\r\npmessage\r\n$16\r\n__keyspace@*__:*\r\n$17\r\n__keyspace@3__:k1\r\n$3\r\nset\r\n"))
	f.Add([]byte("*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*-1\r\n"))
	f.Add([]byte("*2\r\n$4\r\npong\r\n$2\r\n17\r\n"))
	f.Add([]byte("$-1\r\n:9223372036854775807\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr frame
		n, err := scanFrame(b, &fr)
		if err != nil || n == 0 {
			return
		}
		fr.notification()
		for i := range n {
			if m, err := scanFrame(b[:i], &fr); m != 0 || err != nil {
				t.Fatalf("prefix %q of %q: %d, %v; want incomplete", b[:i], b[:n], m, err)
			}
		}
		if m, err := scanFrame(append(b[:n:n], "+x\r\n"...), &fr); m != n || err != nil {
			t.Fatalf("%q followed by more: %d, %v; want %d", b[:n], m, err, n)
		}
	})
}
