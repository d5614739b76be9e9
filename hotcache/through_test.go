package hotcache

import (
	"bytes"
	"testing"
)

// writeThrough runs a SET k value of a cached key up to its +OK: between
// the write's start and its reply, during runs (the events that reached
// the cache meanwhile). It reports what WriteThrough kept; the write is
// ended after it, as the proxy does.
func writeThrough(t *testing.T, c *Cache, k *Key, value string, during func()) bool {
	t.Helper()
	st, w := c.BeginWriteThrough(k, []byte(value))
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

// TestWriteThroughNotification: the write's own notification, whether it
// comes before or after the write's reply, does not evict the value the
// reply cached; the next one does.
func TestWriteThroughNotification(t *testing.T) {
	k := keyOf("k")
	for _, before := range []bool{false, true} {
		c, _ := newTestCache(t, 100, 1<<20)
		if !fill(t, c, "k", "", false, []byte("$3\r\nold\r\n"), 0) {
			t.Fatal("fill refused")
		}
		var during func()
		if before {
			during = func() { c.Invalidate(k, ReasonNotification) }
		}
		if !writeThrough(t, c, k, "new", during) {
			t.Fatalf("notification before the reply %v: WriteThrough refused", before)
		}
		if got, st := get(c, "k", 1, 2); st != Hit || got != "$3\r\nnew\r\n" {
			t.Fatalf("after the write: %q %v, want the new value", got, st)
		}
		if !before {
			c.Invalidate(k, ReasonNotification) // the write's own
			if got, st := get(c, "k", 1, 2); st != Hit || got != "$3\r\nnew\r\n" {
				t.Fatalf("after its notification: %q %v, want the new value", got, st)
			}
		}
		c.Invalidate(k, ReasonNotification) // a later write's
		if got, st := get(c, "k", 1, 2); st != Miss {
			t.Errorf("notification before the reply %v: after a later write's notification: %q %v, want Miss", before, got, st)
		}
	}
}

// TestWriteThroughRefused: whatever else may have happened to the key
// while the write was in flight, or may still be in flight, keeps its
// value out of the cache.
func TestWriteThroughRefused(t *testing.T) {
	k := keyOf("k")
	events := []struct {
		name string
		do   func(c *Cache)
	}{
		{"two notifications", func(c *Cache) {
			c.Invalidate(k, ReasonNotification)
			c.Invalidate(k, ReasonNotification)
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
	for _, ev := range events {
		c, _ := newTestCache(t, 100, 1<<20)
		if !fill(t, c, "k", "", false, []byte("$3\r\nold\r\n"), 0) {
			t.Fatal("fill refused")
		}
		if writeThrough(t, c, k, "new", func() { ev.do(c) }) {
			t.Errorf("%s: WriteThrough kept the value", ev.name)
		}
		if got, st := get(c, "k", 1, 2); st == Hit {
			t.Errorf("%s: lookup after the write: hit %q", ev.name, got)
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
		st, w := c.BeginWriteThrough(k, []byte(tc.value))
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
	st, w := c.BeginWriteThrough(keyOf("k"), []byte("new"))
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
