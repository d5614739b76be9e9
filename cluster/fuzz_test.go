package cluster

import (
	"bytes"
	"strings"
	"testing"
)

// fuzzMap's targets are none of its sources, so rewriting twice is
// rewriting once.
var fuzzEntries = []string{
	":7100=:8100",
	":7105=:8105",
	"127.0.0.1:7101=cicada-1.example:8101",
	"[::1]:7102=[::2]:8102",
	"redis-7103.example:7103=c3:8103",
	"127.0.0.1:7104=127.0.0.1:8104",
	"10.0.0.1:6379=sidecar-1:6380",
	":6379=:6380",
}

// FuzzRewrite feeds Rewrite (kind 1-3) and RewriteRedirect (kind 0) any
// bytes. Beyond not panicking: an unchanged reply is returned as the same
// slice; a changed one is one well-formed reply of the same shape in which
// only strings and integers differ; rewriting is idempotent.
func FuzzRewrite(f *testing.F) {
	for name, b := range fixtures(f) {
		f.Add(uint8(fixtureKind(name)), b)
	}
	for _, s := range []string{
		"-MOVED 3999 10.0.0.1:6379\r\n", "-ASK 1 :6379\r\n", "-MOVED 1 ?:7100\r\n",
		"$-1\r\n", "*-1\r\n", "_\r\n", "*0\r\n", "%0\r\n", "$0\r\n\r\n",
		"*9223372036854775807\r\n", "$9223372036854775807\r\n", "%4611686018427387904\r\n",
		"*99999999999999999999\r\n", "$-2\r\n", "*1\r\n", "$1\r\n",
		"|1\r\n+a\r\n+b\r\n*0\r\n",
		"*1\r\n*3\r\n:0\r\n:1\r\n*4\r\n|1\r\n+a\r\n+b\r\n$8\r\n10.0.0.1\r\n:6379\r\n$2\r\nid\r\n*0\r\n",
		"*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$8\r\n10.0.0.1\r\n:6379\r\n",
		"=12\r\ntxt:a b:6379\r\n",
		"$14\r\nid ::1:7102@1,\r\n",
		strings.Repeat("*1\r\n", 1000) + ":1\r\n",
	} {
		for kind := range uint8(4) {
			f.Add(kind, []byte(s))
		}
	}
	m, err := ParseAddrMap(fuzzEntries)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, kind uint8, reply []byte) {
		k := Reply(kind % 4)
		if k == ReplyNone {
			fuzzRedirect(t, m, reply)
			return
		}
		in := append([]byte(nil), reply...)
		out := m.Rewrite(k, reply)
		if !bytes.Equal(reply, in) {
			t.Fatalf("Rewrite changed its input")
		}
		if bytes.Equal(out, reply) {
			if len(out) > 0 && &out[0] != &reply[0] {
				t.Fatalf("unchanged reply copied")
			}
			return
		}
		a, rest, err := decode(string(reply))
		if err != nil || rest != "" {
			t.Fatalf("rewrote %q, which is not one reply (%v)", reply, err)
		}
		b, rest, err := decode(string(out))
		if err != nil || rest != "" {
			t.Fatalf("rewrote %q to %q, which is not one reply (%v)", reply, out, err)
		}
		if !sameShape(a, b) {
			t.Fatalf("rewrote %q to %q: shape changed", reply, out)
		}
		if again := m.Rewrite(k, out); !bytes.Equal(again, out) {
			t.Fatalf("rewrote %q to %q, then to %q", reply, out, again)
		}
	})
}

func fuzzRedirect(t *testing.T, m *AddrMap, reply []byte) {
	out, ok := m.RewriteRedirect(reply)
	if !ok {
		if out != nil {
			t.Fatalf("RewriteRedirect(%q) = %q, false", reply, out)
		}
		return
	}
	in, got := strings.Fields(string(reply)), strings.Fields(string(out))
	if len(in) != 3 || len(got) != 3 || in[0] != got[0] || in[1] != got[1] || !bytes.HasSuffix(out, crlf) || bytes.Equal(out, reply) {
		t.Fatalf("RewriteRedirect(%q) = %q", reply, out)
	}
	if again, ok := m.RewriteRedirect(out); ok {
		t.Fatalf("RewriteRedirect(%q) = %q, then %q", reply, out, again)
	}
}

// sameShape reports whether a and b differ at most in the content of
// strings and integers.
func sameShape(a, b tv) bool {
	if a.T != b.T || a.Null != b.Null || len(a.Kids) != len(b.Kids) {
		return false
	}
	if a.T != '$' && a.T != '+' && a.T != ':' && a.T != '=' && a.S != b.S {
		return false
	}
	for i := range a.Kids {
		if !sameShape(a.Kids[i], b.Kids[i]) {
			return false
		}
	}
	return true
}
