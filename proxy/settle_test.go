package proxy

import (
	"bytes"
	"testing"

	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/resp"
)

// staleFencer is a notification subscriber that reports the keys hashed
// in stale as unapplied.
type staleFencer struct {
	quietFencer
	stale []uint64
	asked int // Unapplied calls
}

func (f *staleFencer) Unapplied(dst []uint64, _ []byte) ([]uint64, bool) {
	f.asked++
	return append(dst, f.stale...), false
}

// settleSession returns a session whose GET of hitKey is a hit, in front
// of f, the GET's bytes and the cached reply.
func settleSession(t *testing.T, f *staleFencer) (*session, *fakeConn, []byte, []byte) {
	t.Helper()
	srv, reply := hitServerOn(t, 1, f)
	s, c := srv.hitSessionOn(0)
	s.el.hold = true // as under load (settleMode): these tests are about the pass
	return s, c, resp.AppendCommand(nil, []byte("GET"), []byte(hitKey)), reply
}

// checkHeld checks that s holds its hit for the settle pass: nothing
// written, the request still in the client's buffer, counted in flight.
func checkHeld(t *testing.T, s *session, c *fakeConn, get []byte) {
	t.Helper()
	if s.pause != pauseSettle || len(c.out) != 0 || !bytes.HasPrefix(c.in, get) || s.el.stats.inflight.Load() != 1 {
		t.Fatalf("pause %d, wrote %q, buffer %q, in flight %d: want the hit held (pause %d), nothing written, its request buffered, 1 in flight",
			s.pause, c.out, c.in, s.el.stats.inflight.Load(), pauseSettle)
	}
}

// TestSettleAnswersHeldHit: a hit that ends its batch is answered by the
// loop's settle pass, its request consumed then; requests that arrived
// meanwhile are parsed after its reply, in order.
func TestSettleAnswersHeldHit(t *testing.T) {
	s, c, get, reply := settleSession(t, &staleFencer{})
	c.in = get
	s.processClient()
	checkHeld(t, s, c, get)
	c.in = append(append([]byte(nil), c.in...), bytes.Repeat(get, 2)...) // read while it is held
	s.processClient()                                                    // as OnTraffic would: nothing is parsed
	if len(c.out) != 0 {
		t.Fatalf("answered %q while the hit ahead was held", c.out)
	}
	runTasks(s)
	if want := bytes.Repeat(reply, 3); !bytes.Equal(c.out, want) || len(c.in) != 0 {
		t.Errorf("answered %q, left %q: want 3 cached replies, nothing left", c.out, c.in)
	}
	if n := s.el.stats.hits.Load(); n != 3 {
		t.Errorf("hits %d, want 3", n)
	}
	if n := s.el.stats.inflight.Load(); n != 0 {
		t.Errorf("in flight %d after the pass, want 0", n)
	}
}

// TestSettleForwardsUnsettled: a held hit whose key the pass finds with a
// keyspace notification unapplied is forwarded to Redis, byte for byte.
func TestSettleForwardsUnsettled(t *testing.T) {
	f := &staleFencer{}
	s, c, get, _ := settleSession(t, f)
	c.in = get
	s.processClient()
	checkHeld(t, s, c, get)
	k := hotcache.KeyOf(0, []byte(hitKey))
	f.stale = []uint64{k.Hash()}
	runTasks(s)
	if !bytes.Equal(c.out, get) || len(c.in) != 0 { // the fakeConn is Redis's too
		t.Errorf("wrote %q, left %q: want the GET forwarded", c.out, c.in)
	}
	if h, u := s.el.stats.hits.Load(), s.el.stats.unsettled.Load(); h != 0 || u != 1 {
		t.Errorf("hits %d, unsettled %d: want 0 and 1", h, u)
	}
	if s.sent.len() != 1 || s.pause != pauseNone {
		t.Errorf("%d replies awaited, pause %d: want the GET's, none", s.sent.len(), s.pause)
	}
}

// TestSettleForwardsReplaced: a held hit whose cached reply was removed
// before the pass (a write, a notification applied) is decided again: a
// miss, forwarded.
func TestSettleForwardsReplaced(t *testing.T) {
	s, c, get, _ := settleSession(t, &staleFencer{})
	c.in = get
	s.processClient()
	checkHeld(t, s, c, get)
	k := hotcache.KeyOf(0, []byte(hitKey))
	s.srv.cache.Invalidate(&k, hotcache.ReasonNotification)
	runTasks(s)
	if !bytes.HasPrefix(c.out, get) || len(c.in) != 0 {
		t.Errorf("wrote %q, left %q: want the GET forwarded", c.out, c.in)
	}
	if n := s.el.stats.hits.Load(); n != 0 {
		t.Errorf("hits %d, want 0", n)
	}
}

// TestSettleClosed: a client that closed while its hit was held gets
// nothing written, and the hit no longer counts in flight.
func TestSettleClosed(t *testing.T) {
	s, c, get, _ := settleSession(t, &staleFencer{})
	c.in = get
	s.processClient()
	checkHeld(t, s, c, get)
	s.life = clientClosing
	runTasks(s)
	if len(c.out) != 0 || s.el.stats.inflight.Load() != 0 {
		t.Errorf("wrote %q, in flight %d: want nothing, 0", c.out, s.el.stats.inflight.Load())
	}
}

// TestSettleModeAsksUnderLightLoad: a loop whose passes gather one hit
// each answers a hit that ends its batch at once, asking for it alone;
// every probeEvery batch ends it holds one again (a probe), and goes on
// asking while the probes find nothing to gather.
func TestSettleModeAsksUnderLightLoad(t *testing.T) {
	f := &staleFencer{}
	s, c, get, reply := settleSession(t, f)
	s.el.hold = false
	for probe := range 3 {
		for i := range probeEvery {
			c.in, c.out, f.asked = get, nil, 0
			s.processClient()
			if !bytes.Equal(c.out, reply) || len(c.in) != 0 || f.asked != 1 || s.pause != pauseNone {
				t.Fatalf("probe %d, hit %d: wrote %q, left %q, asked %d times, pause %d: want the cached reply at once, one ask, no pause",
					probe, i, c.out, c.in, f.asked, s.pause)
			}
		}
		c.in, c.out = get, nil
		s.processClient()
		checkHeld(t, s, c, get)
		runTasks(s)
		if !bytes.Equal(c.out, reply) || s.el.hold {
			t.Fatalf("probe %d: the pass wrote %q, holding %v: want the cached reply, not holding", probe, c.out, s.el.hold)
		}
	}
}

// TestSettleModeHoldsUnderLoad: a probe whose pass gathers many hits puts
// the loop back to holding them, and passes that gather few let it ask
// again; between the two bounds it keeps its mode.
func TestSettleModeHoldsUnderLoad(t *testing.T) {
	f := &staleFencer{}
	s, _, get, reply := settleSession(t, f)
	s.el.hold = false
	s.el.ends = probeEvery // the next batch end is a probe
	clients := make([]*fakeConn, 32)
	sessions := make([]*session, len(clients))
	for i := range clients {
		sessions[i], clients[i] = s.srv.hitSessionOn(0)
		clients[i].in = get
		sessions[i].processClient()
		// The first probes, the rest join its pass.
		if sessions[i].pause != pauseSettle || len(clients[i].out) != 0 {
			t.Fatalf("client %d: pause %d, wrote %q: want its hit held", i, sessions[i].pause, clients[i].out)
		}
	}
	f.asked = 0
	runTasks(s)
	for i, c := range clients {
		if !bytes.Equal(c.out, reply) {
			t.Fatalf("client %d got %q, want the cached reply", i, c.out)
		}
	}
	if f.asked != 1 || !s.el.hold {
		t.Fatalf("asked %d times, holding %v: want one ask for the pass of 32, holding", f.asked, s.el.hold)
	}

	m := settleMode{}
	for i, tc := range []struct {
		n    int
		hold bool
	}{
		{24, true}, // 3.0
		{1, true},  // 2.75: between the bounds
		{1, true},  // 2.53
		{1, true},  // 2.34
		{1, true},  // 2.17
		{1, true},  // 2.02
		{1, false}, // 1.89
		{9, false}, // 2.78: between the bounds
		{9, true},  // 3.56
	} {
		l := &loopState{settleMode: m}
		l.passed(tc.n)
		if m = l.settleMode; m.hold != tc.hold {
			t.Errorf("pass %d of %d hits: average %.2f, holding %v, want %v", i, tc.n, m.perPass, m.hold, tc.hold)
		}
	}
}
