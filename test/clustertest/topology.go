package clustertest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/cluster"
)

// NodeInfo is one line of CLUSTER NODES: what one node believes of one
// node of the cluster.
type NodeInfo struct {
	// ID is the node's 40-character cluster ID.
	ID string
	// Addr is the announced client address "ip:port" (without the
	// @busport and hostname parts).
	Addr string
	// Flags are the line's flags: myself, master, slave, fail?, fail,
	// handshake, noaddr, nofailover, noflags.
	Flags []string
	// MasterID is the master's ID for a replica, "" for a master.
	MasterID string
	// Slots are the slots the node serves, ascending.
	Slots []int
	// Migrating is true when the line has a slot being migrated or
	// imported ("[slot->-id]" or "[slot-<-id]").
	Migrating bool
}

// Has reports whether the line carries flag.
func (ni NodeInfo) Has(flag string) bool { return slices.Contains(ni.Flags, flag) }

// ParseNodes parses a CLUSTER NODES reply. It returns an error naming the
// line it cannot read.
func ParseNodes(text string) ([]NodeInfo, error) {
	var out []NodeInfo
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("clustertest: CLUSTER NODES line %q: %d fields, want at least 8", line, len(f))
		}
		addr, _, _ := strings.Cut(f[1], "@")
		ni := NodeInfo{ID: f[0], Addr: addr, Flags: strings.Split(f[2], ",")}
		if f[3] != "-" {
			ni.MasterID = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				ni.Migrating = true
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			a, err1 := strconv.Atoi(lo)
			b, err2 := a, error(nil)
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil || a < 0 || b < a || b >= cluster.Slots {
				return nil, fmt.Errorf("clustertest: CLUSTER NODES line %q: bad slot range %q", line, s)
			}
			for x := a; x <= b; x++ {
				ni.Slots = append(ni.Slots, x)
			}
		}
		slices.Sort(ni.Slots)
		out = append(out, ni)
	}
	return out, nil
}

// Topology is the cluster as every running node described it, identically,
// at the last WaitStable.
type Topology struct {
	// Nodes maps a node ID to its line, as the first running node
	// reported it (without its "myself" flag).
	Nodes map[string]NodeInfo
	// owner maps a slot to its master's ID.
	owner [cluster.Slots]string
}

// IsMaster reports whether the node with id is a master.
func (tp *Topology) IsMaster(id string) bool { return tp.Nodes[id].Has("master") }

// Owner returns the ID of the master serving slot.
func (tp *Topology) Owner(slot int) string { return tp.owner[slot] }

// Topology returns the topology of the last WaitStable (every operation
// ends with one).
func (c *Cluster) Topology() *Topology { return c.topo }

// Masters returns the nodes that are masters serving slots, in node order.
func (c *Cluster) Masters() []*Node {
	var ms []*Node
	for _, n := range c.Nodes {
		if ni := c.topo.Nodes[n.ID]; ni.Has("master") && len(ni.Slots) > 0 {
			ms = append(ms, n)
		}
	}
	return ms
}

// MasterOf returns the master of replica r, or nil when r is a master.
func (c *Cluster) MasterOf(r *Node) *Node {
	id := c.topo.Nodes[r.ID].MasterID
	if id == "" {
		return nil
	}
	return c.NodeByID(id)
}

// ReplicaOf returns the running replica of master m with the lowest index,
// or nil when it has none.
func (c *Cluster) ReplicaOf(m *Node) *Node {
	for _, n := range c.Nodes {
		if n.Up() && c.topo.Nodes[n.ID].MasterID == m.ID {
			return n
		}
	}
	return nil
}

// Owner returns the master serving key (by its hash slot).
func (c *Cluster) Owner(key string) *Node {
	return c.NodeByID(c.topo.Owner(cluster.Slot([]byte(key))))
}

// SlotsOf returns the slots master m serves, ascending.
func (c *Cluster) SlotsOf(m *Node) []int { return slices.Clone(c.topo.Nodes[m.ID].Slots) }

// WaitStable waits until the running nodes agree, then records the
// topology (Topology) and returns it. Agreement means, on every running
// node: CLUSTER INFO says cluster_state:ok with all 16384 slots ok;
// CLUSTER NODES lists every node with the same role, master, slots and
// announced address (Announced) as on the others, no running node is
// flagged fail, fail?, handshake or noaddr, every stopped node is flagged
// fail and serves no slot, and no slot is migrating or importing; CLUSTER
// SLOTS gives each master's slots with every running replica of it as
// CLUSTER NODES has them (wantSlots: Redis 7.0 leaves a replica out of
// CLUSTER SLOTS until it knows the replica's replication offset is not
// 0, which each node learns at its own moment); every running replica's
// replication link is up; and a running master without slots is a
// replica (a killed master that came back). want, when not nil, adds a
// condition: it returns "" when the topology is as the caller waits for,
// or what is still missing. The test fails after Options.Timeout with the
// last reason.
func (c *Cluster) WaitStable(want func(*Topology) string) *Topology {
	c.t.Helper()
	start := time.Now()
	deadline, lastRepair := start.Add(c.Opts.Timeout), start
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tp, why := c.check(ctx)
		if why != "" && time.Since(lastRepair) > 4*c.Opts.NodeTimeout {
			lastRepair = time.Now()
			c.repairLostSlots(ctx)
		}
		cancel()
		if why == "" && want != nil {
			why = want(tp)
		}
		if why == "" {
			c.topo = tp
			return tp
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, n := range c.Nodes {
				fmt.Fprintf(&logs, "--- %v log tail:\n%s\n", n, n.logTail(8))
			}
			c.t.Fatalf("cluster not stable after %v: %s\n%s", c.Opts.Timeout, why, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// repairLostSlots works around a Redis 7.0 cluster bus bug (fixed in 7.2
// by redis/redis#12344): a node keeps a slot's "owner not claiming it"
// mark after the slot changes owner by a failover, so a stale message of
// the old master rebinds the slot to it, and when that master turns
// replica the node unbinds the slot and serves it to nobody, for good,
// while every other node has it at its new owner (a CI run saw the
// replica promoted by a manual failover lose one of its own slots). For
// each running node whose CLUSTER NODES leaves slots unserved that every
// other running node gives to one running master, it sends CLUSTER
// SETSLOT slot NODE owner to that node, and logs it. WaitStable calls it
// only after the cluster has been unsettled for 4 node timeouts, longer
// than the bus takes to spread any change it makes itself.
func (c *Cluster) repairLostSlots(ctx context.Context) {
	views := map[*Node][cluster.Slots]string{}
	for _, n := range c.Nodes {
		if !n.Up() {
			continue
		}
		text, err := n.rc.ClusterNodes(ctx).Result()
		if err != nil {
			return
		}
		lines, err := ParseNodes(text)
		if err != nil {
			return
		}
		var owner [cluster.Slots]string
		for _, ni := range lines {
			for _, s := range ni.Slots {
				owner[s] = ni.ID
			}
		}
		views[n] = owner
	}
	for n, view := range views {
		for s, id := range view {
			if id != "" {
				continue
			}
			agreed := ""
			for m, other := range views {
				if m == n {
					continue
				}
				if other[s] == "" || (agreed != "" && other[s] != agreed) {
					agreed = ""
					break
				}
				agreed = other[s]
			}
			owner := c.NodeByID(agreed)
			if owner == nil || !owner.Up() {
				continue
			}
			err := n.rc.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", agreed).Err()
			c.t.Logf("clustertest: %v serves slot %d to nobody while every other node has it at %v: "+
				"(Redis 7.0 does it with a stale owner-not-claiming mark, redis/redis#12344); CLUSTER SETSLOT %d NODE %s on it: %v",
				n, s, owner, s, agreed, err)
		}
	}
}

// check asks every running node for its view and returns the common
// topology, or "" and the first disagreement found.
func (c *Cluster) check(ctx context.Context) (*Topology, string) {
	var first *Topology
	var firstNodes, wantSlots string
	var firstNode *Node
	for _, n := range c.Nodes {
		if !n.Up() {
			continue
		}
		info, err := n.rc.ClusterInfo(ctx).Result()
		if err != nil {
			return nil, fmt.Sprintf("%v: CLUSTER INFO: %v", n, err)
		}
		for _, want := range []string{"cluster_state:ok", "cluster_slots_ok:16384"} {
			if !strings.Contains(info, want+"\r\n") {
				return nil, fmt.Sprintf("%v: CLUSTER INFO has no %s:\n%s", n, want, info)
			}
		}
		text, err := n.rc.ClusterNodes(ctx).Result()
		if err != nil {
			return nil, fmt.Sprintf("%v: CLUSTER NODES: %v", n, err)
		}
		tp, norm, why := c.normalizeNodes(text)
		if why != "" {
			return nil, fmt.Sprintf("%v: %s", n, why)
		}
		if first == nil {
			first, firstNodes, firstNode, wantSlots = tp, norm, n, c.wantSlots(tp)
		} else if norm != firstNodes {
			return nil, fmt.Sprintf("CLUSTER NODES differ: %v says\n%s%v says\n%s", firstNode, firstNodes, n, norm)
		}
		slots, err := c.normalizeSlots(ctx, n)
		if err != nil {
			return nil, fmt.Sprintf("%v: CLUSTER SLOTS: %v", n, err)
		}
		if slots != wantSlots {
			return nil, fmt.Sprintf("%v: CLUSTER SLOTS is not yet what CLUSTER NODES says (a replica missing is one "+
				"whose nonzero replication offset the node has not yet heard of):\n%swant\n%s", n, slots, wantSlots)
		}
	}
	if first == nil {
		return nil, "no node is running"
	}
	for _, n := range c.Nodes {
		if !n.Up() || first.Nodes[n.ID].MasterID == "" {
			continue
		}
		repl, err := n.rc.Info(ctx, "replication").Result()
		if err != nil {
			return nil, fmt.Sprintf("%v: INFO replication: %v", n, err)
		}
		if !strings.Contains(repl, "master_link_status:up\r\n") {
			return nil, fmt.Sprintf("%v: replica's link to its master is not up:\n%s", n, repl)
		}
	}
	return first, ""
}

// normalizeNodes parses one node's CLUSTER NODES, checks it against the
// harness's knowledge (every node listed at its announced address, the
// running ones healthy, the stopped ones failed, all slots served, none
// migrating), and renders what every node must agree on.
func (c *Cluster) normalizeNodes(text string) (*Topology, string, string) {
	lines, err := ParseNodes(text)
	if err != nil {
		return nil, "", err.Error()
	}
	tp := &Topology{Nodes: map[string]NodeInfo{}}
	for _, ni := range lines {
		ni.Flags = slices.DeleteFunc(ni.Flags, func(f string) bool { return f == "myself" })
		tp.Nodes[ni.ID] = ni
	}
	if len(tp.Nodes) != len(c.Nodes) {
		return nil, "", fmt.Sprintf("CLUSTER NODES lists %d nodes, want %d:\n%s", len(tp.Nodes), len(c.Nodes), text)
	}
	served := 0
	var b strings.Builder
	for _, n := range c.Nodes {
		ni, ok := tp.Nodes[n.ID]
		if !ok {
			return nil, "", fmt.Sprintf("CLUSTER NODES does not list %v (%s):\n%s", n, n.ID, text)
		}
		if ni.Addr != c.Announced(n) {
			return nil, "", fmt.Sprintf("CLUSTER NODES gives %v the address %s, want %s", n, ni.Addr, c.Announced(n))
		}
		if ni.Migrating {
			return nil, "", fmt.Sprintf("%v has a slot migrating or importing", n)
		}
		role := "master"
		if ni.Has("slave") {
			role = "replica-of-" + ni.MasterID
		}
		if n.Up() {
			for _, f := range []string{"fail", "fail?", "handshake", "noaddr"} {
				if ni.Has(f) {
					return nil, "", fmt.Sprintf("running %v is flagged %s", n, f)
				}
			}
			if role == "master" && len(ni.Slots) == 0 {
				return nil, "", fmt.Sprintf("running %v is a master without slots (not yet a replica)", n)
			}
		} else {
			if !ni.Has("fail") {
				return nil, "", fmt.Sprintf("stopped %v is not flagged fail (flags %v)", n, ni.Flags)
			}
			if len(ni.Slots) > 0 {
				return nil, "", fmt.Sprintf("stopped %v still serves %d slots", n, len(ni.Slots))
			}
		}
		for _, s := range ni.Slots {
			if tp.owner[s] != "" {
				return nil, "", fmt.Sprintf("slot %d served by %s and %s", s, tp.owner[s], ni.ID)
			}
			tp.owner[s] = ni.ID
			served++
		}
		fmt.Fprintf(&b, "%s %s %s up=%v %s\n", ni.ID, ni.Addr, role, n.Up(), ranges(ni.Slots))
	}
	if served != cluster.Slots {
		return nil, "", fmt.Sprintf("masters serve %d slots, want %d", served, cluster.Slots)
	}
	return tp, b.String(), ""
}

// normalizeSlots renders n's CLUSTER SLOTS as wantSlots does: one line
// per range, ascending, each range's replicas sorted (their order is the
// node's own).
func (c *Cluster) normalizeSlots(ctx context.Context, n *Node) (string, error) {
	slots, err := n.rc.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	slices.SortFunc(slots, func(a, b redis.ClusterSlot) int { return a.Start - b.Start })
	var b strings.Builder
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			return "", fmt.Errorf("range %d-%d has no node", s.Start, s.End)
		}
		var reps []string
		for _, r := range s.Nodes[1:] {
			reps = append(reps, r.ID+"@"+r.Addr)
		}
		b.WriteString(slotsLine(s.Start, s.End, s.Nodes[0].ID+"@"+s.Nodes[0].Addr, reps))
	}
	return b.String(), nil
}

// wantSlots renders, as normalizeSlots does, the CLUSTER SLOTS of a
// cluster whose CLUSTER NODES is tp and which has settled: each maximal
// run of slots of one master, ascending, the master and each of its
// running replicas at their announced addresses. Redis 7.0 lists a
// replica there only when it is not flagged fail and its replication
// offset, as the answering node knows it, is not 0 (isReplicaAvailable
// in cluster.c): after a full sync from a master that has sent nothing
// yet, the offset stays 0 until the master's first write or replication
// PING, and the other nodes learn the new offset from the replica's next
// cluster bus message, each at its own moment. Until then a node's
// CLUSTER SLOTS lacks the replica, and reads a moment apart differ.
func (c *Cluster) wantSlots(tp *Topology) string {
	var b strings.Builder
	for start := 0; start < cluster.Slots; {
		id := tp.owner[start]
		end := start
		for end+1 < cluster.Slots && tp.owner[end+1] == id {
			end++
		}
		var reps []string
		for _, n := range c.Nodes {
			if n.Up() && tp.Nodes[n.ID].MasterID == id {
				reps = append(reps, n.ID+"@"+c.Announced(n))
			}
		}
		master := id + "@" + tp.Nodes[id].Addr
		b.WriteString(slotsLine(start, end, master, reps))
		start = end + 1
	}
	return b.String()
}

// slotsLine renders one range of CLUSTER SLOTS, its replicas sorted.
func slotsLine(start, end int, master string, replicas []string) string {
	slices.Sort(replicas)
	return fmt.Sprintf("%d-%d %s %v\n", start, end, master, replicas)
}

// ranges renders ascending slots as "0-5460,5462".
func ranges(slots []int) string {
	var parts []string
	for i := 0; i < len(slots); {
		j := i
		for j+1 < len(slots) && slots[j+1] == slots[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(slots[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", slots[i], slots[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
