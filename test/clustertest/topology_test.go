package clustertest

import (
	"slices"
	"testing"
)

// A CLUSTER NODES reply of redis-server 7.0.15 during a reshard (slot 0
// migrating from the first node to the second), with hostnames absent.
const nodesDuringReshard = `a14ab10064c460be7d8193e9d9a0f66e5cd9d7fe 127.0.0.1:38371@45001 myself,master - 0 1700000000000 1 connected 0-2 5 [0->-681d7bcf1608949bd88ddbde6530d6a5f469bf85]
681d7bcf1608949bd88ddbde6530d6a5f469bf85 127.0.0.1:34991@45002,host-b master - 0 1700000000000 2 connected 5461-10922 [0-<-a14ab10064c460be7d8193e9d9a0f66e5cd9d7fe]
fa40a4550313a71c2e25b560e262609096c444da 127.0.0.1:34147@45003 slave,fail a14ab10064c460be7d8193e9d9a0f66e5cd9d7fe 1700000000000 1700000000000 1 disconnected
`

func TestParseNodes(t *testing.T) {
	got, err := ParseNodes(nodesDuringReshard)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got %d lines, want 3", len(got))
	}
	a, b, r := got[0], got[1], got[2]
	if a.Addr != "127.0.0.1:38371" || !a.Has("master") || !a.Has("myself") || a.MasterID != "" ||
		!slices.Equal(a.Slots, []int{0, 1, 2, 5}) || !a.Migrating {
		t.Errorf("first line: got %+v", a)
	}
	if b.Addr != "127.0.0.1:34991" || len(b.Slots) != 10922-5461+1 || !b.Migrating {
		t.Errorf("second line: got addr %s, %d slots, migrating %v; want 127.0.0.1:34991, 5462, true", b.Addr, len(b.Slots), b.Migrating)
	}
	if !r.Has("fail") || r.Has("master") || r.MasterID != a.ID || len(r.Slots) != 0 || r.Migrating {
		t.Errorf("third line: got %+v", r)
	}
	for _, bad := range []string{"x 1:2 master - 0 0 1", "x 1:2@3 master - 0 0 1 connected 5-4", "x 1:2@3 master - 0 0 1 connected 16384"} {
		if _, err := ParseNodes(bad); err == nil {
			t.Errorf("ParseNodes(%q) accepted it", bad)
		}
	}
}

func TestRanges(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{{nil, ""}, {[]int{7}, "7"}, {[]int{0, 1, 2, 5, 7, 8}, "0-2,5,7-8"}} {
		if got := ranges(c.in); got != c.want {
			t.Errorf("ranges(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}
