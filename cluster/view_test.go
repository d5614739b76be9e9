package cluster

import (
	"errors"
	"testing"
)

// nodes7000 is CLUSTER NODES as redis-server 7.0.15 answered it on the
// replica 127.0.0.1:7000 of a 3+3 cluster after a failover and two slots
// moved (7233, 7365), with a migration marker added to its master's line
// (Redis shows them on the myself line only; a replica ignores them: it
// answers nil, not -ASK, for a key that moved).
const nodes7000 = `f12d9084171a0d7dff07d23dd7820677feaba5cf 127.0.0.1:7003@17003 slave 41462397fec31f4a6627e999e28712ef8ed538d1 0 1796017731196 8 connected
8a1540138d93cac1535f61c1cbea3598762996a0 127.0.0.1:7005@17005 slave 85484da5e7297a06b6eba7829802635bb57a8511 0 1796017731096 2 connected
85484da5e7297a06b6eba7829802635bb57a8511 127.0.0.1:7001@17001 master - 0 1796017731096 2 connected 5461-7232 7234-7364 7366-10922
41462397fec31f4a6627e999e28712ef8ed538d1 127.0.0.1:7002@17002 master - 0 1796017731096 8 connected 7233 7365 10923-16383
c1ad615803dce7cf454c29d7d7dd83999b1fee54 127.0.0.1:7004@17004 master - 0 1796017731196 7 connected 0-5460 [5460->-41462397fec31f4a6627e999e28712ef8ed538d1]
db358e28a22cc1a1eae5ae6dc7128f95b1d0aa36 127.0.0.1:7000@17000 myself,slave c1ad615803dce7cf454c29d7d7dd83999b1fee54 0 1796017731000 7 connected
`

func TestParseNodesReplica(t *testing.T) {
	v, err := ParseNodes(nodes7000, true)
	if err != nil {
		t.Fatal(err)
	}
	if v.Role != RoleReplica || !v.OK || v.ServedCount() != 5461 || !v.Serves(0) || !v.Serves(5460) || v.Serves(5461) {
		t.Fatalf("view %v ok=%v served=%d", v.Role, v.OK, v.ServedCount())
	}
}

func TestParseNodesMaster(t *testing.T) {
	// The same cluster as seen by 127.0.0.1:7001, slot 7000 migrating to
	// 7002 (not served: its moved keys get -ASK) and 7233 importing back.
	nodes := `85484da5e7297a06b6eba7829802635bb57a8511 127.0.0.1:7001@17001 myself,master - 0 1796017731096 2 connected 5461-7232 7234-7364 7366-10922 [7000->-41462397fec31f4a6627e999e28712ef8ed538d1] [7233-<-41462397fec31f4a6627e999e28712ef8ed538d1]
41462397fec31f4a6627e999e28712ef8ed538d1 127.0.0.1:7002@17002 master - 0 1796017731096 8 connected 7233 7365 10923-16383`
	v, err := ParseNodes(nodes, false)
	if err != nil {
		t.Fatal(err)
	}
	if v.Role != RoleMaster || v.OK || v.ServedCount() != 5459 || v.Serves(7233) || v.Serves(7365) || !v.Serves(7366) || v.Serves(7000) {
		t.Fatalf("view %v ok=%v served=%d", v.Role, v.OK, v.ServedCount())
	}
}

func TestParseNodesErrors(t *testing.T) {
	if _, err := ParseNodes("", true); !errors.Is(err, ErrNoMyself) {
		t.Errorf("empty: %v", err)
	}
	for _, bad := range []string{
		"id 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 5-3",
		"id 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 16384",
		"id 127.0.0.1:7000@17000 myself,master - 0 0 1 connected x",
		"id 127.0.0.1:7000@17000 myself,handshake - 0 0 1 connected",
		"id 127.0.0.1:7000@17000 myself",
	} {
		if _, err := ParseNodes(bad, true); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestTopology(t *testing.T) {
	top := NewTopology()
	if top.Answerable(0, false) {
		t.Fatal("answerable without a view")
	}
	master, _ := ParseNodes("m 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-99", true)
	top.Publish(master, top.Begin())
	if !top.Answerable(5, false) || top.Answerable(100, false) {
		t.Fatal("master view")
	}
	top.Contradicted(100, false) // a client with an older map: not ours anyway
	if !top.Answerable(5, false) {
		t.Fatal("a redirect for a slot the view does not serve distrusted it")
	}
	begin := top.Begin()
	top.Contradicted(5, false)
	if top.Answerable(5, false) {
		t.Fatal("answerable after a contradicting -MOVED")
	}
	select {
	case <-top.Kicked():
	default:
		t.Fatal("no kick")
	}
	top.Publish(master, begin) // read before the redirect: still distrusted
	if top.Answerable(5, false) {
		t.Fatal("a view read before the redirect was trusted")
	}
	replica, _ := ParseNodes("r 127.0.0.1:7000@17000 myself,slave m 0 0 1 connected\nm 127.0.0.1:7001@17001 master - 0 0 1 connected 0-99", true)
	top.Publish(replica, top.Begin())
	if top.Answerable(5, false) || !top.Answerable(5, true) {
		t.Fatal("replica view: only READONLY connections")
	}
	top.Contradicted(5, false) // -MOVED to a connection without READONLY: normal
	if !top.Answerable(5, true) {
		t.Fatal("distrusted by an expected -MOVED")
	}
	top.Contradicted(-1, false) // -CLUSTERDOWN
	if top.Answerable(5, true) {
		t.Fatal("answerable after -CLUSTERDOWN")
	}
}

// TestContradictionWhileDistrusted: a -MOVED that arrives while an earlier
// one's re-read is in flight must not be forgotten: that re-read's CLUSTER
// NODES may predate it (found by an attack on the change).
func TestContradictionWhileDistrusted(t *testing.T) {
	v1, _ := ParseNodes("m 127.0.0.1:7400@17400 myself,master - 0 0 1 connected 0-200", true)
	v2, _ := ParseNodes("m 127.0.0.1:7400@17400 myself,master - 0 0 1 connected 1-200", true)
	top := NewTopology()
	top.SetEnabled(true)
	top.Publish(v1, top.Begin())
	top.Contradicted(0, false)   // slot 0 moved
	begin := top.Begin()         // the re-read's CLUSTER NODES is answered...
	top.Contradicted(100, false) // ...then slot 100 moves too
	top.Publish(v2, begin)
	if top.Answerable(100, false) {
		t.Fatal("slot 100 answerable right after a -MOVED 100 went to a client")
	}
	top.Publish(v2, top.Begin()) // read after it: trusted again
	if !top.Answerable(100, false) || top.Answerable(0, false) {
		t.Fatal("a view read after the last redirect")
	}
}
