// Package clients drives Cicada with the Redis clients people use, each
// from its ecosystem's registry or Debian: go-redis and rueidis (Go),
// redis-py (Debian python3-redis), ioredis and node-redis (npm, pinned in
// node/package-lock.json), redis-cli and redis-benchmark (Debian
// redis-tools). Each runs a scenario in its own style twice, against a
// redis-server directly and through Cicada (hot threshold 1, so repeated
// reads are answered from the cache) in front of a second redis-server,
// and the two transcripts must be equal. `make deps` installs python3-redis
// and the npm packages.
package clients

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// sides are the two places a scenario runs: Redis directly, and Cicada in
// front of another Redis. A scenario's backdoor is the Redis its writes
// "from elsewhere" go to: the same Redis for the direct run, the one behind
// Cicada for the other.
type sides struct {
	direct, behind string
	proxy          *cicadatest.Proxy
}

func newSides(t *testing.T) sides {
	t.Helper()
	direct, behind := redistest.Start(t), redistest.Start(t)
	return sides{direct: direct.Addr, behind: behind.Addr, proxy: cicadatest.Start(t, behind.Addr, cicadatest.Options{})}
}

// compare runs scenario(addr, backdoor) on both sides and fails unless the
// transcripts are equal and Cicada answered some reads from its cache.
func (s sides) compare(t *testing.T, scenario func(addr, backdoor string) string) {
	t.Helper()
	want := scenario(s.direct, s.direct)
	before := s.proxy.Server.Hits()
	got := scenario(s.proxy.Addr, s.behind)
	if got != want {
		t.Errorf("through Cicada the transcript differs.\ndirect:\n%s\nthrough Cicada:\n%s", want, got)
	}
	if s.proxy.Server.Hits() == before {
		t.Error("no read was answered from Cicada's cache: the scenario did not exercise it")
	}
	t.Logf("%d lines equal; %d reads answered by Cicada", strings.Count(got, "\n"), s.proxy.Server.Hits()-before)
	if testing.Verbose() {
		t.Logf("transcript:\n%s", got)
	}
}

// script returns a scenario that runs an external program with the two
// addresses appended, its standard output as the transcript.
func script(t *testing.T, name string, args ...string) func(addr, backdoor string) string {
	return func(addr, backdoor string) string {
		t.Helper()
		cmd := exec.Command(name, append(args, addr, backdoor)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s against %s: %v\n%s%s", cmd, addr, err, out, stderr.Bytes())
		}
		return string(out)
	}
}

// TestRedisPy runs redis_py_scenario.py with Debian's python3 and
// python3-redis.
func TestRedisPy(t *testing.T) {
	const python = "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import redis; print(redis.__version__)").CombinedOutput(); err != nil {
		t.Fatalf("redis-py is missing (make deps installs python3-redis): %v\n%s", err, out)
	} else {
		t.Logf("redis-py %s", strings.TrimSpace(string(out)))
	}
	newSides(t).compare(t, script(t, python, "redis_py_scenario.py"))
}

// nodeScenario checks the npm packages are installed and returns the
// scenario running file with node.
func nodeScenario(t *testing.T, file, pkg string) func(addr, backdoor string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("node", "node_modules", pkg, "package.json"))
	if err != nil {
		t.Fatalf("%s is missing (make deps runs npm ci in test/clients/node): %v", pkg, err)
	}
	if i := bytes.Index(b, []byte(`"version"`)); i >= 0 {
		line, _, _ := bytes.Cut(b[i:], []byte("\n"))
		t.Logf("%s %s", pkg, line)
	}
	return script(t, "node", filepath.Join("node", file))
}

// TestIORedis runs node/ioredis_scenario.js.
func TestIORedis(t *testing.T) {
	newSides(t).compare(t, nodeScenario(t, "ioredis_scenario.js", "ioredis"))
}

// TestNodeRedis runs node/node_redis_scenario.js: RESP3 with node-redis's
// client-side cache, whose invalidations come through Cicada.
func TestNodeRedis(t *testing.T) {
	newSides(t).compare(t, nodeScenario(t, "node_redis_scenario.js", "redis"))
}
