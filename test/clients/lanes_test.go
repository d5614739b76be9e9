package clients

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// laneCounts reads how many times Cicada's clients moved to connections
// of their own (cicada_upstream_pins_total) and back to lanes
// (cicada_upstream_returns_total).
func laneCounts(t *testing.T, p *cicadatest.Proxy) (pins, returns float64) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(p.Server.Collector())
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		switch f.GetName() {
		case "cicada_upstream_pins_total":
			pins = f.GetMetric()[0].GetCounter().GetValue()
		case "cicada_upstream_returns_total":
			returns = f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return pins, returns
}

// TestConnectSequences: each client of the matrix, with its default
// connect sequence (go-redis: HELLO 3 and CLIENT SETINFO; ioredis: INFO
// and CLIENT SETINFO; node-redis and redis-py: what their versions send),
// then plain reads and writes, stays on lanes: no connection of its own.
// rueidis with its client-side cache on (its default) sends CLIENT
// TRACKING, whose invalidations belong to one connection: each of its
// connections gets one of its own, as documented (docs/limits.md#lanes);
// without the cache it stays on lanes. Under requirepass each client
// connection gets a connection of its own for its AUTH and then goes back
// to lanes (rueidis with its cache: to stay for its tracking).
func TestConnectSequences(t *testing.T) {
	cicadatest.NeedLanes(t, "")
	ctx := context.Background()
	node := func(src string) func(addr, pass string) error {
		return func(addr, pass string) error {
			cmd := exec.Command("node", "-e", src, addr, pass)
			cmd.Dir = "node"
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}
	}
	clients := []struct {
		name  string
		stays bool // it keeps a connection of its own
		drive func(addr, pass string) error
	}{
		{"go-redis", false, func(addr, pass string) error {
			r := redis.NewClient(&redis.Options{Addr: addr, Password: pass, PoolSize: 1})
			defer r.Close()
			for range 10 {
				if err := r.Set(ctx, "k", "v", 0).Err(); err != nil {
					return err
				}
				if err := r.Get(ctx, "k").Err(); err != nil {
					return err
				}
			}
			return nil
		}},
		{"rueidis (client-side cache)", true, func(addr, pass string) error {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Password: pass, DisableRetry: true})
			if err != nil {
				return err
			}
			defer c.Close()
			return c.Do(ctx, c.B().Get().Key("k").Build()).Error()
		}},
		{"rueidis (no cache)", false, func(addr, pass string) error {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Password: pass, DisableRetry: true, DisableCache: true})
			if err != nil {
				return err
			}
			defer c.Close()
			return c.Do(ctx, c.B().Get().Key("k").Build()).Error()
		}},
		{"redis-py", false, func(addr, pass string) error {
			host, port, _ := strings.Cut(addr, ":")
			src := `import sys, redis
r = redis.Redis(host=sys.argv[1], port=int(sys.argv[2]), password=sys.argv[3] or None)
for _ in range(10):
    r.set("k", "v"); r.get("k")`
			if out, err := exec.Command("/usr/bin/python3", "-c", src, host, port, pass).CombinedOutput(); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}},
		{"ioredis", false, node(`const Redis = require("ioredis");
const [addr, pass] = process.argv.slice(1);
const [host, port] = addr.split(":");
const r = new Redis({ host, port: Number(port), password: pass || undefined });
(async () => { for (let i = 0; i < 10; i++) { await r.set("k", "v"); await r.get("k"); } r.disconnect(); })()
  .catch((e) => { console.error(e); process.exit(1); });`)},
		{"node-redis", false, node(`const { createClient } = require("redis");
const [addr, pass] = process.argv.slice(1);
const r = createClient({ url: "redis://" + addr, password: pass || undefined });
(async () => { await r.connect(); for (let i = 0; i < 10; i++) { await r.set("k", "v"); await r.get("k"); } await r.disconnect(); })()
  .catch((e) => { console.error(e); process.exit(1); });`)},
		{"redis-cli", false, func(addr, pass string) error {
			host, port, _ := strings.Cut(addr, ":")
			args := []string{"-h", host, "-p", port, "-r", "10", "get", "k"}
			if pass != "" {
				args = append([]string{"--no-auth-warning", "-a", pass}, args...)
			}
			if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil || strings.Contains(string(out), "ERR") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}},
		{"redis-benchmark", false, func(addr, pass string) error {
			host, port, _ := strings.Cut(addr, ":")
			args := []string{"-h", host, "-p", port, "-q", "-n", "1000", "-c", "4", "-t", "get,set"}
			if pass != "" {
				args = append(args, "-a", pass)
			}
			if out, err := exec.Command("redis-benchmark", args...).CombinedOutput(); err != nil || strings.Contains(strings.ToLower(string(out)), "error") {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}},
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is missing (make deps installs it): %v", err)
	}
	if _, err := filepath.Abs("node/node_modules"); err != nil {
		t.Fatal(err)
	}
	for _, pass := range []string{"", "pw"} {
		var redisArgs []string
		if pass != "" {
			redisArgs = []string{"--requirepass", pass}
		}
		r := redistest.Start(t, redisArgs...)
		p := cicadatest.Start(t, r.Addr, cicadatest.Options{Password: pass})
		for _, c := range clients {
			pins0, returns0 := laneCounts(t, p)
			if err := c.drive(p.Addr, pass); err != nil {
				t.Fatalf("%s (password %q): %v", c.name, pass, err)
			}
			pins1, returns1 := laneCounts(t, p)
			pins, returns := pins1-pins0, returns1-returns0
			switch {
			case c.stays && (pins == 0 || returns != 0):
				t.Errorf("%s (password %q): %v moves to connections of their own, %v back: want some, and none back", c.name, pass, pins, returns)
			case !c.stays && pass == "" && pins != 0:
				t.Errorf("%s: %v moves to connections of their own, want none", c.name, pins)
			case !c.stays && pass != "" && (pins == 0 || returns != pins):
				t.Errorf("%s (password): %v moves to connections of their own, %v back: want one per connection, each back", c.name, pins, returns)
			}
			t.Logf("%-28s password %-4q: %v moves to connections of their own, %v back to lanes", c.name, pass, pins, returns)
		}
	}
}
