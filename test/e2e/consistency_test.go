package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

func newProxied(t *testing.T, o cicadatest.Options, redisArgs ...string) (*redistest.Server, *cicadatest.Proxy) {
	t.Helper()
	r := redistest.Start(t, redisArgs...)
	return r, cicadatest.Start(t, r.Addr, o)
}

// warmKey reads args through rc until Cicada answers them locally.
func warmKey(t *testing.T, p *cicadatest.Proxy, rc *redis.Client, args ...any) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		before := hits(p)
		mustDo(t, rc, args...)
		if hits(p) > before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v never answered from the cache", args)
		}
	}
}

// TestWriteThenRead: a write acknowledged through Cicada is seen by the
// next read on any Cicada connection, 10,000 times on a hot key.
func TestWriteThenRead(t *testing.T) {
	_, p := newProxied(t, cicadatest.Options{})
	ctx := context.Background()
	writer := client(t, p.Addr, 2)
	readers := []*redis.Client{client(t, p.Addr, 2), client(t, p.Addr, 3), writer}
	mustDo(t, writer, "SET", "k", "v0")
	warmKey(t, p, readers[0], "GET", "k")
	hitsBefore := hits(p)
	stale := 0
	for i := 1; i <= 10000; i++ {
		want := "v" + strconv.Itoa(i)
		if err := writer.Set(ctx, "k", want, 0).Err(); err != nil {
			t.Fatal(err)
		}
		for _, r := range readers {
			// Several reads, so the key is refilled and read from the cache.
			for range 2 {
				if got, err := r.Get(ctx, "k").Result(); err != nil || got != want {
					stale++
				}
			}
		}
	}
	if stale != 0 {
		t.Fatalf("%d stale reads out of 60000", stale)
	}
	if hits(p) == hitsBefore {
		t.Error("no read was answered from the cache: the test did not exercise it")
	}
}

// TestWritesOfEveryKind checks that every way of changing a cached key
// through Cicada makes the next read see the change.
func TestWritesOfEveryKind(t *testing.T) {
	_, p := newProxied(t, cicadatest.Options{})
	rc := client(t, p.Addr, 2)
	ctx := context.Background()
	tests := []struct {
		name  string
		write [][]any
		want  any // the next GET k
	}{
		{"SET", [][]any{{"SET", "k", "new"}}, "new"},
		{"DEL", [][]any{{"DEL", "k"}}, nil},
		{"APPEND", [][]any{{"APPEND", "k", "+"}}, "old+"},
		{"INCR", [][]any{{"SET", "k", "1"}, {"INCR", "k"}}, "2"},
		{"GETDEL", [][]any{{"GETDEL", "k"}}, nil},
		{"MSET", [][]any{{"MSET", "a", "1", "k", "m"}}, "m"},
		{"RENAME", [][]any{{"SET", "src", "renamed"}, {"RENAME", "src", "k"}}, "renamed"},
		{"COPY", [][]any{{"SET", "src", "copied"}, {"COPY", "src", "k", "REPLACE"}}, "copied"},
		{"MOVE away", [][]any{{"MOVE", "k", "1"}}, nil},
		{"EVAL undeclared key", [][]any{{"EVAL", "redis.call('SET', 'k', 'script') return 1", "0"}}, "script"},
		{"FCALL undeclared key", [][]any{
			{"FUNCTION", "LOAD", "REPLACE", "#!lua name=lib\nredis.register_function('f', function(keys, args) return redis.call('SET', 'k', 'fn') end)"},
			{"FCALL", "f", "0"}}, "fn"},
		{"MULTI EXEC", [][]any{{"MULTI"}, {"SET", "k", "tx"}, {"EXEC"}}, "tx"},
		{"MULTI with script", [][]any{{"MULTI"}, {"EVAL", "redis.call('SET', 'k', 'txs') return 1", "0"}, {"EXEC"}}, "txs"},
		{"FLUSHDB", [][]any{{"FLUSHDB"}}, nil},
		{"FLUSHALL", [][]any{{"FLUSHALL"}}, nil},
		{"SWAPDB", [][]any{{"SELECT", "1"}, {"SET", "k", "db1"}, {"SELECT", "0"}, {"SWAPDB", "0", "1"}}, "db1"},
		{"EXPIRE past", [][]any{{"PEXPIREAT", "k", "1"}}, nil},
		{"SORT STORE", [][]any{{"RPUSH", "l", "3"}, {"SORT", "l", "STORE", "k"}}, "WRONGTYPE"},
		{"RESTORE", [][]any{{"SET", "src", "dumped"}}, "dumped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A pinned connection: SELECT and MULTI apply to it.
			conn := rc.Conn()
			defer conn.Close()
			mustDo(t, rc, "FLUSHALL")
			mustDo(t, rc, "SET", "k", "old")
			warmKey(t, p, rc, "GET", "k")
			for _, w := range tt.write {
				if err := conn.Do(ctx, w...).Err(); err != nil && err != redis.Nil {
					t.Fatalf("%v: %v", w, err)
				}
			}
			if tt.name == "RESTORE" {
				dump, err := conn.Dump(ctx, "src").Result()
				if err != nil {
					t.Fatal(err)
				}
				if err := conn.RestoreReplace(ctx, "k", 0, dump).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for _, r := range []*redis.Client{rc, client(t, p.Addr, 3)} {
				got, err := r.Get(ctx, "k").Result()
				var v any = got
				if err == redis.Nil {
					v = nil
				} else if err != nil {
					v, _, _ = strings.Cut(err.Error(), " ")
				}
				if v != tt.want {
					t.Errorf("GET k after %v = %v, want %v", tt.write, v, tt.want)
				}
			}
		})
	}
}

// TestHashFields caches HGET replies per field and evicts them on HSET.
func TestHashFields(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	rc := client(t, p.Addr, 2)
	direct := client(t, r.Addr, 2)
	ctx := context.Background()
	mustDo(t, rc, "HSET", "h", "a", "1", "b", "2")
	warmKey(t, p, rc, "HGET", "h", "a")
	warmKey(t, p, rc, "HGET", "h", "b")
	warmKey(t, p, rc, "HGET", "h", "missing")
	mustDo(t, rc, "HSET", "h", "b", "3")
	if got := rc.HGet(ctx, "h", "b").Val(); got != "3" {
		t.Errorf("HGET after HSET through Cicada = %q, want 3", got)
	}
	warmKey(t, p, rc, "HGET", "h", "a")
	mustDo(t, direct, "HSET", "h", "missing", "now")
	waitFor(t, func() bool { return rc.HGet(ctx, "h", "missing").Val() == "now" })
	if got := rc.HGet(ctx, "h", "a").Val(); got != "1" {
		t.Errorf("HGET h a = %q, want 1", got)
	}
}

// TestTTL: a cached key stops being served at its expiry even when Redis
// has not deleted it yet (active expiry off).
func TestTTL(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{}, "--enable-debug-command", "yes")
	direct := client(t, r.Addr, 2)
	mustDo(t, direct, "DEBUG", "SET-ACTIVE-EXPIRE", "0")
	rc := client(t, p.Addr, 2)
	ctx := context.Background()
	mustDo(t, rc, "SET", "k", "v", "PX", "300")
	warmKey(t, p, rc, "GET", "k")
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		got, err := rc.Get(ctx, "k").Result()
		if err == redis.Nil {
			break
		}
		if got != "v" {
			t.Fatalf("GET k = %q, want v before expiry", got)
		}
	}
	time.Sleep(time.Until(deadline) + 5*time.Millisecond)
	if err := rc.Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("GET k after expiry: %v, want nil", err)
	}
}

// TestBypassWrites: writes on a direct connection reach Cicada's readers
// through keyspace notifications; a nil reply is cached and evicted too.
func TestBypassWrites(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	direct := client(t, r.Addr, 2)
	rc := client(t, p.Addr, 2)
	ctx := context.Background()
	for i, key := range []string{"present", "absent"} {
		if key == "present" {
			mustDo(t, direct, "SET", key, "old")
		}
		warmKey(t, p, rc, "GET", key)
		mustDo(t, direct, "SET", key, "new"+strconv.Itoa(i))
		waitFor(t, func() bool { return rc.Get(ctx, key).Val() == "new"+strconv.Itoa(i) })
	}
}

// TestSubscriptionLoss: while notifications are down the cache answers
// nothing, and writes made meanwhile are not served stale afterwards.
func TestSubscriptionLoss(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	direct := client(t, r.Addr, 2)
	rc := client(t, p.Addr, 2)
	ctx := context.Background()
	mustDo(t, direct, "SET", "k", "old")
	warmKey(t, p, rc, "GET", "k")
	mustDo(t, direct, "CLIENT", "KILL", "TYPE", "pubsub")
	mustDo(t, direct, "SET", "k", "written-during-the-gap")
	waitFor(t, func() bool { return !p.Sub.Ready() || p.Sub.Reconnects() > 1 })
	if got := rc.Get(ctx, "k").Val(); got != "written-during-the-gap" {
		t.Fatalf("GET during or after the gap = %q", got)
	}
	waitFor(t, p.Sub.Ready)
	warmKey(t, p, rc, "GET", "k")
	if got := rc.Get(ctx, "k").Val(); got != "written-during-the-gap" {
		t.Fatalf("GET after the subscription is back = %q", got)
	}
}

// TestNotifyKeyspaceEvents: Cicada adds the classes it needs without
// removing those set before.
func TestNotifyKeyspaceEvents(t *testing.T) {
	r := redistest.Start(t, "--notify-keyspace-events", "Em")
	cicadatest.Start(t, r.Addr, cicadatest.Options{})
	got := client(t, r.Addr, 2).ConfigGet(context.Background(), "notify-keyspace-events").Val()["notify-keyspace-events"]
	for _, c := range "AKEm" {
		if !containsRune(got, c) {
			t.Errorf("notify-keyspace-events = %q, missing %q", got, c)
		}
	}
}

// TestNotifyEventsEmptiedDirectly: notify-keyspace-events emptied on a
// direct connection, then scripts through Cicada write a cached key they
// do not declare, twice. The first script's fence sees the CONFIG SET in
// INFO commandstats; the second's must not pass on a subscription that no
// longer hears writes (found by TestFaults in test/linearizability: the
// classes were restored only by the next periodic check).
func TestNotifyEventsEmptiedDirectly(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{CheckInterval: time.Hour})
	direct := client(t, r.Addr, 2)
	rc := client(t, p.Addr, 2)
	ctx := context.Background()
	mustDo(t, direct, "SET", "k", "v0")
	warmKey(t, p, rc, "GET", "k")
	mustDo(t, direct, "CONFIG", "SET", "notify-keyspace-events", "")
	for i := 1; i <= 3; i++ {
		want := "v" + strconv.Itoa(i)
		mustDo(t, rc, "EVAL", "return redis.call('SET', ARGV[1], ARGV[2])", 0, "k", want)
		for range 3 {
			if got := rc.Get(ctx, "k").Val(); got != want {
				t.Fatalf("GET after script write %d = %q, want %q", i, got, want)
			}
		}
	}
	// The GETs above may all have been forwarded while the fence was
	// pending; the classes are restored before it passes.
	waitFor(t, func() bool {
		got := direct.ConfigGet(ctx, "notify-keyspace-events").Val()["notify-keyspace-events"]
		return containsRune(got, 'K') && containsRune(got, 'A')
	})
}

// TestScriptSwapDB: a script that runs SWAPDB sends no keyspace
// notification that names a key; only the counter check in its fence sees
// it. With no periodic check to hide a miss, a read after the fence must
// see the swapped data (found by mutation testing: dropping that check
// passed every harness).
func TestScriptSwapDB(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{CheckInterval: time.Hour})
	direct := client(t, r.Addr, 2)
	rc := client(t, p.Addr, 2)
	ctx := context.Background()
	mustDo(t, direct, "SET", "k", "db0")
	mustDo(t, direct, "EVAL", "redis.call('SELECT', 1) return redis.call('SET', 'k', 'db1')", 0)
	for i := 0; i < 4; i++ {
		warmKey(t, p, rc, "GET", "k")
		mustDo(t, rc, "EVAL", "return redis.call('SWAPDB', 0, 1)", 0)
		want := []string{"db1", "db0"}[i%2]
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) { // past the fence, whenever it passes
			if got := rc.Get(ctx, "k").Val(); got != want {
				t.Fatalf("GET after script SWAPDB %d = %q, want %q", i+1, got, want)
			}
		}
	}
}

func containsRune(s string, r rune) bool {
	for _, c := range s {
		if c == r {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestUpstreamDown: with Redis not up yet, clients are closed like a
// client of a down Redis (without a reply: its connection would have
// been refused), each counted as an upstream error and a burst of them
// logged once; the cache is not ready; once Redis is up, everything works
// without a restart.
func TestUpstreamDown(t *testing.T) {
	port := redistest.FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logs, seen := observer.New(zap.InfoLevel)
	p := cicadatest.Start(t, addr, cicadatest.Options{NoWait: true, Observe: logs})
	const clients = 20
	for range clients {
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("PING\r\n"))
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		// EOF, or a reset when Cicada closed before it had read the PING.
		if n, err := c.Read(make([]byte, 16)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read %d bytes (%v) from a proxy whose Redis is down, want the connection closed without a reply", n, err)
		}
		c.Close()
	}
	if got := p.Server.UpstreamErrors(); got != clients {
		t.Errorf("upstream errors = %d after %d clients connected with Redis down, want %d", got, clients, clients)
	}
	if got := seen.FilterMessage("upstream connection failed; client closed").All(); len(got) != 1 || got[0].Level != zap.WarnLevel {
		t.Errorf("logged %d lines of the failed dials (%v), want one warning for the burst", len(got), got)
	}
	if p.Sub.Ready() {
		t.Fatal("ready with Redis down")
	}
	redistest.StartPort(t, port)
	p.WaitReady(t)
	rc := client(t, p.Addr, 2)
	if got := fmt.Sprint(mustDo(t, rc, "PING")); got != "PONG" {
		t.Fatalf("PING = %v", got)
	}
}

// TestBypassFlush: FLUSHALL and FLUSHDB sent to Redis directly send no
// keyspace notification; Cicada learns of them through client tracking.
func TestBypassFlush(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	direct := client(t, r.Addr, 2)
	rc := client(t, p.Addr, 2)
	ctx := context.Background()
	for i, flush := range []string{"FLUSHALL", "FLUSHDB"} {
		mustDo(t, direct, "SET", "k", "v")
		warmKey(t, p, rc, "GET", "k")
		mustDo(t, direct, flush)
		waitFor(t, func() bool { return rc.Get(ctx, "k").Err() == redis.Nil })
		if err := rc.Get(ctx, "k").Err(); err != redis.Nil {
			t.Fatalf("GET after a direct %s: %v, want nil", flush, err)
		}
		// The INFO commandstats check may have emptied the cache first;
		// the tracking connection must report the flush too.
		waitFor(t, func() bool { return p.Sub.Flushes() == uint64(i+1) })
	}
}

// TestTransactions: state changes and writes inside MULTI, refused MULTI,
// EXECABORT; the cache must follow each and never stay suspended.
func TestTransactions(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	ctx := context.Background()
	rc := client(t, p.Addr, 2)
	db1 := redis.NewClient(&redis.Options{Addr: p.Addr, DB: 1, DisableIdentity: true})
	defer db1.Close()
	mustDo(t, client(t, r.Addr, 2), "ACL", "SETUSER", "nomulti", "on", ">pw", "~*", "+@all", "-multi")

	// A go-redis transaction that selects db 1 and writes there.
	mustDo(t, db1, "SET", "k", "old")
	warmKey(t, p, db1, "GET", "k")
	conn := rc.Conn()
	if _, err := conn.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.Select(ctx, 1)
		pipe.Set(ctx, "k", "tx", 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := conn.Set(ctx, "k", "after", 0).Err(); err != nil { // now in db 1
		t.Fatal(err)
	}
	conn.Close()
	if got := db1.Get(ctx, "k").Val(); got != "after" {
		t.Fatalf("db 1 k = %q, want after", got)
	}
	if p.Cache.Suspended() {
		t.Fatal("cache suspended after a transaction with SELECT")
	}

	// MULTI refused by ACL, then SELECT and a write: not queued at all.
	warmKey(t, p, db1, "GET", "k")
	out, _ := converse(t, p.Addr, []step{send(cmds([]string{"AUTH", "nomulti", "pw"}, []string{"MULTI"},
		[]string{"SELECT", "1"}, []string{"SET", "k", "no-tx"}))}, 300e6)
	if !strings.Contains(string(out), "NOPERM") {
		t.Fatalf("MULTI was not refused: %q", out)
	}
	if got := db1.Get(ctx, "k").Val(); got != "no-tx" {
		t.Fatalf("db 1 k after a refused MULTI = %q, want no-tx", got)
	}

	// EXECABORT and WATCH failure release everything.
	warmKey(t, p, rc, "GET", "k0")
	converse(t, p.Addr, []step{send(cmds([]string{"MULTI"}, []string{"FLUSHDB"}, []string{"NOSUCHCMD"}, []string{"EXEC"}))}, 300e6)
	if p.Cache.Suspended() {
		t.Fatal("cache suspended after EXECABORT")
	}
	warmKey(t, p, rc, "GET", "k0")
}

// TestUnnotifiedChanges: changes that send no keyspace notification, made
// by a script through Cicada or directly on Redis, are not served stale.
func TestUnnotifiedChanges(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	ctx := context.Background()
	rc := client(t, p.Addr, 2)
	direct := client(t, r.Addr, 2)
	setDBs := func() {
		mustDo(t, direct, "FLUSHALL")
		mustDo(t, direct, "SET", "k", "db0")
		mustDo(t, direct, "EVAL", "redis.call('SELECT', 1) redis.call('SET', 'k', 'db1') return 1", "0")
		warmKey(t, p, rc, "GET", "k")
	}
	// SWAPDB inside a script sent through Cicada: seen before the reply.
	setDBs()
	mustDo(t, rc, "EVAL", "return redis.call('SWAPDB', 0, 1)", "0")
	if got := rc.Get(ctx, "k").Val(); got != "db1" {
		t.Fatalf("GET after SWAPDB in a script = %q, want db1", got)
	}
	// SWAPDB sent directly: seen within the check interval.
	setDBs()
	mustDo(t, direct, "SWAPDB", "0", "1")
	waitFor(t, func() bool { return rc.Get(ctx, "k").Val() == "db1" })
	// The flush-watch connection killed, then a direct FLUSHALL: the
	// command counters still reveal it.
	setDBs()
	for _, line := range strings.Split(direct.ClientList(ctx).Val(), "\n") {
		if strings.Contains(line, " name=cicada-flush-watch ") {
			id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
			mustDo(t, direct, "CLIENT", "KILL", "ID", id)
		}
	}
	warmKey(t, p, rc, "GET", "k")
	mustDo(t, direct, "FLUSHALL")
	waitFor(t, func() bool { return rc.Get(ctx, "k").Err() == redis.Nil })
	// Notification classes removed directly while writes keep the
	// subscription busy: restored, and nothing stale survives it.
	mustDo(t, direct, "SET", "k", "v0")
	warmKey(t, p, rc, "GET", "k")
	mustDo(t, direct, "CONFIG", "SET", "notify-keyspace-events", "")
	for i := 1; i <= 50; i++ {
		want := "v" + strconv.Itoa(i)
		mustDo(t, rc, "EVAL", "redis.call('SET', 'k', ARGV[1]) return 1", "0", want)
		mustDo(t, rc, "SET", "other", want) // keeps events flowing
		time.Sleep(10 * time.Millisecond)
	}
	waitFor(t, func() bool { return rc.Get(ctx, "k").Val() == "v50" })
	ev := client(t, r.Addr, 2).ConfigGet(ctx, "notify-keyspace-events").Val()["notify-keyspace-events"]
	if !strings.ContainsRune(ev, 'K') {
		t.Errorf("notify-keyspace-events = %q after the check interval, want K restored", ev)
	}
}

// TestRedisIdleTimeout: with Redis's timeout set, a client whose GETs are
// all answered by Cicada is not closed as idle: Cicada forwards one now and
// then.
func TestRedisIdleTimeout(t *testing.T) {
	_, p := newProxied(t, cicadatest.Options{}, "--timeout", "1")
	rc := client(t, p.Addr, 2)
	mustDo(t, rc, "SET", "hot", "v")
	waitFor(t, func() bool { return p.Sub.IdleTimeout() == time.Second })
	conn := rc.Conn()
	defer conn.Close()
	ctx := context.Background()
	before := hits(p)
	for i := 0; i < 30; i++ {
		if err := conn.Get(ctx, "hot").Err(); err != nil {
			t.Fatalf("GET %d on a busy connection: %v", i, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if hits(p)-before < 15 {
		t.Errorf("only %d of 30 GETs answered locally", hits(p)-before)
	}
}
