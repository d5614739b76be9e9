package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/difftest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// rawConn is a client connection that sends commands and reads whole
// replies as raw bytes.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

// do sends one command and returns its whole reply.
func (r *rawConn) do(args ...string) string {
	r.t.Helper()
	if _, err := r.c.Write([]byte(cmd(args...))); err != nil {
		r.t.Fatal(err)
	}
	_ = r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := redistest.ReadReply(r.br)
	if err != nil {
		r.t.Fatalf("%q: %v", args, err)
	}
	return string(b)
}

// hotkeysReport runs HOTKEYS GET through go-redis (RESP2) and returns its
// one map; nil for a nil reply.
func hotkeysReport(t *testing.T, rc *redis.Client) map[string]any {
	t.Helper()
	v, err := rc.Do(context.Background(), "HOTKEYS", "GET").Result()
	if err == redis.Nil {
		return nil
	}
	if err != nil {
		t.Fatalf("HOTKEYS GET: %v", err)
	}
	outer, ok := v.([]any)
	if !ok || len(outer) != 1 {
		t.Fatalf("HOTKEYS GET = %#v, want an array of one", v)
	}
	flat := outer[0].([]any)
	m := map[string]any{}
	var order []string
	for i := 0; i+1 < len(flat); i += 2 {
		m[flat[i].(string)] = flat[i+1]
		order = append(order, flat[i].(string))
	}
	m["_order"] = strings.Join(order, ",")
	return m
}

// ranking returns a by-* field as key=amount strings, in order.
func ranking(t *testing.T, m map[string]any, field string) []string {
	t.Helper()
	arr, ok := m[field].([]any)
	if !ok {
		t.Fatalf("%s = %#v", field, m[field])
	}
	var out []string
	for i := 0; i+1 < len(arr); i += 2 {
		out = append(out, fmt.Sprintf("%s=%d", arr[i], arr[i+1]))
	}
	return out
}

// TestHotkeysErrors: every error reply of HOTKEYS, byte for byte as Redis
// 8.6 words it. Generic ones come from server.c (commandCheckExistence:
// "unknown subcommand '%.128s'. Try %s HELP."; commandCheckArity: "wrong
// number of arguments for '%s' command"), checked here against Redis
// 7.0.15's own wording for another container command; the rest from
// hotkeysCommand in src/hotkeys.c of the 8.6 line (redis/redis, the START,
// STOP, GET and RESET branches).
func TestHotkeysErrors(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	direct := dialRaw(t, r.Addr)
	for _, tt := range []struct{ args, want string }{
		{"CONFIG foo", "-ERR unknown subcommand 'foo'. Try CONFIG HELP.\r\n"},
		{"config GET", "-ERR wrong number of arguments for 'config|get' command\r\n"},
	} {
		if got := direct.do(strings.Fields(tt.args)...); got != tt.want {
			t.Fatalf("Redis 7.0.15's generic wording changed: %s = %q, want %q", tt.args, got, tt.want)
		}
	}
	c := dialRaw(t, p.Addr)
	for _, tt := range []struct{ args, want string }{
		{"HOTKEYS", "-ERR wrong number of arguments for 'hotkeys' command\r\n"},
		{"hotkeys foo", "-ERR unknown subcommand 'foo'. Try HOTKEYS HELP.\r\n"},
		{"HOTKEYS GET x", "-ERR wrong number of arguments for 'hotkeys|get' command\r\n"},
		{"HOTKEYS STOP x", "-ERR wrong number of arguments for 'hotkeys|stop' command\r\n"},
		{"HOTKEYS RESET x", "-ERR wrong number of arguments for 'hotkeys|reset' command\r\n"},
		{"HOTKEYS HELP x", "-ERR wrong number of arguments for 'hotkeys|help' command\r\n"},
		{"HOTKEYS GET", "$-1\r\n"},
		{"HOTKEYS STOP", "$-1\r\n"},
		{"HOTKEYS RESET", "+OK\r\n"},
		{"HOTKEYS START", "-ERR METRICS parameter is required\r\n"},
		{"HOTKEYS START COUNT 5 METRICS 1", "-ERR METRICS parameter is required\r\n"},
		{"HOTKEYS START METRICS 0", "-ERR METRICS count must be > 0 and <= 2\r\n"},
		{"HOTKEYS START METRICS 3 CPU NET", "-ERR METRICS count must be > 0 and <= 2\r\n"},
		{"HOTKEYS START METRICS 2 CPU", "-ERR METRICS count does not match number of metric types provided\r\n"},
		{"HOTKEYS START METRICS 1 CPU NET", "-ERR syntax error\r\n"},
		{"HOTKEYS START METRICS 2 CPU CPU", "-ERR METRICS CPU defined more than once!\r\n"},
		{"HOTKEYS START METRICS 2 NET NET", "-ERR METRICS NET defined more than once!\r\n"},
		{"HOTKEYS START METRICS 1 GPU", "-ERR METRICS no valid metrics passed. Supported: CPU|NET\r\n"},
		{"HOTKEYS START METRICS 1 CPU COUNT 0", "-ERR COUNT must be between 1 and 64\r\n"},
		{"HOTKEYS START METRICS 1 CPU COUNT 100", "-ERR COUNT must be between 1 and 64\r\n"},
		{"HOTKEYS START METRICS 1 CPU DURATION 0", "-ERR DURATION must be between 1 and 1000000\r\n"},
		{"HOTKEYS START METRICS 1 CPU SAMPLE 0", "-ERR SAMPLE ratio must be positive\r\n"},
		{"HOTKEYS START METRICS 1 CPU SLOTS 2 0 5", "-ERR SLOTS parameter cannot be used in non-cluster mode\r\n"},
		{"HOTKEYS START METRICS 1 CPU COUNT", "-ERR syntax error\r\n"},
		{"HOTKEYS START METRICS 1 CPU", "+OK\r\n"},
		{"HOTKEYS START METRICS 1 NET", "-ERR hotkey tracking session already in progress\r\n"},
		{"HOTKEYS START BOGUS", "-ERR hotkey tracking session already in progress\r\n"},
		{"HOTKEYS RESET", "-ERR hotkey tracking session in progress, stop tracking first\r\n"},
		{"HOTKEYS STOP", "+OK\r\n"},
		{"HOTKEYS STOP", "$-1\r\n"},
		{"HOTKEYS RESET", "+OK\r\n"},
		{"HOTKEYS GET", "$-1\r\n"},
	} {
		if got := c.do(strings.Fields(tt.args)...); got != tt.want {
			t.Errorf("%s = %q, want %q", tt.args, got, tt.want)
		}
	}
	if help := c.do("hotkeys", "help"); !strings.HasPrefix(help, "*18\r\n+HOTKEYS <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n") ||
		!strings.HasSuffix(help, "+HELP\r\n+    Print this help.\r\n") {
		t.Errorf("HOTKEYS HELP = %q", help)
	}
	if n := commandCalls(t, r.Addr, "hotkeys"); n != 0 {
		t.Errorf("Redis saw %d HOTKEYS calls, want none", n)
	}
}

// TestHotkeysTopK: keys read 1000, 100 and 10 times rank in that order by
// bytes (exact: every request sampled, fewer keys than counters) and by
// event-loop time; the session is shared by every connection.
func TestHotkeysTopK(t *testing.T) {
	_, p := newProxied(t, cicadatest.Options{})
	rc := client(t, p.Addr, 2)
	values := map[string]string{"hk:A": strings.Repeat("a", 64), "hk:B": strings.Repeat("b", 10), "hk:C": "c"}
	for k, v := range values {
		mustDo(t, rc, "SET", k, v)
	}
	admin := client(t, p.Addr, 2)
	if v := mustDo(t, admin, "HOTKEYS", "START", "METRICS", "2", "CPU", "NET", "COUNT", "5"); v != "OK" {
		t.Fatalf("START = %v", v)
	}
	counts := map[string]int{"hk:A": 1000, "hk:B": 100, "hk:C": 10}
	ctx := context.Background()
	readAll := func() {
		for k, n := range counts {
			pipe := rc.Pipeline()
			for range n {
				pipe.Get(ctx, k)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	readAll()
	if v := mustDo(t, rc, "HOTKEYS", "STOP"); v != "OK" { // another connection stops it
		t.Fatalf("STOP = %v", v)
	}
	m := hotkeysReport(t, admin)
	if m["_order"] != "tracking-active,sample-ratio,selected-slots,all-commands-all-slots-us,net-bytes-all-commands-all-slots,"+
		"collection-start-time-unix-ms,collection-duration-ms,total-cpu-time-user-ms,total-cpu-time-sys-ms,total-net-bytes,by-cpu-time-us,by-net-bytes" {
		t.Fatalf("fields: %v", m["_order"])
	}
	if m["tracking-active"] != int64(0) || m["sample-ratio"] != int64(1) {
		t.Errorf("tracking-active %v sample-ratio %v", m["tracking-active"], m["sample-ratio"])
	}
	if fmt.Sprint(m["selected-slots"]) != "[[0 16383]]" {
		t.Errorf("selected-slots = %v", m["selected-slots"])
	}
	// A GET of key k with value v: its request and reply bytes.
	getBytes := func(k string) int {
		v := values[k]
		return len(cmd("GET", k)) + len("$"+strconv.Itoa(len(v))+"\r\n"+v+"\r\n")
	}
	var want []string
	total := 0
	for _, k := range []string{"hk:A", "hk:B", "hk:C"} {
		want = append(want, fmt.Sprintf("%s=%d", k, counts[k]*getBytes(k)))
		total += counts[k] * getBytes(k)
	}
	if got := ranking(t, m, "by-net-bytes"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("by-net-bytes = %v, want %v", got, want)
	}
	if m["net-bytes-all-commands-all-slots"] != int64(total) || m["total-net-bytes"] != int64(total) {
		t.Errorf("net totals %v %v, want %d", m["net-bytes-all-commands-all-slots"], m["total-net-bytes"], total)
	}
	// Event-loop time is wall time, as Redis's command durations are: a
	// loop thread descheduled while timing one request (CI runs packages
	// side by side on 2 cores) adds milliseconds to that key, so CI once
	// saw B's 100 reads at 4.1 ms against A's 1000 at 3.8. The order must
	// hold in one of up to five sessions; with time not attributed per key
	// it would hold in none.
	inOrder := func(cpu []string) bool {
		return len(cpu) >= 2 && strings.HasPrefix(cpu[0], "hk:A=") && strings.HasPrefix(cpu[1], "hk:B=") &&
			(len(cpu) == 2 || strings.HasPrefix(cpu[2], "hk:C="))
	}
	cpu := ranking(t, m, "by-cpu-time-us")
	for try := 2; !inOrder(cpu) && try <= 5; try++ {
		t.Logf("session %d: by-cpu-time-us = %v; again", try-1, cpu)
		mustDo(t, admin, "HOTKEYS", "START", "METRICS", "1", "CPU", "COUNT", "5")
		readAll()
		mustDo(t, admin, "HOTKEYS", "STOP")
		cpu = ranking(t, hotkeysReport(t, admin), "by-cpu-time-us")
	}
	if !inOrder(cpu) {
		t.Errorf("by-cpu-time-us = %v, want hk:A, hk:B (then hk:C)", cpu)
	}
	if us := m["all-commands-all-slots-us"].(int64); us <= 0 {
		t.Errorf("all-commands-all-slots-us = %d", us)
	}
	if d := m["collection-duration-ms"].(int64); d < 0 || d > 10000 {
		t.Errorf("collection-duration-ms = %d", d)
	}
	if st := m["collection-start-time-unix-ms"].(int64); time.Since(time.UnixMilli(st)) > time.Minute {
		t.Errorf("collection-start-time-unix-ms = %d", st)
	}
	// COUNT 1 keeps the top key only.
	mustDo(t, admin, "HOTKEYS", "START", "METRICS", "1", "NET", "COUNT", "1")
	for k := range counts {
		mustDo(t, rc, "GET", k)
	}
	mustDo(t, rc, "GET", "hk:A")
	m = hotkeysReport(t, admin)
	if got := ranking(t, m, "by-net-bytes"); fmt.Sprint(got) != fmt.Sprintf("[hk:A=%d]", 2*getBytes("hk:A")) ||
		m["tracking-active"] != int64(1) || m["_order"] != "tracking-active,sample-ratio,selected-slots,all-commands-all-slots-us,"+
		"net-bytes-all-commands-all-slots,collection-start-time-unix-ms,collection-duration-ms,total-net-bytes,by-net-bytes" {
		t.Errorf("COUNT 1, NET only: %v", m)
	}
	mustDo(t, admin, "HOTKEYS", "STOP")
	mustDo(t, admin, "HOTKEYS", "RESET")
}

// TestHotkeysSample: SAMPLE 10 ranks about one request in ten, while the
// all-commands total counts every one.
func TestHotkeysSample(t *testing.T) {
	_, p := newProxied(t, cicadatest.Options{})
	rc := client(t, p.Addr, 2)
	mustDo(t, rc, "SET", "s", "v")
	mustDo(t, rc, "HOTKEYS", "START", "METRICS", "1", "NET", "SAMPLE", "10")
	ctx := context.Background()
	const n = 2000
	pipe := rc.Pipeline()
	for range n {
		pipe.Get(ctx, "s")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	m := hotkeysReport(t, rc)
	per := int64(len(cmd("GET", "s")) + len("$1\r\nv\r\n"))
	all, sampled := m["net-bytes-all-commands-all-slots"].(int64), m["total-net-bytes"].(int64)
	// Binomial(2000, 0.1): 200 requests, sd 13.4; 120..280 is 6 sd.
	if all != n*per || m["sample-ratio"] != int64(10) || sampled%per != 0 || sampled/per < 120 || sampled/per > 280 {
		t.Fatalf("all %d (want %d), sampled %d requests, sample-ratio %v", all, n*per, sampled/per, m["sample-ratio"])
	}
	if got := ranking(t, m, "by-net-bytes"); fmt.Sprint(got) != fmt.Sprintf("[s=%d]", sampled) {
		t.Errorf("by-net-bytes = %v, want s=%d", got, sampled)
	}
	mustDo(t, rc, "HOTKEYS", "STOP")
}

// TestHotkeysDuration: DURATION 1 stops the session by itself after a
// second (at the next 100-ms tick); later reads are not counted.
func TestHotkeysDuration(t *testing.T) {
	_, p := newProxied(t, cicadatest.Options{})
	rc := client(t, p.Addr, 2)
	mustDo(t, rc, "HOTKEYS", "START", "METRICS", "1", "NET", "DURATION", "1")
	mustDo(t, rc, "GET", "d")
	start := time.Now()
	var m map[string]any
	for {
		m = hotkeysReport(t, rc)
		if m["tracking-active"] == int64(0) {
			break
		}
		if time.Since(start) > 3*time.Second {
			t.Fatal("still active 3 s after START ... DURATION 1")
		}
		time.Sleep(20 * time.Millisecond)
	}
	d := m["collection-duration-ms"].(int64)
	if d < 1000 || d > 1500 {
		t.Errorf("collection-duration-ms = %d, want 1000-1500", d)
	}
	before := m["net-bytes-all-commands-all-slots"].(int64)
	mustDo(t, rc, "GET", "d")
	if m = hotkeysReport(t, rc); m["net-bytes-all-commands-all-slots"].(int64) != before || m["collection-duration-ms"].(int64) != d {
		t.Errorf("counted after the auto-stop: %v", m)
	}
	if v := mustDo(t, rc, "HOTKEYS", "START", "METRICS", "1", "CPU"); v != "OK" {
		t.Errorf("START after the auto-stop = %v", v)
	}
	mustDo(t, rc, "HOTKEYS", "STOP")
}

// TestHotkeysRESP3: after HELLO 3 the report is an array of one map and
// nil is RESP3's null, as Redis 8.6 replies.
func TestHotkeysRESP3(t *testing.T) {
	_, p := newProxied(t, cicadatest.Options{})
	c := dialRaw(t, p.Addr)
	if got := c.do("HELLO", "3"); !strings.HasPrefix(got, "%") {
		t.Fatalf("HELLO 3 = %q", got)
	}
	for _, tt := range []struct{ args, want string }{
		{"HOTKEYS GET", "_\r\n"},
		{"HOTKEYS STOP", "_\r\n"},
		{"HOTKEYS START METRICS 1 NET", "+OK\r\n"},
		{"SET r3 xyz", "+OK\r\n"},
	} {
		if got := c.do(strings.Fields(tt.args)...); got != tt.want {
			t.Fatalf("%s = %q, want %q", tt.args, got, tt.want)
		}
	}
	got := c.do("HOTKEYS", "GET")
	setBytes := len(cmd("SET", "r3", "xyz")) + len("+OK\r\n")
	wantTail := fmt.Sprintf("$32\r\nnet-bytes-all-commands-all-slots\r\n:%d\r\n", setBytes)
	if !strings.HasPrefix(got, "*1\r\n%9\r\n$15\r\ntracking-active\r\n:1\r\n$12\r\nsample-ratio\r\n:1\r\n$14\r\nselected-slots\r\n*1\r\n*2\r\n:0\r\n:16383\r\n") ||
		!strings.Contains(got, wantTail) ||
		!strings.HasSuffix(got, fmt.Sprintf("$15\r\ntotal-net-bytes\r\n:%d\r\n$12\r\nby-net-bytes\r\n*2\r\n$2\r\nr3\r\n:%d\r\n", setBytes, setBytes)) {
		t.Errorf("RESP3 HOTKEYS GET = %q", got)
	}
	c.do("HOTKEYS", "STOP")
	c.do("HOTKEYS", "RESET")
	if got := c.do("HOTKEYS", "GET"); got != "_\r\n" {
		t.Errorf("GET after RESET = %q", got)
	}
}

// TestHotkeysACL: Cicada answers HOTKEYS only to a connection Redis 8.6
// would run it for: NOAUTH before authentication (default user off), NOPERM
// for a user without @admin (Redis's ACL_DENIED_CMD wording), and a rule
// change made through Cicada takes effect at once.
func TestHotkeysACL(t *testing.T) {
	_, p := newProxied(t, cicadatest.Options{Username: "admin", Password: "apw"},
		"--user", "admin", "on", ">apw", "~*", "&*", "+@all",
		"--user", "reader", "on", ">rpw", "~*", "-@all", "+@read", "+@connection", "+@slow", "-@admin",
		"--user", "ops", "on", ">opw", "-@all", "+@admin", "+@connection",
		"--user", "default", "off")
	c := dialRaw(t, p.Addr)
	if got := c.do("HOTKEYS", "GET"); got != "-NOAUTH Authentication required.\r\n" {
		t.Errorf("unauthenticated HOTKEYS GET = %q", got)
	}
	if got := c.do("HOTKEYS", "BOGUS"); got != "-ERR unknown subcommand 'BOGUS'. Try HOTKEYS HELP.\r\n" {
		t.Errorf("unauthenticated HOTKEYS BOGUS = %q (the subcommand check comes first)", got)
	}
	c.do("AUTH", "reader", "rpw")
	if got := c.do("HOTKEYS", "START", "METRICS", "1", "NET"); got != "-NOPERM User reader has no permissions to run the 'hotkeys|start' command\r\n" {
		t.Errorf("reader HOTKEYS START = %q", got)
	}
	if got := c.do("HOTKEYS", "HELP"); !strings.HasPrefix(got, "*") { // HELP is @slow only
		t.Errorf("reader HOTKEYS HELP = %q", got)
	}
	o := dialRaw(t, p.Addr)
	o.do("AUTH", "ops", "opw")
	if got := o.do("HOTKEYS", "START", "METRICS", "1", "NET"); got != "+OK\r\n" {
		t.Errorf("ops HOTKEYS START = %q", got)
	}
	if got := o.do("HOTKEYS", "HELP"); got != "-NOPERM User ops has no permissions to run the 'hotkeys|help' command\r\n" {
		t.Errorf("ops (no @slow) HOTKEYS HELP = %q", got)
	}
	a := dialRaw(t, p.Addr)
	a.do("AUTH", "admin", "apw")
	if got := a.do("ACL", "SETUSER", "reader", "+@admin"); got != "+OK\r\n" {
		t.Fatalf("ACL SETUSER = %q", got)
	}
	if got := c.do("HOTKEYS", "STOP"); got != "+OK\r\n" {
		t.Errorf("reader HOTKEYS STOP after +@admin = %q", got)
	}
}

// TestHotkeysMulti: inside MULTI, HOTKEYS goes to Redis, which answers as
// it does without Cicada (Redis 7 does not know the command).
func TestHotkeysMulti(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	for _, addr := range []string{r.Addr, p.Addr} {
		c := dialRaw(t, addr)
		c.do("MULTI")
		got := c.do("HOTKEYS", "GET")
		if !strings.HasPrefix(got, "-ERR unknown command 'HOTKEYS'") {
			t.Errorf("%s: HOTKEYS GET in MULTI = %q", addr, got)
		}
		if got := c.do("EXEC"); !strings.HasPrefix(got, "-EXECABORT") {
			t.Errorf("%s: EXEC = %q", addr, got)
		}
	}
}

// TestDebugHotkeys: /debug/hotkeys lists cached keys and fields, hottest
// first, bounded by limit, and never shows a value.
func TestDebugHotkeys(t *testing.T) {
	_, p := newProxied(t, cicadatest.Options{})
	admin := httptest.NewServer(p.Server.LocalAdminHandler())
	defer admin.Close()
	rc := client(t, p.Addr, 2)
	const secret = "VALUE-7f3c-do-not-show"
	mustDo(t, rc, "SET", "dbg:hot", secret)
	mustDo(t, rc, "SET", "dbg:warm", secret+"-2")
	mustDo(t, rc, "HSET", "dbg:h", "f1", secret+"-3")
	warmKey(t, p, rc, "GET", "dbg:hot")
	warmKey(t, p, rc, "GET", "dbg:warm")
	warmKey(t, p, rc, "HGET", "dbg:h", "f1")
	ctx := context.Background()
	// dbg:warm's only reads are its warming, which took 75 GETs once on a
	// loaded machine (a clean-clone CI run): the others' counts are well
	// above that.
	pipe := rc.Pipeline()
	for range 3000 {
		pipe.Get(ctx, "dbg:hot")
	}
	for range 300 {
		pipe.HGet(ctx, "dbg:h", "f1")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	get := func(q string) (int, string) {
		resp, err := http.Get(admin.URL + "/debug/hotkeys" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == 200 && resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("Content-Type %q", resp.Header.Get("Content-Type"))
		}
		return resp.StatusCode, string(b)
	}
	code, body := get("")
	if code != 200 || strings.Contains(body, "VALUE-7f3c") {
		t.Fatalf("/debug/hotkeys = %d, shows the value: %v\n%s", code, strings.Contains(body, "VALUE-7f3c"), body)
	}
	var hk struct {
		Total     int  `json:"total"`
		Limit     int  `json:"limit"`
		Suspended bool `json:"suspended"`
		Keys      []struct {
			DB        int     `json:"db"`
			Key       string  `json:"key"`
			Field     *string `json:"field"`
			OpsPerSec uint32  `json:"ops_per_sec"`
			Cached    bool    `json:"cached"`
			Bytes     int     `json:"bytes"`
		} `json:"keys"`
	}
	if err := json.Unmarshal([]byte(body), &hk); err != nil {
		t.Fatal(err)
	}
	if hk.Total != 3 || hk.Limit != 100 || len(hk.Keys) != 3 {
		t.Fatalf("body: %s", body)
	}
	k := hk.Keys
	if k[0].Key != "dbg:hot" || k[0].Field != nil || k[1].Key != "dbg:h" || k[1].Field == nil || *k[1].Field != "f1" || k[2].Key != "dbg:warm" {
		t.Errorf("order: %s", body)
	}
	if !(k[0].OpsPerSec >= 3000 && k[0].OpsPerSec > k[1].OpsPerSec && k[1].OpsPerSec >= 300 && k[1].OpsPerSec > k[2].OpsPerSec) {
		t.Errorf("ops/s: %d %d %d", k[0].OpsPerSec, k[1].OpsPerSec, k[2].OpsPerSec)
	}
	if want := len("$22\r\n" + secret + "\r\n"); k[0].Bytes != want || !k[0].Cached || k[0].DB != 0 {
		t.Errorf("hot entry %+v, want %d bytes, cached, db 0", k[0], want)
	}
	if code, body = get("?limit=1"); code != 200 || !strings.Contains(body, `"dbg:hot"`) || strings.Contains(body, `"dbg:warm"`) {
		t.Errorf("?limit=1: %d %s", code, body)
	}
	for _, q := range []string{"?limit=0", "?limit=x", "?limit=10001"} {
		if code, _ := get(q); code != http.StatusBadRequest {
			t.Errorf("%s = %d, want 400", q, code)
		}
	}
}

// TestDebugHotkeysNil: a cached nil reply (GET of a missing key, HGET of
// a missing field) is listed with "nil": true and bytes 5, the length of
// $-1\r\n, the RESP2 reply, though RESP3 clients are served _\r\n; other
// entries have no "nil".
func TestDebugHotkeysNil(t *testing.T) {
	_, p := newProxied(t, cicadatest.Options{})
	admin := httptest.NewServer(p.Server.LocalAdminHandler())
	defer admin.Close()
	rc2, rc3 := client(t, p.Addr, 2), client(t, p.Addr, 3)
	mustDo(t, rc2, "SET", "nil:present", "v")
	mustDo(t, rc2, "HSET", "nil:h", "f", "v")
	warmKey(t, p, rc3, "GET", "nil:missing") // filled by a RESP3 client
	warmKey(t, p, rc2, "HGET", "nil:h", "missing")
	warmKey(t, p, rc2, "GET", "nil:present")
	raw2, raw3 := dialRaw(t, p.Addr), dialRaw(t, p.Addr)
	raw3.do("HELLO", "3")
	if got := raw2.do("GET", "nil:missing"); got != "$-1\r\n" {
		t.Errorf("RESP2 GET nil:missing = %q, want %q", got, "$-1\r\n")
	}
	if got := raw3.do("GET", "nil:missing"); got != "_\r\n" {
		t.Errorf("RESP3 GET nil:missing = %q, want %q", got, "_\r\n")
	}
	resp, err := http.Get(admin.URL + "/debug/hotkeys")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var hk struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(body, &hk); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, k := range hk.Keys {
		name := fmt.Sprint(k["key"])
		if f, ok := k["field"]; ok {
			name += " " + fmt.Sprint(f)
		}
		got[name] = fmt.Sprintf("bytes=%v nil=%v", k["bytes"], k["nil"])
	}
	want := map[string]string{
		"nil:missing":   "bytes=5 nil=true",
		"nil:h missing": "bytes=5 nil=true",
		"nil:present":   "bytes=7 nil=<nil>", // $1\r\nv\r\n; no "nil" field
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("/debug/hotkeys entries %v, want %v\n%s", got, want, body)
	}
}

// TestDebugHotkeysPausedCountedOnce: a cached GET behind a forwarded
// request waits for its reply and is then parsed again; the detector counts
// it once (it counted it twice, so such keys became hot at half the
// threshold and /debug/hotkeys showed twice their rate).
func TestDebugHotkeysPausedCountedOnce(t *testing.T) {
	// A low threshold makes the warm-up a few GETs: at the default, its
	// thousand counts leaving the window during a measurement on a loaded
	// machine outweighed the 200 measured (CI, 2026-12-02: grew by -2).
	_, p := newProxied(t, cicadatest.Options{HotThreshold: 10})
	admin := httptest.NewServer(p.Server.LocalAdminHandler())
	defer admin.Close()
	rc := client(t, p.Addr, 2)
	mustDo(t, rc, "SET", "paused:k", "v")
	rate := func() int64 {
		resp, err := http.Get(admin.URL + "/debug/hotkeys")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var hk struct {
			Keys []struct {
				Key       string `json:"key"`
				OpsPerSec uint32 `json:"ops_per_sec"`
			} `json:"keys"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&hk); err != nil || len(hk.Keys) != 1 || hk.Keys[0].Key != "paused:k" {
			t.Fatalf("/debug/hotkeys: %+v, %v", hk, err)
		}
		return int64(hk.Keys[0].OpsPerSec)
	}
	ctx := context.Background()
	const n = 200
	// The rate is over a sliding second: a measurement that a loaded
	// machine stretched past a fraction of it loses counts of its own to
	// the window, and is made again once they have left it.
	for range 5 {
		warmKey(t, p, rc, "GET", "paused:k")
		start := time.Now()
		before, hitsBefore := rate(), hits(p)
		pipe := rc.Pipeline()
		for range n {
			pipe.Ping(ctx) // forwarded: the GET behind it pauses until its reply is in
			pipe.Get(ctx, "paused:k")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if h := hits(p) - hitsBefore; h < n/2 {
			t.Fatalf("%d of %d GETs answered from the cache: the test did not test paused hits", h, n)
		}
		got, took := rate()-before, time.Since(start)
		// Counts of the warm-up may leave the window meanwhile; none are
		// added beyond one per GET, however long it took.
		if got > n {
			t.Fatalf("ops_per_sec grew by %d for %d GETs, want at most %d", got, n, n)
		}
		if took < 300*time.Millisecond {
			if got < n/2 {
				t.Errorf("ops_per_sec grew by %d for %d GETs in %v, want at least %d", got, n, took, n/2)
			}
			return
		}
		time.Sleep(1100 * time.Millisecond) // past the window: this attempt's counts are out of it
	}
	t.Fatal("no measurement of the 200 GETs took less than 300 ms in 5 attempts")
}

// TestHotkeysSubscribedRESP2: on a RESP2 subscribed connection, pub/sub
// messages that arrive ahead of a command's reply are not counted as the
// key's bytes: each GET counts its request and its own (error) reply only.
func TestHotkeysSubscribedRESP2(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	direct := dialRaw(t, r.Addr)
	direct.do("SUBSCRIBE", "ch")
	errReply := direct.do("GET", "k") // Redis's refusal in subscribed mode
	if !strings.HasPrefix(errReply, "-ERR Can't execute 'get'") {
		t.Fatalf("direct GET while subscribed = %q", errReply)
	}
	admin := client(t, p.Addr, 2)
	mustDo(t, admin, "HOTKEYS", "START", "METRICS", "1", "NET")
	sub := dialRaw(t, p.Addr)
	sub.do("SUBSCRIBE", "ch")
	done, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		pub := redis.NewClient(&redis.Options{Addr: p.Addr, DisableIdentity: true, Protocol: 2})
		defer pub.Close()
		for i := 0; i < 100000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if pub.Publish(context.Background(), "ch", "message-payload").Err() != nil {
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	_ = sub.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if first, err := redistest.ReadReply(sub.br); err != nil || !strings.Contains(string(first), "message-payload") {
		t.Fatalf("first message %q, %v", first, err)
	}
	const n, batches = 300, 30
	errs, msgs := 0, 1
	for i := 0; i < batches; i++ {
		if _, err := sub.c.Write([]byte(strings.Repeat(cmd("GET", "k"), n/batches))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	for errs < n {
		_ = sub.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := redistest.ReadReply(sub.br)
		if err != nil {
			t.Fatalf("after %d errors, %d messages: %v", errs, msgs, err)
		}
		if string(b) == errReply {
			errs++
		} else {
			msgs++
		}
	}
	m := hotkeysReport(t, admin)
	want := fmt.Sprintf("[k=%d]", n*(len(cmd("GET", "k"))+len(errReply)))
	if got := ranking(t, m, "by-net-bytes"); fmt.Sprint(got) != want {
		t.Errorf("by-net-bytes = %v, want %s (%d messages interleaved)", got, want, msgs)
	}
	if msgs < 10 {
		t.Errorf("only %d messages interleaved: the test did not test anything", msgs)
	}
}

// TestHotkeysHeaderForwarded: a HOTKEYS of more than 10 arguments arriving
// in two pieces has its header sent to Redis at once (Redis may refuse it
// before authentication); Cicada must then forward the rest, never answer
// it itself, or Redis waits for arguments that never come and every later
// reply goes to the wrong request. A client on a lane (authenticated)
// sends nothing of a request early, so only a dedicated connection does
// this.
func TestHotkeysHeaderForwarded(t *testing.T) {
	p := newPair(t, nil, cicadatest.Options{Dedicated: true})
	whole := cmd("HOTKEYS", "START", "METRICS", "1", "CPU", "COUNT", "10", "DURATION", "5", "SAMPLE", "1")
	p.Compare(t,
		difftest.Step{Raw: []byte(whole[:20])},
		difftest.Step{Raw: []byte(whole[20:]), Wait: 200 * time.Millisecond},
		difftest.Step{Raw: []byte(cmd("PING")), Wait: 200 * time.Millisecond},
	)
}
