package cluster

import (
	"errors"
	"strings"
	"testing"
)

func TestParseAddrMapErrors(t *testing.T) {
	for _, tc := range []struct {
		entries []string
		want    error
	}{
		{[]string{"127.0.0.1:6379"}, ErrAddrSyntax},
		{[]string{"a:1=b:2=c:3"}, ErrAddrSyntax},
		{[]string{"=:6380"}, ErrAddrSyntax},
		{[]string{":6379="}, ErrAddrSyntax},
		{[]string{"6379=6380"}, ErrAddrSyntax},
		{[]string{"::1:6379=[::1]:6380"}, ErrAddrSyntax}, // IPv6 needs brackets
		{[]string{"[redis]:6379=[::1]:6380"}, ErrAddrSyntax},
		{[]string{"[10.0.0.1]:6379=10.0.0.1:6380"}, ErrAddrSyntax},
		{[]string{"red is:6379=a:6380"}, ErrAddrSyntax},
		{[]string{"a,b:6379=a:6380"}, ErrAddrSyntax},
		{[]string{"a@b:6379=a:6380"}, ErrAddrSyntax},
		{[]string{"a:0=b:1"}, ErrAddrPort},
		{[]string{"a:1=b:65536"}, ErrAddrPort},
		{[]string{"a:+1=b:1"}, ErrAddrPort},
		{[]string{"a:-1=b:1"}, ErrAddrPort},
		{[]string{"a:=b:1"}, ErrAddrPort},
		{[]string{"a:x=b:1"}, ErrAddrPort},
		{[]string{"a:065535=b:1"}, ErrAddrPort},
		{[]string{":6379=10.0.0.1:6380"}, ErrAddrMixed},
		{[]string{"10.0.0.1:6379=:6380"}, ErrAddrMixed},
		{[]string{":6379=:6380", ":6379=:6381"}, ErrAddrDuplicate},
		{[]string{"a:1=b:2", "a:1=c:3"}, ErrAddrDuplicate},
		{[]string{"[::1]:1=b:2", "[0:0::1]:1=c:3"}, ErrAddrDuplicate}, // same address
	} {
		m, err := ParseAddrMap(tc.entries)
		if !errors.Is(err, tc.want) || m != nil {
			t.Errorf("ParseAddrMap(%q) = %v, %v; want nil, %v", tc.entries, m, err, tc.want)
			continue
		}
		bad := tc.entries[len(tc.entries)-1]
		if !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseAddrMap(%q): error %q does not name entry %q", tc.entries, err, bad)
		}
	}
}

func TestAddrMapMap(t *testing.T) {
	m, err := ParseAddrMap([]string{
		":6379=:6380",
		"10.0.0.1:6379=10.0.0.1:7000", // wins over the port-only entry
		"10.0.0.2:7001=sidecar-2.example:8001",
		"[0:0::1]:7002=[::2]:8002",
		"redis-3.ns.svc:6379=cicada-3.ns.svc:6380",
		"[::ffff:10.0.0.4]:7004=10.0.0.4:8004",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Len(); got != 6 {
		t.Errorf("Len() = %d, want 6", got)
	}
	for _, tc := range []struct {
		host     string
		port     int
		wantHost string
		wantPort int
		wantOK   bool
	}{
		{"10.0.0.9", 6379, "10.0.0.9", 6380, true},
		{"", 6379, "", 6380, true},
		{"?", 6379, "?", 6380, true},
		{"10.0.0.1", 6379, "10.0.0.1", 7000, true},
		{"10.0.0.1", 6380, "10.0.0.1", 6380, false},
		{"10.0.0.2", 7001, "sidecar-2.example", 8001, true},
		{"10.0.0.2", 7002, "10.0.0.2", 7002, false},
		{"::1", 7002, "::2", 8002, true},
		{"[::1]", 7002, "[::1]", 7002, false}, // Redis prints no brackets
		{"redis-3.ns.svc", 6379, "cicada-3.ns.svc", 6380, true},
		{"REDIS-3.ns.svc", 6379, "REDIS-3.ns.svc", 6380, true}, // port-only
		{"::ffff:10.0.0.4", 7004, "10.0.0.4", 8004, true},
	} {
		h, p, ok := m.Map(tc.host, tc.port)
		if h != tc.wantHost || p != tc.wantPort || ok != tc.wantOK {
			t.Errorf("Map(%q, %d) = %q, %d, %v; want %q, %d, %v", tc.host, tc.port, h, p, ok, tc.wantHost, tc.wantPort, tc.wantOK)
		}
	}
}

func TestAddrMapEmptyAndNil(t *testing.T) {
	var nilMap *AddrMap
	empty, err := ParseAddrMap(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*AddrMap{nilMap, empty} {
		if got := m.Len(); got != 0 {
			t.Errorf("Len() = %d, want 0", got)
		}
		if h, p, ok := m.Map("10.0.0.1", 6379); h != "10.0.0.1" || p != 6379 || ok {
			t.Errorf("Map = %q, %d, %v; want unchanged, false", h, p, ok)
		}
		moved := []byte("-MOVED 1 10.0.0.1:6379\r\n")
		if got, ok := m.RewriteRedirect(moved); got != nil || ok {
			t.Errorf("RewriteRedirect = %q, %v; want nil, false", got, ok)
		}
		nodes := []byte("$46\r\nid 10.0.0.1:6379@16379 myself,master - 0 0 1 c\r\n")
		if got := m.Rewrite(ReplyNodes, nodes); &got[0] != &nodes[0] {
			t.Errorf("Rewrite = %q, want the reply itself", got)
		}
	}
}

func TestAddrMapFindAllocs(t *testing.T) {
	m, err := ParseAddrMap([]string{":6379=:6380", "10.0.0.1:7000=10.0.0.1:8000"})
	if err != nil {
		t.Fatal(err)
	}
	host := []byte("10.0.0.1")
	if n := testing.AllocsPerRun(100, func() { m.find(host, nil, 7000) }); n != 0 {
		t.Errorf("find allocates %v times, want 0", n)
	}
}
