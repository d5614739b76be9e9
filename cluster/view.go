package cluster

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
)

// Role is the role of the node behind a sidecar.
type Role uint8

// Roles, as CLUSTER NODES names them (master, slave).
const (
	RoleMaster Role = iota + 1
	RoleReplica
)

// String returns "master" or "replica".
func (r Role) String() string {
	switch r {
	case RoleMaster:
		return "master"
	case RoleReplica:
		return "replica"
	}
	return "unknown"
}

// View is what the node behind a sidecar answers GET and HGET for: its
// role, whether the cluster is up (CLUSTER INFO cluster_state:ok; a node
// of a failed cluster answers -CLUSTERDOWN), and its served slots: for a
// master the slots it owns, for a replica its master's (which it answers
// for on a connection that sent READONLY). Immutable once published.
type View struct {
	Role Role
	OK   bool
	// served is a bitmap of Slots bits.
	served [Slots / 64]uint64
	// clean is the Topology's dirt count when the CLUSTER NODES this view
	// was read from was sent (set by Publish).
	clean uint64
}

// Serves reports whether slot is one of the view's served slots.
func (v *View) Serves(slot int) bool {
	return v.served[slot>>6]&(1<<(slot&63)) != 0
}

// ServedCount returns how many slots the view serves.
func (v *View) ServedCount() int {
	n := 0
	for _, w := range v.served {
		for ; w != 0; w &= w - 1 {
			n++
		}
	}
	return n
}

// Lost reports whether slot is served by v but not by next.
func (v *View) Lost(next *View, slot int) bool {
	return v.Serves(slot) && !next.Serves(slot)
}

// Same reports whether v and o have the same role, state and slots.
func (v *View) Same(o *View) bool {
	return v.Role == o.Role && v.OK == o.OK && v.served == o.served
}

// ErrNoMyself is ParseNodes's error for a CLUSTER NODES reply without the
// line flagged "myself".
var ErrNoMyself = errors.New("cluster: CLUSTER NODES has no line flagged myself")

// ParseNodes reads the role and served slots of the node that produced
// nodes, a CLUSTER NODES reply (one line per node: id, address, flags,
// master id, ping sent, pong received, config epoch, link state, then
// slots as "n" or "a-b", and on the "myself" line "[n->-id]"/"[n-<-id]"
// for slots migrating or importing). A slot migrating away is not served
// (its keys that moved get -ASK); a replica serves its master's slots (the
// markers are only on the master's own line; a replica answers nil for a
// key that moved); a replica whose master is not listed serves none. ok is CLUSTER INFO's cluster_state:ok. Errors:
// ErrNoMyself, or a line that is not in this format.
func ParseNodes(nodes string, ok bool) (*View, error) {
	type line struct {
		flags, master string
		slots         []string
	}
	byID := map[string]line{}
	var myself line
	found := false
	for _, l := range strings.Split(nodes, "\n") {
		l = strings.TrimRight(l, "\r")
		if l == "" {
			continue
		}
		f := strings.Fields(l)
		if len(f) < 8 {
			return nil, fmt.Errorf("cluster: CLUSTER NODES line has %d fields: %q", len(f), l)
		}
		ln := line{flags: f[2], master: f[3], slots: f[8:]}
		byID[f[0]] = ln
		if hasFlag(ln.flags, "myself") {
			myself, found = ln, true
		}
	}
	if !found {
		return nil, ErrNoMyself
	}
	v := &View{OK: ok}
	owner := myself
	switch {
	case hasFlag(myself.flags, "master"):
		v.Role = RoleMaster
	case hasFlag(myself.flags, "slave"):
		v.Role = RoleReplica
		m, listed := byID[myself.master]
		if !listed {
			return v, nil
		}
		owner = m
	default:
		return nil, fmt.Errorf("cluster: CLUSTER NODES myself flags %q name no role", myself.flags)
	}
	var migrating []int
	for _, s := range owner.slots {
		if m, ok := strings.CutPrefix(s, "["); ok {
			// "[n->-id]": n is migrating away; the node answers -ASK for
			// its keys that are gone, so no cached reply (a nil, say) may
			// stand in for it. "[n-<-id]": importing, not owned.
			if n, _, ok := strings.Cut(m, "->-"); ok {
				if i, err := strconv.Atoi(n); err == nil && i >= 0 && i < Slots {
					migrating = append(migrating, i)
				}
			}
			continue
		}
		lo, hi, isRange := strings.Cut(s, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b >= Slots || a > b {
			return nil, fmt.Errorf("cluster: CLUSTER NODES slot range %q", s)
		}
		for i := a; i <= b; i++ {
			v.served[i>>6] |= 1 << (i & 63)
		}
	}
	for _, i := range migrating {
		if v.Role == RoleMaster {
			v.served[i>>6] &^= 1 << (i & 63)
		}
	}
	return v, nil
}

func hasFlag(flags, f string) bool {
	for _, x := range strings.Split(flags, ",") {
		if x == f {
			return true
		}
	}
	return false
}

// Topology is the view a sidecar answers from. The keyspace subscriber's
// control goroutine publishes views read from Redis (Begin, Publish);
// event loops read it on each GET and HGET (Answerable) and report
// redirects that contradict it (Contradicted). Safe for concurrent use;
// the hit path costs three atomic loads.
type Topology struct {
	enabled atomic.Bool
	view    atomic.Pointer[View]
	// dirt counts redirects that contradicted the view: a view answers
	// only while it was read after the last of them.
	dirt atomic.Uint64
	kick chan struct{}
	// changes counts published views that differ from the one before.
	changes atomic.Uint64
}

// NewTopology returns a Topology for a node not known to be in a cluster
// (Enabled false).
func NewTopology() *Topology {
	return &Topology{kick: make(chan struct{}, 1)}
}

// Enabled reports whether the node runs in cluster mode (cluster_enabled:1).
func (t *Topology) Enabled() bool { return t.enabled.Load() }

// SetEnabled records whether the node runs in cluster mode; off, it drops
// the view.
func (t *Topology) SetEnabled(on bool) {
	if !on {
		t.view.Store(nil)
	}
	t.enabled.Store(on)
}

// View returns the published view, or nil before the first.
func (t *Topology) View() *View { return t.view.Load() }

// Begin returns the dirt count to pass to Publish; call it before sending
// the CLUSTER NODES the view will be read from.
func (t *Topology) Begin() uint64 { return t.dirt.Load() }

// Publish makes a copy of v the view, clean of the redirects counted by
// begin (Begin's result), and returns the view it replaces (nil if none).
func (t *Topology) Publish(v *View, begin uint64) *View {
	c := *v
	c.clean = begin
	old := t.view.Swap(&c)
	if old == nil || !old.Same(&c) {
		t.changes.Add(1)
	}
	return old
}

// Changes returns how many published views differed from the one before
// (the first included).
func (t *Topology) Changes() uint64 { return t.changes.Load() }

// Contradictions returns how many redirects made a view stale.
func (t *Topology) Contradictions() uint64 { return t.dirt.Load() }

// Answerable reports whether the node would answer a GET of a key in slot
// itself rather than with -MOVED or -CLUSTERDOWN, as far as the published
// view knows: the cluster is up, no redirect has contradicted the view
// since it was read, and the slot is the node's (a master) or its
// master's on a connection that sent READONLY (a replica).
func (t *Topology) Answerable(slot int, readonly bool) bool {
	v := t.view.Load()
	if v == nil || !v.OK || t.dirt.Load() != v.clean || !v.Serves(slot) {
		return false
	}
	return v.Role == RoleMaster || readonly
}

// Contradicted is called by an event loop that saw Redis answer -MOVED or
// -ASK for slot (or -CLUSTERDOWN, with slot -1) to a connection with the given
// READONLY state, before the reply is passed on. If the view says the node
// would have answered (Answerable), the view is stale: nothing is answered
// from it until one read after this call is published, and the control
// goroutine is woken to read one now.
func (t *Topology) Contradicted(slot int, readonly bool) {
	v := t.view.Load()
	if v == nil || (slot < 0 && !v.OK) {
		return // no view, or known to be down
	}
	// Counted even when the view is distrusted already: a re-read whose
	// CLUSTER NODES went out before this redirect must not clear it.
	if slot >= 0 && !(v.Serves(slot) && (v.Role == RoleMaster || readonly)) {
		return // a client with an older map than ours
	}
	t.Distrust()
}

// Distrust stops answers from the view until one read after this call is
// published, and wakes the control goroutine to read one: for a command
// that changed the node's slots or role (CLUSTER SETSLOT, DELSLOTS, ...)
// whose reply passed through Cicada.
func (t *Topology) Distrust() {
	t.dirt.Add(1)
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// Kicked is signalled when a view was contradicted; the control goroutine
// reads a new one at once.
func (t *Topology) Kicked() <-chan struct{} { return t.kick }
