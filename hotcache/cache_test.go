package hotcache

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type fakeClock struct{ ns atomic.Int64 }

func (f *fakeClock) now() int64 { return f.ns.Load() }

func newTestCache(t testing.TB, capacity int, maxBytes int64) (*Cache, *fakeClock) {
	t.Helper()
	clk := &fakeClock{}
	c, err := New(Config{Capacity: capacity, MaxBytes: maxBytes, MaxValue: 1024, Now: clk.now, StrictHolds: true})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c, clk
}

// fill caches reply for GET key (field nil) or HGET key field in db 0.
func fill(t testing.TB, c *Cache, key, field string, isField bool, reply []byte, expireAt int64) bool {
	t.Helper()
	k := KeyOf(0, []byte(key))
	if isField {
		k = FieldKeyOf(0, []byte(key), []byte(field))
	}
	tk, ok := c.BeginFill(&k)
	if !ok {
		return false
	}
	return c.Fill(tk, FillRequest{Key: k, Reply: reply, ValueLen: len(reply), ExpireAt: expireAt, Ident: 1})
}

func get(c *Cache, key string, ident Ident, proto int) (string, Status) {
	k := KeyOf(0, []byte(key))
	var f Found
	c.Lookup(&k, ident, proto, &f)
	return string(f.Reply), f.Status
}

// hget looks up HGET key field in db 0.
func hget(c *Cache, key, field string, ident Ident, proto int) (string, Status) {
	k := FieldKeyOf(0, []byte(key), []byte(field))
	var f Found
	c.Lookup(&k, ident, proto, &f)
	return string(f.Reply), f.Status
}

// lookup is Lookup for identity 1 in RESP2, returning what it found.
func lookup(c *Cache, k *Key) Found {
	var f Found
	c.Lookup(k, 1, 2, &f)
	return f
}

// keyOf is KeyOf(0, key) for a string key.
func keyOf(key string) *Key {
	k := KeyOf(0, []byte(key))
	return &k
}

func TestGetHitMissAndNil(t *testing.T) {
	c, _ := newTestCache(t, 100, 1<<20)
	if got, st := get(c, "k", 1, 2); st != Miss {
		t.Fatalf("empty cache: got %q %v, want Miss", got, st)
	}
	if !fill(t, c, "k", "", false, []byte("$5\r\nhello\r\n"), 0) {
		t.Fatal("fill refused")
	}
	if !fill(t, c, "absent", "", false, nil, 0) {
		t.Fatal("nil fill refused")
	}
	tests := []struct {
		key   string
		ident Ident
		proto int
		want  string
		st    Status
	}{
		{"k", 1, 2, "$5\r\nhello\r\n", Hit},
		{"k", 1, 3, "$5\r\nhello\r\n", Hit},
		{"absent", 1, 2, "$-1\r\n", Hit},
		{"absent", 1, 3, "_\r\n", Hit},
		{"k", 2, 2, "", Unproven},
		{"other", 1, 2, "", Miss},
	}
	for _, tt := range tests {
		got, st := get(c, tt.key, tt.ident, tt.proto)
		if got != tt.want || st != tt.st {
			t.Errorf("Get(%q, ident %d, RESP%d) = %q %v, want %q %v", tt.key, tt.ident, tt.proto, got, st, tt.want, tt.st)
		}
	}
	// Another db is another key.
	k1 := KeyOf(1, []byte("k"))
	if st := lookup(c, &k1).Status; st != Miss {
		t.Errorf("db 1: got %v, want Miss", st)
	}
	epoch := c.Epoch()
	c.Flush()
	fill(t, c, "k", "", false, []byte("$5\r\nhello\r\n"), 0)
	c.AddReader(epoch, keyOf("k"), 2)
	if _, st := get(c, "k", 2, 2); st != Unproven {
		t.Errorf("proof from before a flush: %v, want Unproven", st)
	}
	c.AddReader(c.Epoch(), keyOf("k"), 2)
	if got, st := get(c, "k", 2, 2); st != Hit || got != "$5\r\nhello\r\n" {
		t.Errorf("after AddReader: got %q %v, want hit", got, st)
	}
}

func TestFields(t *testing.T) {
	c, _ := newTestCache(t, 100, 1<<20)
	fill(t, c, "h", "f1", true, []byte("$1\r\na\r\n"), 0)
	fill(t, c, "h", "f2", true, nil, 0)
	fill(t, c, "h", "", false, nil, 0) // GET on the same key is a separate reply
	for _, tt := range []struct {
		field, want string
		st          Status
	}{{"f1", "$1\r\na\r\n", Hit}, {"f2", "_\r\n", Hit}, {"f3", "", Miss}} {
		got, st := hget(c, "h", tt.field, 1, 3)
		if got != tt.want || st != tt.st {
			t.Errorf("HGet %s = %q %v, want %q %v", tt.field, got, st, tt.want, tt.st)
		}
	}
	if s := c.Stats(); s.Replies != 3 {
		t.Errorf("replies %d, want 3", s.Replies)
	}
	c.BeginWrite(keyOf("h"))
	if _, st := hget(c, "h", "f1", 1, 3); st != Miss {
		t.Errorf("after write: %v, want Miss", st)
	}
	if s := c.Stats(); s.Replies != 0 || s.Evicted[ReasonWrite] != 3 {
		t.Errorf("after write: replies %d evicted %d, want 0 and 3", s.Replies, s.Evicted[ReasonWrite])
	}
}

func TestTTL(t *testing.T) {
	c, clk := newTestCache(t, 100, 1<<20)
	clk.ns.Store(1000)
	if fill(t, c, "gone", "", false, []byte("$1\r\nx\r\n"), 1000) {
		t.Error("fill of an already expired key was kept")
	}
	fill(t, c, "k", "", false, []byte("$1\r\nx\r\n"), 2000)
	if _, st := get(c, "k", 1, 2); st != Hit {
		t.Fatalf("before expiry: %v, want Hit", st)
	}
	clk.ns.Store(1999)
	if _, st := get(c, "k", 1, 2); st != Hit {
		t.Fatalf("1 ns before expiry: %v, want Hit", st)
	}
	clk.ns.Store(2000)
	if _, st := get(c, "k", 1, 2); st != Miss {
		t.Fatalf("at expiry: %v, want Miss", st)
	}
	c.Sweep(func(_, _ uint64) bool { return false })
	if s := c.Stats(); s.Replies != 0 || s.Evicted[ReasonExpired] != 1 {
		t.Errorf("after sweep: replies %d expired %d, want 0 and 1", s.Replies, s.Evicted[ReasonExpired])
	}
}

// TestTTLClockIsWall checks that without Config.Now cached TTLs run on the
// wall clock, Redis's expiry clock: an entry that expires 50 ms from now by
// time.Now().UnixNano() is served until then and not after.
func TestTTLClockIsWall(t *testing.T) {
	c, err := New(Config{Capacity: 100, MaxBytes: 1 << 20, MaxValue: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(c.Now() - time.Now().UnixNano()); d < -time.Second || d > time.Second {
		t.Fatalf("Now() is %v from the wall clock", d)
	}
	at := time.Now().Add(50 * time.Millisecond)
	fill(t, c, "k", "", false, []byte("$1\r\nx\r\n"), at.UnixNano())
	if _, st := get(c, "k", 1, 2); st != Hit && time.Now().Before(at) {
		t.Fatalf("before expiry: %v, want Hit", st)
	}
	time.Sleep(time.Until(at) + time.Millisecond)
	if _, st := get(c, "k", 1, 2); st != Miss {
		t.Fatalf("after expiry: %v, want Miss", st)
	}
}

// TestFillGuard covers every event that must make an in-flight fill be
// dropped: the stale-fill rule.
func TestFillGuard(t *testing.T) {
	k := keyOf("k")
	events := []struct {
		name string
		do   func(c *Cache)
	}{
		{"write began", func(c *Cache) { c.BeginWrite(k) }},
		{"write ended", func(c *Cache) { c.EndWrite(c.BeginWrite(k)) }},
		{"notification", func(c *Cache) { c.Invalidate(k, ReasonNotification) }},
		{"flush", func(c *Cache) { c.Flush() }},
		{"hold", func(c *Cache) { c.Hold() }},
		{"hold and release", func(c *Cache) { c.Hold().Release() }},
	}
	for _, ev := range events {
		c, _ := newTestCache(t, 100, 1<<20)
		tk, ok := c.BeginFill(k)
		if !ok {
			t.Fatalf("%s: BeginFill refused", ev.name)
		}
		ev.do(c)
		if c.Fill(tk, FillRequest{Key: *k, Reply: []byte("$1\r\nx\r\n"), ValueLen: 1, Ident: 1}) {
			t.Errorf("%s during the fill: Fill kept a stale reply", ev.name)
		}
	}
	// While a write is in flight, BeginFill refuses; after EndWrite it is fine.
	c, _ := newTestCache(t, 100, 1<<20)
	s := c.BeginWrite(k)
	if _, ok := c.BeginFill(k); ok {
		t.Error("BeginFill during a write: ok, want refused")
	}
	c.EndWrite(s)
	if !fill(t, c, "k", "", false, []byte("$1\r\nx\r\n"), 0) {
		t.Error("fill after the write ended was refused")
	}
	h1 := c.Hold()
	if _, st := get(c, "k", 1, 2); st != Suspended {
		t.Errorf("held: %v, want Suspended", st)
	}
	h1.Release()
	if _, st := get(c, "k", 1, 2); st != Hit {
		t.Errorf("released: %v, want Hit", st)
	}
}

// TestHoldReleasedOnce: holds nest, and a second Release of one Hold
// neither resumes the cache under another Hold nor goes unnoticed.
func TestHoldReleasedOnce(t *testing.T) {
	c, _ := newTestCache(t, 100, 1<<20)
	fill(t, c, "k", "", false, []byte("$1\r\nx\r\n"), 0)
	a, b := c.Hold(), c.Hold()
	a.Release()
	if got := c.Holds(); got != 1 {
		t.Fatalf("Holds after one of two released: got %d, want 1", got)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("second Release with StrictHolds: no panic, want one")
			}
		}()
		a.Release()
	}()
	if _, st := get(c, "k", 1, 2); st != Suspended {
		t.Errorf("after a second Release of one Hold while another is held: %v, want Suspended", st)
	}
	if got := c.Stats().DoubleReleases; got != 1 {
		t.Errorf("DoubleReleases: got %d, want 1", got)
	}
	b.Release()
	if _, st := get(c, "k", 1, 2); st != Hit || c.Holds() != 0 {
		t.Errorf("every Hold released: %v with %d holds, want Hit with 0", st, c.Holds())
	}

	lax, err := New(Config{Capacity: 10, MaxBytes: 1 << 20, MaxValue: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	x, y := lax.Hold(), lax.Hold()
	x.Release()
	x.Release() // counted, not resumed
	if lax.Holds() != 1 || lax.Stats().DoubleReleases != 1 {
		t.Errorf("without StrictHolds: %d holds, %d double releases; want 1, 1", lax.Holds(), lax.Stats().DoubleReleases)
	}
	y.Release()
}

func TestCapacity(t *testing.T) {
	c, _ := newTestCache(t, 3, 1<<20)
	for i := range 5 {
		fill(t, c, fmt.Sprint("k", i), "", false, []byte("$1\r\nx\r\n"), 0)
	}
	if s := c.Stats(); s.Replies != 3 || s.Evicted[ReasonCapacity] != 2 {
		t.Fatalf("replies %d capacity-evicted %d, want 3 and 2", s.Replies, s.Evicted[ReasonCapacity])
	}
	for i, want := range []Status{Miss, Miss, Hit, Hit, Hit} {
		if _, st := get(c, fmt.Sprint("k", i), 1, 2); st != want {
			t.Errorf("k%d: %v, want %v (oldest evicted first)", i, st, want)
		}
	}
	// Bytes: each entry costs entryOverhead+replyOverhead+len(key)+len(reply).
	per := int64(entryOverhead + replyOverhead + 2 + 7)
	c, _ = newTestCache(t, 100, 2*per)
	for i := range 3 {
		fill(t, c, fmt.Sprint("k", i), "", false, []byte("$1\r\nx\r\n"), 0)
	}
	if s := c.Stats(); s.Replies != 2 || s.Bytes != 2*per {
		t.Errorf("byte bound: replies %d bytes %d, want 2 and %d", s.Replies, s.Bytes, 2*per)
	}
	// A value over MaxValue is never cached.
	big := make([]byte, 2000)
	if fill(t, c, "big", "", false, big, 0) {
		t.Error("reply over MaxValue was cached")
	}
}

// TestSweepNilCold: with no cold function the sweep still drops expired
// replies, and it skips its walk only while no cached key has a TTL: the
// count of keys with one follows fills (a TTL added by a field's fill
// too), writes, expiry and flushes.
func TestSweepNilCold(t *testing.T) {
	c, clk := newTestCache(t, 100, 1<<20)
	expiring := func(want int64) {
		t.Helper()
		if got := c.expiring.Load(); got != want {
			t.Fatalf("keys with a TTL: %d, want %d", got, want)
		}
	}
	clk.ns.Store(1000)
	fill(t, c, "a", "", false, []byte("$1\r\nx\r\n"), 0)
	fill(t, c, "b", "", false, []byte("$1\r\nx\r\n"), 2000)
	fill(t, c, "h", "f1", true, []byte("$1\r\nx\r\n"), 0)
	expiring(1)
	fill(t, c, "h", "f2", true, []byte("$1\r\nx\r\n"), 5000) // the key gets a TTL
	expiring(2)
	clk.ns.Store(2000)
	c.Sweep(nil)
	if s := c.Stats(); s.Replies != 3 || s.Evicted[ReasonExpired] != 1 {
		t.Errorf("after the sweep at 2000: replies %d expired %d, want 3 and 1", s.Replies, s.Evicted[ReasonExpired])
	}
	expiring(1)
	k := KeyOf(0, []byte("h"))
	c.EndWrite(c.BeginWrite(&k))
	expiring(0)
	fill(t, c, "c", "", false, []byte("$1\r\nx\r\n"), 9000)
	expiring(1)
	c.Flush()
	expiring(0)
	// No key with a TTL: nothing to walk, and "a" has none.
	fill(t, c, "a", "", false, []byte("$1\r\nx\r\n"), 0)
	clk.ns.Store(1 << 40)
	c.Sweep(nil)
	if _, st := get(c, "a", 1, 2); st != Hit {
		t.Errorf("a key without a TTL after a sweep: %v, want Hit", st)
	}
}

func TestSweepCold(t *testing.T) {
	c, _ := newTestCache(t, 100, 1<<20)
	fill(t, c, "k", "", false, []byte("$1\r\nx\r\n"), 0)
	fill(t, c, "h", "hot", true, []byte("$1\r\nx\r\n"), 0)
	fill(t, c, "h", "cold", true, []byte("$1\r\nx\r\n"), 0)
	coldHash := FieldHash(HashString(0, "h"), []byte("cold"))
	kHash := HashString(0, "k")
	c.Sweep(func(_, h uint64) bool { return h == coldHash || h == kHash })
	if _, st := get(c, "k", 1, 2); st != Miss {
		t.Errorf("cold GET key: %v, want Miss", st)
	}
	if _, st := hget(c, "h", "hot", 1, 2); st != Hit {
		t.Errorf("hot field: %v, want Hit", st)
	}
	if _, st := hget(c, "h", "cold", 1, 2); st != Miss {
		t.Errorf("cold field: %v, want Miss", st)
	}
	if s := c.Stats(); s.Replies != 1 || s.Evicted[ReasonCold] != 2 {
		t.Errorf("replies %d cold-evicted %d, want 1 and 2", s.Replies, s.Evicted[ReasonCold])
	}
}

func TestGetAllocs(t *testing.T) {
	c, _ := newTestCache(t, 100, 1<<20)
	fill(t, c, "k", "", false, []byte("$1\r\nx\r\n"), 5)
	fill(t, c, "h", "f", true, []byte("$1\r\nx\r\n"), 0)
	k, hk, other := KeyOf(0, []byte("k")), FieldKeyOf(0, []byte("h"), []byte("f")), KeyOf(0, []byte("other"))
	if a := testing.AllocsPerRun(1000, func() {
		var f Found
		c.Lookup(&k, 1, 2, &f)
		c.Current(&f)
		c.Lookup(&hk, 1, 2, &f)
		c.Lookup(&other, 1, 2, &f)
	}); a != 0 {
		t.Errorf("lookups allocate %v times, want 0", a)
	}
}

// TestConcurrent runs readers on every key while writers fill, write,
// invalidate and flush; run with -race. A reader must only ever see a
// reply that was filled for that key.
func TestConcurrent(t *testing.T) {
	c, _ := newTestCache(t, 16, 1<<20)
	keys := make([][]byte, 32)
	for i := range keys {
		keys[i] = []byte(fmt.Sprint("key", i))
	}
	stop := make(chan struct{})
	var readers, writers sync.WaitGroup
	var bad atomic.Int64
	for r := 0; r < 4; r++ {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i, k := range keys {
					key := KeyOf(0, k)
					f := lookup(c, &key)
					if f.Status == Hit && string(f.Reply) != fmt.Sprintf("$1\r\n%c\r\n", 'a'+i%26) {
						bad.Add(1)
					}
				}
			}
		}()
	}
	for w := 0; w < 2; w++ {
		writers.Add(1)
		go func(w int) {
			defer writers.Done()
			for n := 0; n < 3000; n++ {
				i := (n*7 + w) % len(keys)
				k := KeyOf(0, keys[i])
				switch n % 5 {
				case 0, 1:
					if tk, ok := c.BeginFill(&k); ok {
						c.Fill(tk, FillRequest{Key: k, Reply: []byte(fmt.Sprintf("$1\r\n%c\r\n", 'a'+i%26)), ValueLen: 1, Ident: 1})
					}
				case 2:
					c.EndWrite(c.BeginWrite(&k))
				case 3:
					c.Invalidate(&k, ReasonNotification)
				case 4:
					if n%50 == 4 {
						c.Flush()
					}
					c.Sweep(func(_, _ uint64) bool { return n%3 == 0 })
				}
			}
		}(w)
	}
	writers.Wait()
	close(stop)
	readers.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d reads returned another key's reply", bad.Load())
	}
	s := c.Stats()
	if s.Replies > 16 || s.Replies < 0 {
		t.Errorf("replies %d outside [0, 16]", s.Replies)
	}
}

func BenchmarkGetHit(b *testing.B) {
	c, _ := newTestCache(b, 1000, 1<<20)
	fill(b, c, "hot:key", "", false, []byte("$5\r\nhello\r\n"), 0)
	key := []byte("hot:key")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := KeyOf(0, key)
			var f Found
			if c.Lookup(&k, 1, 2, &f); f.Status != Hit {
				b.Fatal("miss")
			}
		}
	})
}

// BenchmarkSweep: one sweep of a cache of 100,000 keys without a TTL
// when none is cold: the walk (cold returns false for each) against a nil
// cold, which skips it.
func BenchmarkSweep(b *testing.B) {
	c, _ := newTestCache(b, 100000, 1<<30)
	for i := range 100000 {
		fill(b, c, "key:"+strconv.Itoa(i), "", false, []byte("$5\r\nhello\r\n"), 0)
	}
	b.Run("walk", func(b *testing.B) {
		for range b.N {
			c.Sweep(func(_, _ uint64) bool { return false })
		}
	})
	b.Run("nil", func(b *testing.B) {
		for range b.N {
			c.Sweep(nil)
		}
	})
}

// BenchmarkLookupLarge: lookups in a cache of 100,000 keys (the default
// capacity, a table of 262,144 slots) of keys spread over 1,000,000, as
// scenario 4 of make bench does: hit, a cached key; miss, a key that is
// not. Each lookup's slots and entry are out of the CPU's caches, as on a
// loop serving many keys.
func BenchmarkLookupLarge(b *testing.B) {
	const cached, space = 100000, 1000000
	c, _ := newTestCache(b, cached, 1<<30)
	keys := make([]Key, space)
	for i := range keys {
		keys[i] = KeyOf(0, []byte("key:"+strconv.Itoa(i)))
	}
	order := rand.New(rand.NewPCG(1, 2)).Perm(space)
	var hits []int // a fill may evict another key whose probe slots are full
	for _, i := range order[:cached] {
		fill(b, c, string(keys[i].name), "", false, []byte("$5\r\nhello\r\n"), 0)
	}
	for _, i := range order[:cached] {
		var f Found
		if c.Lookup(&keys[i], 1, 2, &f); f.Status == Hit {
			hits = append(hits, i)
		}
	}
	for _, bc := range []struct {
		name   string
		keys   []int
		status Status
	}{{"hit", hits, Hit}, {"miss", order[cached:], Miss}} {
		b.Run(bc.name, func(b *testing.B) {
			var f Found
			var name []byte // the key's bytes are in cache, as in a loop's read buffer
			for i := range b.N {
				name = strconv.AppendInt(append(name[:0], "key:"...), int64(bc.keys[i%len(bc.keys)]), 10)
				k := KeyOf(0, name)
				if c.Lookup(&k, 1, 2, &f); f.Status != bc.status {
					b.Fatalf("status %v, want %v", f.Status, bc.status)
				}
			}
		})
	}
}

func BenchmarkGetMiss(b *testing.B) {
	c, _ := newTestCache(b, 1000, 1<<20)
	key := []byte("cold:key")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		k := KeyOf(0, key)
		var f Found
		c.Lookup(&k, 1, 2, &f)
	}
}

// TestReasonsAll: every eviction reason is exported, each with its own
// label (the cluster reason was once left out of the metrics).
func TestReasonsAll(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Reasons() {
		seen[r.String()] = true
	}
	for _, want := range []string{"write", "notification", "expired", "cold", "capacity", "flush", "config", "cluster"} {
		if !seen[want] {
			t.Errorf("reason %q not in Reasons()", want)
		}
	}
	if len(seen) != int(numReasons) {
		t.Errorf("%d labels for %d reasons", len(seen), numReasons)
	}
}

// TestCurrent: what Lookup found stays current until the key's entry is
// replaced or removed or the cache is held, and only then.
func TestCurrent(t *testing.T) {
	c, _ := newTestCache(t, 100, 1<<20)
	fill(t, c, "k", "", false, []byte("$1\r\nx\r\n"), 0)
	fill(t, c, "other", "", false, []byte("$1\r\ny\r\n"), 0)
	k := keyOf("k")
	for _, ev := range []struct {
		name    string
		do      func()
		current bool
	}{
		{"nothing", func() {}, true},
		{"another key filled", func() { fill(t, c, "third", "", false, []byte("$1\r\nz\r\n"), 0) }, true},
		{"another key invalidated", func() { c.Invalidate(keyOf("other"), ReasonNotification) }, true},
		{"a field of the key filled", func() { fill(t, c, "k", "f", true, []byte("$1\r\nz\r\n"), 0) }, false},
		{"the key invalidated", func() { c.Invalidate(k, ReasonNotification) }, false},
		{"the key written", func() { c.EndWrite(c.BeginWrite(k)) }, false},
		{"a flush", func() { c.Flush() }, false},
		{"a hold", func() { c.Hold() }, false},
	} {
		fill(t, c, "k", "", false, []byte("$1\r\nx\r\n"), 0)
		f := lookup(c, k)
		if f.Status != Hit {
			t.Fatalf("%s: lookup before: %v, want Hit", ev.name, f.Status)
		}
		ev.do()
		if got := c.Current(&f); got != ev.current {
			t.Errorf("after %s: Current %v, want %v", ev.name, got, ev.current)
		}
	}
	if miss := lookup(c, keyOf("absent")); c.Current(&miss) {
		t.Error("Current of a miss: true, want false")
	}
}

// TestEvictByRank: with a rank, an eviction for room takes the lowest
// ranked of the oldest keys, not the oldest; Replies yields each reply's
// key and read hashes; Full compares with the share of a limit.
func TestEvictByRank(t *testing.T) {
	c, _ := newTestCache(t, 3, 1<<20)
	rank := map[uint64]float64{HashString(0, "k0"): 5, HashString(0, "k1"): 1, HashString(0, "k2"): 3, HashString(0, "k3"): 4}
	c.SetRank(func(keyHash, readHash uint64) float64 {
		if keyHash != readHash {
			t.Errorf("GET reply ranked with key hash %x, read hash %x", keyHash, readHash)
		}
		return rank[keyHash]
	})
	for i := range 4 {
		fill(t, c, fmt.Sprint("k", i), "", false, []byte("$1\r\nx\r\n"), 0)
	}
	for i, want := range []Status{Hit, Miss, Hit, Hit} {
		if _, st := get(c, fmt.Sprint("k", i), 1, 2); st != want {
			t.Errorf("k%d: %v, want %v (k1, ranked lowest, evicted)", i, st, want)
		}
	}
	if !c.Full(1) || c.Full(1.01) {
		t.Errorf("3 of 3 replies: Full(1) %v, Full(1.01) %v; want true, false", c.Full(1), c.Full(1.01))
	}
	fill(t, c, "h", "f", true, []byte("$1\r\nx\r\n"), 0) // evicts k2 (rank 3 < 4 < 5)
	got := map[[2]uint64]bool{}
	for keyHash, readHash := range c.Replies() {
		got[[2]uint64{keyHash, readHash}] = true
	}
	h := HashString(0, "h")
	want := map[[2]uint64]bool{
		{HashString(0, "k0"), HashString(0, "k0")}: true,
		{HashString(0, "k3"), HashString(0, "k3")}: true,
		{h, FieldHash(h, []byte("f"))}:             true,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Replies: %v, want %v", got, want)
	}
	c.SetRank(nil)
	fill(t, c, "k9", "", false, []byte("$1\r\nx\r\n"), 0) // oldest first again: k0
	if _, st := get(c, "k0", 1, 2); st != Miss {
		t.Errorf("without a rank, k0 (oldest): %v, want Miss", st)
	}
}

// TestShrinkWhileFoundUnlocked: AddReader and dropReplies (the sweep's)
// find an entry without the lock, then lock; if SetLimits shrank the table
// meanwhile, the entry's slot may be past the new table's end. Each must
// see the key gone, not index the new table with it (it panicked: a live
// config reload could end the process).
func TestShrinkWhileFoundUnlocked(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(c *Cache, e *entry, k *Key)
	}{
		{"AddReader", func(c *Cache, _ *entry, k *Key) { c.AddReader(c.Epoch(), k, 2) }},
		{"dropReplies", func(c *Cache, e *entry, _ *Key) { c.dropReplies(e, true, nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := newTestCache(t, 20, 1<<20) // a table of 64 slots
			var k Key
			for i := 0; ; i++ { // a key whose slot is past a 16-slot table's end
				if k = KeyOf(0, []byte("k"+strconv.Itoa(i))); k.hash&63 >= 16 && k.hash&63 < 56 {
					break
				}
			}
			if !fill(t, c, string(k.name), "", false, []byte("$0\r\n\r\n"), 0) {
				t.Fatal("fill refused")
			}
			e := c.find(0, k.hash, k.name)
			if e == nil || e.rec.slot < 16 {
				t.Fatalf("entry %v not where the test needs it", e)
			}
			c.mu.Lock()
			done := make(chan any, 1)
			go func() {
				defer func() { done <- recover() }()
				tc.call(c, e, &k)
			}()
			time.Sleep(50 * time.Millisecond) // the call waits for mu
			c.setLimitsLocked(8, 1<<20, 1024) // a table of 16 slots
			c.mu.Unlock()
			if r := <-done; r != nil {
				t.Fatalf("panicked: %v", r)
			}
		})
	}
}

// TestFillServesNothingBeforeItsTicketCheck: Fill publishes a reply, then
// checks its ticket again (a write may have looked for the key between);
// a lookup in between must find no reply, or a write whose BeginWrite
// came before the publication and whose reply came back before the lookup
// would be answered with the value read before it. The lookup here runs
// inside the rank that the eviction for room calls after publishing.
func TestFillServesNothingBeforeItsTicketCheck(t *testing.T) {
	c, _ := newTestCache(t, 1, 1<<20)
	if !fill(t, c, "old", "", false, []byte("$1\r\nx\r\n"), 0) {
		t.Fatal("fill of old refused")
	}
	k := KeyOf(0, []byte("new"))
	var looked atomic.Bool
	var during Status
	c.SetRank(func(_, _ uint64) float64 {
		if !looked.Swap(true) {
			var f Found
			c.Lookup(&k, 1, 2, &f)
			during = f.Status
		}
		return 0
	})
	tk, ok := c.BeginFill(&k)
	if !ok || !c.Fill(tk, FillRequest{Key: k, Reply: []byte("$1\r\ny\r\n"), ValueLen: 1, Ident: 1}) {
		t.Fatal("fill of new refused")
	}
	if !looked.Load() {
		t.Fatal("the rank was not called while Fill evicted for room: the test looked at nothing")
	}
	if during != Miss {
		t.Errorf("a lookup between Fill's publication and its ticket check: status %v, want Miss", during)
	}
	var f Found
	if c.Lookup(&k, 1, 2, &f); f.Status != Hit || string(f.Reply) != "$1\r\ny\r\n" {
		t.Errorf("after Fill: status %v reply %q, want Hit $1 y", f.Status, f.Reply)
	}
}
