package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/resp"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// testCluster is a running Redis Cluster of two masters and one replica
// of the first, with a rewriting proxy in front of each node.
type testCluster struct {
	servers [3]*redistest.Server
	ids     [3]string
	proxies [3]string // proxy addresses as the map announces them
	ents    oracle
	m       *AddrMap
}

// startCluster forms the cluster with CLUSTER ADDSLOTSRANGE, MEET and
// REPLICATE and waits until every node sees it whole.
func startCluster(t *testing.T) *testCluster {
	ctx := context.Background()
	tc := &testCluster{}
	var cl [3]*redis.Client
	for i := range tc.servers {
		// A replica shows "online" in CLUSTER SHARDS once it has a
		// replication offset: sync at once, and let the master's
		// pings move the offset every second rather than every 10.
		tc.servers[i] = redistest.Start(t, "--cluster-enabled", "yes",
			"--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1")
		cl[i] = redis.NewClient(&redis.Options{Addr: tc.servers[i].Addr, Protocol: 2})
		t.Cleanup(func() { cl[i].Close() })
		tc.ids[i] = cl[i].ClusterMyID(ctx).Val()
	}
	must := func(c *redis.Client, args ...any) {
		t.Helper()
		if err := c.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	must(cl[0], "CLUSTER", "ADDSLOTSRANGE", 0, 8191)
	must(cl[1], "CLUSTER", "ADDSLOTSRANGE", 8192, 16383)
	for i := 1; i < 3; i++ {
		must(cl[0], "CLUSTER", "MEET", "127.0.0.1", tc.servers[i].Port)
	}
	waitFor(t, "the replica to know its master", func() bool {
		return strings.Contains(cl[2].ClusterNodes(ctx).Val(), tc.ids[0])
	})
	must(cl[2], "CLUSTER", "REPLICATE", tc.ids[0])
	waitFor(t, "all nodes to see 2 shards of 3 nodes, synced and online", func() bool {
		for _, c := range cl {
			if !strings.Contains(c.ClusterInfo(ctx).Val(), "cluster_state:ok") {
				return false
			}
			slots := c.ClusterSlots(ctx).Val()
			if len(slots) != 2 || len(slots[0].Nodes)+len(slots[1].Nodes) != 3 {
				return false
			}
			for _, sh := range c.ClusterShards(ctx).Val() {
				for _, n := range sh.Nodes {
					if n.Health != "online" {
						return false
					}
				}
			}
		}
		return true
	})

	// Node 0 and the replica through port-only entries, node 1 through an
	// exact one that also changes its host.
	var ls [3]net.Listener
	var ports [3]int
	for i := range ls {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls[i], ports[i] = l, l.Addr().(*net.TCPAddr).Port
	}
	tc.ents = oracle{
		{"", tc.servers[0].Port, "", ports[0]},
		{"127.0.0.1", tc.servers[1].Port, "localhost", ports[1]},
		{"", tc.servers[2].Port, "", ports[2]},
	}
	tc.proxies = [3]string{
		net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		net.JoinHostPort("localhost", strconv.Itoa(ports[1])),
		net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2])),
	}
	m, err := ParseAddrMap(tc.ents.entries())
	if err != nil {
		t.Fatal(err)
	}
	tc.m = m
	for i, l := range ls {
		serveProxy(t, l, m, tc.servers[i].Addr)
	}
	return tc
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serveProxy serves a minimal Cicada on l in front of the Redis at addr:
// requests are forwarded one at a time, and replies rewritten as Cicada does
// (Rewrite for topology commands, RewriteRedirect for errors).
func serveProxy(t *testing.T, l net.Listener, m *AddrMap, addr string) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				defer up.Close()
				_ = proxyConn(m, c, up)
			}()
		}
	}()
}

func proxyConn(m *AddrMap, c, up net.Conn) error {
	in := bufio.NewReader(c)
	var buf []byte
	for {
		raw, args, err := readRequest(in)
		if err != nil {
			return err
		}
		if _, err := up.Write(raw); err != nil {
			return err
		}
		var reply []byte
		if reply, buf, err = readReply(up, buf); err != nil {
			return err
		}
		if kind := TopologyCommand(args); kind != ReplyNone {
			reply = m.Rewrite(kind, reply)
		} else if r, ok := m.RewriteRedirect(reply); ok {
			reply = r
		}
		if _, err := c.Write(reply); err != nil {
			return err
		}
	}
}

// readRequest reads one RESP array of bulk strings, as clients send.
func readRequest(r *bufio.Reader) (raw []byte, args [][]byte, err error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return nil, nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(string(line), "*")))
	if line[0] != '*' || err != nil {
		return nil, nil, fmt.Errorf("bad request line %q", line)
	}
	raw = append(raw, line...)
	for range n {
		hdr, err := r.ReadBytes('\n')
		if err != nil {
			return nil, nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(string(hdr), "$")))
		if err != nil {
			return nil, nil, fmt.Errorf("bad bulk header %q", hdr)
		}
		arg := make([]byte, size+2)
		if _, err := io.ReadFull(r, arg); err != nil {
			return nil, nil, err
		}
		raw = append(append(raw, hdr...), arg...)
		args = append(args, arg[:size])
	}
	return raw, args, nil
}

// readReply reads one whole reply from up, buf holding bytes already read.
func readReply(up net.Conn, buf []byte) (reply, rest []byte, err error) {
	chunk := make([]byte, 64<<10)
	for {
		sc := resp.NewScanner(buf)
		if len(buf) > 0 && sc.Skip(1) == resp.ScanOK {
			i := sc.Offset()
			return buf[:i:i], buf[i:], nil
		}
		if err := up.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			return nil, nil, err
		}
		n, err := up.Read(chunk)
		if err != nil {
			return nil, nil, err
		}
		buf = append(buf, chunk[:n]...)
	}
}

// rawExchange sends HELLO proto and then each command on one connection to
// addr and returns the raw bytes of each command's reply.
func rawExchange(t *testing.T, addr string, proto int, cmds ...[]string) [][]byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var buf []byte
	var out [][]byte
	for _, cmd := range append([][]string{{"HELLO", strconv.Itoa(proto)}}, cmds...) {
		req := fmt.Sprintf("*%d\r\n", len(cmd))
		for _, a := range cmd {
			req += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		var reply []byte
		if reply, buf, err = readReply(c, buf); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
		out = append(out, reply)
	}
	return out[1:]
}

// keyOn returns a key whose slot node i serves (0: 0-8191, 1: 8192-16383).
func keyOn(i int) string {
	for n := 0; ; n++ {
		k := "k" + strconv.Itoa(n)
		if Slot([]byte(k)) >= 8192 == (i == 1) {
			return k
		}
	}
}

// TestRealCluster rewrites the replies of a real cluster, in RESP2 and
// RESP3, and checks them byte for byte against the oracle; then reads them
// through rewriting proxies with go-redis, which must see the proxies'
// addresses and everything else as Redis sent it, and route a
// ClusterClient through the proxies alone.
func TestRealCluster(t *testing.T) {
	tc := startCluster(t)
	ctx := context.Background()
	keyA, keyB := keyOn(0), keyOn(1)
	slotB := strconv.Itoa(Slot([]byte(keyB)))

	// ASK: node 0 migrating keyA's slot to node 1; a missing key is asked
	// for there.
	slotA := strconv.Itoa(Slot([]byte(keyA)))
	ask := rawExchange(t, tc.servers[0].Addr, 2,
		[]string{"CLUSTER", "SETSLOT", slotA, "MIGRATING", tc.ids[1]},
		[]string{"GET", keyA},
		[]string{"CLUSTER", "SETSLOT", slotA, "STABLE"})
	wantAsk := "-ASK " + slotA + " " + tc.proxies[1] + "\r\n"
	if got, ok := tc.m.RewriteRedirect(ask[1]); string(got) != wantAsk || !ok {
		t.Errorf("RewriteRedirect(%q) = %q, %v; want %q", ask[1], got, ok, wantAsk)
	}

	for _, proto := range []int{2, 3} {
		cmds := [][]string{
			{"CLUSTER", "SLOTS"},
			{"CLUSTER", "SHARDS"},
			{"CLUSTER", "NODES"},
			{"CLUSTER", "REPLICAS", tc.ids[0]},
			{"CLUSTER", "SLAVES", tc.ids[0]},
			{"GET", keyB},
		}
		replies := rawExchange(t, tc.servers[0].Addr, proto, cmds...)
		for i, reply := range replies[:5] {
			args := make([][]byte, len(cmds[i]))
			for j, a := range cmds[i] {
				args[j] = []byte(a)
			}
			kind := TopologyCommand(args)
			orig, rest, err := decode(string(reply))
			if err != nil || rest != "" || encode(orig) != string(reply) {
				t.Fatalf("RESP%d %v: reply %q does not round-trip", proto, cmds[i], reply)
			}
			want := encode(tc.ents.expect(kind, orig))
			got := tc.m.Rewrite(kind, reply)
			if string(got) != want {
				t.Errorf("RESP%d %v:\n got %q\nwant %q", proto, cmds[i], got, want)
			}
			if string(got) == string(reply) {
				t.Errorf("RESP%d %v: nothing rewritten in %q", proto, cmds[i], reply)
			}
		}
		wantMoved := "-MOVED " + slotB + " " + tc.proxies[1] + "\r\n"
		if got, ok := tc.m.RewriteRedirect(replies[5]); string(got) != wantMoved || !ok {
			t.Errorf("RESP%d: RewriteRedirect(%q) = %q, %v; want %q", proto, replies[5], got, ok, wantMoved)
		}

		t.Run(fmt.Sprintf("go-redis RESP%d", proto), func(t *testing.T) {
			tc.checkGoRedis(t, ctx, proto, keyB, wantMoved)
		})
	}
}

// checkGoRedis reads the topology through the proxy of node 0 and directly
// from node 0 with go-redis, and compares.
func (tc *testCluster) checkGoRedis(t *testing.T, ctx context.Context, proto int, keyB, wantMoved string) {
	via := redis.NewClient(&redis.Options{Addr: tc.proxies[0], Protocol: proto})
	direct := redis.NewClient(&redis.Options{Addr: tc.servers[0].Addr, Protocol: proto})
	defer via.Close()
	defer direct.Close()
	mapAddr := map[string]string{}
	for i, s := range tc.servers {
		mapAddr[s.Addr] = tc.proxies[i]
	}

	gotSlots, err := via.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	wantSlots := direct.ClusterSlots(ctx).Val()
	for _, s := range wantSlots {
		for j := range s.Nodes {
			s.Nodes[j].Addr = mapAddr[s.Nodes[j].Addr]
		}
	}
	if !reflect.DeepEqual(gotSlots, wantSlots) || len(gotSlots) != 2 {
		t.Errorf("CLUSTER SLOTS via the proxy = %+v, want %+v", gotSlots, wantSlots)
	}

	gotShards, err := via.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	wantShards := direct.ClusterShards(ctx).Val()
	for _, shards := range [][]redis.ClusterShard{gotShards, wantShards} {
		for _, s := range shards {
			for j := range s.Nodes {
				s.Nodes[j].ReplicationOffset = 0 // moves on by itself
			}
		}
	}
	for _, s := range wantShards {
		for j := range s.Nodes {
			n := &s.Nodes[j]
			addr := mapAddr[net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))]
			host, port, _ := net.SplitHostPort(addr)
			n.IP, n.Endpoint = host, host
			n.Port, _ = strconv.ParseInt(port, 10, 64)
		}
	}
	if !reflect.DeepEqual(gotShards, wantShards) || len(gotShards) != 2 {
		t.Errorf("CLUSTER SHARDS via the proxy = %+v, want %+v", gotShards, wantShards)
	}

	// CLUSTER NODES: compare id and address of each line (the ping and pong
	// times move on between two calls).
	nodeAddrs := func(text string) map[string]string {
		out := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
			f := strings.Fields(line)
			out[f[0]] = f[1]
		}
		return out
	}
	gotNodes := nodeAddrs(via.ClusterNodes(ctx).Val())
	wantNodes := nodeAddrs(direct.ClusterNodes(ctx).Val())
	for id, a := range wantNodes {
		addr, bus, _ := strings.Cut(a, "@")
		wantNodes[id] = mapAddr[addr] + "@" + bus
	}
	if !reflect.DeepEqual(gotNodes, wantNodes) || len(gotNodes) != 3 {
		t.Errorf("CLUSTER NODES via the proxy = %v, want %v", gotNodes, wantNodes)
	}

	replicas, err := via.ClusterSlaves(ctx, tc.ids[0]).Result()
	if err != nil || len(replicas) != 1 || !strings.Contains(replicas[0], " "+tc.proxies[2]+"@") {
		t.Errorf("CLUSTER SLAVES via the proxy = %q, %v; want the replica at %s", replicas, err, tc.proxies[2])
	}

	var rerr redis.Error
	if err := via.Get(ctx, keyB).Err(); !errors.As(err, &rerr) || err.Error()+"\r\n" != wantMoved[1:] {
		t.Errorf("GET %s via the proxy: %v; want %q", keyB, err, wantMoved[1:])
	}

	// A cluster client that knows only the first proxy must find and use
	// the others.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{tc.proxies[0]}, Protocol: proto})
	defer cc.Close()
	for n := range 50 {
		k := fmt.Sprintf("key-%d-%d", proto, n)
		if err := cc.Set(ctx, k, n, 0).Err(); err != nil {
			t.Fatalf("SET %s through the proxies: %v", k, err)
		}
		if v, err := cc.Get(ctx, k).Int(); err != nil || v != n {
			t.Fatalf("GET %s through the proxies = %v, %v; want %d", k, v, err, n)
		}
	}
	seen := map[string]bool{}
	var mu sync.Mutex
	err = cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		seen[c.Options().Addr] = true
		return nil
	})
	want := map[string]bool{tc.proxies[0]: true, tc.proxies[1]: true, tc.proxies[2]: true}
	if err != nil || !reflect.DeepEqual(seen, want) {
		t.Errorf("cluster client shards = %v, %v; want %v", seen, err, want)
	}
}
