package cluster

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/resp"
	"github.com/cicada-proxy/cicada/test/clustertest"
)

// redisPortIn returns the port of addr (a node's Redis address) if a
// topology reply shows it as a node's port, "" if not: after the node's
// IP (CLUSTER SLOTS), in "ip:port@bus" (CLUSTER NODES, REPLICAS), or as a
// "port" field (CLUSTER SHARDS). Not anywhere: a port can equal a slot
// number (a test failed in CI when Redis got port 10922, the end of the
// second node's slots).
func redisPortIn(reply, addr string) string {
	host, p, _ := net.SplitHostPort(addr)
	for _, shown := range []string{
		"$" + strconv.Itoa(len(host)) + "\r\n" + host + "\r\n:" + p + "\r\n",
		host + ":" + p + "@",
		"$4\r\nport\r\n:" + p + "\r\n", "+port\r\n:" + p + "\r\n",
	} {
		if strings.Contains(reply, shown) {
			return p
		}
	}
	return ""
}

// TestClusterCacheEdges: the moments a sidecar could answer from its cache
// where its node no longer would, each checked through the sidecar of the
// node concerned with a client that does not follow redirects, in map mode
// (so that every redirect is rewritten too). The first three come from an
// attack on the change.
func TestClusterCacheEdges(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Mode: clustertest.Map})
	ctx := context.Background()

	t.Run("thousands of redirects in one read", func(t *testing.T) {
		// 3,000 pipelined GETs of a key another node serves: every
		// -MOVED rewritten (two gather slices each; more than 1,024 in
		// one writev closed the connection without a reply).
		key := "many"
		owner := c.Owner(key)
		other := c.Masters()[0]
		if other == owner {
			other = c.Masters()[1]
		}
		var req []byte
		for range 3000 {
			req = resp.AppendCommand(req, []byte("GET"), []byte(key))
		}
		want := strings.Repeat("-MOVED "+strconv.Itoa(cluster.Slot([]byte(key)))+" "+owner.SidecarAddr+"\r\n", 3000)
		if got := sendAll(t, other.SidecarAddr, req, len(want)); got != want {
			t.Fatalf("through %v: %d bytes, want %d: %.200q", other, len(got), len(want), got)
		}
	})

	t.Run("topology reply after a refused MULTI", func(t *testing.T) {
		// MULTI refused by ACL runs the pipelined CLUSTER SLOTS at once:
		// its reply is rewritten, not taken for +QUEUED.
		n := c.Masters()[0]
		if err := c.Direct(n).Do(ctx, "ACL", "SETUSER", "nomulti", "on", ">pw", "~*", "+@all", "-multi").Err(); err != nil {
			t.Fatal(err)
		}
		req := resp.AppendCommand(nil, []byte("AUTH"), []byte("nomulti"), []byte("pw"))
		req = resp.AppendCommand(req, []byte("MULTI"))
		req = resp.AppendCommand(req, []byte("CLUSTER"), []byte("SLOTS"))
		got := sendAll(t, n.SidecarAddr, req, -1)
		for _, m := range c.Nodes {
			if p := redisPortIn(got, m.RedisAddr); p != "" {
				t.Errorf("Redis port %s of %v in %q", p, m, got)
			}
		}
		if !strings.HasPrefix(got, "+OK\r\n-NOPERM") {
			t.Errorf("got %.120q", got)
		}
	})

	t.Run("topology replies inside a transaction", func(t *testing.T) {
		// CLUSTER SLOTS/NODES/SHARDS/REPLICAS queued in MULTI come back in
		// EXEC's array: rewritten there too, in both protocols.
		n := c.Masters()[0]
		for _, hello := range []string{"2", "3"} {
			req := resp.AppendCommand(nil, []byte("HELLO"), []byte(hello))
			req = resp.AppendCommand(req, []byte("MULTI"))
			for _, sub := range []string{"SLOTS", "NODES", "SHARDS"} {
				req = resp.AppendCommand(req, []byte("CLUSTER"), []byte(sub))
			}
			req = resp.AppendCommand(req, []byte("CLUSTER"), []byte("REPLICAS"), []byte(n.ID))
			req = resp.AppendCommand(req, []byte("PING"))
			req = resp.AppendCommand(req, []byte("EXEC"))
			got := sendAll(t, n.SidecarAddr, req, -1)
			if !strings.Contains(got, "QUEUED") || !strings.Contains(got, n.SidecarAddr[strings.LastIndexByte(n.SidecarAddr, ':'):]) {
				t.Fatalf("HELLO %s: %.300q", hello, got)
			}
			for _, m := range c.Nodes {
				if p := redisPortIn(got, m.RedisAddr); p != "" {
					t.Errorf("HELLO %s: Redis port %s of %v in EXEC's reply", hello, p, m)
				}
			}
		}
	})

	t.Run("replica reads after READONLY", func(t *testing.T) {
		// A replica's sidecar answers its master's keys from cache on a
		// READONLY connection, and a write to the master reaches it
		// through the replica's own keyspace notifications: once the new
		// value was read there, the old one never comes back.
		key := "replica{edge4}"
		m := c.Owner(key)
		r := c.ReplicaOf(m)
		mustDo(t, c.Direct(m).Set(ctx, key, "one", 0).Err())
		conn := dialRaw(t, "replica sidecar", r.SidecarAddr)
		if got := conn.do("GET", key); !strings.HasPrefix(got, "-MOVED ") {
			t.Fatalf("GET without READONLY: %q", got)
		}
		if got := conn.do("READONLY"); got != "+OK\r\n" {
			t.Fatalf("READONLY: %q", got)
		}
		waitHits(t, r, func() {
			if got := conn.do("GET", key); got != "$3\r\none\r\n" {
				t.Fatalf("GET after READONLY: %q", got)
			}
		})
		writer := dialRaw(t, "master sidecar", m.SidecarAddr)
		if got := writer.do("SET", key, "two"); got != "+OK\r\n" {
			t.Fatalf("SET: %q", got)
		}
		waitReply(t, conn, key, "$3\r\ntwo\r\n", 2*time.Second)
		waitHits(t, r, func() {
			if got := conn.do("GET", key); got != "$3\r\ntwo\r\n" {
				t.Fatalf("GET after the new value: %q", got)
			}
		})
		if got := conn.do("READWRITE"); got != "+OK\r\n" {
			t.Fatalf("READWRITE: %q", got)
		}
		if got := conn.do("GET", key); !strings.HasPrefix(got, "-MOVED ") {
			t.Fatalf("GET after READWRITE: %q", got)
		}
	})

	t.Run("cached nil of a slot starting to migrate", func(t *testing.T) {
		// A key absent on its master is cached as nil; its slot starts
		// migrating and the key is created on the target: the source
		// answers -ASK, so the sidecar must stop answering nil.
		key := "absent{edge}"
		src := c.Owner(key)
		dst := otherMaster(c, src)
		conn := dialRaw(t, "source sidecar", src.SidecarAddr)
		waitHits(t, src, func() { conn.do("GET", key) })
		slot := strconv.Itoa(cluster.Slot([]byte(key)))
		mustDo(t, c.Direct(dst).Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.ID).Err())
		mustDo(t, c.Direct(src).Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.ID).Err())
		_, err := c.Direct(dst).Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Do(ctx, "ASKING")
			p.Set(ctx, key, "on-target", 0)
			return nil
		})
		mustDo(t, err)
		ask := "-ASK " + slot + " " + dst.SidecarAddr + "\r\n"
		firstASK := waitReply(t, conn, key, ask, time.Second)
		t.Logf("-ASK through the sidecar %v after the slot started migrating", firstASK)
		for range 200 {
			if got := conn.do("GET", key); got != ask {
				t.Fatalf("after -ASK: %q", got)
			}
		}
		// Finish the migration (the key is on the target already).
		mustDo(t, c.Direct(dst).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.ID).Err())
		mustDo(t, c.Direct(src).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.ID).Err())
		c.WaitStable(nil)
	})

	t.Run("slot change sent through the sidecar", func(t *testing.T) {
		// CLUSTER SETSLOT / DELSLOTS pipelined with a GET through the
		// sidecar: Redis runs the GET after the change, so must the
		// sidecar (its reply distrusts the view before the GET is looked
		// at; the reading of the view alone would leave 100 ms).
		key := "absent{edge5}"
		src := c.Owner(key)
		dst := otherMaster(c, src)
		slot := strconv.Itoa(cluster.Slot([]byte(key)))
		conn := dialRaw(t, "source sidecar", src.SidecarAddr)
		waitHits(t, src, func() { conn.do("GET", key) })
		req := resp.AppendCommand(nil, []byte("CLUSTER"), []byte("SETSLOT"), []byte(slot), []byte("MIGRATING"), []byte(dst.ID))
		req = resp.AppendCommand(req, []byte("GET"), []byte(key))
		want := "+OK\r\n-ASK " + slot + " " + dst.SidecarAddr + "\r\n"
		if got := sendAll(t, src.SidecarAddr, req, len(want)); got != want {
			t.Fatalf("SETSLOT MIGRATING then GET: %q, want %q", got, want)
		}
		mustDo(t, c.Direct(src).Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE").Err())
		c.WaitStable(nil)
		waitHits(t, src, func() { conn.do("GET", key) })
		req = resp.AppendCommand(nil, []byte("CLUSTER"), []byte("DELSLOTS"), []byte(slot))
		req = resp.AppendCommand(req, []byte("GET"), []byte(key))
		want = "+OK\r\n-CLUSTERDOWN Hash slot not served\r\n"
		if got := sendAll(t, src.SidecarAddr, req, len(want)); got != want {
			t.Fatalf("DELSLOTS then GET: %q, want %q", got, want)
		}
		mustDo(t, c.Direct(src).Do(ctx, "CLUSTER", "ADDSLOTS", slot).Err())
		c.WaitStable(nil)
	})

	t.Run("slot taken with its keys", func(t *testing.T) {
		// The target claims a slot whose keys were never migrated: Redis
		// 7.0 deletes them on the old owner without a notification. The
		// sidecar must turn to -MOVED at its next reading of the view,
		// and never answer the value again.
		key := "taken{edge2}"
		src := c.Owner(key)
		dst := otherMaster(c, src)
		mustDo(t, c.Direct(src).Set(ctx, key, "old", 0).Err())
		conn := dialRaw(t, "source sidecar", src.SidecarAddr)
		waitHits(t, src, func() { conn.do("GET", key) })
		slot := strconv.Itoa(cluster.Slot([]byte(key)))
		mustDo(t, c.Direct(dst).Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.ID).Err())
		mustDo(t, c.Direct(dst).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.ID).Err())
		moved := "-MOVED " + slot + " " + dst.SidecarAddr + "\r\n"
		// Redis's own switch is not observable from here; the bound is
		// the reading interval (100 ms) plus the bus and the machine.
		took := waitReply(t, conn, key, moved, 2*time.Second)
		t.Logf("-MOVED through the sidecar %v after the target claimed the slot", took)
		if n := src.Sidecar.Metric(t, `cicada_cache_evictions_total{reason="cluster"}`); n < 1 {
			t.Errorf("cluster evictions on the old owner's sidecar: %v", n)
		}
		for range 200 {
			if got := conn.do("GET", key); got != moved {
				t.Fatalf("after -MOVED: %q", got)
			}
		}
		c.WaitStable(nil)
	})

	t.Run("manual failover", func(t *testing.T) {
		// Two plain clients loop GET of a cached key while the master's
		// replica takes over: one through the master's sidecar, one to
		// the master directly. Once the direct one got -MOVED, a GET sent
		// through the sidecar after that instant must not get the value
		// (the role watch shows the demotion at once; the reading of the
		// view alone would leave up to 100 ms), and once the sidecar
		// answered -MOVED, no value may follow.
		key := "failover{edge3}"
		m := c.Owner(key)
		r := c.ReplicaOf(m)
		mustDo(t, c.Direct(m).Set(ctx, key, "v", 0).Err())
		side := dialRaw(t, "master sidecar", m.SidecarAddr)
		direct := dialRaw(t, "master", m.RedisAddr)
		waitHits(t, m, func() { side.do("GET", key) })
		type reply struct {
			sent, got time.Time
			b         string
		}
		loop := func(conn *rawConn, out chan<- []reply) {
			var rs []reply
			moved := 0
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && moved < 300; {
				sent := time.Now()
				b, err := conn.try("GET", key)
				if err != nil {
					b = "error: " + err.Error()
				}
				rs = append(rs, reply{sent, time.Now(), b})
				if strings.HasPrefix(b, "-MOVED ") {
					moved++
				}
				if err != nil {
					break
				}
			}
			out <- rs
		}
		sideCh, directCh := make(chan []reply), make(chan []reply)
		go loop(side, sideCh)
		go loop(direct, directCh)
		time.Sleep(50 * time.Millisecond)
		c.ManualFailover(r)
		sideReplies, directReplies := <-sideCh, <-directCh
		var redisMoved time.Time
		for _, d := range directReplies {
			if strings.HasPrefix(d.b, "-MOVED ") {
				redisMoved = d.got
				break
			}
		}
		if redisMoved.IsZero() {
			t.Fatal("Redis never answered -MOVED")
		}
		movedAt, late := -1, 0
		for i, g := range sideReplies {
			switch {
			case strings.HasPrefix(g.b, "-MOVED "):
				if movedAt < 0 {
					movedAt = i
				}
			case movedAt >= 0:
				t.Fatalf("reply %d after the first -MOVED (%d): %q", i, movedAt, g.b)
			case g.b != "$1\r\nv\r\n":
				t.Fatalf("reply %d: %q", i, g.b)
			case g.sent.After(redisMoved):
				late++
			}
		}
		if movedAt < 0 {
			t.Fatalf("no -MOVED in %d replies", len(sideReplies))
		}
		if late > 0 {
			t.Fatalf("%d values through the sidecar for GETs sent after Redis had answered -MOVED", late)
		}
		t.Logf("%d values, then -MOVED; Redis's first -MOVED came %v before the sidecar's",
			movedAt, sideReplies[movedAt].got.Sub(redisMoved).Round(time.Microsecond))
	})

	t.Run("slot its own master serves to nobody", func(t *testing.T) {
		// Redis 7.0 can leave a master serving one of its slots to nobody
		// in its own view while every other node has the slot at it (a
		// CI run: the replica promoted by a manual failover); the bus
		// never mends it, and WaitStable does (clustertest's
		// repairLostSlots). CLUSTER DELSLOTS on the slot's master makes
		// the same state.
		key := "lost{edge4}"
		m := c.Owner(key)
		slot := cluster.Slot([]byte(key))
		mustDo(t, c.Direct(m).Do(ctx, "CLUSTER", "DELSLOTS", slot).Err())
		if got := c.WaitStable(nil).Owner(slot); got != m.ID {
			t.Fatalf("slot %d is served by %s after the repair, want %v (%s)", slot, got, m, m.ID)
		}
	})
}

// mustDo fails the test on err (a direct command to a node).
func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// otherMaster returns a master other than m.
func otherMaster(c *clustertest.Cluster, m *clustertest.Node) *clustertest.Node {
	for _, n := range c.Masters() {
		if n != m {
			return n
		}
	}
	return nil
}

// waitHits runs read until n's sidecar has answered one from its cache
// (within 5 s).
func waitHits(t *testing.T, n *clustertest.Node, read func()) {
	t.Helper()
	before := n.Counts(t).Hits
	deadline := time.Now().Add(5 * time.Second)
	for n.Counts(t).Hits == before {
		if time.Now().After(deadline) {
			t.Fatalf("%v: no cache hit after 5 s", n)
		}
		for range 20 {
			read()
		}
	}
}

// waitReply sends GET key until the reply is want, and returns how long
// that took; it fails the test after limit.
func waitReply(t *testing.T, conn *rawConn, key, want string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		got := conn.do("GET", key)
		if got == want {
			return time.Since(start).Round(time.Millisecond)
		}
		if time.Since(start) > limit {
			t.Fatalf("after %v: %q, want %q", limit, got, want)
		}
	}
}

// sendAll writes req to addr in one write and reads until want bytes came
// (want < 0: until the connection is quiet for 300 ms), within 10 s.
func sendAll(t *testing.T, addr string, req []byte, want int) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 64<<10)
	for (want < 0 || got.Len() < want) && time.Now().Before(deadline) {
		wait := deadline
		if want < 0 {
			wait = time.Now().Add(300 * time.Millisecond)
		}
		_ = c.SetReadDeadline(wait)
		n, err := c.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return got.String()
}
