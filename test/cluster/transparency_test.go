package cluster

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	cicadacluster "github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/test/clustertest"
)

// TestClusterTransparency sends the same commands to a sidecar and to its
// redis-server and compares the replies byte for byte, the node addresses
// in them aside (the sidecar's must be sidecars'): multi-key commands
// within a hash tag, CROSSSLOT, MOVED, READONLY/READWRITE/RESET on a
// replica, CLUSTER SLOTS/SHARDS/NODES, and ASK during a slot migration.
// Keys are read several times first, so that they are hot (threshold 1)
// and cached where Cicada caches them. In both addressing modes.
func TestClusterTransparency(t *testing.T) {
	for _, mode := range []clustertest.Mode{clustertest.Announce, clustertest.Map} {
		t.Run(mode.String(), func(t *testing.T) {
			c := clustertest.Start(t, clustertest.Options{Mode: mode})
			t.Run("hash tags", func(t *testing.T) { testHashTags(t, c) })
			t.Run("crossslot", func(t *testing.T) { testCrossSlot(t, c) })
			t.Run("moved", func(t *testing.T) { testMoved(t, c) })
			t.Run("readonly", func(t *testing.T) { testReadonly(t, c) })
			t.Run("topology", func(t *testing.T) { testTopologyReplies(t, c) })
			// Last, as it moves a slot; not in a subtest, as it waits for
			// the cluster (on the goroutine of the test that started it).
			testAsk(t, c)
		})
	}
}

// testHashTags: MSET and MGET of keys sharing a hash tag, on their master,
// with a cached key overwritten by MSET.
func testHashTags(t *testing.T, c *clustertest.Cluster) {
	p := newPair(t, c, c.Owner("{t}"))
	p.expect("+OK\r\n", "MSET", "{t}{%}a", "1", "{t}{%}b", "2")
	for range 3 {
		p.expect("*2\r\n$1\r\n1\r\n$1\r\n2\r\n", "MGET", "{t}{%}a", "{t}{%}b")
		p.expect(bulk("1"), "GET", "{t}{%}a")
	}
	p.expect("+OK\r\n", "MSET", "{t}{%}a", "3", "{t}{%}b", "4")
	p.expect(bulk("3"), "GET", "{t}{%}a")
	p.expect("*3\r\n$1\r\n3\r\n$1\r\n4\r\n$-1\r\n", "MGET", "{t}{%}a", "{t}{%}b", "{t}{%}c")
	p.expect(":2\r\n", "DEL", "{t}{%}a", "{t}{%}b")
	p.expect("$-1\r\n", "GET", "{t}{%}a")
}

// testCrossSlot: multi-key commands over slots are refused with Redis's
// words (a and b are in slots 15495 and 3300).
func testCrossSlot(t *testing.T, c *clustertest.Cluster) {
	const crossSlot = "-CROSSSLOT Keys in request don't hash to the same slot\r\n"
	for _, m := range c.Masters() {
		p := newPair(t, c, m)
		p.expect(crossSlot, "MSET", "a", "1", "b", "2")
		p.expect(crossSlot, "MGET", "a", "b")
		p.expect(crossSlot, "DEL", "a", "b")
	}
}

// testMoved: a key asked of a master that does not serve it is redirected
// to its master's sidecar, also after the key was cached by its master's
// sidecar.
func testMoved(t *testing.T, c *clustertest.Cluster) {
	const key = "moved-key"
	owner := c.Owner(key)
	slot := cicadacluster.Slot([]byte(key))
	home := dialRaw(t, "owner's sidecar", owner.SidecarAddr)
	if got := home.do("SET", key, "v"); got != "+OK\r\n" {
		t.Fatalf("SET through the owner's sidecar = %q, want +OK", got)
	}
	for range 3 {
		if got := home.do("GET", key); got != bulk("v") {
			t.Fatalf("GET through the owner's sidecar = %q, want %q", got, bulk("v"))
		}
	}
	moved := fmt.Sprintf("-MOVED %d {node%d}\r\n", slot, owner.Index)
	for _, m := range c.Masters() {
		if m == owner {
			continue
		}
		p := newPair(t, c, m)
		p.expect(moved, "GET", key)
		p.expect(moved, "SET", key, "w")
	}
	if got := home.do("GET", key); got != bulk("v") {
		t.Errorf("GET through the owner's sidecar after the redirected SETs = %q, want %q", got, bulk("v"))
	}
}

// testReadonly: a replica redirects reads to its master until READONLY,
// after which it answers them (and still redirects writes); READWRITE and
// RESET end READONLY. A second connection, never READONLY, is redirected
// although the first one's reads made the key hot on the sidecar.
func testReadonly(t *testing.T, c *clustertest.Cluster) {
	const key = "ro-key"
	m := c.Owner(key)
	r := c.ReplicaOf(m)
	slot := cicadacluster.Slot([]byte(key))
	w := dialRaw(t, "master's sidecar", m.SidecarAddr)
	if got := w.do("SET", key, "v"); got != "+OK\r\n" {
		t.Fatalf("SET = %q, want +OK", got)
	}
	if got := w.do("WAIT", "1", "5000"); got != ":1\r\n" {
		t.Fatalf("WAIT 1 5000 = %q, want :1 (the replica has the write)", got)
	}
	moved := fmt.Sprintf("-MOVED %d {node%d}\r\n", slot, m.Index)
	p := newPair(t, c, r)
	p.expect(moved, "GET", key)
	p.expect("+OK\r\n", "READONLY")
	for range 3 {
		p.expect(bulk("v"), "GET", key)
	}
	other := newPair(t, c, r)
	other.expect(moved, "GET", key)
	p.expect(moved, "SET", key, "x")
	p.expect(bulk("v"), "GET", key)
	p.expect("+OK\r\n", "READWRITE")
	p.expect(moved, "GET", key)
	p.expect("+OK\r\n", "READONLY")
	p.expect(bulk("v"), "GET", key)
	p.expect("+RESET\r\n", "RESET")
	p.expect(moved, "GET", key)
	other.expect(moved, "GET", key)
}

// testAsk migrates one key's slot by hand, as redis-cli does, and checks
// the redirections on both sides while the slot is migrating: the source
// answers -ASK with the target's sidecar; the target answers after ASKING
// only, for one command. Then the slot is given to the target.
func testAsk(t *testing.T, c *clustertest.Cluster) {
	const key = "ask-key"
	src := c.Owner(key)
	var dst *clustertest.Node
	for _, m := range c.Masters() {
		if m != src {
			dst = m
			break
		}
	}
	slot := strconv.Itoa(cicadacluster.Slot([]byte(key)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin := func(n *clustertest.Node, args ...any) {
		t.Helper()
		if err := c.Direct(n).Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v: %v: %v", n, args, err)
		}
	}
	srcPair, dstPair := newPair(t, c, src), newPair(t, c, dst)
	srcPair.expect("+OK\r\n", "SET", key, "v")
	for range 3 {
		srcPair.expect(bulk("v"), "GET", key)
	}
	admin(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.ID)
	admin(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.ID)
	// Migrating, but still here: the source answers.
	srcPair.expect(bulk("v"), "GET", key)
	host, port, _ := net.SplitHostPort(dst.RedisAddr)
	admin(src, "MIGRATE", host, port, key, "0", "5000")

	ask := fmt.Sprintf("-ASK %s {node%d}\r\n", slot, dst.Index)
	movedBack := fmt.Sprintf("-MOVED %s {node%d}\r\n", slot, src.Index)
	srcPair.expect(ask, "GET", key)
	dstPair.expect(movedBack, "GET", key)
	for range 3 {
		dstPair.expect("+OK\r\n", "ASKING")
		dstPair.expect(bulk("v"), "GET", key)
		// ASKING is good for one command.
		dstPair.expect(movedBack, "GET", key)
	}
	dstPair.expect("+OK\r\n", "ASKING")
	dstPair.expect("+OK\r\n", "SET", key, "w")
	dstPair.expect(movedBack, "GET", key)

	for _, m := range c.Masters() {
		admin(m, "CLUSTER", "SETSLOT", slot, "NODE", dst.ID)
	}
	c.WaitStable(func(tp *clustertest.Topology) string {
		if s, _ := strconv.Atoi(slot); tp.Owner(s) != dst.ID {
			return fmt.Sprintf("slot %s is not yet %v's", slot, dst)
		}
		return ""
	})
	srcPair.expect(fmt.Sprintf("-MOVED %s {node%d}\r\n", slot, dst.Index), "GET", key)
	dstPair.expect(bulk("w"), "GET", key)
}

// testTopologyReplies: CLUSTER SLOTS through a sidecar is Redis's reply
// with every node's port the sidecar's (byte for byte); CLUSTER SHARDS
// and CLUSTER NODES give the same nodes, roles and slots as Redis's, at
// the sidecars' addresses. Each is compared with Redis's reply as it was
// both just before and just after the sidecar's (settledRead): what
// Redis says may change between two reads, a replica appearing in
// CLUSTER SLOTS, a node flagged fail? for a moment.
func testTopologyReplies(t *testing.T, c *clustertest.Cluster) {
	for _, n := range c.Nodes {
		p := newPair(t, c, n)
		got, want := settledRead(t, fmt.Sprintf("%v: CLUSTER SLOTS", n),
			func() string {
				w := p.direct.do("CLUSTER", "SLOTS")
				for _, m := range c.Nodes {
					w = strings.ReplaceAll(w, "$9\r\n127.0.0.1\r\n:"+portOf(c.Announced(m))+"\r\n",
						"$9\r\n127.0.0.1\r\n:"+portOf(m.SidecarAddr)+"\r\n")
				}
				return w
			},
			func() string { return p.sidecar.do("CLUSTER", "SLOTS") })
		if got != want {
			t.Errorf("%v: CLUSTER SLOTS through the sidecar =\n%q\nwant (Redis's, at the sidecars' ports, the same before and after)\n%q", n, got, want)
		}
		compareNodes(t, c, n)
		compareShards(t, c, n)
	}
}

// settleTimeout bounds settledRead.
const settleTimeout = 5 * time.Second

// settledRead reads one thing from a node's redis-server (direct), then
// through its sidecar (viaSidecar), then from the redis-server again,
// until the two direct reads agree, and returns the sidecar's read and
// the direct one: Redis said the same before and after the sidecar's
// read, so a difference between them is the sidecar's. direct renders
// what must be equal (Redis's reply at the sidecars' addresses, without
// what changes from one read to the next). It fails t, with both direct
// reads, when they have not agreed within settleTimeout.
func settledRead(t *testing.T, what string, direct, viaSidecar func() string) (got, want string) {
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for {
		before := direct()
		got = viaSidecar()
		after := direct()
		if before == after {
			return got, before
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: Redis's reply changed around every read through the sidecar for %v; the last two direct reads:\n%s\nthen\n%s",
				what, settleTimeout, before, after)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// compareNodes compares CLUSTER NODES from n's sidecar and redis-server:
// the same IDs, flags, masters and slots, at sidecar addresses (the
// ping and pong times and epochs aside), Redis's the same before and
// after the sidecar's.
func compareNodes(t *testing.T, c *clustertest.Cluster, n *clustertest.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*settleTimeout)
	defer cancel()
	sc := redis.NewClient(&redis.Options{Addr: n.SidecarAddr, Protocol: 2, DisableIdentity: true})
	defer sc.Close()
	// render gives each node's line as "addr flags master slots", sorted
	// by ID; sidecarAddrs puts each node at its sidecar's address.
	render := func(side, text string, sidecarAddrs bool) string {
		lines, err := clustertest.ParseNodes(text)
		if err != nil {
			t.Fatalf("%v: CLUSTER NODES %s: %v\n%s", n, side, err, text)
		}
		var out []string
		for _, l := range lines {
			if m := c.NodeByID(l.ID); sidecarAddrs && m != nil {
				l.Addr = m.SidecarAddr
			}
			out = append(out, fmt.Sprintf("%s %s %v %s %v", l.ID, l.Addr, l.Flags, l.MasterID, l.Slots))
		}
		slices.Sort(out)
		return strings.Join(out, "\n")
	}
	var viaSidecar, direct string
	got, want := settledRead(t, fmt.Sprintf("%v: CLUSTER NODES", n),
		func() string {
			var err error
			if direct, err = c.Direct(n).ClusterNodes(ctx).Result(); err != nil {
				t.Fatalf("%v: CLUSTER NODES: %v", n, err)
			}
			return render("from Redis", direct, true)
		},
		func() string {
			var err error
			if viaSidecar, err = sc.ClusterNodes(ctx).Result(); err != nil {
				t.Fatalf("%v: CLUSTER NODES through the sidecar: %v", n, err)
			}
			return render("through the sidecar", viaSidecar, false)
		})
	if got != want {
		t.Errorf("%v: CLUSTER NODES through the sidecar:\n%s\nwant Redis's at the sidecars' addresses (the same before and after):\n%s", n, viaSidecar, direct)
	}
}

// compareShards compares CLUSTER SHARDS from n's sidecar and redis-server:
// the same shards (slots, node IDs, roles), every node at its sidecar's
// port, Redis's the same before and after the sidecar's. Replication
// offsets and health move from one read to the next, and are not
// compared.
func compareShards(t *testing.T, c *clustertest.Cluster, n *clustertest.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*settleTimeout)
	defer cancel()
	sc := redis.NewClient(&redis.Options{Addr: n.SidecarAddr, Protocol: 2, DisableIdentity: true})
	defer sc.Close()
	render := func(shards []redis.ClusterShard, sidecarPorts bool) string {
		var out []string
		for _, s := range shards {
			var nodes []string
			for _, sn := range s.Nodes {
				port := sn.Port
				if m := c.NodeByID(sn.ID); sidecarPorts && m != nil {
					port, _ = strconv.ParseInt(portOf(m.SidecarAddr), 10, 64)
				}
				nodes = append(nodes, fmt.Sprintf("%s %s:%d %s", sn.ID, sn.IP, port, sn.Role))
			}
			slices.Sort(nodes)
			out = append(out, fmt.Sprintf("%v %v", s.Slots, nodes))
		}
		slices.Sort(out)
		return strings.Join(out, "\n")
	}
	got, want := settledRead(t, fmt.Sprintf("%v: CLUSTER SHARDS", n),
		func() string {
			direct, err := c.Direct(n).ClusterShards(ctx).Result()
			if err != nil {
				t.Fatalf("%v: CLUSTER SHARDS: %v", n, err)
			}
			return render(direct, true)
		},
		func() string {
			viaSidecar, err := sc.ClusterShards(ctx).Result()
			if err != nil {
				t.Fatalf("%v: CLUSTER SHARDS through the sidecar: %v", n, err)
			}
			return render(viaSidecar, false)
		})
	if got != want {
		t.Errorf("%v: CLUSTER SHARDS through the sidecar:\n%s\nwant Redis's at the sidecars' ports (the same before and after):\n%s", n, got, want)
	}
}

// portOf returns the port of "host:port".
func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
