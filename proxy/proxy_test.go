package proxy

import (
	"testing"

	"github.com/cicada-proxy/cicada/hotcache"
)

func TestRing(t *testing.T) {
	var r ring[int]
	next, want := 0, 0
	for round := 0; round < 50; round++ {
		for i := 0; i < round%7+1; i++ {
			r.push(next)
			next++
		}
		for i := 0; i < round%5 && r.len() > 0; i++ {
			if got := *r.front(); got != want {
				t.Fatalf("front = %d, want %d", got, want)
			}
			if got := r.pop(); got != want {
				t.Fatalf("pop = %d, want %d", got, want)
			}
			want++
		}
	}
	if r.len() != next-want {
		t.Fatalf("len = %d, want %d", r.len(), next-want)
	}
}

// TestRingBacklog: a backlog of 100,000 is queued and drained in waves;
// the storage follows it (within a chunk and the spare) and an emptied
// ring shrinks to nothing.
func TestRingBacklog(t *testing.T) {
	var r ring[int]
	next, want := 0, 0
	for _, backlog := range []int{100000, 10, 5000, 0, 100000} {
		for r.len() < backlog {
			r.push(next)
			next++
		}
		for r.len() > backlog {
			if got := r.pop(); got != want {
				t.Fatalf("pop = %d, want %d", got, want)
			}
			want++
		}
		if slack := r.cap() - r.len(); slack < 0 || slack > 3*ringChunkMax {
			t.Fatalf("backlog %d: cap %d, len %d; want cap - len in [0, %d]", backlog, r.cap(), r.len(), 3*ringChunkMax)
		}
	}
	for r.len() > 0 {
		if got := r.pop(); got != want {
			t.Fatalf("pop = %d, want %d", got, want)
		}
		want++
	}
	if !r.shrink() || r.cap() != 0 {
		t.Fatalf("shrink of an empty ring: cap %d, want 0", r.cap())
	}
	r.push(1)
	if r.shrink() || r.cap() != 8 || r.pop() != 1 {
		t.Fatalf("a ring of one: cap %d (want 8), shrunk while holding an element", r.cap())
	}
}

func TestParseHello(t *testing.T) {
	tests := []struct {
		args  []string // "<nil>" stands for an uncaptured argument
		proto int64
		user  string
		auth  bool
		anon  bool
	}{
		{[]string{"HELLO"}, 0, "", false, false},
		{[]string{"HELLO", "3"}, 3, "", false, false},
		{[]string{"hello", "2", "auth", "alice", "pw"}, 2, "alice", true, false},
		{[]string{"HELLO", "3", "SETNAME", "x", "AUTH", "bob", "pw"}, 3, "bob", true, false},
		{[]string{"HELLO", "2", "AUTH", "", "pw"}, 2, "", true, false}, // "" is a valid ACL user name
		{[]string{"HELLO", "3", "AUTH", "<nil>", "pw"}, 3, "", true, true},
		{[]string{"HELLO", "<nil>"}, 0, "", true, true},
	}
	for _, tt := range tests {
		var args [][]byte
		for _, a := range tt.args {
			if a == "<nil>" {
				args = append(args, nil)
			} else {
				args = append(args, []byte(a))
			}
		}
		proto, user, auth, anon := parseHello(args)
		if proto != tt.proto || user != tt.user || auth != tt.auth || anon != tt.anon {
			t.Errorf("parseHello(%q) = %d, %q, %v, %v; want %d, %q, %v, %v", tt.args, proto, user, auth, anon, tt.proto, tt.user, tt.auth, tt.anon)
		}
	}
}

func TestIdentities(t *testing.T) {
	ids := newIdentities()
	fresh, gen := ids.fresh()
	alice := ids.user("alice")
	if f, g := ids.fresh(); ids.user("alice") != alice || f != fresh || g != gen {
		t.Fatal("identities are not stable")
	}
	a1, a2 := ids.anonymous(), ids.anonymous()
	seen := map[hotcache.Ident]bool{}
	for _, id := range []hotcache.Ident{fresh, alice, a1, a2, ids.user("bob")} {
		if seen[id] {
			t.Fatalf("identity %d handed out twice", id)
		}
		seen[id] = true
	}
	ids.rulesChanged()
	if f, g := ids.fresh(); f == fresh || seen[f] || g == gen || g == 0 {
		t.Fatalf("fresh identity after a rules change = %d gen %d, want a new one and a new gen", f, g)
	}
}

// TestHKKey: HOTKEYS counts GET/HGET and single-key commands by their key,
// not SPUBLISH's shard channel (a key spec Redis flags not_key).
func TestHKKey(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"GET", "k"}, "k"},
		{[]string{"hget", "h", "f"}, "h"},
		{[]string{"SET", "k", "v"}, "k"},
		{[]string{"SPUBLISH", "ch", "msg"}, ""},
		{[]string{"MGET", "a", "b"}, ""},
		{[]string{"PING"}, ""},
	} {
		args := make([][]byte, len(tt.args))
		for i, a := range tt.args {
			args[i] = []byte(a)
		}
		if got := string(hkKey(nil, args, int64(len(args)))); got != tt.want {
			t.Errorf("hkKey(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

// TestLoopSessions: sessions leave the loop's list in any order, and the
// others keep their index.
func TestLoopSessions(t *testing.T) {
	var l loopState
	ss := make([]*session, 100)
	for i := range ss {
		ss[i] = &session{}
		l.register(ss[i])
	}
	for _, i := range []int{50, 0, 99, 98, 10} {
		l.unregister(ss[i])
		ss[i] = nil
	}
	for i := range 95 {
		l.unregister(l.sessions[len(l.sessions)/2])
		for j, s := range l.sessions {
			if s.loopIdx != j {
				t.Fatalf("after %d removals: session at %d has index %d", i+6, j, s.loopIdx)
			}
		}
	}
	if len(l.sessions) != 0 {
		t.Fatalf("%d sessions left, want 0", len(l.sessions))
	}
}

// TestRingAt: at(i) is the i-th oldest element across chunk boundaries.
func TestRingAt(t *testing.T) {
	var r ring[int]
	for i := range 1000 {
		r.push(i)
	}
	for range 300 {
		r.pop()
	}
	for i := 0; i < r.len(); i++ {
		if got := *r.at(i); got != 300+i {
			t.Fatalf("at(%d) = %d, want %d", i, got, 300+i)
		}
	}
}

// TestSlotBytes pins the bookkeeping of one request in flight that the
// limits charge (slotBytes) to the figure the documentation gives
// (docs/configuration.md, --client-query-buffer-limit).
func TestRequestBytes(t *testing.T) {
	if requestBytes != 72 {
		t.Errorf("requestBytes: got %d, want 72 (update docs/configuration.md and docs/limits.md if it must change)", requestBytes)
	}
}
