package hotcache

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
)

// TestSetLimits: a lowered capacity or byte bound evicts oldest first, a
// capacity needing another table size empties the cache once and the new
// size holds more keys, a lowered max value empties it, bad values change
// nothing.
func TestSetLimits(t *testing.T) {
	c, _ := newTestCache(t, 8, 1<<20)
	for i := range 8 {
		fill(t, c, fmt.Sprint("k", i), "", false, []byte("$1\r\nx\r\n"), 0)
	}
	if err := c.SetLimits(6, 1<<20, 1024); err != nil { // same table size (16 slots)
		t.Fatal(err)
	}
	if s := c.Stats(); s.Replies != 6 || s.Evicted[ReasonCapacity] != 2 || s.Evicted[ReasonConfig] != 0 {
		t.Fatalf("after capacity 6: %d replies, %d capacity-evicted, %d config-evicted; want 6, 2, 0", s.Replies, s.Evicted[ReasonCapacity], s.Evicted[ReasonConfig])
	}
	if _, st := get(c, "k0", 1, 2); st != Miss {
		t.Error("k0, the oldest, still cached")
	}
	if _, st := get(c, "k7", 1, 2); st != Hit {
		t.Error("k7, the newest, evicted")
	}

	if err := c.SetLimits(1000, 1<<20, 1024); err != nil { // a bigger table
		t.Fatal(err)
	}
	if s := c.Stats(); s.Replies != 0 || s.Evicted[ReasonConfig] != 6 {
		t.Fatalf("after the table grew: %d replies, %d config-evicted; want 0 and 6", s.Replies, s.Evicted[ReasonConfig])
	}
	for i := range 1000 {
		fill(t, c, fmt.Sprint("k", i), "", false, []byte("$1\r\nx\r\n"), 0)
	}
	if s := c.Stats(); s.Replies < 900 {
		t.Errorf("the grown table holds %d of 1000 keys", s.Replies)
	}

	before := c.Stats().Replies
	for _, bad := range []struct {
		capacity int
		maxBytes int64
		maxValue int
		want     error
	}{{0, 1, 0, ErrCapacity}, {1, 0, 0, ErrMaxBytes}, {1, 1, -1, ErrMaxValue}} {
		if err := c.SetLimits(bad.capacity, bad.maxBytes, bad.maxValue); err != bad.want {
			t.Errorf("SetLimits(%d, %d, %d) = %v, want %v", bad.capacity, bad.maxBytes, bad.maxValue, err, bad.want)
		}
	}
	if capacity, maxBytes, maxValue := c.Limits(); capacity != 1000 || maxBytes != 1<<20 || maxValue != 1024 || c.Stats().Replies != before {
		t.Errorf("a rejected SetLimits changed the cache: %d %d %d", capacity, maxBytes, maxValue)
	}

	// fill passes the reply's length as the value's.
	if err := c.SetLimits(1000, 1<<20, 10); err != nil { // lower max value
		t.Fatal(err)
	}
	if s := c.Stats(); s.Replies != 0 {
		t.Errorf("a lowered max value left %d replies", s.Replies)
	}
	if fill(t, c, "long", "", false, []byte("$5\r\nxxxxx\r\n"), 0) || !fill(t, c, "short", "", false, []byte("$4\r\nxxxx\r\n"), 0) {
		t.Error("the new max value (10 bytes) is not in force")
	}
	if err := c.SetLimits(1000, 1, 10); err != nil { // byte bound below one entry
		t.Fatal(err)
	}
	if s := c.Stats(); s.Replies != 0 || s.Bytes != 0 {
		t.Errorf("byte bound 1 left %d replies, %d bytes", s.Replies, s.Bytes)
	}
}

// TestSetDenied: matching keys are evicted at once and never filled again;
// others stay; nil lifts the deny-list.
func TestSetDenied(t *testing.T) {
	c, _ := newTestCache(t, 100, 1<<20)
	for _, k := range []string{"session:1", "session:2", "user:1"} {
		fill(t, c, k, "", false, []byte("$1\r\nx\r\n"), 0)
	}
	// A fill begun before the deny-list changed must not publish a
	// matching key after it.
	k := keyOf("session:3")
	tk, _ := c.BeginFill(k)
	c.SetDenied(func(key []byte) bool { return bytes.HasPrefix(key, []byte("session:")) })
	if c.Fill(tk, FillRequest{Key: *k, Reply: []byte("$1\r\nx\r\n"), ValueLen: 1, Ident: 1}) {
		t.Error("a fill begun before SetDenied published a denied key")
	}
	for k, want := range map[string]Status{"session:1": Miss, "session:2": Miss, "user:1": Hit} {
		if _, st := get(c, k, 1, 2); st != want {
			t.Errorf("%s: %v, want %v", k, st, want)
		}
	}
	if fill(t, c, "session:9", "", false, []byte("$1\r\nx\r\n"), 0) {
		t.Error("a denied key was filled")
	}
	if _, ok := c.BeginFill(keyOf("session:9")); ok {
		t.Error("BeginFill lets a denied key's fill start: Redis would get its PTTL for nothing")
	}
	if _, ok := c.BeginFill(keyOf("user:2")); !ok {
		t.Error("BeginFill refuses a key the deny-list does not match")
	}
	if s := c.Stats(); s.Evicted[ReasonConfig] != 2 {
		t.Errorf("config-evicted %d, want 2", s.Evicted[ReasonConfig])
	}
	c.SetDenied(nil)
	if !fill(t, c, "session:9", "", false, []byte("$1\r\nx\r\n"), 0) {
		t.Error("nil did not lift the deny-list")
	}
}

// TestSetEnabled: off empties the cache and refuses fills and hits; on
// restores both; both are idempotent and nest with Hold.
func TestSetEnabled(t *testing.T) {
	c, _ := newTestCache(t, 100, 1<<20)
	fill(t, c, "k", "", false, []byte("$1\r\nx\r\n"), 0)
	c.SetEnabled(false)
	c.SetEnabled(false)
	if _, st := get(c, "k", 1, 2); st == Hit || c.Enabled() || !c.Off() || c.Stats().Replies != 0 {
		t.Fatal("disabled cache still holds or answers k")
	}
	if fill(t, c, "k", "", false, []byte("$1\r\nx\r\n"), 0) {
		t.Error("disabled cache took a fill")
	}
	held := c.Hold() // the subscriber's suspension outlives SetEnabled(true)
	c.SetEnabled(true)
	c.SetEnabled(true)
	if fill(t, c, "k", "", false, []byte("$1\r\nx\r\n"), 0) {
		t.Error("a fill passed while the subscriber still suspended the cache")
	}
	held.Release()
	if !c.Enabled() || c.Off() || !fill(t, c, "k", "", false, []byte("$1\r\nx\r\n"), 0) {
		t.Error("re-enabled cache refused a fill")
	}
	if _, st := get(c, "k", 1, 2); st != Hit {
		t.Errorf("re-enabled cache: %v, want Hit", st)
	}
}

// TestSetLimitsWhileServing: lookups, fills, invalidations and capacity
// changes at once (run with -race). An invalidated key is never found
// afterwards.
func TestSetLimitsWhileServing(t *testing.T) {
	c, _ := newTestCache(t, 64, 1<<20)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprint("w", w, ":", i%50)
				fill(t, c, k, "", false, []byte("$1\r\nx\r\n"), 0)
				c.Invalidate(keyOf(k), ReasonWrite)
				if _, st := get(c, k, 1, 2); st == Hit {
					t.Errorf("%s found after its invalidation", k)
					return
				}
			}
		}()
	}
	for i := range 200 {
		if err := c.SetLimits(8+i%3*500, 1<<20, 1024); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}
