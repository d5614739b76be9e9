package proxy

import (
	"bufio"
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/command"
	"github.com/cicada-proxy/cicada/detector"
	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/resp"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// The component tests below drive one session without gnet or sockets on
// Cicada's side: a step's requests go into the session through its client
// callback, what it forwards is written to a real redis-server, Redis's
// replies come back through its upstream callback, and what the client
// gets is compared byte for byte with what a direct connection to a
// second redis-server (same commands, same data) gets, and the session's
// state (db, protocol, transaction, subscriptions, opacity, cache) is
// checked after each step.

// convStep is one batch of requests the client sends at once, the number
// of top-level replies (pushes included) Redis sends for it, and the
// session state it must leave.
type convStep struct {
	both    string // first sent to each Redis on a connection of its own (another client), if set
	send    string
	replies int
	check   func(t *testing.T, s *session)
}

// convHarness is a session over fakes of its two connections, the real
// Redis it forwards to, and a direct connection to a twin Redis.
type convHarness struct {
	s      *session
	client *fakeConn
	up     *fakeConn
	redis  net.Conn // the session's upstream
	direct net.Conn // the twin, spoken to directly
	dr     *bufio.Reader
	others [2]net.Conn // another client of each Redis
	ors    [2]*bufio.Reader
}

// newConvHarness starts the two redis-servers and a session whose keys
// become hot at their first read (threshold 1).
func newConvHarness(t *testing.T, addrMap string) *convHarness {
	return newConvHarnessClock(t, addrMap, nil)
}

// newConvHarnessClock is newConvHarness with the cache's clock now
// (hotcache.Config.Now; nil: the wall clock).
func newConvHarnessClock(t *testing.T, addrMap string, now func() int64) *convHarness {
	t.Helper()
	viaR, directR := redistest.Start(t), redistest.Start(t)
	cache, err := hotcache.New(hotcache.Config{Capacity: 64, MaxBytes: 1 << 20, MaxValue: 1024, StrictHolds: true, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	det, err := detector.New(detector.Config{Threshold: 1, Loops: 1}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Listen: "127.0.0.1:0", Upstream: viaR.Addr, Loops: 1}
	if addrMap != "" {
		m, err := cluster.ParseAddrMap([]string{addrMap})
		if err != nil {
			t.Fatal(err)
		}
		cfg.AddrMap = m
	}
	srv, err := New(cfg, cache, detector.NewAdmission(det, 64, time.Now()), quietFencer{})
	if err != nil {
		t.Fatal(err)
	}
	h := &convHarness{client: &fakeConn{}, up: &fakeConn{}}
	h.s = newSession(srv, srv.loopFor(fakeLoop{}), h.client)
	h.s.up = h.up
	h.s.setFresh()
	dial := func(addr string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	h.redis, h.direct = dial(viaR.Addr), dial(directR.Addr)
	h.dr = bufio.NewReader(h.direct)
	for i, addr := range []string{viaR.Addr, directR.Addr} {
		h.others[i] = dial(addr)
		h.ors[i] = bufio.NewReader(h.others[i])
	}
	t.Cleanup(func() {
		h.s.release()
		if n := cache.Holds(); n != 0 {
			t.Errorf("cache holds after the session was released: got %d, want 0", n)
		}
	})
	return h
}

// directReplies sends b to the twin and reads n replies.
func (h *convHarness) directReplies(t *testing.T, b string, n int) []byte {
	t.Helper()
	if _, err := h.direct.Write([]byte(b)); err != nil {
		t.Fatal(err)
	}
	_ = h.direct.SetReadDeadline(time.Now().Add(5 * time.Second))
	var out []byte
	for range n {
		r, err := redistest.ReadReply(h.dr)
		if err != nil {
			t.Fatalf("direct reply to %q: %v (after %q)", b, err, out)
		}
		out = append(out, r...)
	}
	return out
}

// viaSession sends b through the session and relays between it and its
// Redis until the client has n complete replies.
func (h *convHarness) viaSession(t *testing.T, b string, n int) []byte {
	t.Helper()
	h.client.in = append(h.client.in, b...)
	h.client.out = h.client.out[:0]
	h.s.onClientTraffic()
	buf := make([]byte, 64<<10)
	for deadline := time.Now().Add(5 * time.Second); ; {
		runTasks(h.s)
		if len(h.up.out) > 0 {
			if _, err := h.redis.Write(h.up.out); err != nil {
				t.Fatal(err)
			}
			h.up.out = h.up.out[:0]
		}
		if countReplies(h.client.out) >= n && h.s.sent.len() == 0 {
			return h.client.out
		}
		_ = h.redis.SetReadDeadline(deadline)
		m, err := h.redis.Read(buf)
		if err != nil {
			t.Fatalf("through the session, %q: %v; the client got %q", b, err, h.client.out)
		}
		h.up.in = append(h.up.in, buf[:m]...)
		h.s.onUpstreamTraffic()
	}
}

// countReplies counts the complete top-level values in b.
func countReplies(b []byte) int {
	sc := resp.NewScanner(b)
	n := 0
	for sc.Skip(1) == resp.ScanOK {
		n++
	}
	return n
}

// run plays steps through the session and directly, comparing replies.
func (h *convHarness) run(t *testing.T, steps []convStep) {
	t.Helper()
	for i, st := range steps {
		if st.both != "" {
			for j, c := range h.others {
				if _, err := c.Write([]byte(st.both)); err != nil {
					t.Fatal(err)
				}
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := redistest.ReadReply(h.ors[j]); err != nil {
					t.Fatalf("step %d: %q from another client: %v", i, st.both, err)
				}
			}
		}
		want := h.directReplies(t, st.send, st.replies)
		got := h.viaSession(t, st.send, st.replies)
		if !bytes.Equal(got, want) {
			t.Fatalf("step %d %q: got %q, want %q (Redis's)", i, st.send, got, want)
		}
		if st.check != nil {
			st.check(t, h.s)
		}
	}
}

// cmds encodes each space-separated command as a RESP array, in order.
func cmds(lines ...string) string {
	var b []byte
	for _, l := range lines {
		var args [][]byte
		for _, a := range strings.Fields(l) {
			args = append(args, []byte(a))
		}
		b = resp.AppendCommand(b, args...)
	}
	return string(b)
}

func TestConversations(t *testing.T) {
	db := func(want int) func(*testing.T, *session) {
		return func(t *testing.T, s *session) {
			t.Helper()
			if s.db != want {
				t.Errorf("db: got %d, want %d", s.db, want)
			}
		}
	}
	cases := []struct {
		name    string
		addrMap string
		steps   []convStep
	}{
		{name: "select", steps: []convStep{
			{send: cmds("SELECT 3", "SET k v", "GET k"), replies: 3, check: db(3)},
			{send: cmds("SELECT 99"), replies: 1, check: db(3)}, // refused: unchanged
			{send: cmds("SELECT x"), replies: 1, check: db(3)},
		}},
		{name: "multi exec", steps: []convStep{
			{send: cmds("MULTI", "SET a 1", "SELECT 2", "GET a"), replies: 4, check: func(t *testing.T, s *session) {
				if s.tx.confirmed != txOpen || s.tx.send != txSendQueueState || s.tx.queued != 3 || len(s.tx.acts) != 1 || s.db != 0 {
					t.Errorf("in MULTI: confirmed %d send %d queued %d acts %d db %d, want %d %d 3 1 0",
						s.tx.confirmed, s.tx.send, s.tx.queued, len(s.tx.acts), s.db, txOpen, txSendQueueState)
				}
			}},
			{send: cmds("EXEC"), replies: 1, check: func(t *testing.T, s *session) {
				if s.tx.open() || s.tx.queuing() || s.tx.queued != 0 || len(s.tx.acts) != 0 || s.db != 2 {
					t.Errorf("after EXEC: multi %v sent %v queued %d acts %d db %d, want false false 0 0 2",
						s.tx.open(), s.tx.queuing(), s.tx.queued, len(s.tx.acts), s.db)
				}
			}},
		}},
		{name: "multi pipelined with exec", steps: []convStep{
			{send: cmds("MULTI", "SELECT 4", "INCR n", "EXEC", "GET n"), replies: 5, check: db(4)},
		}},
		{name: "discard", steps: []convStep{
			{send: cmds("MULTI", "SELECT 5", "DISCARD", "PING"), replies: 4, check: func(t *testing.T, s *session) {
				if s.tx.open() || s.db != 0 || len(s.tx.stripes) != 0 {
					t.Errorf("after DISCARD: multi %v db %d stripes %d, want false 0 0", s.tx.open(), s.db, len(s.tx.stripes))
				}
			}},
		}},
		{name: "exec error", steps: []convStep{
			{send: cmds("MULTI", "SELECT 6", "NOSUCHCOMMAND", "EXEC"), replies: 4, check: db(0)},
		}},
		{name: "subscriptions", steps: []convStep{
			{send: cmds("SUBSCRIBE a b", "PSUBSCRIBE p*"), replies: 3, check: func(t *testing.T, s *session) {
				if s.subs != [3]int64{2, 1, 0} {
					t.Errorf("subscriptions: got %v, want [2 1 0]", s.subs)
				}
			}},
			// Unsubscribing from all lists channels in hash-table order,
			// which differs between two servers: all of one, by name.
			{send: cmds("UNSUBSCRIBE b a", "PUNSUBSCRIBE"), replies: 3, check: func(t *testing.T, s *session) {
				if s.subscribed() {
					t.Errorf("after unsubscribing from all: %v, want none", s.subs)
				}
			}},
		}},
		{name: "resp3 subscriptions", steps: []convStep{
			{send: cmds("HELLO 3"), replies: 1, check: func(t *testing.T, s *session) {
				if s.proto != 3 {
					t.Errorf("proto: got %d, want 3", s.proto)
				}
			}},
			{send: cmds("SSUBSCRIBE s1", "GET k"), replies: 2, check: func(t *testing.T, s *session) {
				if s.subs != [3]int64{0, 0, 1} || s.canAnswer() {
					t.Errorf("shard subscription: %v canAnswer %v, want [0 0 1] false", s.subs, s.canAnswer())
				}
			}},
		}},
		{name: "reset", steps: []convStep{
			{send: cmds("HELLO 3", "SELECT 7", "CLIENT TRACKING on", "MULTI"), replies: 4},
			{send: cmds("RESET"), replies: 1, check: func(t *testing.T, s *session) {
				if s.db != 0 || s.proto != 2 || s.tx.open() || s.tracking || s.tx.queuing() {
					t.Errorf("after RESET: db %d proto %d multi %v tracking %v sent %v, want 0 2 false false false",
						s.db, s.proto, s.tx.open(), s.tracking, s.tx.queuing())
				}
			}},
		}},
		{name: "tracking", steps: []convStep{
			{send: cmds("CLIENT TRACKING on"), replies: 1, check: func(t *testing.T, s *session) {
				if !s.tracking || s.canAnswer() {
					t.Errorf("tracking %v canAnswer %v, want true false", s.tracking, s.canAnswer())
				}
			}},
			{send: cmds("CLIENT TRACKING off"), replies: 1, check: func(t *testing.T, s *session) {
				if s.tracking {
					t.Error("tracking after OFF: true")
				}
			}},
		}},
		{name: "client reply skip goes opaque", steps: []convStep{
			{send: cmds("SET k 1", "CLIENT REPLY SKIP", "INCR k", "GET k"), replies: 2, check: func(t *testing.T, s *session) {
				if s.opacity != opaque || s.sent.len() != 0 {
					t.Errorf("after CLIENT REPLY SKIP: opacity %d sent %d, want opaque, 0", s.opacity, s.sent.len())
				}
			}},
			{send: cmds("GET k", "SET k 3", "GET k"), replies: 3},
		}},
		{name: "protocol error", steps: []convStep{
			{send: cmds("PING") + "*1\r\n$x\r\n" + cmds("PING"), replies: 2, check: func(t *testing.T, s *session) {
				if s.input != inputProtocolError || s.opacity == framed {
					t.Errorf("after a protocol error: input %d opacity %d, want protocol error, not framed", s.input, s.opacity)
				}
			}},
		}},
		{name: "auth and hello", steps: []convStep{
			{send: cmds("AUTH nobody pw"), replies: 1, check: func(t *testing.T, s *session) {
				if s.user != "" || s.freshGen == 0 {
					t.Errorf("after a refused AUTH: user %q fresh gen %d, want none and the initial identity", s.user, s.freshGen)
				}
			}},
			// The default user has nopass: any password is accepted.
			{send: cmds("HELLO 3 AUTH default any", "HELLO 2"), replies: 2, check: func(t *testing.T, s *session) {
				if s.proto != 2 || s.user != "default" || s.freshGen != 0 {
					t.Errorf("after HELLO AUTH: proto %d user %q fresh gen %d, want 2 default 0", s.proto, s.user, s.freshGen)
				}
			}},
			{send: cmds("HELLO 3 AUTH default nopass"), replies: 1, check: func(t *testing.T, s *session) {
				if s.proto != 3 || s.user != "default" {
					t.Errorf("after HELLO 3 AUTH: proto %d user %q, want 3 default", s.proto, s.user)
				}
			}},
		}},
		{name: "hot key filled then answered", steps: []convStep{
			{send: cmds("SET hot v"), replies: 1},
			{send: cmds("GET hot"), replies: 1, check: func(t *testing.T, s *session) {
				if got := s.loop.stats.fills.Load(); got != 1 {
					t.Errorf("fills after the first GET of a hot key: got %d, want 1", got)
				}
			}},
			{send: cmds("GET hot", "GET hot"), replies: 2, check: func(t *testing.T, s *session) {
				if got := s.loop.stats.hits.Load(); got != 2 {
					t.Errorf("hits: got %d, want 2", got)
				}
			}},
			// The GET behind the SET waits for its +OK, and is answered
			// from the value the SET wrote through.
			{send: cmds("SET hot w", "GET hot"), replies: 2, check: func(t *testing.T, s *session) {
				if got := s.loop.stats.hits.Load(); got != 3 {
					t.Errorf("hits after the write: got %d, want 3", got)
				}
			}},
		}},
		{name: "fills: a key with a TTL, a missing key, not a HyperLogLog", steps: []convStep{
			{send: cmds("SET t v PX 100000", "PFADD hll a"), replies: 2},
			{send: cmds("GET t"), replies: 1},
			{send: cmds("GET nokey"), replies: 1},
			{send: cmds("GET hll"), replies: 1},
			{send: cmds("GET t", "GET nokey", "GET hll"), replies: 3, check: func(t *testing.T, s *session) {
				if fills, hits := s.loop.stats.fills.Load(), s.loop.stats.hits.Load(); fills != 2 || hits != 2 {
					t.Errorf("fills %d hits %d, want 2 2 (the HyperLogLog is not kept)", fills, hits)
				}
				if tried := s.loop.stats.fillsTried.Load(); tried != 3 {
					t.Errorf("fills tried %d, want 3: none of the HyperLogLog again while its backoff lasts", tried)
				}
				var f hotcache.Found
				k := hotcache.KeyOf(0, []byte("t"))
				if s.env.cache.Lookup(&k, s.ident, s.proto, &f); f.Status != hotcache.Hit {
					t.Errorf("GET t after its fill: %v, want a hit", f.Status)
				}
			}},
		}},
		{name: "fills of two keys and a field in one pipeline, behind other reads", steps: []convStep{
			{send: cmds("SET k1 v", "SET a-longer-key-name w", "HSET h f x"), replies: 3},
			{send: cmds("GET k1", "GET a-longer-key-name", "HGET h f", "GET k1", "PING"), replies: 5, check: func(t *testing.T, s *session) {
				if tried, fills := s.loop.stats.fillsTried.Load(), s.loop.stats.fills.Load(); tried != 3 || fills != 3 {
					t.Errorf("fills tried %d kept %d, want 3 3 (the second GET k1 waits for its fill)", tried, fills)
				}
				if n := len(s.loop.fills); n != 0 {
					t.Errorf("%d fills still recorded on the loop, want 0", n)
				}
			}},
			{send: cmds("GET k1", "GET a-longer-key-name", "HGET h f"), replies: 3, check: func(t *testing.T, s *session) {
				if hits := s.loop.stats.hits.Load(); hits != 4 {
					t.Errorf("hits %d, want 4", hits)
				}
			}},
			// Behind a request that is not a plain read, no fill starts.
			{send: cmds("SET k2 v", "GET k2", "PING", "GET nokey"), replies: 4, check: func(t *testing.T, s *session) {
				if tried := s.loop.stats.fillsTried.Load(); tried != 3 {
					t.Errorf("fills tried %d, want still 3: none behind SET or PING", tried)
				}
			}},
		}},
		{name: "hello auth refused", steps: []convStep{
			{send: cmds("HELLO 3 AUTH nobody pw", "PING"), replies: 2, check: func(t *testing.T, s *session) {
				if s.proto != 2 || s.user != "" || !s.userAnon || s.freshGen != 0 {
					t.Errorf("after a refused HELLO AUTH: proto %d user %q anon %v fresh gen %d, want 2 \"\" true 0",
						s.proto, s.user, s.userAnon, s.freshGen)
				}
			}},
		}},
		{name: "hash field filled then answered", steps: []convStep{
			{send: cmds("HSET h f v"), replies: 1},
			{send: cmds("HGET h f", "HGET h f"), replies: 2},
			{send: cmds("HGET h f", "HGET h g"), replies: 2, check: func(t *testing.T, s *session) {
				if got := s.loop.stats.hits.Load(); got == 0 {
					t.Error("no HGET answered from the cache")
				}
			}},
		}},
		{name: "script and flush hold the cache until their reply", steps: []convStep{
			{send: cmds("SET s 1", "GET s", "GET s"), replies: 3},
			{send: cmds("EVAL return 1 0", "FLUSHALL", "GET s"), replies: 3, check: func(t *testing.T, s *session) {
				if n := s.srv.cache.Holds(); n != 0 {
					t.Errorf("holds after their replies: got %d, want 0", n)
				}
			}},
		}},
		{name: "error rewrite passes a non-redirect", addrMap: ":1=:2", steps: []convStep{
			{send: cmds("CLUSTER SLOTS", "NOSUCH"), replies: 2},
		}},
		{name: "messages while subscribed", steps: []convStep{
			{send: cmds("SUBSCRIBE ch"), replies: 1},
			{both: cmds("PUBLISH ch hello"), send: cmds("PING"), replies: 2},
			{send: cmds("UNSUBSCRIBE ch", "GET k"), replies: 2},
		}},
		{name: "subscribe in a transaction goes opaque", steps: []convStep{
			{send: cmds("MULTI", "SUBSCRIBE x"), replies: 2, check: func(t *testing.T, s *session) {
				if s.tx.confirmed != txOpenSubscribing || s.tx.send != txSendQueueState {
					t.Errorf("SUBSCRIBE queued: confirmed %d send %d, want %d %d", s.tx.confirmed, s.tx.send, txOpenSubscribing, txSendQueueState)
				}
			}},
			{send: cmds("EXEC"), replies: 1, check: func(t *testing.T, s *session) {
				if s.opacity != opaque || s.tx.open() {
					t.Errorf("after EXEC of a SUBSCRIBE: opacity %d multi %v, want opaque false", s.opacity, s.tx.open())
				}
			}},
			{both: cmds("PUBLISH x m"), send: cmds("PING"), replies: 2},
		}},
		{name: "watch aborted", steps: []convStep{
			{send: cmds("WATCH w", "MULTI", "SELECT 8", "SET w 2"), replies: 4},
			{both: cmds("SET w 1"), send: cmds("EXEC", "GET w"), replies: 2, check: db(0)},
		}},
		{name: "nested multi and execabort", steps: []convStep{
			{send: cmds("MULTI", "MULTI", "SELECT 9", "GET"), replies: 4},
			{send: cmds("EXEC", "PING"), replies: 2, check: func(t *testing.T, s *session) {
				if s.tx.open() || s.db != 0 {
					t.Errorf("after EXECABORT: multi %v db %d, want false 0", s.tx.open(), s.db)
				}
			}},
		}},
		{name: "config set verifies the notification classes", steps: []convStep{
			{send: cmds("SET c 1", "GET c", "GET c"), replies: 3},
			{send: cmds("CONFIG SET maxmemory-policy noeviction", "GET c"), replies: 2},
		}},
		{name: "quit", steps: []convStep{
			{send: cmds("QUIT", "PING"), replies: 1, check: func(t *testing.T, s *session) {
				if s.input != inputQuit {
					t.Errorf("input after QUIT: got %d, want inputQuit", s.input)
				}
			}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newConvHarness(t, c.addrMap)
			h.run(t, c.steps)
		})
	}
}

// TestRoute: where a conversation on a lane sends each request: on its
// lane, to the lane of another state (SELECT, HELLO), or to its own
// connection; and the state its own connection is given (setup).
func TestRoute(t *testing.T) {
	cache, err := hotcache.New(hotcache.Config{Capacity: 64, MaxBytes: 1 << 20, MaxValue: 1024})
	if err != nil {
		t.Fatal(err)
	}
	det, err := detector.New(detector.Config{Threshold: 1, Loops: 1}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Listen: "127.0.0.1:0", Upstream: "127.0.0.1:1", Loops: 1, Multiplex: true}, cache, detector.NewAdmission(det, 64, time.Now()), quietFencer{})
	if err != nil {
		t.Fatal(err)
	}
	l := srv.loopFor(fakeLoop{})
	home := shareKey{gen: 7, db: 0, proto: 2}
	tests := []struct {
		req  string
		want decision
		to   shareKey // for decideSwitch
	}{
		{"GET k", decideForward, home},
		{"HGET h f", decideForward, home},
		{"SET k v", decideForward, home},
		{"CLIENT SETNAME app", decideForward, home},
		{"SELECT 0", decideForward, home},
		{"SELECT x", decideForward, home},  // refused: no change
		{"SELECT -1", decideForward, home}, // refused: no change
		{"HELLO", decideForward, home},
		{"HELLO 4", decideForward, home}, // -NOPROTO: no change
		{"HELLO 2", decideForward, home},
		{"SELECT 5", decideSwitch, shareKey{gen: 7, db: 5, proto: 2}},
		{"HELLO 3", decideSwitch, shareKey{gen: 7, db: 0, proto: 3}},
		{"MULTI", decideOwn, home},
		{"WATCH k", decideOwn, home},
		{"BLPOP l 0", decideOwn, home},
		{"AUTH pw", decideOwn, home},
		{"HELLO 3 AUTH u p", decideOwn, home},
		{"CLIENT ID", decideOwn, home},
		{"SUBSCRIBE c", decideOwn, home},
		{"WAIT 1 0", decideOwn, home},
		{"QUIT", decideOwn, home},
		{"NOSUCHCOMMAND x", decideOwn, home},
	}
	for _, tt := range tests {
		cv := newConversation(&srv.convEnv, &l.loopEnv)
		cv.shared, cv.gen, cv.on = true, home.gen, home
		cv.parser.SetHold(laneHold)
		in := cmds(tt.req)
		if n, r := cv.parser.Parse([]byte(in)); r != resp.Complete || n != len(in) {
			t.Fatalf("%s: parse (%d, %d)", tt.req, n, r)
		}
		_, _, d := cv.route(cv.parser.Args(), cv.parser.Argc(), len(in))
		if d != tt.want || d == decideSwitch && cv.want != tt.to {
			t.Errorf("%s: got %d (want state %+v), want %d (%+v)", tt.req, d, cv.want, tt.want, tt.to)
		}
		if cv.sent.len() != 0 {
			t.Errorf("%s: routing queued %d requests, want none", tt.req, cv.sent.len())
		}
	}
	// A confirmed state that is no longer the lane's (a SELECT refused on
	// the lane of the db it asked for) goes back to its lane.
	cv := newConversation(&srv.convEnv, &l.loopEnv)
	cv.shared, cv.gen, cv.on = true, home.gen, shareKey{gen: 7, db: 99, proto: 2}
	cv.parser.Parse([]byte(cmds("GET k")))
	if _, _, d := cv.route(cv.parser.Args(), cv.parser.Argc(), 14); d != decideSwitch || cv.want != home {
		t.Errorf("GET on the lane of another db: got %d to %+v, want decideSwitch to %+v", d, cv.want, home)
	}
	// A client on its own connection goes back to a lane when its state
	// allows (here for a GET), not with a transaction, WATCH or ASKING
	// open, and not for a request that needs its own connection; it stays
	// where no lane could carry its state (noLane).
	for _, tt := range []struct {
		name  string
		setup func(cv *conversation)
		req   string
		want  decision
	}{
		{"idle", func(cv *conversation) {}, "GET k", decideSwitch},
		{"client id", func(cv *conversation) {}, "CLIENT ID", decideForward},
		{"transaction", func(cv *conversation) { cv.tx.send = txSendQueue }, "GET k", decideForward},
		{"watch", func(cv *conversation) { cv.watching = true }, "GET k", decideForward},
		{"asking", func(cv *conversation) { cv.asking = true }, "GET k", decideForward},
		{"sticky", func(cv *conversation) { cv.sticky = true }, "GET k", decideForward},
		{"anonymous identity", func(cv *conversation) { cv.gen = 0 }, "GET k", decideForward},
		{"user", func(cv *conversation) { cv.gen, cv.laneUser = 0, "alice" }, "GET k", decideSwitch},
		{"no lane", func(cv *conversation) { cv.noLane = home }, "GET k", decideForward},
		{"over laneHold", func(cv *conversation) {}, "SET k v", decideForward}, // as if its value were larger
	} {
		cv := newConversation(&srv.convEnv, &l.loopEnv)
		cv.gen = home.gen
		tt.setup(&cv)
		cv.parser.Parse([]byte(cmds(tt.req)))
		d := decideForward
		if cv.canShare() {
			n := 20
			if tt.name == "over laneHold" {
				n = laneHold + 1 // a lane would refuse it (resp.Oversize): it stays
			}
			_, _, d = cv.route(cv.parser.Args(), cv.parser.Argc(), n)
		}
		if d != tt.want {
			t.Errorf("on its own connection, %s, %s: got %d, want %d", tt.name, tt.req, d, tt.want)
		}
	}
	// Its own connection gets its db, protocol, name and library.
	cv.db, cv.proto, cv.name, cv.libName, cv.libVer = 3, 3, "app", "go-redis", "9"
	got := string(cv.setup(nil))
	want := cmds("SELECT 3", "HELLO 3", "CLIENT SETNAME app", "CLIENT SETINFO LIB-NAME go-redis", "CLIENT SETINFO LIB-VER 9")
	if got != want || cv.sent.len() != 5 || cv.sent.front().kind != expectSetup {
		t.Errorf("setup: %q with %d requests queued, want %q and 5 expectSetup", got, cv.sent.len(), want)
	}
	for cv.sent.len() > 0 {
		cv.dequeue()
	}
}

// TestThroughSet: only SET key value, alone or with EX or PX, SETEX and
// PSETEX, with a TTL written as Redis reads it, are written through, with
// their value and their TTL in ms.
func TestThroughSet(t *testing.T) {
	cases := []struct {
		args []string
		ttl  int64
		ok   bool
	}{
		{[]string{"SET", "k", "v"}, 0, true},
		{[]string{"set", "k", "v", "EX", "10"}, 10_000, true},
		{[]string{"SET", "k", "v", "px", "1500"}, 1500, true},
		{[]string{"SET", "k", "v", "Px", "100000000000"}, 100_000_000_000, true},
		{[]string{"SET", "k", "v", "PX", "100000000001"}, 0, false}, // over MaxThroughTTL
		{[]string{"SET", "k", "v", "EX", "100000000"}, 100_000_000_000, true},
		{[]string{"SET", "k", "v", "EX", "100000001"}, 0, false},
		{[]string{"SET", "k", "v", "EX", "0"}, 0, false},   // Redis: invalid expire time
		{[]string{"SET", "k", "v", "EX", "010"}, 0, false}, // Redis: not an integer
		{[]string{"SET", "k", "v", "EX", "-5"}, 0, false},
		{[]string{"SET", "k", "v", "EX", "+5"}, 0, false},
		{[]string{"SET", "k", "v", "EX", ""}, 0, false},
		{[]string{"SET", "k", "v", "EX", "9999999999999"}, 0, false},
		{[]string{"SET", "k", "v", "EXAT", "10"}, 0, false},
		{[]string{"SET", "k", "v", "PXAT", "10"}, 0, false},
		{[]string{"SET", "k", "v", "KEEPTTL"}, 0, false},
		{[]string{"SET", "k", "v", "NX"}, 0, false},
		{[]string{"SET", "k", "v", "EX", "10", "XX"}, 0, false},
		{[]string{"SET", "k", "v", "GET"}, 0, false},
		{[]string{"SET", "k"}, 0, false},
		{[]string{"SETEX", "k", "10", "v"}, 10_000, true},
		{[]string{"psetex", "k", "10", "v"}, 10, true},
		{[]string{"SETEX", "k", "0", "v"}, 0, false},
		{[]string{"PSETEX", "k", "1e3", "v"}, 0, false},
		{[]string{"SETEX", "k", "10"}, 0, false},
		{[]string{"SETNX", "k", "v"}, 0, false},
		{[]string{"GETSET", "k", "v"}, 0, false},
	}
	for _, tc := range cases {
		args := make([][]byte, len(tc.args))
		for i, a := range tc.args {
			args[i] = []byte(a)
		}
		value, ttl, ok := throughSet(command.Resolve(args), args, int64(len(args)))
		if ttl != tc.ttl || ok != tc.ok || (ok && string(value) != "v") {
			t.Errorf("%q: %q %d %v, want \"v\" %d %v", tc.args, value, ttl, ok, tc.ttl, tc.ok)
		}
	}
	for _, args := range [][][]byte{
		{[]byte("SET"), []byte("k"), nil}, // a value too big to capture
		{[]byte("SET"), []byte("k"), nil, []byte("EX"), []byte("10")},
		{[]byte("SETEX"), []byte("k"), []byte("10"), nil},
	} {
		if _, _, ok := throughSet(command.Resolve(args), args, int64(len(args))); ok {
			t.Errorf("%q: an uncaptured value written through", args)
		}
	}
	args := [][]byte{[]byte("SET"), []byte("k"), []byte("v")} // arguments past the captured ones
	if _, _, ok := throughSet(command.Resolve(args), args, 5); ok {
		t.Error("uncaptured arguments: written through")
	}
	if _, _, ok := throughSet(nil, args, 3); ok {
		t.Error("a command Redis does not know: written through")
	}
}

// TestFillAfterClockStepBack: a fill of a key with a TTL is not kept when
// the cache's clock (the wall clock) reads earlier at the PTTL's reply
// than at the GET's send: Redis's expiry may then come after the one the
// fill would compute. The same fill on a clock that did not step is kept.
func TestFillAfterClockStepBack(t *testing.T) {
	for _, back := range []bool{false, true} {
		ns := int64(1e15)
		clock := func() int64 {
			if back {
				ns -= int64(time.Millisecond) // the session runs on this goroutine
			}
			return ns
		}
		h := newConvHarnessClock(t, "", clock)
		h.viaSession(t, "*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nPX\r\n$6\r\n100000\r\n", 1)
		if got := h.viaSession(t, "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", 1); string(got) != "$1\r\nv\r\n" {
			t.Fatalf("GET k = %q", got)
		}
		if n, want := h.s.env.cache.Stats().Replies, map[bool]int{false: 1, true: 0}[back]; n != want {
			t.Errorf("clock stepped back %v: %d replies cached, want %d", back, n, want)
		}
	}
}
