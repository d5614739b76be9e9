package cluster

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	cicadacluster "github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/test/clustertest"
)

var long = flag.Bool("cluster.long", false, "run the load test in both addressing modes with longer phases (make test-cluster)")

// timing is how long each part of a phase lasts.
type timing struct {
	steady time.Duration // the steady phase
	pre    time.Duration // a move phase's start, before its "before" window
	window time.Duration // the windows right before and after a move
	post   time.Duration // after the "after" window
}

var (
	shortTiming = timing{steady: 2 * time.Second, pre: 300 * time.Millisecond, window: time.Second, post: 300 * time.Millisecond}
	longTiming  = timing{steady: 5 * time.Second, pre: 2 * time.Second, window: 3 * time.Second, post: 2 * time.Second}
)

// reshardSlots is how many slots the reshard phase moves.
const reshardSlots = 100

// TestClusterLoad runs writers and readers of a few hot keys through a
// go-redis ClusterClient that knows only the sidecars, through a steady
// phase and then a reshard of two hot keys' slots, a manual failover of
// their master, a forced failover (their master killed) and restarts (the
// killed node, back as a replica, and another replica). Afterwards: no
// stale read, a linearizable history per key, no load client ever seen by
// a Redis or dialing anything but a sidecar, and the moved keys served from
// their new owner's sidecar's cache after each move. Announce mode only,
// with short phases, unless -cluster.long.
func TestClusterLoad(t *testing.T) {
	modes, tm := []clustertest.Mode{clustertest.Announce}, shortTiming
	if *long {
		modes, tm = []clustertest.Mode{clustertest.Announce, clustertest.Map}, longTiming
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) { runLoad(t, mode, tm) })
	}
}

// phaseResult is what one phase measured.
type phaseResult struct {
	name string
	// move describes the change; "" for the steady phase.
	move     string
	moveTook time.Duration
	// owner is the node serving the moved hot keys after the move;
	// formerOwner the one that served them before, nil when the move
	// moved nothing.
	owner, formerOwner *clustertest.Node
	// Counts of every sidecar at the phase's start, at the start and end
	// of the window before the move, of the window after it, and at the
	// phase's end.
	start, beforeA, beforeB, afterA, afterB, end []clustertest.CacheCounts
	// afterFrom and afterTo bound the window after the move (ns since the
	// load began).
	afterFrom, afterTo int64
}

func runLoad(t *testing.T, mode clustertest.Mode, tm timing) {
	c := clustertest.Start(t, clustertest.Options{Mode: mode})
	ms := c.Masters()
	if len(ms) != 3 {
		t.Fatalf("%d masters serve slots, want 3", len(ms))
	}
	a, b, other := ms[0], ms[1], ms[2]
	// Two keys in a's two lowest slots move to b with the reshard (which
	// takes the source's lowest slots); b then serves no other hot key, so
	// its sidecar's hits are the moved keys'. A third key stays on other.
	aSlots := c.SlotsOf(a)
	moving := []string{keyInSlot(t, "hot", aSlots[0]), keyInSlot(t, "hot", aSlots[1])}
	keys := append(slices.Clone(moving), keyInSlot(t, "hot", c.SlotsOf(other)[0]))

	g := newLoadGen(c.SidecarAddrs(), keys)
	defer g.stop()
	if err := g.start(); err != nil {
		t.Fatal(err)
	}

	var results []phaseResult
	st := phaseResult{name: "steady", start: c.AllCounts(), owner: a}
	time.Sleep(tm.steady)
	st.end = c.AllCounts()
	checkNoDirectClients(t, c, st.name)
	results = append(results, st)

	// phase runs a phase around one move, sampling every sidecar's
	// counters; move returns its description and the moved keys' owner.
	phase := func(name string, formerOwner *clustertest.Node, move func() (string, *clustertest.Node)) {
		g.setPhase(len(results))
		p := phaseResult{name: name, start: c.AllCounts(), formerOwner: formerOwner}
		time.Sleep(tm.pre)
		p.beforeA = c.AllCounts()
		time.Sleep(tm.window)
		p.beforeB = c.AllCounts()
		t0 := time.Now()
		p.move, p.owner = move()
		p.moveTook = time.Since(t0)
		p.afterFrom, p.afterA = g.now(), c.AllCounts()
		time.Sleep(tm.window)
		p.afterTo, p.afterB = g.now(), c.AllCounts()
		time.Sleep(tm.post)
		p.end = c.AllCounts()
		checkNoDirectClients(t, c, name)
		results = append(results, p)
	}
	phase("reshard", a, func() (string, *clustertest.Node) {
		moved := c.Reshard(a, b, reshardSlots)
		for _, k := range moving {
			if s := cicadacluster.Slot([]byte(k)); !slices.Contains(moved, s) {
				t.Errorf("the reshard moved slots %d-%d; hot key %s's slot %d is not among them", moved[0], moved[len(moved)-1], k, s)
			}
		}
		return fmt.Sprintf("%d slots node%d -> node%d", reshardSlots, a.Index, b.Index), b
	})
	bReplica := c.ReplicaOf(b)
	if bReplica == nil {
		t.Fatalf("%v has no running replica", b)
	}
	phase("manual failover", b, func() (string, *clustertest.Node) {
		c.ManualFailover(bReplica)
		return fmt.Sprintf("node%d replaces node%d", bReplica.Index, b.Index), bReplica
	})
	phase("forced failover", bReplica, func() (string, *clustertest.Node) {
		// A master killed with acknowledged writes its replica has not
		// yet received loses them: Redis's staleness, not Cicada's. The
		// writes stop until the replica has them all and resume once the
		// master is dead (also if the harness fails the test first).
		resume := g.pauseWrites()
		defer resume()
		c.WaitReplicated(bReplica)
		promoted := c.KillMaster(bReplica, resume)
		return fmt.Sprintf("node%d killed, node%d promoted", bReplica.Index, promoted.Index), promoted
	})
	otherReplica := c.ReplicaOf(other)
	if otherReplica == nil {
		t.Fatalf("%v has no running replica", other)
	}
	phase("restarts", nil, func() (string, *clustertest.Node) {
		c.RestartNode(bReplica)
		c.Restart(otherReplica)
		return fmt.Sprintf("node%d back as node%d's replica, replica node%d restarted", bReplica.Index,
			c.MasterOf(bReplica).Index, otherReplica.Index), c.Owner(moving[0])
	})
	history, failedWrites, failedReads := g.stop()

	t.Logf("%v mode:\n%s", mode, report(c, results, history, moving, failedWrites, failedReads))

	stale := staleReads(history)
	for i, s := range stale {
		if i == 10 {
			t.Errorf("... and %d more stale reads", len(stale)-10)
			break
		}
		t.Errorf("stale read in phase %s by client %d: GET %s at %v-%v returned %q: %s", results[s.Read.Phase].name, s.Read.Client,
			s.Read.Key, time.Duration(s.Read.Call), time.Duration(s.Read.Return), s.Read.Value, s.Why)
	}
	t0 := time.Now()
	res, view, err := checkLinearizable(history, 2*time.Minute, artifacts(), fmt.Sprintf("cicada-cluster-%s-%d", mode, time.Now().Unix()))
	if err != nil {
		t.Errorf("writing porcupine's visualization: %v", err)
	}
	t.Logf("porcupine: %d operations %s in %v", len(history), res, time.Since(t0).Round(time.Millisecond))
	if res != porcupine.Ok {
		t.Errorf("the history of %d operations is %s for porcupine (view: %s)", len(history), res, view)
	}

	sidecars := c.SidecarAddrs()
	for addr, n := range g.dials() {
		if !slices.Contains(sidecars, addr) {
			t.Errorf("the load client dialed %s (%d times), not a sidecar: %s", addr, n, describeAddr(c, addr))
		}
	}

	for _, p := range results[1:] {
		if d := p.afterB[p.owner.Index].Sub(p.afterA[p.owner.Index]); d.Hits == 0 {
			t.Errorf("%s: the moved keys' owner %v answered none of its %.0f GETs from its cache in the %v after the move",
				p.name, p.owner, d.Gets, tm.window)
		}
		// The load client never sends READONLY: once its node serves no
		// hot key, a sidecar that answers one from its cache answers what
		// Redis would have redirected.
		if f := p.formerOwner; f != nil {
			if d := p.afterB[f.Index].Sub(p.afterA[f.Index]); d.Hits != 0 {
				t.Errorf("%s: the former owner %v answered %.0f of %.0f GETs from its cache in the %v after the move; Redis redirects them",
					p.name, f, d.Hits, d.Gets, tm.window)
			}
		}
	}
}

// keyInSlot returns the first key prefix-N (N = 0, 1, ...) in slot.
func keyInSlot(t *testing.T, prefix string, slot int) string {
	t.Helper()
	for i := range 1_000_000 {
		k := fmt.Sprintf("%s-%d", prefix, i)
		if cicadacluster.Slot([]byte(k)) == slot {
			return k
		}
	}
	t.Fatalf("no key %s-N in slot %d among a million", prefix, slot)
	return ""
}

// checkNoDirectClients fails t when any running Redis lists a client
// connected from clientIP: every load client connection must end at a
// sidecar.
func checkNoDirectClients(t *testing.T, c *clustertest.Cluster, phase string) {
	t.Helper()
	for _, n := range c.Nodes {
		if !n.Up() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		list, err := c.Direct(n).ClientList(ctx).Result()
		cancel()
		if err != nil {
			t.Errorf("%s: %v: CLIENT LIST: %v", phase, n, err)
			continue
		}
		var direct []string
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " addr="+clientIP.String()+":") {
				direct = append(direct, line)
			}
		}
		if len(direct) > 0 {
			t.Errorf("%s: %d load client connections to %v's redis-server itself, first: %s", phase, len(direct), n, direct[0])
		}
	}
}

// describeAddr names what listens on addr.
func describeAddr(c *clustertest.Cluster, addr string) string {
	n := c.NodeByAddr(addr)
	switch {
	case n == nil:
		return "an unknown address"
	case n.RedisAddr == addr:
		return fmt.Sprintf("the redis-server of %v", n)
	}
	return fmt.Sprintf("the sidecar of %v", n)
}
