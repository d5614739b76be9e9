package e2e

// Behaviour that exists only on some servers of the version matrix
// (`make test-matrix`: Redis 7.0, Redis 8.0, Valkey 8.1): each test asks the
// live server whether it has the commands involved and skips otherwise.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// requireCommands skips t unless the server at rc has every command named
// (COMMAND INFO answers nil for an unknown one).
func requireCommands(t *testing.T, rc *redis.Client, names ...string) {
	t.Helper()
	for _, name := range names {
		v, err := rc.Do(context.Background(), "COMMAND", "INFO", name).Slice()
		if err != nil {
			t.Fatalf("COMMAND INFO %s: %v", name, err)
		}
		if len(v) != 1 || v[0] == nil {
			t.Skipf("the server has no %s: runs on the servers of make test's matrix that have it (Redis 8.0; Valkey 8.1 for CLIENT SETINFO and NO-TOUCH)", name)
		}
	}
}

// TestFieldExpiry: a cached HGET is never served after its field's expiry,
// whether the TTL was set after the field was cached (HPEXPIRE on a direct
// connection, the case) or before (known at fill), with Redis's
// active expiry running. Figures with -v: reads, stale reads (a value read
// through Cicada that started after the field's latest possible expiry),
// and the hits among the reads.
func TestFieldExpiry(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	direct := client(t, r.Addr, 2)
	requireCommands(t, direct, "hpexpire", "hpttl")
	rc := client(t, p.Addr, 2)
	ctx := context.Background()
	const batches, perBatch, ttl = 10, 100, 100 * time.Millisecond
	var reads, stale, hitsAfter uint64
	for b := 0; b < batches; b++ {
		setAfter := b%2 == 0 // the TTL comes after the field is cached
		keys := make([]string, perBatch)
		pipe := direct.Pipeline()
		for i := range keys {
			keys[i] = fmt.Sprintf("hx:%d:%d", b, i)
			pipe.HSet(ctx, keys[i], "f", "v")
			if !setAfter {
				pipe.Do(ctx, "HPEXPIRE", keys[i], ttl.Milliseconds()+200, "FIELDS", 1, "f")
			}
		}
		start := time.Now()
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("HSET: %v", err)
		}
		for _, k := range keys {
			warmKey(t, p, rc, "HGET", k, "f")
		}
		expireBy := start.Add(ttl + 200*time.Millisecond)
		if setAfter {
			pipe = direct.Pipeline()
			for _, k := range keys {
				pipe.Do(ctx, "HPEXPIRE", k, ttl.Milliseconds(), "FIELDS", 1, "f")
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatalf("HPEXPIRE: %v", err)
			}
			expireBy = time.Now().Add(ttl)
		}
		// Redis's clock has millisecond resolution: a field is expired
		// from the millisecond after its expiry time.
		expireBy = expireBy.Add(2 * time.Millisecond)
		h0 := hits(p)
		gone := make([]bool, perBatch)
		left := perBatch
		deadline := expireBy.Add(5 * time.Second)
		for left > 0 && time.Now().Before(deadline) {
			for i, k := range keys {
				if gone[i] {
					continue
				}
				sent := time.Now()
				v, err := rc.HGet(ctx, k, "f").Result()
				reads++
				switch {
				case err == redis.Nil:
					gone[i] = true
					left--
				case err != nil:
					t.Fatalf("HGET %s f: %v", k, err)
				case v != "v":
					t.Fatalf("HGET %s f = %q, want v or nil", k, v)
				case sent.After(expireBy):
					stale++
					if stale <= 5 {
						t.Errorf("HGET %s f sent %v after the field's expiry: got v, want nil", k, sent.Sub(expireBy))
					}
				}
			}
		}
		if left > 0 {
			t.Fatalf("batch %d: %d fields still answered 5 s after their expiry", b, left)
		}
		hitsAfter += hits(p) - h0
	}
	if stale > 0 {
		t.Errorf("%d stale reads", stale)
	}
	t.Logf("%d expiring fields, %d reads through Cicada, %d from its cache, %d stale", batches*perBatch, reads, hitsAfter, stale)
	if hitsAfter == 0 {
		t.Errorf("no read was answered from the cache between the TTL and the expiry: the test proves nothing")
	}
}

// cached reports whether the cache holds an entry for key (field for HGET).
func cached(p *cicadatest.Proxy, key, field string) bool {
	found := false
	p.Cache.Items(func(it hotcache.Item) {
		if it.Key == key && it.Field == field && !it.Expired {
			found = true
		}
	})
	return found
}

// TestLearnedWrites: on a server with commands the built-in table does not
// know (Redis 8.0: HSETEX, HGETDEL, HPEXPIRE, VADD), the table learned from
// the server's COMMAND evicts exactly the keys a write names, at once and
// with no hold on the cache: the cached keys it does not name stay cached
// and are answered from the cache by the reads pipelined right behind it.
// A command no table knows (what an unlearned module's write is) keeps
// every cached key and is fenced: its keyspace notifications evict.
func TestLearnedWrites(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	direct := client(t, r.Addr, 2)
	rc := client(t, p.Addr, 2)
	ctx := context.Background()
	mustDo(t, direct, "HSET", "other", "f", "1")
	mustDo(t, direct, "SET", "s", "x")
	writes := []struct {
		need   string
		before []any // creates the key
		write  []any
		key    string // cached before the write (field f for a hash)
		read   []any  // through Cicada after the write
		want   any
	}{
		{"hsetex", []any{"HSET", "h1", "f", "old"}, []any{"HSETEX", "h1", "FIELDS", 1, "f", "new"},
			"h1", []any{"HGET", "h1", "f"}, "new"},
		{"hgetdel", []any{"HSET", "h2", "f", "old", "g", "1"}, []any{"HGETDEL", "h2", "FIELDS", 1, "f"},
			"h2", []any{"HGET", "h2", "f"}, nil},
		{"hpexpire", []any{"HSET", "h3", "f", "v"}, []any{"HPEXPIRE", "h3", 100000, "FIELDS", 1, "f"},
			"h3", []any{"HGET", "h3", "f"}, "v"},
		{"vadd", []any{"DEL", "v1"}, []any{"VADD", "v1", "VALUES", 2, 1, 2, "e1"},
			"v1", []any{"GET", "v1"}, "WRONGTYPE"},
	}
	for _, w := range writes {
		t.Run(w.need, func(t *testing.T) {
			requireCommands(t, direct, w.need)
			field := ""
			if w.read[0] == "HGET" {
				field = "f"
			}
			// A read behind the write may also be forwarded when a
			// keyspace notification is half-read at that moment
			// (unsettled): a fence would forward both reads every time.
			best := 0
			for attempt := 0; attempt < 5 && best < 2; attempt++ {
				mustDo(t, direct, w.before...)
				warmKey(t, p, rc, w.read...)
				warmKey(t, p, rc, "HGET", "other", "f")
				warmKey(t, p, rc, "GET", "s")
				h0 := hits(p)
				pipe := rc.Pipeline()
				wr := pipe.Do(ctx, w.write...)
				other := pipe.HGet(ctx, "other", "f")
				s := pipe.Get(ctx, "s")
				_, _ = pipe.Exec(ctx)
				if err := wr.Err(); err != nil {
					t.Fatalf("%v: %v", w.write, err)
				}
				if other.Val() != "1" || s.Val() != "x" {
					t.Errorf("keys the write does not name: got %q %q, want 1 x", other.Val(), s.Val())
				}
				best = max(best, int(hits(p)-h0))
				if !cached(p, "other", "f") || !cached(p, "s", "") {
					t.Errorf("keys the write does not name: no longer cached")
				}
			}
			if best != 2 {
				t.Errorf("reads behind %s answered from the cache: got at most %d in 5 tries, want 2 (no hold)", w.need, best)
			}
			if cached(p, w.key, field) {
				t.Errorf("%s %s: still cached after the write", w.need, w.key)
			}
			gv, err := rc.Do(ctx, w.read...).Result()
			switch {
			case err == redis.Nil:
				gv = nil
			case err != nil:
				gv = err.Error()[:len("WRONGTYPE")]
			}
			if gv != w.want {
				t.Errorf("%v after %v: got %v, want %v", w.read, w.write, gv, w.want)
			}
		})
	}
	t.Run("unknown", func(t *testing.T) {
		warmKey(t, p, rc, "GET", "s")
		warmKey(t, p, rc, "HGET", "other", "f")
		if err := rc.Do(ctx, "XMODWRITE", "s", "z").Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR unknown command") {
			t.Fatalf("XMODWRITE: got %v, want ERR unknown command", err)
		}
		if !cached(p, "other", "f") || !cached(p, "s", "") {
			t.Errorf("cached keys dropped by an unknown command")
		}
		mustDo(t, direct, "SET", "s", "y")
		waitFor(t, func() bool { return rc.Get(ctx, "s").Val() == "y" })
	})
}

// TestModuleCreatesKey: Redis 8.0's vector sets send no keyspace
// notification when VADD creates a key, so a cached nil reply for the key
// would be served after a VADD on a direct connection. Cicada subscribes to
// the "new key" class (n) too on a server whose modules write, and the
// read through Cicada gets Redis's WRONGTYPE error.
func TestModuleCreatesKey(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	direct := client(t, r.Addr, 2)
	requireCommands(t, direct, "vadd")
	rc := client(t, p.Addr, 2)
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		key := fmt.Sprintf("vs%d", i)
		warmKey(t, p, rc, "GET", key)
		mustDo(t, direct, "VADD", key, "VALUES", 2, 1, 2, "e1")
		waitFor(t, func() bool {
			err := rc.Get(ctx, key).Err()
			return err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE")
		})
	}
}

// TestPipelinedAuthFailure: Redis 7.2 and later (and Valkey) drop a failed
// AUTH's error when the client has replies pending (redis/redis#15640), so
// a pipeline "PING, AUTH wrong, PING" gets two replies from Redis when it
// arrives in one read, three when AUTH arrives after the first reply went
// out. Cicada sends an AUTH behind other requests only once their replies
// are in: always the three replies, never a connection waiting for a
// reply that will not come. Queued in MULTI, the error is missing from
// EXEC's reply on those servers whatever Cicada does: Cicada passes Redis's
// bytes through as they are and follows the connection's replies no more.
func TestPipelinedAuthFailure(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{Password: "pw"}, "--requirepass", "pw")
	wrongPass := "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
	noAuth := "-NOAUTH Authentication required.\r\n"
	for _, tc := range []struct{ name, in, want string }{
		{"auth", cmds([]string{"PING"}, []string{"AUTH", "wrong"}, []string{"PING"}), noAuth + wrongPass + noAuth},
		{"hello", cmds([]string{"PING"}, []string{"HELLO", "2", "AUTH", "default", "wrong"}, []string{"PING"}), noAuth + wrongPass + noAuth},
		{"then right", cmds([]string{"PING"}, []string{"AUTH", "wrong"}, []string{"AUTH", "pw"}, []string{"PING"}),
			noAuth + wrongPass + "+OK\r\n+PONG\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := converse(t, p.Addr, []step{send(tc.in)}, 300*time.Millisecond)
			if string(got) != tc.want {
				t.Errorf("through Cicada: got %q, want %q", got, tc.want)
			}
		})
	}
	// In MULTI: the bytes Redis sends, whatever they are, then a connection
	// that still works.
	steps := []step{send(cmds([]string{"AUTH", "pw"}, []string{"MULTI"}, []string{"AUTH", "wrong"}, []string{"EXEC"},
		[]string{"SET", "k", "v"}, []string{"GET", "k"}))}
	want, _ := converse(t, r.Addr, steps, 300*time.Millisecond)
	got, _ := converse(t, p.Addr, steps, 300*time.Millisecond)
	if string(got) != string(want) {
		t.Errorf("AUTH queued in MULTI: through Cicada %q, directly %q", got, want)
	}
	t.Logf("%s, AUTH wrong queued in MULTI: %q", redistest.BinaryVersion(t), want)

	// A RESP3 subscriber: a message may be in Redis's output buffer when
	// AUTH fails (here a 20 MB one Redis is still writing), so the error
	// may be dropped whatever Cicada waits for. The connection must go on
	// answering (Cicada passes its bytes through from then on).
	for _, addr := range []string{r.Addr, p.Addr} {
		sub, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		sendBytes(t, sub, cmds([]string{"HELLO", "3", "AUTH", "default", "pw"}, []string{"SUBSCRIBE", "ch"}))
		br := bufio.NewReader(sub)
		for range 2 { // HELLO's map, the subscribe push
			if _, err := redistest.ReadReply(br); err != nil {
				t.Fatal(err)
			}
		}
		// Not read yet, the message stays in Redis's output buffer (on
		// the way through Cicada too: it reads Redis no faster than its
		// client reads it).
		pub := client(t, r.Addr, 2)
		mustDo(t, pub, "AUTH", "pw")
		mustDo(t, pub, "PUBLISH", "ch", strings.Repeat("x", 20<<20))
		sendBytes(t, sub, cmd("AUTH", "default", "wrong"))
		time.Sleep(100 * time.Millisecond)
		sendBytes(t, sub, cmd("PING", "after"))
		_ = sub.SetReadDeadline(time.Now().Add(5 * time.Second))
		var got []string
		for len(got) == 0 || !strings.Contains(got[len(got)-1], "after") {
			b, err := redistest.ReadReply(br)
			if err != nil {
				t.Fatalf("%s: after a failed AUTH behind a message: %v (replies so far: %d)", addr, err, len(got))
			}
			got = append(got, string(b[:min(len(b), 40)]))
		}
	}
}

// TestClientSetinfoNoTouch: CLIENT SETINFO and CLIENT NO-TOUCH (Redis 7.2,
// Valkey) are learned as commands without effect on the cache: the replies
// are Redis's, the library name reaches Redis on the client's own upstream
// connection, and the hot key behind them is still answered from the cache.
func TestClientSetinfoNoTouch(t *testing.T) {
	p := newPair(t, nil, cicadatest.Options{})
	direct := client(t, p.Direct.Addr, 2)
	requireCommands(t, direct, "client|setinfo", "client|no-touch")
	p.LoadSample(t)
	before := hits(p.Proxy)
	got := p.Compare(t, send(cmds(
		[]string{"CLIENT", "SETINFO", "LIB-NAME", "cicada-test"}, []string{"CLIENT", "SETINFO", "LIB-VER", "1.2"},
		[]string{"CLIENT", "SETINFO", "LIB-NAME", "bad name"}, []string{"CLIENT", "NO-TOUCH", "ON"}, []string{"GET", "hot"},
		[]string{"CLIENT", "NO-TOUCH", "maybe"}, []string{"CLIENT", "NO-TOUCH", "OFF"}, []string{"GET", "hot"},
	)))
	if !strings.Contains(string(got), "hot-value") {
		t.Fatalf("no value in %q", got)
	}
	if hits(p.Proxy) < before+2 {
		t.Errorf("hits behind CLIENT SETINFO/NO-TOUCH: got %d, want 2", hits(p.Proxy)-before)
	}
	c, _ := converse(t, p.Proxy.Addr, []step{send(cmds([]string{"CLIENT", "SETINFO", "LIB-NAME", "cicada-test"},
		[]string{"CLIENT", "INFO"}))}, 200*time.Millisecond)
	if !strings.Contains(string(c), " lib-name=cicada-test ") {
		t.Errorf("CLIENT INFO through Cicada after SETINFO: got %q, want lib-name=cicada-test", c)
	}
}
