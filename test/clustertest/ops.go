package clustertest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/cicada-proxy/cicada/test/redistest"
)

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
