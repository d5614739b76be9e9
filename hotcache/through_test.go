package hotcache

import (
	"bytes"
	"testing"
	"time"
)

// writeThrough runs a SET k value [PX ttl] of a cached key up to its +OK:
// between the write's start and its reply, during runs (the events that
// reached the cache meanwhile). It reports what WriteThrough kept; the
// write is ended after it, as the proxy does.
func writeThrough(t *testing.T, c *Cache, k *Key, value string, ttl int64, during func()) bool {
	t.Helper()
	st, w := c.BeginWriteThrough(k, []byte(value), ttl)
	if w == nil {
		c.EndWrite(st)
		t.Fatal("BeginWriteThrough of a cached key: no WriteThrough")
	}
	if during != nil {
		during()
	}
	kept := c.WriteThrough(w)
	c.EndWrite(st)
	return kept
}

// TestWriteThroughNotification: the write's own notifications (set, and
// expire for a SET with a TTL), however many of them come before the
// write's reply, do not evict the value the reply cached; the next one
// does.
func TestWriteThroughNotification(t *testing.T) {
	k := keyOf("k")
	for _, ttl := range []int64{0, 10_000} {
		notes := 1
		if ttl > 0 {
			notes = 2
		}
		for before := 0; before <= notes; before++ {
			c, _ := newTestCache(t, 100, 1<<20)
			if !fill(t, c, "k", "", false, []byte("$3\r\nold\r\n"), 0) {
				t.Fatal("fill refused")
			}
			during := func() {
				for range before {
					c.Invalidate(k, ReasonNotification)
				}
			}
			if !writeThrough(t, c, k, "new", ttl, during) {
				t.Fatalf("TTL %d, %d notifications before the reply: WriteThrough refused", ttl, before)
			}
			for i := before; i <= notes; i++ {
				if got, st := get(c, "k", 1, 2); st != Hit || got != "$3\r\nnew\r\n" {
					t.Fatalf("TTL %d, %d before the reply, after %d: %q %v, want the new value", ttl, before, i, got, st)
				}
				if i < notes {
					c.Invalidate(k, ReasonNotification) // the write's own
				}
			}
			c.Invalidate(k, ReasonNotification) // a later write's
			if got, st := get(c, "k", 1, 2); st != Miss {
				t.Errorf("TTL %d, %d before the reply: after a later write's notification: %q %v, want Miss", ttl, before, got, st)
			}
		}
	}
}

// TestWriteThroughTTL: a SET with a TTL caches its value until the TTL,
// counted from the write's send, has passed; one whose TTL passed before
// its reply caches nothing.
func TestWriteThroughTTL(t *testing.T) {
	k := keyOf("k")
	c, clk := newTestCache(t, 100, 1<<20)
	fill(t, c, "k", "", false, []byte("$3\r\nold\r\n"), 0)
	if !writeThrough(t, c, k, "new", 50, func() { clk.ns.Add(int64(10 * time.Millisecond)) }) {
		t.Fatal("WriteThrough refused")
	}
	clk.ns.Add(int64(39 * time.Millisecond))
	if got, st := get(c, "k", 1, 2); st != Hit || got != "$3\r\nnew\r\n" {
		t.Fatalf("49 ms after the send: %q %v, want the new value", got, st)
	}
	clk.ns.Add(int64(time.Millisecond))
	if got, st := get(c, "k", 1, 2); st != Miss {
		t.Fatalf("50 ms after the send: %q %v, want Miss", got, st)
	}
	fill(t, c, "k", "", false, []byte("$3\r\nold\r\n"), 0)
	if writeThrough(t, c, k, "new", 5, func() { clk.ns.Add(int64(5 * time.Millisecond)) }) {
		t.Error("a TTL that passed before the reply: WriteThrough kept the value")
	}
	fill(t, c, "k", "", false, []byte("$3\r\nold\r\n"), 0)
	if writeThrough(t, c, k, "new", 5000, func() { clk.ns.Add(-int64(time.Millisecond)) }) {
		t.Error("the clock stepped back before the reply: WriteThrough kept a TTL Redis may end later")
	}
	fill(t, c, "k", "", false, []byte("$3\r\nold\r\n"), 0)
	three := func() {
		for range 3 {
			c.Invalidate(k, ReasonNotification)
		}
	}
	if writeThrough(t, c, k, "new", 5000, three) {
		t.Error("three notifications before the reply of a SET with a TTL: WriteThrough kept the value")
	}
	for _, ttl := range []int64{-1, MaxThroughTTL + 1} {
		fill(t, c, "k", "", false, []byte("$3\r\nold\r\n"), 0)
		st, w := c.BeginWriteThrough(k, []byte("new"), ttl)
		c.EndWrite(st)
		if w != nil {
			t.Errorf("TTL %d: got a WriteThrough", ttl)
		}
	}
}

// TestWriteThroughRefused: whatever else may have happened to the key
// while the write was in flight, or may still be in flight, keeps its
// value out of the cache.
func TestWriteThroughRefused(t *testing.T) {
	k := keyOf("k")
	notes := 0 // the write's own: set, and expire with a TTL
	events := []struct {
		name string
		do   func(c *Cache)
	}{
		{"a notification more than the write makes", func(c *Cache) {
			for range notes + 1 {
				c.Invalidate(k, ReasonNotification)
			}
		}},
		{"another write in flight", func(c *Cache) { c.BeginWrite(k) }},
		{"another write ended", func(c *Cache) { c.EndWrite(c.BeginWrite(k)) }},
		{"a write of another key of the stripe", func(c *Cache) {
			for i := 0; ; i++ {
				o := KeyOf(0, []byte{byte(i), byte(i >> 8)})
				if o.hash&c.smask == k.hash&c.smask && !bytes.Equal(o.name, k.name) {
					c.EndWrite(c.BeginWrite(&o))
					return
				}
			}
		}},
		{"flush", func(c *Cache) { c.Flush() }},
		{"hold", func(c *Cache) { c.Hold() }},
		{"hold and release", func(c *Cache) { c.Hold().Release() }},
	}
	for _, ttl := range []int64{0, 10_000} {
		notes = 1 + min(int(ttl), 1)
		for _, ev := range events {
			c, _ := newTestCache(t, 100, 1<<20)
			if !fill(t, c, "k", "", false, []byte("$3\r\nold\r\n"), 0) {
				t.Fatal("fill refused")
			}
			if writeThrough(t, c, k, "new", ttl, func() { ev.do(c) }) {
				t.Errorf("TTL %d, %s: WriteThrough kept the value", ttl, ev.name)
			}
			if got, st := get(c, "k", 1, 2); st == Hit {
				t.Errorf("TTL %d, %s: lookup after the write: hit %q", ttl, ev.name, got)
			}
		}
	}
}

// TestWriteThroughOnlyCached: a key without a cached GET reply, a value
// over MaxValue, a denied key and a suspended cache get no WriteThrough;
// the write is still guarded as BeginWrite guards it.
func TestWriteThroughOnlyCached(t *testing.T) {
	c, _ := newTestCache(t, 100, 1<<20)
	cases := []struct {
		name, key, value string
		setup            func()
	}{
		{"not cached", "absent", "v", nil},
		{"only a field cached", "h", "v", func() { fill(t, c, "h", "f", true, []byte("$1\r\nx\r\n"), 0) }},
		{"value over MaxValue", "big", string(make([]byte, 1025)), func() { fill(t, c, "big", "", false, []byte("$1\r\nx\r\n"), 0) }},
		{"denied key", "secret", "v", func() {
			fill(t, c, "secret", "", false, []byte("$1\r\nx\r\n"), 0)
			c.SetDenied(func(key []byte) bool { return string(key) == "secret" })
		}},
	}
	for _, tc := range cases {
		if tc.setup != nil {
			tc.setup()
		}
		k := keyOf(tc.key)
		st, w := c.BeginWriteThrough(k, []byte(tc.value), 0)
		if w != nil {
			t.Errorf("%s: got a WriteThrough", tc.name)
		}
		if _, ok := c.BeginFill(k); ok {
			t.Errorf("%s: a fill began while the write was in flight", tc.name)
		}
		c.EndWrite(st)
		if _, s := get(c, tc.key, 1, 2); s == Hit {
			t.Errorf("%s: the key's reply survived the write", tc.name)
		}
	}
}

// TestWriteThroughReaders: the cached value is served to the identities
// Redis had let read the key, not to the writer for writing it.
func TestWriteThroughReaders(t *testing.T) {
	c, _ := newTestCache(t, 100, 1<<20)
	fill(t, c, "k", "", false, []byte("$3\r\nold\r\n"), 0) // read by identity 1
	c.AddReader(c.Epoch(), keyOf("k"), 2)
	st, w := c.BeginWriteThrough(keyOf("k"), []byte("new"), 0)
	if !c.WriteThrough(w) {
		t.Fatal("WriteThrough refused")
	}
	c.EndWrite(st)
	for ident, want := range map[Ident]Status{1: Hit, 2: Hit, 3: Unproven} {
		if _, s := get(c, "k", ident, 2); s != want {
			t.Errorf("identity %d: %v, want %v", ident, s, want)
		}
	}
	if got, _ := get(c, "k", 1, 3); got != "$3\r\nnew\r\n" {
		t.Errorf("RESP3: %q, want the bulk string", got)
	}
	if s := c.Stats(); s.WriteThroughs != 1 {
		t.Errorf("Stats.WriteThroughs = %d, want 1", s.WriteThroughs)
	}
}

// TestWriteThroughRevived: a SET of a key that a write evicted, and that
// is not cached again, writes through with the readers the key had (two
// overlapping SETs of a hot key cache neither, and the next one puts the
// value back without a fill); not after a flush, and not once a write has
// evicted another key of the stripe since.
func TestWriteThroughRevived(t *testing.T) {
	c, err := New(Config{Capacity: 100, MaxBytes: 1 << 20, MaxValue: 1024, Stripes: 1, Now: (&fakeClock{}).now, StrictHolds: true})
	if err != nil {
		t.Fatal(err)
	}
	k := keyOf("k")
	fill(t, c, "k", "", false, []byte("$3\r\nold\r\n"), 0) // read by identity 1
	c.AddReader(c.Epoch(), k, 2)
	st1, w1 := c.BeginWriteThrough(k, []byte("one"), 0)
	st2, w2 := c.BeginWriteThrough(k, []byte("two"), 0)
	if w1 == nil || w1.Revived() || w2 == nil || !w2.Revived() {
		t.Fatalf("overlapping SETs: WriteThroughs %v and %v, want the first from the entry and the second revived", w1, w2)
	}
	if c.WriteThrough(w1) {
		t.Fatal("the first of two overlapping SETs was kept")
	}
	c.EndWrite(st1)
	if c.WriteThrough(w2) {
		t.Fatal("the second of two overlapping SETs was kept: the first may have run after it")
	}
	c.EndWrite(st2)
	if _, s := get(c, "k", 1, 2); s != Miss {
		t.Fatalf("after the overlapping SETs: %v, want Miss", s)
	}
	st, w := c.BeginWriteThrough(k, []byte("three"), 0)
	if w == nil || !w.Revived() {
		t.Fatal("the next SET: no revived WriteThrough")
	}
	if !c.WriteThrough(w) {
		t.Fatal("the next SET: WriteThrough refused")
	}
	c.EndWrite(st)
	for ident, want := range map[Ident]Status{1: Hit, 2: Hit, 3: Unproven} {
		if got, s := get(c, "k", ident, 2); s != want || (s == Hit && got != "$5\r\nthree\r\n") {
			t.Errorf("identity %d after the revived SET: %q %v, want %v", ident, got, s, want)
		}
	}

	// Evicted by a write, then a flush: the readers are not trusted.
	c.EndWrite(c.BeginWrite(k))
	c.Flush()
	st, w = c.BeginWriteThrough(k, []byte("four"), 0)
	c.EndWrite(st)
	if w != nil {
		t.Error("a SET after a flush was written through")
	}

	// Another key of the (only) stripe evicted by a write since.
	fill(t, c, "k", "", false, []byte("$3\r\nold\r\n"), 0)
	fill(t, c, "other", "", false, []byte("$1\r\nx\r\n"), 0)
	c.EndWrite(c.BeginWrite(k))
	c.EndWrite(c.BeginWrite(keyOf("other")))
	st, w = c.BeginWriteThrough(k, []byte("five"), 0)
	c.EndWrite(st)
	if w != nil {
		t.Error("a SET was revived from another key's eviction")
	}
}
