package proxy

import (
	"testing"

	"github.com/cicada-proxy/cicada/hotcache"
)

// newWriteThrough returns the write-through of a SET of key, cached
// before, in a cache of its own.
func newWriteThrough(t *testing.T, key string) *hotcache.WriteThrough {
	t.Helper()
	cache, err := hotcache.New(hotcache.Config{Capacity: 16, MaxBytes: 1 << 20, MaxValue: 1024})
	if err != nil {
		t.Fatal(err)
	}
	k := hotcache.KeyOf(0, []byte(key))
	tk, ok := cache.BeginFill(&k)
	if !ok || !cache.Fill(tk, hotcache.FillRequest{Key: k, Reply: []byte("$2\r\nv0\r\n"), ValueLen: 2, Ident: 1}) {
		t.Fatal("fill refused")
	}
	_, w := cache.BeginWriteThrough(&k, []byte("v1"), 0)
	if w == nil {
		t.Fatal("no write-through for a cached key")
	}
	return w
}

func TestThroughWaits(t *testing.T) {
	const limit = 100
	w := newWriteThrough(t, "k")
	var tw throughWaits
	woken := 0
	wake := func() { woken++ }

	if _, ok := tw.wait(w.Hash(), wake, 0, limit); ok {
		t.Fatal("wait with nothing in flight")
	}
	tw.start(w, true, 10)
	if left, ok := tw.wait(w.Hash(), nil, 40, limit); !ok || left != 70 {
		t.Fatalf("probe at 40: left %d ok %v, want 70 true", left, ok)
	}
	if _, ok := tw.wait(w.Hash(), wake, 110, limit); ok {
		t.Fatal("wait at the limit")
	}
	if _, ok := tw.wait(w.Hash(), wake, 50, limit); !ok {
		t.Fatal("no wait at 50")
	}
	tw.start(newWriteThrough(t, "k"), true, 60) // a second write-through of the key: the first is kept
	tw.end(newWriteThrough(t, "k"))             // not the one recorded
	if woken != 0 {
		t.Fatalf("woken %d before the end", woken)
	}
	tw.end(w)
	if woken != 1 {
		t.Fatalf("woken %d at the end, want 1", woken)
	}
	if _, ok := tw.wait(w.Hash(), wake, 60, limit); ok {
		t.Fatal("wait after the end")
	}

	// Another write of the key sent: its waiters go at once, and no more wait.
	tw.start(w, true, 0)
	tw.wait(w.Hash(), wake, 1, limit)
	tw.wrote(w.Hash())
	if woken != 2 {
		t.Fatalf("woken %d after wrote, want 2", woken)
	}
	if _, ok := tw.wait(w.Hash(), wake, 2, limit); ok {
		t.Fatal("wait after another write")
	}
	tw.end(w)
	if woken != 2 || len(tw.m) != 0 {
		t.Fatalf("after the end: woken %d, %d recorded; want 2, 0", woken, len(tw.m))
	}

	// Not waitable from the start (a reply that may come late).
	tw.start(w, false, 0)
	if _, ok := tw.wait(w.Hash(), wake, 1, limit); ok {
		t.Fatal("wait for a write-through that is not waitable")
	}
	tw.end(w)
}

// A SET of a cached key that no read waits for allocates nothing here.
func TestThroughWaitsAllocs(t *testing.T) {
	w := newWriteThrough(t, "k")
	var tw throughWaits
	tw.start(w, true, 0)
	tw.end(w)
	if n := testing.AllocsPerRun(100, func() {
		tw.start(w, true, 0)
		tw.wrote(w.Hash())
		tw.end(w)
	}); n != 0 {
		t.Errorf("%v allocations per write-through, want 0", n)
	}
}
