package e2e

import (
	"context"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// TestRequirePass: with requirepass, a cached value never reaches a
// connection before AUTH or after RESET, and the replies are Redis's.
func TestRequirePass(t *testing.T) {
	args := []string{"--requirepass", "s3cret"}
	p := newPair(t, args, cicadatest.Options{Password: "s3cret"})
	for _, srv := range []string{p.Direct.Addr, p.Behind.Addr} {
		rc := redis.NewClient(&redis.Options{Addr: srv, Password: "s3cret", DisableIdentity: true})
		mustDo(t, rc, "SET", "hot", "secret-value")
		rc.Close()
	}
	authed := redis.NewClient(&redis.Options{Addr: p.Proxy.Addr, Password: "s3cret", DisableIdentity: true})
	defer authed.Close()
	warmKey(t, p.Proxy, authed, "GET", "hot")
	before := hits(p.Proxy)
	p.Compare(t, send(cmds(
		[]string{"GET", "hot"}, []string{"HGET", "hot", "f"}, []string{"AUTH", "wrong"}, []string{"GET", "hot"},
		[]string{"AUTH", "s3cret"}, []string{"GET", "hot"}, []string{"AUTH", "wrong"}, []string{"GET", "hot"},
		[]string{"RESET"}, []string{"GET", "hot"}, []string{"HELLO", "3", "AUTH", "default", "s3cret"}, []string{"GET", "hot"},
	)))
	// 10,000 unauthenticated reads of the hot key, 100 per pipeline (Redis
	// closes an unauthenticated client whose replies pile up): every one
	// refused with Redis's exact reply.
	c, err := net.Dial("tcp", p.Proxy.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	batch := strings.Repeat(cmd("GET", "hot"), 100)
	for range 100 {
		if _, err := c.Write([]byte(batch)); err != nil {
			t.Fatal(err)
		}
		expectBytes(t, c, strings.Repeat("-NOAUTH Authentication required.\r\n", 100))
	}
	if hits(p.Proxy) == before {
		t.Error("the authenticated reads were not answered from the cache")
	}
}

// TestDefaultUserOff: with Redis's default user off, a fresh connection is
// unauthenticated even without requirepass; a cached value reaches it only
// after AUTH as a user that may read it, and never again after RESET.
func TestDefaultUserOff(t *testing.T) {
	args := []string{"--user", "admin", "on", ">apw", "~*", "&*", "+@all", "--user", "default", "off"}
	p := newPair(t, args, cicadatest.Options{Username: "admin", Password: "apw"})
	for _, srv := range []string{p.Direct.Addr, p.Behind.Addr} {
		rc := redis.NewClient(&redis.Options{Addr: srv, Username: "admin", Password: "apw", DisableIdentity: true})
		mustDo(t, rc, "SET", "secret", "classified")
		rc.Close()
	}
	admin := redis.NewClient(&redis.Options{Addr: p.Proxy.Addr, Username: "admin", Password: "apw", DisableIdentity: true})
	defer admin.Close()
	warmKey(t, p.Proxy, admin, "GET", "secret")
	before := hits(p.Proxy)
	got := p.Compare(t, send(cmds(
		[]string{"GET", "secret"}, []string{"AUTH", "default", "x"}, []string{"GET", "secret"},
		[]string{"HELLO", "3", "AUTH", "default", "x"}, []string{"GET", "secret"},
		[]string{"AUTH", "admin", "apw"}, []string{"GET", "secret"}, []string{"GET", "secret"},
		[]string{"RESET"}, []string{"GET", "secret"},
	)))
	if n := strings.Count(string(got), "classified"); n != 2 {
		t.Errorf("the value reached the connection %d times, want 2 (the reads after AUTH admin)", n)
	}
	if hits(p.Proxy) == before {
		t.Error("the reads after AUTH admin were not answered from the cache")
	}
}

// TestACLKeyPatterns: a user whose key patterns exclude a cached key gets
// Redis's -NOPERM, not the value; a user allowed to read it gets hits.
func TestACLKeyPatterns(t *testing.T) {
	p := newPair(t, nil, cicadatest.Options{})
	p.Both(t, []string{"ACL", "SETUSER", "alice", "on", ">pw", "~public:*", "+@all"})
	p.Both(t, []string{"ACL", "SETUSER", "bob", "on", ">pw", "~*", "+@all", "-get"})
	p.Both(t, []string{"SET", "secret", "classified"})
	p.Both(t, []string{"SET", "public:x", "open"})
	p.Warm(t, "GET", "secret")
	p.Warm(t, "GET", "public:x")
	got := p.Compare(t, send(cmds(
		[]string{"AUTH", "alice", "pw"}, []string{"GET", "secret"}, []string{"GET", "public:x"}, []string{"GET", "public:x"},
		[]string{"AUTH", "bob", "pw"}, []string{"GET", "public:x"}, []string{"GET", "secret"},
		[]string{"AUTH", "default", "nopass-is-fine"}, []string{"GET", "secret"},
	)))
	// The text of NOPERM differs by version ("this user has" in 7.0,
	// "User bob has" from 7.2): bob's refused GET is the first that names
	// the command.
	bob := regexp.MustCompile(`-NOPERM [^\r]*'get' command`).FindIndex(got)
	if bob == nil {
		t.Fatalf("no NOPERM for bob's GET in %q", got)
	}
	if strings.Contains(string(got[:bob[0]]), "classified") {
		t.Fatal("alice or bob got the secret value")
	}
	// ACL changes through Cicada take effect at once.
	alice := redis.NewClient(&redis.Options{Addr: p.Proxy.Addr, Username: "alice", Password: "pw", DisableIdentity: true})
	defer alice.Close()
	warmKey(t, p.Proxy, alice, "GET", "public:x")
	mustDo(t, client(t, p.Proxy.Addr, 2), "ACL", "SETUSER", "alice", "resetkeys", "~other:*")
	if err := alice.Get(context.Background(), "public:x").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Fatalf("GET after the permission was revoked: %v, want NOPERM", err)
	}
}

// TestUncertainIdentity: when Cicada cannot tell which user Redis now
// authenticates a connection as (HELLO that authenticates and then fails on
// SETNAME; a user name too long to capture), that connection's reads must
// prove nothing for anybody else.
func TestUncertainIdentity(t *testing.T) {
	long := strings.Repeat("u", 5000)
	p := newPair(t, []string{"--requirepass", "pw"}, cicadatest.Options{Password: "pw"})
	for _, srv := range []string{p.Direct.Addr, p.Behind.Addr} {
		rc := redis.NewClient(&redis.Options{Addr: srv, Password: "pw", DisableIdentity: true})
		mustDo(t, rc, "SET", "secret", "classified")
		mustDo(t, rc, "ACL", "SETUSER", long, "on", ">pw", "~public:*", "+@all")
		rc.Close()
	}
	authed := redis.NewClient(&redis.Options{Addr: p.Proxy.Addr, Password: "pw", DisableIdentity: true})
	defer authed.Close()
	warmKey(t, p.Proxy, authed, "GET", "secret")
	p.Compare(t, send(cmds([]string{"HELLO", "2", "AUTH", "default", "pw", "SETNAME", "bad name"}, []string{"GET", "secret"}, []string{"GET", "secret"})))
	p.Compare(t, send(cmds([]string{"PING"}, []string{"GET", "secret"})))
	p.Compare(t, send(cmds([]string{"AUTH", long, "pw"}, []string{"GET", "secret"}, []string{"GET", "secret"})))
	p.Compare(t, send(cmds([]string{"HELLO", "2", "AUTH", long, "pw"}, []string{"GET", "secret"})))
}

// TestMaxClients: a client with a connection of its own that Redis
// refuses gets Redis's refusal, never a cached value first. On a lane
// (TestMaxClientsLanes) it needs no connection Redis could refuse.
func TestMaxClients(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{Dedicated: true})
	rc := client(t, p.Addr, 2)
	mustDo(t, rc, "SET", "hot", "v")
	warmKey(t, p, rc, "GET", "hot")
	fillMaxClients(t, client(t, r.Addr, 2))
	out, closed := converse(t, p.Addr, []step{send(cmds([]string{"GET", "hot"}, []string{"GET", "hot"}))}, 500*time.Millisecond)
	if string(out) != "-ERR max number of clients reached\r\n" || !closed {
		t.Fatalf("refused connection got %q closed=%v", out, closed)
	}
}

// fillMaxClients sets Redis's maxclients to the connections it has: no
// room for one more.
func fillMaxClients(t *testing.T, direct *redis.Client) {
	t.Helper()
	info := direct.Info(context.Background(), "clients").Val()
	_, rest, _ := strings.Cut(info, "connected_clients:")
	n, _, _ := strings.Cut(rest, "\r\n")
	mustDo(t, direct, "CONFIG", "SET", "maxclients", n)
}

// TestMaxClientsLanes: Redis's maxclients counts connections, and clients
// on a lane share one: a client that a full Redis would refuse on a
// connection of its own is served on a lane (docs/limits.md), and gets
// Redis's refusal when it needs a connection of its own.
func TestMaxClientsLanes(t *testing.T) {
	cicadatest.NeedLanes(t, "TestMaxClients")
	r, p := newProxied(t, cicadatest.Options{Loops: 1}) // one lane, opened below
	rc := client(t, p.Addr, 2)
	mustDo(t, rc, "SET", "hot", "v")
	fillMaxClients(t, client(t, r.Addr, 2))
	out, closed := converse(t, p.Addr, []step{send(cmds([]string{"GET", "hot"}, []string{"GET", "hot"}))}, 500*time.Millisecond)
	if string(out) != "$1\r\nv\r\n$1\r\nv\r\n" || closed {
		t.Fatalf("a client on the lane got %q closed=%v, want both values and the connection open", out, closed)
	}
	out, closed = converse(t, p.Addr, []step{send(cmds([]string{"MULTI"}))}, 500*time.Millisecond)
	if string(out) != "-ERR max number of clients reached\r\n" || !closed {
		t.Fatalf("a client needing its own connection got %q closed=%v, want Redis's refusal and the close", out, closed)
	}
}

// TestDirectAuthChanges: ACL and requirepass changes made on Redis directly
// are seen within the check interval: no connection keeps reading what it
// may no longer read.
func TestDirectAuthChanges(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	ctx := context.Background()
	direct := client(t, r.Addr, 2)
	mustDo(t, direct, "SET", "public:x", "v")
	mustDo(t, direct, "ACL", "SETUSER", "alice", "on", ">pw", "~public:*", "+@all")
	alice := redis.NewClient(&redis.Options{Addr: p.Addr, Username: "alice", Password: "pw", DisableIdentity: true})
	defer alice.Close()
	warmKey(t, p, alice, "GET", "public:x")
	mustDo(t, direct, "ACL", "SETUSER", "alice", "resetkeys", "~other:*")
	waitFor(t, func() bool {
		err := alice.Get(ctx, "public:x").Err()
		return err != nil && strings.HasPrefix(err.Error(), "NOPERM")
	})

	// requirepass set directly: an old connection keeps reading (Redis
	// authenticated it already), a new one must be refused.
	old := client(t, p.Addr, 2)
	warmKey(t, p, old, "GET", "public:x")
	mustDo(t, direct, "CONFIG", "SET", "requirepass", "now-secret")
	time.Sleep(600 * time.Millisecond) // past the check interval
	warmKey(t, p, old, "GET", "public:x")
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(cmd("GET", "public:x") + cmd("GET", "public:x"))); err != nil {
		t.Fatal(err)
	}
	expectBytes(t, c, strings.Repeat("-NOAUTH Authentication required.\r\n", 2))
}

// TestConfigSetKeepsIdentities: a CONFIG SET on Redis directly that
// changes no access rule (ACL LIST the same) empties the cache, as any
// direct CONFIG SET does, but leaves every connection's identity as it
// was: 12 connections open before it, all the default user, are answered
// from the cache again once one of them has refilled it. (Each got an
// identity of its own, and a cached reply records 8: 73% of reads stayed
// forwarded with 50 connections.)
func TestConfigSetKeepsIdentities(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	direct := client(t, r.Addr, 2)
	mustDo(t, direct, "SET", "hot", "v")
	var conns []*redis.Client
	for range 12 {
		rc := redis.NewClient(&redis.Options{Addr: p.Addr, DisableIdentity: true, PoolSize: 1})
		t.Cleanup(func() { rc.Close() })
		warmKey(t, p, rc, "GET", "hot")
		conns = append(conns, rc)
	}
	flushes := p.Cache.Stats().Evicted[hotcache.ReasonFlush]
	mustDo(t, direct, "CONFIG", "SET", "slowlog-max-len", "200")
	waitFor(t, func() bool { return p.Cache.Stats().Evicted[hotcache.ReasonFlush] > flushes })
	warmKey(t, p, conns[0], "GET", "hot")
	// A hit forwarded because Cicada could not tell whether a keyspace
	// notification was waiting (its subscriber starved of CPU, mid-read)
	// is no identity's doing: it counts with the hits.
	unsettled := metric(t, p, "cicada_cache_hits_forwarded_total", "")
	before := hits(p)
	for _, rc := range conns {
		for range 5 {
			mustDo(t, rc, "GET", "hot")
		}
	}
	if got := float64(hits(p)-before) + metric(t, p, "cicada_cache_hits_forwarded_total", "") - unsettled; got != 60 {
		t.Errorf("after a CONFIG SET that changed no rule, %v of 60 reads from 12 connections were answered from the cache (or found there and forwarded unsettled), want 60", got)
	}
}

// dialPlain dials addr for byte-level exchanges (send, then expectBytes).
func dialPlain(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func sendBytes(t *testing.T, c net.Conn, b string) {
	t.Helper()
	if _, err := c.Write([]byte(b)); err != nil {
		t.Fatal(err)
	}
}

// TestRulesChangeWindow: a password set on Redis directly is seen by Cicada
// only at its next check. A connection accepted in between is
// unauthenticated in Redis, yet got the same initial identity as the
// connections Redis had authenticated before the change; it must not keep
// that identity (and their cached reads) once Cicada has seen the change.
func TestRulesChangeWindow(t *testing.T) {
	// Cicada's own connections use their own user: requirepass concerns
	// the default user.
	r := redistest.Start(t, "--user", "cicada", "on", ">cpw", "~*", "&*", "+@all")
	p := cicadatest.Start(t, r.Addr, cicadatest.Options{CheckInterval: 2 * time.Second, Username: "cicada", Password: "cpw"})
	direct := client(t, r.Addr, 2)
	mustDo(t, direct, "SET", "secret", "TOPSECRET")
	victim := client(t, p.Addr, 2)
	warmKey(t, p, victim, "GET", "secret")

	flushes := p.Cache.Stats().Evicted[hotcache.ReasonFlush]
	mustDo(t, direct, "CONFIG", "SET", "requirepass", "pw")
	attacker := dialPlain(t, p.Addr) // before Cicada's next check, 2 s away
	sendBytes(t, attacker, cmd("RESET"))
	expectBytes(t, attacker, "+RESET\r\n")
	// The victim keeps reading (the key stays hot) until Cicada's check
	// sees the change and empties the cache.
	waitFor(t, func() bool {
		mustDo(t, victim, "GET", "secret")
		return p.Cache.Stats().Evicted[hotcache.ReasonFlush] > flushes
	})
	warmKey(t, p, victim, "GET", "secret") // Redis authenticated it before the change: cached again
	sendBytes(t, attacker, cmd("GET", "secret")+cmd("GET", "secret"))
	expectBytes(t, attacker, strings.Repeat("-NOAUTH Authentication required.\r\n", 2))
}

// TestHelloAuthEmptyUser: "" is a valid ACL user name; HELLO AUTH "" must
// change the connection's identity like any other user's.
func TestHelloAuthEmptyUser(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{Password: "pw"})
	direct := client(t, r.Addr, 2)
	mustDo(t, direct, "CONFIG", "SET", "requirepass", "pw")
	direct = redis.NewClient(&redis.Options{Addr: r.Addr, Password: "pw", DisableIdentity: true})
	defer direct.Close()
	mustDo(t, direct, "ACL", "SETUSER", "", "on", ">x", "~*", "+@all")
	mustDo(t, direct, "SET", "secret", "TOPSECRET")
	time.Sleep(600 * time.Millisecond) // Cicada's check sees the new rules

	u := dialPlain(t, p.Addr)
	sendBytes(t, u, cmd("HELLO", "2", "AUTH", "", "x"))
	if _, err := u.Read(make([]byte, 4096)); err != nil { // the HELLO map
		t.Fatal(err)
	}
	for range 20 {
		sendBytes(t, u, cmd("GET", "secret"))
		expectBytes(t, u, "$9\r\nTOPSECRET\r\n")
	}
	if hits(p) == 0 {
		t.Fatal("user \"\"'s reads were not cached: the test proves nothing")
	}
	attacker := dialPlain(t, p.Addr)
	sendBytes(t, attacker, cmd("RESET")+cmd("GET", "secret"))
	expectBytes(t, attacker, "+RESET\r\n-NOAUTH Authentication required.\r\n")
}

// TestACLRevokedBehindResetstat: an ACL change made on Redis directly
// after a CONFIG RESETSTAT, with commands padding every counter back past
// the last reading, leaves INFO commandstats looking unchanged; Cicada
// compares ACL LIST too, so the revocation still takes effect.
func TestACLRevokedBehindResetstat(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	ctx := context.Background()
	direct := client(t, r.Addr, 2)
	mustDo(t, direct, "SET", "secret", "TOPSECRET")
	mustDo(t, direct, "CONFIG", "RESETSTAT")
	mustDo(t, direct, "ACL", "SETUSER", "alice", "on", ">pw", "~*", "+@all")
	alice := redis.NewClient(&redis.Options{Addr: p.Addr, Username: "alice", Password: "pw", DisableIdentity: true})
	defer alice.Close()
	time.Sleep(600 * time.Millisecond) // a check has read the counters after the reset
	warmKey(t, p, alice, "GET", "secret")

	pipe := direct.Pipeline()
	pipe.ConfigResetStat(ctx)
	pipe.Do(ctx, "ACL", "SETUSER", "alice", "resetkeys")
	for range 300 {
		pipe.Ping(ctx)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		err := alice.Get(ctx, "secret").Err()
		return err != nil && strings.HasPrefix(err.Error(), "NOPERM")
	})
}
