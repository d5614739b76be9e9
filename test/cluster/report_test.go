package cluster

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cicada-proxy/cicada/test/clustertest"
)

// report renders TestClusterLoad's table, a line per phase: operations
// called in it (reads, acknowledged writes, writes of unknown outcome),
// stale reads, the hit ratio of all sidecars over the phase and in the
// windows right before and after its move, the moved keys' owner after
// the move (reads of those keys in the window, its sidecar's hits/GETs),
// the former owner's sidecar's hits/GETs in that window, and the sidecar
// with the most hits (over the after window, or the
// steady phase).
func report(c *clustertest.Cluster, results []phaseResult, history []op, moving []string, failedWrites, failedReads int) string {
	type tally struct{ reads, writes, unknown, stale, movedAfter int }
	per := make([]tally, len(results))
	for _, o := range history {
		p := &per[o.Phase]
		switch {
		case o.Write && o.Unknown:
			p.unknown++
		case o.Write:
			p.writes++
		default:
			p.reads++
			if r := results[o.Phase]; slices.Contains(moving, o.Key) && o.Call >= r.afterFrom && o.Return <= r.afterTo {
				p.movedAfter++
			}
		}
	}
	for _, s := range staleReads(history) {
		per[s.Read.Phase].stale++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-15s %6s %6s %7s %5s %6s %7s %6s  %-28s %-16s %-12s %s\n", "phase", "reads", "writes", "unknown", "stale",
		"hit%", "before%", "after%", "owner after: reads hits/GETs", "former: hits/GETs", "most hits", "move (took)")
	for i, p := range results {
		before, after, owner, former, move := "-", "-", "-", "-", "-"
		most := mostHits(p.start, p.end)
		if p.move != "" {
			before = pct(total(p.beforeA, p.beforeB).Ratio())
			after = pct(total(p.afterA, p.afterB).Ratio())
			most = mostHits(p.afterA, p.afterB)
			d := p.afterB[p.owner.Index].Sub(p.afterA[p.owner.Index])
			owner = fmt.Sprintf("node%d: %d %.0f/%.0f", p.owner.Index, per[i].movedAfter, d.Hits, d.Gets)
			if f := p.formerOwner; f != nil {
				d := p.afterB[f.Index].Sub(p.afterA[f.Index])
				former = fmt.Sprintf("node%d: %.0f/%.0f", f.Index, d.Hits, d.Gets)
			}
			move = fmt.Sprintf("%s (%v)", p.move, p.moveTook.Round(time.Millisecond))
		}
		fmt.Fprintf(&b, "%-15s %6d %6d %7d %5d %6s %7s %6s  %-28s %-16s %-12s %s\n", p.name, per[i].reads, per[i].writes, per[i].unknown,
			per[i].stale, pct(total(p.start, p.end).Ratio()), before, after, owner, former, most, move)
	}
	fmt.Fprintf(&b, "failed writes %d (unknown outcome), failed reads %d (not in the history); nodes:", failedWrites, failedReads)
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, " %v", n)
	}
	return b.String()
}

// total sums every sidecar's counts from a to b.
func total(a, b []clustertest.CacheCounts) clustertest.CacheCounts {
	var s clustertest.CacheCounts
	for i := range a {
		d := b[i].Sub(a[i])
		s.Hits += d.Hits
		s.Gets += d.Gets
	}
	return s
}

// mostHits names the sidecar with the most hits from a to b, with them.
func mostHits(a, b []clustertest.CacheCounts) string {
	best, bestHits := -1, 0.0
	for i := range a {
		if h := b[i].Sub(a[i]).Hits; h > bestHits {
			best, bestHits = i, h
		}
	}
	if best < 0 {
		return "none"
	}
	return fmt.Sprintf("node%d %.0f", best, bestHits)
}

func pct(r float64) string { return fmt.Sprintf("%.1f", 100*r) }
