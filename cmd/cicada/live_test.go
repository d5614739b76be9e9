package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/test/redistest"
)

// syncBuffer is a log sink safe for the logger's and the test's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// running is a Cicada started with run(), as main starts it: admin and
// local are its two admin listeners' addresses.
type running struct {
	addr, admin, local string
	logs               *syncBuffer
}

func startRun(t *testing.T, args ...string) *running {
	t.Helper()
	r := redistest.Start(t)
	p := &running{
		addr:  "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)),
		admin: "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)),
		local: "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)),
		logs:  &syncBuffer{},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	all := append([]string{"--listen", p.addr, "--admin", p.admin, "--local-admin", p.local, "--upstream", r.Addr, "--loops", "1"}, args...)
	go func() { done <- run(ctx, all, nil, io.Discard, p.logs) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("run exited %d\n%s", code, p.logs)
		}
	})
	waitUntil(t, "ready", func() bool { code, _ := p.get(t, "/readyz"); return code == 200 })
	return p
}

// get requests path from the admin listener.
func (p *running) get(t *testing.T, path string) (int, string) {
	t.Helper()
	return httpGet("http://" + p.admin + path)
}

// getLocal requests path from the local admin listener.
func (p *running) getLocal(t *testing.T, path string) (int, string) {
	t.Helper()
	return httpGet("http://" + p.local + path)
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (p *running) post(t *testing.T, body string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+p.local+"/config", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// setting returns one setting in force from GET /config.
func (p *running) setting(t *testing.T, key string) string {
	t.Helper()
	_, body := p.getLocal(t, "/config")
	var c struct{ Settings map[string]any }
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatalf("GET /config: %v: %s", err, body)
	}
	return fmt.Sprint(c.Settings[key])
}

// metric returns one sample of /metrics.
func (p *running) metric(t *testing.T, sample string) float64 {
	t.Helper()
	_, body := p.get(t, "/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	t.Fatalf("no %s in /metrics", sample)
	return 0
}

// hits reads key through Cicada n times and returns how many Cicada
// answered from its cache.
func (p *running) hits(t *testing.T, rc *redis.Client, key string, n int) float64 {
	t.Helper()
	before := p.metric(t, "cicada_cache_hits_total")
	for range n {
		if err := rc.Get(context.Background(), key).Err(); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
	}
	return p.metric(t, "cicada_cache_hits_total") - before
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// replaceFile writes body to a new file renamed over path, as editors and
// Kubernetes ConfigMap updates replace a file.
func replaceFile(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestLiveConfigFile: edits of the --config file change the live settings
// without a restart (deny-list, threshold), a file that does not validate
// changes nothing, a changed non-live setting waits for a restart, and a
// file removed and written again is followed.
func TestLiveConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cicada.yaml")
	write := func(body string) { t.Helper(); replaceFile(t, path, body) }
	write("hot-threshold: 1\n")
	p := startRun(t, "--config", path)
	rc := redis.NewClient(&redis.Options{Addr: p.addr, DisableIdentity: true})
	defer rc.Close()
	if err := rc.Set(context.Background(), "session:1", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "session:1 cached", func() bool { return p.hits(t, rc, "session:1", 20) > 0 })

	write("hot-threshold: 1\ncache-deny: [\"session:*\"]\n")
	waitUntil(t, "the deny-list in force", func() bool { return p.setting(t, "cache-deny") == "[session:*]" })
	if n := p.metric(t, `cicada_cache_evictions_total{reason="config"}`); n < 1 {
		t.Errorf("config evictions %v, want the cached session:1", n)
	}
	if n := p.hits(t, rc, "session:1", 50); n != 0 {
		t.Errorf("a denied key got %v hits", n)
	}
	if !strings.Contains(p.logs.String(), `"msg":"configuration changed","setting":"cache-deny","from":[],"to":["session:*"],"source":"file"`) {
		t.Errorf("the change was not logged:\n%s", p.logs)
	}

	write("hot-threshold: 0\ncache-deny: []\n") // invalid: nothing changes
	waitUntil(t, "the rejection logged", func() bool {
		return strings.Contains(p.logs.String(), `configuration file rejected; the settings in force are kept","error":"`+path+`: hot-threshold: must be between 1 and 4294967295, got 0"`)
	})
	if got := p.setting(t, "cache-deny"); got != "[session:*]" {
		t.Errorf("a rejected file changed cache-deny to %q", got)
	}

	write("hot-threshold: 1\nmaxclients: 5\n") // deny lifted; maxclients needs a restart
	waitUntil(t, "the deny-list lifted", func() bool { return p.setting(t, "cache-deny") == "[]" })
	if p.setting(t, "maxclients") == "5" || !strings.Contains(p.logs.String(), `"setting changed in the configuration file takes effect at restart","setting":"maxclients"`) {
		t.Error("maxclients changed live, or the restart it needs was not logged")
	}

	// Truncated, not yet written: ignored, nothing reset to defaults.
	write("hot-threshold: 3\nlog-level: warn\n")
	waitUntil(t, "hot-threshold 3", func() bool { return p.setting(t, "hot-threshold") == "3" })
	write("")
	waitUntil(t, "the empty file noticed", func() bool {
		return strings.Contains(p.logs.String(), "configuration file is empty; the settings in force are kept")
	})
	if p.setting(t, "hot-threshold") != "3" {
		t.Error("an empty file reset hot-threshold")
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	write("hot-threshold: 7\n")
	waitUntil(t, "the recreated file followed", func() bool { return p.setting(t, "hot-threshold") == "7" })
	// Logged at log-level warn too (the file had set it).
	if !strings.Contains(p.logs.String(), `"setting":"hot-threshold","from":3,"to":7,"source":"file"`) {
		t.Errorf("a change at log-level warn was not logged:\n%s", p.logs)
	}
}

// TestLiveConfigAdmin: POST /config validates every setting in the body
// before any takes effect, refuses settings that need a restart, and
// applies threshold, capacity and the cache switch at once.
func TestLiveConfigAdmin(t *testing.T) {
	p := startRun(t, "--hot-threshold", "1")
	rc := redis.NewClient(&redis.Options{Addr: p.addr, DisableIdentity: true})
	defer rc.Close()
	if err := rc.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "k cached", func() bool { return p.hits(t, rc, "k", 20) > 0 })

	for body, want := range map[string]string{
		`{"hot-threshold": 50, "cache-capacity": 0}`: "cache-capacity: must be between 1 and 16777216, or 0 with cache-max-value 0 (the cache off), got 0\n",
		`{"listen": ":1"}`:                           "listen: not a live setting; it takes a restart (live: hot-threshold, cache-max-value, cache-capacity, cache-max-bytes, cache-enabled, cache-deny, log-level)\n",
		`{"nonsense": 1}`:                            "nonsense: unknown setting\n",
		`{"cache-deny": ["[unclosed"]}`:              "cache-deny: bad pattern \"[unclosed\": glob: syntax error at 9: unexpected end of input\n",
		`{"cache-deny": ["{user:*"]}`:                "cache-deny: bad pattern \"{user:*\": glob: syntax error at 7: unclosed `{`\n",
		`[1]`:                                        "body must be a JSON object of settings: json: cannot unmarshal array into Go value of type map[string]interface {}\n",
		"{\"cache-deny\": [\"x\xff\"]}":              "body must be UTF-8 text: invalid UTF-8 at byte 18\n",
		`{"cache-deny": ["x\ud800"]}`:                "body must be UTF-8 text: half a surrogate pair (\\ud800) at byte 18\n",
	} {
		if code, got := p.post(t, body); code != 400 || got != want {
			t.Errorf("POST %s: %d %q, want 400 %q", body, code, got, want)
		}
	}
	if p.setting(t, "hot-threshold") != "1" {
		t.Error("a rejected POST changed hot-threshold")
	}

	if code, body := p.post(t, `{"cache-enabled": false, "hot-threshold": "20", "cache-capacity": 500, "log-level": "debug"}`); code != 200 {
		t.Fatalf("POST: %d %s", code, body)
	}
	if p.metric(t, "cicada_cache_suspended") != 1 || p.hits(t, rc, "k", 50) != 0 {
		t.Error("cache-enabled false: the cache still answers")
	}
	for k, want := range map[string]string{"hot-threshold": "20", "cache-capacity": "500", "cache-enabled": "false", "log-level": "debug"} {
		if got := p.setting(t, k); got != want {
			t.Errorf("%s = %s, want %s", k, got, want)
		}
	}
	if code, body := p.post(t, `{"cache-enabled": true, "hot-threshold": 1}`); code != 200 {
		t.Fatalf("POST: %d %s", code, body)
	}
	waitUntil(t, "k cached again", func() bool { return p.hits(t, rc, "k", 20) > 0 })
	if code, _ := p.getLocal(t, "/config"); code != 200 {
		t.Errorf("GET /config: %d", code)
	}
	if req, _ := http.NewRequest(http.MethodDelete, "http://"+p.local+"/config", nil); req != nil {
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 405 {
			t.Errorf("DELETE /config: %v %v, want 405", resp, err)
		} else {
			resp.Body.Close()
		}
	}
}

// TestConfigPostRefused: POST /config from what a web page in a browser can
// send (an Origin header, a form or text content type, a rebound Host) is
// refused and changes nothing; a capacity too large for memory is a 400.
func TestConfigPostRefused(t *testing.T) {
	p := startRun(t)
	for _, tt := range []struct {
		name    string
		headers map[string]string
		body    string
		code    int
		want    string
	}{
		{"origin", map[string]string{"Origin": "http://evil.example"}, `{"hot-threshold": 79}`, 403, "POST /config refused: not from a web page (it has an Origin header)\n"},
		{"text/plain", map[string]string{"Content-Type": "text/plain"}, `{"hot-threshold": 79}`, 403, "POST /config refused: the Content-Type must be application/json\n"},
		{"rebound host", map[string]string{"Host": "evil.example:9121"}, `{"hot-threshold": 79}`, 403, "refused: the Host must be an address or localhost, not a name\n"},
		{"host not loopback", map[string]string{"Host": "10.0.0.5:9122"}, `{"hot-threshold": 79}`, 403, "POST /config refused: the Host must be a loopback address or localhost\n"},
		{"capacity", nil, `{"cache-capacity": 1000000000000}`, 400, "cache-capacity: must be between 1 and 16777216, or 0 with cache-max-value 0 (the cache off), got 1000000000000\n"},
		{"threshold -1", nil, `{"hot-threshold": -1}`, 400, "hot-threshold: must be between 1 and 4294967295, got -1\n"},
		{"threshold 0", nil, `{"hot-threshold": 0}`, 400, "hot-threshold: must be between 1 and 4294967295, got 0\n"},
		{"threshold beyond uint32", nil, `{"hot-threshold": 4294967296}`, 400, "hot-threshold: must be between 1 and 4294967295, got 4294967296\n"},
		{"threshold beyond int64", nil, `{"hot-threshold": "99999999999999999999"}`, 400, "hot-threshold: must be between 1 and 4294967295, got 99999999999999999999\n"},
		{"threshold not a number", nil, `{"hot-threshold": "abc"}`, 400, "hot-threshold: invalid integer \"abc\"\n"},
		{"bytes -1", nil, `{"cache-max-bytes": -1}`, 400, "cache-max-bytes: must be >= 1, or 0 with cache-max-value 0 (the cache off), got -1\n"},
		{"bytes -1kb", nil, `{"cache-max-bytes": "-1kb"}`, 400, "cache-max-bytes: must be >= 1, or 0 with cache-max-value 0 (the cache off), got -1024\n"},
		{"null", nil, `{"hot-threshold": null}`, 400, "hot-threshold: invalid integer: got null\n"},
	} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+p.local+"/config", strings.NewReader(tt.body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range tt.headers {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.code || string(b) != tt.want {
			t.Errorf("%s: %d %q, want %d %q", tt.name, resp.StatusCode, b, tt.code, tt.want)
		}
	}
	if got := p.setting(t, "hot-threshold"); got != "1" {
		t.Errorf("a refused POST changed hot-threshold to %s", got)
	}
}

// TestDenyPatternsWithCommas: a comma inside {a,b} or [...] is part of the
// pattern in every layer, and a POST of a list equal but for that comma is
// a change.
func TestDenyPatternsWithCommas(t *testing.T) {
	p := startRun(t, "--cache-deny", "user:{a,b}:*,x:[,;]")
	if got := p.setting(t, "cache-deny"); got != "[user:{a,b}:* x:[,;]]" {
		t.Fatalf("cache-deny from the flag = %s", got)
	}
	if code, body := p.post(t, `{"cache-deny": ["user:{a,b}:*", "y"]}`); code != 200 {
		t.Fatalf("POST: %d %s", code, body)
	}
	if got := p.setting(t, "cache-deny"); got != "[user:{a,b}:* y]" {
		t.Errorf("cache-deny after POST = %s", got)
	}
	if !strings.Contains(p.logs.String(), `"to":["user:{a,b}:*","y"]`) {
		t.Errorf("the change was not logged:\n%s", p.logs)
	}
}

// TestFromLoopback: POST /config is for loopback peers only.
func TestFromLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:5000": true, "[::1]:5000": true, "10.1.2.3:5000": false, "[2001:db8::1]:80": false, "bad": false} {
		if got := fromLoopback(&http.Request{RemoteAddr: addr}); got != want {
			t.Errorf("fromLoopback(%s) = %v", addr, got)
		}
	}
}

// TestCacheOffZeroCapacity: with the cache off (cache-max-value 0), a
// capacity and byte bound of 0 pass validation, and Cicada must start.
func TestCacheOffZeroCapacity(t *testing.T) {
	p := startRun(t, "--cache-max-value", "0", "--cache-capacity", "0", "--cache-max-bytes", "0")
	if p.metric(t, "cicada_cache_suspended") != 1 {
		t.Error("the cache is not off")
	}
}

// TestSetLiveCoversLiveKeys: every setting marked live is copied by
// setLive (so file edits and POST /config apply it), and nothing else is.
func TestSetLiveCoversLiveKeys(t *testing.T) {
	base := mustLoad(t, nil, nil)
	other := mustLoad(t, []string{"--hot-threshold", "7", "--cache-max-value", "1kb", "--cache-capacity", "5", "--cache-max-bytes", "1mb",
		"--cache-enabled=false", "--cache-deny", "a*", "--log-level", "debug", "--loops", "3", "--log-format", "console"}, nil)
	for _, k := range liveKeys {
		if same(base.Redacted()[k], other.Redacted()[k]) {
			t.Fatalf("test: %s is %v in both", k, base.Redacted()[k])
		}
		dst := *base
		setLive(&dst, other, k)
		got, want := dst.Redacted(), base.Redacted()
		want[k] = other.Redacted()[k]
		if !reflect.DeepEqual(got, want) {
			t.Errorf("setLive %s: got %v, want %v", k, got, want)
		}
	}
}

// TestRestartSettingRestored: a restart-only setting edited in the file
// warns that it waits for a restart; edited back to the value in force it
// does not warn again, and edited away again it does.
func TestRestartSettingRestored(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cicada.yaml")
	write := func(body string) { t.Helper(); replaceFile(t, path, body) }
	write("log-format: json\nhot-threshold: 1\n")
	p := startRun(t, "--config", path)
	count := func() int {
		return strings.Count(p.logs.String(), `"setting changed in the configuration file takes effect at restart","setting":"log-format"`)
	}
	// Each edit also changes hot-threshold, whose change in force shows
	// that the file was read.
	for i, step := range []struct {
		body string
		want int
	}{
		{"log-format: console\nhot-threshold: 2\n", 1}, // differs from the value in force
		{"log-format: json\nhot-threshold: 3\n", 1},    // back to the value in force
		{"log-format: json\nhot-threshold: 4\n", 1},    // unchanged
		{"log-format: console\nhot-threshold: 5\n", 2}, // away again
	} {
		write(step.body)
		threshold := strconv.Itoa(i + 2)
		waitUntil(t, "hot-threshold "+threshold, func() bool { return p.setting(t, "hot-threshold") == threshold })
		if got := count(); got != step.want {
			t.Errorf("after %q: %d restart warnings for log-format, want %d\n%s", step.body, got, step.want, p.logs)
		}
	}
}

// TestCheckText: what POST /config refuses before decoding, since
// encoding/json would turn it into U+FFFD.
func TestCheckText(t *testing.T) {
	for body, want := range map[string]string{
		`{"cache-deny": ["x"]}`:                  "",
		`{"cache-deny": ["\u00e9\ud83d\ude00"]}`: "", // é and a pair: 😀
		`{"cache-deny": ["\\ud800"]}`:            "", // an escaped backslash, then text
		`{"cache-deny": ["\"\ud800"]}`:           "half a surrogate pair (\\ud800) at byte 19",
		`{"cache-deny": ["\udc00"]}`:             "half a surrogate pair (\\udc00) at byte 17",
		`{"cache-deny": ["\ud800\u0041"]}`:       "half a surrogate pair (\\ud800) at byte 17",
		`{"cache-deny": ["\ud800"`:               "half a surrogate pair (\\ud800) at byte 17",
		`{"cache-deny": ["\ud8`:                  "", // not JSON: json.Unmarshal says so
		`{"x\ud800": 1}`:                         "half a surrogate pair (\\ud800) at byte 3",
		"{\"cache-deny\": [\"\xc3\"]}":           "invalid UTF-8 at byte 17",
		`[1, \ud800]`:                            "", // outside a string: not JSON, json.Unmarshal says so
	} {
		got := ""
		if err := checkText([]byte(body)); err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("checkText(%q) = %q, want %q", body, got, want)
		}
	}
}
