// Package clustertest runs a Redis Cluster of real redis-server processes
// with one Cicada sidecar (the real binary, cicadatest.StartBinary) in
// front of each node, for end-to-end tests.
//
// # Shape
//
// Start forms 3 masters and 3 replicas (Options.Masters sets the masters;
// each has one replica) with `redis-cli --cluster create`, then waits
// until every node reports cluster_state:ok and all agree on the slot map
// and on every node's role (WaitStable):
//
//	client ──► sidecar 0 ──► redis-server 0 ─┐
//	client ──► sidecar 1 ──► redis-server 1 ─┼─ cluster bus (direct)
//	   ...                                   │
//	client ──► sidecar 5 ──► redis-server 5 ─┘
//
// Clients are given the sidecars' addresses only. What the cluster tells
// them about other nodes (CLUSTER SLOTS, SHARDS, NODES, -MOVED, -ASK)
// must name sidecars too, in one of two ways (Mode):
//
//   - Announce: each redis-server runs with --cluster-announce-port set to
//     its sidecar's port (chosen before either starts), so Redis itself
//     names the sidecars. Replication and MIGRATE then go through the
//     sidecars as well.
//   - Map: Redis announces its own ports and every sidecar gets
//     --cluster-address-map with the six redisHost:port=sidecarHost:port
//     pairs, and rewrites the addresses in the replies.
//
// # Operations
//
// Reshard, ManualFailover, KillMaster, RestartNode and Restart change the
// cluster and return once it is stable again; each is bounded
// (Options.Timeout) and fails the test, naming what was still missing,
// when the bound passes. Sidecars stay up through all of them.
//
// # Ports, processes and ownership
//
// Every port is a free loopback port outside the kernel's ephemeral range
// (distinctPorts): a cluster names its ports (the address map, the
// announced addresses) before its processes bind them, and an ephemeral
// port found free could meanwhile become the source port of another
// process's connection (a package's tests running beside). Servers and
// sidecars die with the test process (Pdeathsig) and are stopped by
// t.Cleanup. A Cluster and its Nodes are used only by the goroutine of
// the test that started the cluster, not by its subtests' (their methods
// call that test's t.Fatal, and a restarted server lives as long as that
// test); the addresses in a Node never change and may be read from any
// goroutine.
package clustertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// Mode is how the addresses clients see come to name sidecars.
type Mode int

const (
	// Announce makes each redis-server announce its sidecar's port
	// (--cluster-announce-port).
	Announce Mode = iota + 1
	// Map keeps Redis's own ports in the cluster and gives every sidecar
	// --cluster-address-map from Redis addresses to sidecar addresses.
	Map
)

// String returns "announce" or "map".
func (m Mode) String() string {
	switch m {
	case Announce:
		return "announce"
	case Map:
		return "map"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Options configure Start. Zero values take the defaults noted.
type Options struct {
	// Mode is the addressing mode; default Announce.
	Mode Mode
	// Masters is the number of masters, each with one replica; default 3,
	// at least 3 (redis-cli --cluster create needs 3 masters).
	Masters int
	// NodeTimeout is the cluster-node-timeout: how long a node may be
	// unreachable before it is failed over. Default 1500 ms.
	NodeTimeout time.Duration
	// HotThreshold is each sidecar's --hot-threshold in ops/s; default 1
	// (a key is cached from its first read).
	HotThreshold int
	// SidecarArgs are appended to every sidecar's flags (later flags win).
	// The harness sets --listen, --hot-threshold, --commandstats-interval
	// 100ms, --log-level error (six sidecars warn of every upstream loss)
	// and, in Map mode, --cluster-address-map.
	SidecarArgs []string
	// Timeout bounds each wait (formation, stability after an operation, a
	// redis-cli run); default 30 s.
	Timeout time.Duration
}

// Node is one redis-server and its sidecar.
type Node struct {
	// Index is the node's position in Cluster.Nodes (0-based).
	Index int
	// ID is the node's cluster ID (CLUSTER MYID); it survives restarts
	// (nodes.conf is kept in Dir).
	ID string
	// RedisAddr is redis-server's client address, "127.0.0.1:<port>".
	RedisAddr string
	// BusPort is redis-server's cluster bus port (--cluster-port).
	BusPort int
	// SidecarAddr is the sidecar's client address, "127.0.0.1:<port>".
	SidecarAddr string
	// Sidecar is the sidecar process; it runs until the test ends.
	Sidecar *cicadatest.Binary
	// Dir holds nodes.conf and redis.log, across restarts.
	Dir string

	// Owned by the test goroutine.
	srv  *redistest.Server // the running process; nil while down
	args []string          // redis-server arguments, the same at every start
	rc   *redis.Client     // direct client, closed at cleanup
}

// Up reports whether the node's redis-server is running (not killed or
// stopped by the harness).
func (n *Node) Up() bool { return n.srv != nil }

// String names the node for logs: "node2(:41234 via :41240)".
func (n *Node) String() string {
	_, rp, _ := net.SplitHostPort(n.RedisAddr)
	_, sp, _ := net.SplitHostPort(n.SidecarAddr)
	return fmt.Sprintf("node%d(:%s via :%s)", n.Index, rp, sp)
}

// Cluster is a running Redis Cluster with its sidecars. Its methods run
// on the goroutine of the test given to Start.
type Cluster struct {
	// Opts are the options with defaults filled in.
	Opts Options
	// Nodes are all nodes, masters and replicas, in start order; the
	// roles are in Topology.
	Nodes []*Node

	t testing.TB
	// topo is the topology seen by the last successful WaitStable.
	topo *Topology
}

// Start runs the redis-servers and sidecars, forms the cluster and waits
// until it is stable. It skips t when redis-server is not installed outside
// CI (redistest.Require), and fails it when redis-cli is missing or the
// cluster does not form within Options.Timeout.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	redistest.Require(t)
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found in PATH (apt-get install -y redis-tools): %v", err)
	}
	if o.Mode == 0 {
		o.Mode = Announce
	}
	if o.Masters == 0 {
		o.Masters = 3
	}
	if o.Masters < 3 {
		t.Fatalf("Options.Masters = %d, want at least 3", o.Masters)
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = 1500 * time.Millisecond
	}
	if o.HotThreshold == 0 {
		o.HotThreshold = 1
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	c := &Cluster{Opts: o, t: t}
	ports := distinctPorts(t, 3*2*o.Masters)
	for i := range 2 * o.Masters {
		c.Nodes = append(c.Nodes, &Node{
			Index:       i,
			RedisAddr:   "127.0.0.1:" + strconv.Itoa(ports[3*i]),
			BusPort:     ports[3*i+1],
			SidecarAddr: "127.0.0.1:" + strconv.Itoa(ports[3*i+2]),
			Dir:         t.TempDir(),
		})
	}
	var pairs []string
	for _, n := range c.Nodes {
		pairs = append(pairs, n.RedisAddr+"="+n.SidecarAddr)
	}
	for _, n := range c.Nodes {
		n.args = c.redisArgs(n)
		n.srv = redistest.StartPort(t, port(n.RedisAddr), n.args...)
		n.rc = redis.NewClient(&redis.Options{Addr: n.RedisAddr, Protocol: 2, DisableIdentity: true,
			DialTimeout: time.Second, ReadTimeout: 5 * time.Second, MaxRetries: 1})
		rc := n.rc
		t.Cleanup(func() { _ = rc.Close() })
	}
	// The sidecars start before the cluster is formed: a Redis with no
	// slots is a Redis they must tolerate.
	for _, n := range c.Nodes {
		args := []string{"--listen", n.SidecarAddr, "--hot-threshold", strconv.Itoa(o.HotThreshold),
			"--commandstats-interval", "100ms", "--log-level", "error"}
		if o.Mode == Map {
			args = append(args, "--cluster-address-map", strings.Join(pairs, ","))
		}
		n.Sidecar = cicadatest.StartBinary(t, n.RedisAddr, append(args, o.SidecarArgs...)...)
	}
	for _, n := range c.Nodes {
		id, err := n.rc.Do(context.Background(), "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("%v: CLUSTER MYID: %v", n, err)
		}
		n.ID = id
	}
	create := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		create = append(create, n.RedisAddr)
	}
	create = append(create, "--cluster-replicas", "1", "--cluster-yes")
	c.redisCLI(cli, create...)
	c.WaitStable(nil)
	return c
}

// redisArgs are the redis-server arguments of n, the same at every start
// (appended to redistest's, so --dir and --logfile here win).
func (c *Cluster) redisArgs(n *Node) []string {
	args := []string{
		"--dir", n.Dir,
		"--logfile", filepath.Join(n.Dir, "redis.log"),
		"--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(n.Dir, "nodes.conf"),
		"--cluster-node-timeout", strconv.FormatInt(c.Opts.NodeTimeout.Milliseconds(), 10),
		"--cluster-port", strconv.Itoa(n.BusPort),
		"--cluster-announce-ip", "127.0.0.1",
		// The other masters keep serving while one is being failed over.
		"--cluster-require-full-coverage", "no",
		// A replica fails over however long it was cut off from its master.
		"--cluster-replica-validity-factor", "0",
		// Roles change only when a test says so.
		"--cluster-allow-replica-migration", "no",
		// A restarted replica's full sync starts at once (the default waits 5 s
		// for more replicas).
		"--repl-diskless-sync-delay", "0",
		// A master pings its replicas every second (default 10): a replica
		// synced from a master that has sent nothing is at offset 0, which
		// keeps it out of CLUSTER SLOTS (WaitStable waits for it there)
		// until the master's first write or PING.
		"--repl-ping-replica-period", "1",
		// Redis 7.0 refuses clients from any address but 127.0.0.1 and ::1
		// without a password; a test client that reaches a Redis directly
		// from another loopback address (127.0.0.2) must be served and seen
		// in CLIENT LIST, not turned away. The server still listens on
		// 127.0.0.1 only.
		"--protected-mode", "no",
	}
	if c.Opts.Mode == Announce {
		args = append(args, "--cluster-announce-port", strconv.Itoa(port(n.SidecarAddr)))
	}
	return args
}

// redisCLI runs redis-cli with args, bounded by Options.Timeout, and fails
// the test with its output when it fails.
func (c *Cluster) redisCLI(cli string, args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.Opts.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("redis-cli %s: %v (timeout %v)\n%s", strings.Join(args, " "), err, c.Opts.Timeout, out)
	}
	return string(out)
}

// Direct returns a client connected to n's redis-server itself, not
// through its sidecar (RESP2, no retries beyond one). It lives as long as
// the test; after a restart its next command may fail once while it
// reconnects.
func (c *Cluster) Direct(n *Node) *redis.Client { return n.rc }

// SidecarAddrs returns every sidecar's client address, in node order.
func (c *Cluster) SidecarAddrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.SidecarAddr)
	}
	return a
}

// NodeByAddr returns the node whose sidecar or redis-server listens on
// addr, or nil.
func (c *Cluster) NodeByAddr(addr string) *Node {
	for _, n := range c.Nodes {
		if n.SidecarAddr == addr || n.RedisAddr == addr {
			return n
		}
	}
	return nil
}

// NodeByID returns the node with cluster ID id, or nil.
func (c *Cluster) NodeByID(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Announced returns the address the cluster gives clients for n: its
// sidecar's in Announce mode, its redis-server's in Map mode (which the
// sidecars rewrite).
func (c *Cluster) Announced(n *Node) string {
	if c.Opts.Mode == Announce {
		return n.SidecarAddr
	}
	return n.RedisAddr
}

// distinctPorts returns n distinct loopback ports, free when it returns,
// below the kernel's ephemeral range (ip_local_port_range; at least
// 10000): no outgoing connection or port-0 listener of another process
// takes them before the cluster binds them.
func distinctPorts(t testing.TB, n int) []int {
	t.Helper()
	lo, hi := 10000, ephemeralLow()
	if hi-lo < 10*n {
		t.Fatalf("ephemeral ports start at %d: no room below for %d ports", hi, n)
	}
	seen := map[int]bool{}
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries == 100*n {
			t.Fatalf("%d free ports in [%d, %d) after %d tries, want %d", len(ports), lo, hi, tries, n)
		}
		p := lo + rand.IntN(hi-lo)
		if seen[p] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // taken
		}
		_ = l.Close()
		seen[p] = true
		ports = append(ports, p)
	}
	return ports
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	v, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return v
}

// port returns the port of "host:port"; 0 when there is none.
func port(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}

// logTail returns the last lines of n's redis.log, for failure messages.
func (n *Node) logTail(lines int) string {
	b, err := os.ReadFile(filepath.Join(n.Dir, "redis.log"))
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// AllCounts returns Counts of every node's sidecar, in node order.
func (c *Cluster) AllCounts() []CacheCounts {
	c.t.Helper()
	out := make([]CacheCounts, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Counts(c.t)
	}
	return out
}

// Operations on the cluster: resharding, failover, kills and restarts.

// Reshard moves the n lowest-numbered slots of master from to master to
// with `redis-cli --cluster reshard` (which takes a single source's slots
// from slot 0 upwards), waits until the cluster is stable, and returns
// the slots moved, ascending. It fails the test when the slots moved are
// not exactly those n (so a test can place keys in them beforehand), or
// when redis-cli fails or the cluster does not settle in Options.Timeout.
func (c *Cluster) Reshard(from, to *Node, n int) []int {
	c.t.Helper()
	before := c.SlotsOf(from)
	if !c.topo.IsMaster(from.ID) || !c.topo.IsMaster(to.ID) || len(before) < n || n < 1 {
		c.t.Fatalf("Reshard(%v, %v, %d): both must be masters and the source serve at least %d slots (it serves %d)",
			from, to, n, n, len(before))
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		c.t.Fatal(err)
	}
	c.redisCLI(cli, "--cluster", "reshard", from.RedisAddr, "--cluster-from", from.ID, "--cluster-to", to.ID,
		"--cluster-slots", strconv.Itoa(n), "--cluster-yes")
	c.WaitStable(func(tp *Topology) string {
		if got := len(tp.Nodes[from.ID].Slots); got != len(before)-n {
			return fmt.Sprintf("%v serves %d slots, want %d", from, got, len(before)-n)
		}
		return ""
	})
	after := c.SlotsOf(from)
	var moved []int
	for _, s := range before {
		if !slices.Contains(after, s) {
			moved = append(moved, s)
		}
	}
	if !slices.Equal(moved, before[:n]) {
		c.t.Fatalf("reshard moved slots %s from %v, want its lowest %d: %s", ranges(moved), from, n, ranges(before[:n]))
	}
	for _, s := range moved {
		if c.topo.Owner(s) != to.ID {
			c.t.Fatalf("after the reshard slot %d is served by %s, want %v (%s)", s, c.topo.Owner(s), to, to.ID)
		}
	}
	return moved
}

// ManualFailover sends CLUSTER FAILOVER to replica r (a coordinated
// failover: its master stops writes until r has every write, then r takes
// over), and waits until r is a master and its old master r's replica on
// every node. It returns the old master.
func (c *Cluster) ManualFailover(r *Node) *Node {
	c.t.Helper()
	m := c.MasterOf(r)
	if m == nil {
		c.t.Fatalf("ManualFailover(%v): it is not a replica", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.rc.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		c.t.Fatalf("%v: CLUSTER FAILOVER: %v", r, err)
	}
	c.WaitStable(swapped(r, m))
	return m
}

// swapped waits for r as a master and m as its replica.
func swapped(r, m *Node) func(*Topology) string {
	return func(tp *Topology) string {
		if !tp.IsMaster(r.ID) {
			return fmt.Sprintf("%v is not yet a master", r)
		}
		if m.Up() && tp.Nodes[m.ID].MasterID != r.ID {
			return fmt.Sprintf("%v is not yet %v's replica", m, r)
		}
		return ""
	}
}

// WaitReplicated waits until every replica of master m has acknowledged
// m's whole replication stream as it was when WaitReplicated was called
// (INFO replication: each slaveN's offset at least the first
// master_repl_offset read), so that killing m loses no write it
// acknowledged. The caller stops writes to m first. The offset is read
// once: the master's PINGs (every second, repl-ping-replica-period) keep
// adding to it, and a replica acknowledges once a second, so equal
// offsets could be rare.
func (c *Cluster) WaitReplicated(m *Node) {
	c.t.Helper()
	re := regexp.MustCompile(`(?m)^slave\d+:.*\boffset=(\d+)\b`)
	master := regexp.MustCompile(`(?m)^master_repl_offset:(\d+)\r$`)
	deadline := time.Now().Add(c.Opts.Timeout)
	target := int64(-1)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := m.rc.Info(ctx, "replication").Result()
		cancel()
		why := ""
		if err != nil {
			why = err.Error()
		} else if mo := master.FindStringSubmatch(info); mo == nil {
			why = "no master_repl_offset"
		} else if reps := re.FindAllStringSubmatch(info, -1); len(reps) == 0 {
			why = "no replica"
		} else {
			if target < 0 {
				target, _ = strconv.ParseInt(mo[1], 10, 64)
			}
			for _, r := range reps {
				if off, _ := strconv.ParseInt(r[1], 10, 64); off < target {
					why = fmt.Sprintf("a replica is at offset %s, want at least %d (the master is at %s)", r[1], target, mo[1])
				}
			}
		}
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%v: replicas not caught up after %v: %s\n%s", m, c.Opts.Timeout, why, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// KillMaster sends SIGKILL to master m's redis-server (its sidecar stays
// up) and waits until its replica has been promoted and every running
// node agrees (m flagged fail, serving nothing). killed, when not nil,
// runs once m's port refuses connections, before that wait (a test
// resumes its writes there). It returns the promoted replica. With
// cluster-node-timeout T this takes about 2T.
func (c *Cluster) KillMaster(m *Node, killed func()) *Node {
	c.t.Helper()
	r := c.ReplicaOf(m)
	if !c.topo.IsMaster(m.ID) || r == nil {
		c.t.Fatalf("KillMaster(%v): it must be a master with a running replica", m)
	}
	c.stop(m, false)
	if killed != nil {
		killed()
	}
	c.WaitStable(swapped(r, m))
	return r
}

// RestartNode starts n's redis-server again on its port, in its directory
// (its nodes.conf, so the same node ID; no data: the servers keep none on
// disk) and waits until it has rejoined and every node agrees. A master
// that was killed and failed over rejoins as a replica of the node that
// took its slots (and fetches their data from it).
func (c *Cluster) RestartNode(n *Node) {
	c.t.Helper()
	if n.Up() {
		c.t.Fatalf("RestartNode(%v): it is running", n)
	}
	n.srv = redistest.StartPort(c.t, port(n.RedisAddr), n.args...)
	c.WaitStable(nil)
}

// Restart shuts n's redis-server down (SHUTDOWN NOSAVE), starts it again
// and waits as RestartNode does. A master comes back empty and, if that
// takes less than cluster-node-timeout, keeps its slots: its keys are lost
// (restart replicas, or fail masters over first, to keep the data).
func (c *Cluster) Restart(n *Node) {
	c.t.Helper()
	c.stop(n, true)
	c.RestartNode(n)
}

// stop ends n's redis-server (SHUTDOWN NOSAVE when graceful, else
// SIGKILL) and waits until its port refuses connections.
func (c *Cluster) stop(n *Node, graceful bool) {
	c.t.Helper()
	if !n.Up() {
		c.t.Fatalf("%v is not running", n)
	}
	if graceful {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		// The reply is the connection closing.
		_ = n.rc.Do(ctx, "SHUTDOWN", "NOSAVE").Err()
		cancel()
	} else {
		n.srv.Stop()
	}
	deadline := time.Now().Add(c.Opts.Timeout)
	for {
		conn, err := net.DialTimeout("tcp", n.RedisAddr, 200*time.Millisecond)
		if err != nil {
			break
		}
		_ = conn.Close()
		if time.Now().After(deadline) {
			c.t.Fatalf("%v still accepts connections %v after it was stopped", n, c.Opts.Timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	n.srv = nil
}
