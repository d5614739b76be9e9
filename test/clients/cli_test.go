package clients

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/detector"
)

// redisTool runs redis-cli or redis-benchmark (Debian redis-tools) against
// addr with args and returns its output; stdin, if not empty, is piped in.
func redisTool(t *testing.T, tool, addr, stdin string, args ...string) string {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command(tool, append([]string{"-h", host, "-p", port}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	return string(out)
}

// TestRedisCLI: redis-cli the ways people use it: one-shot commands in
// RESP2 and RESP3 (-3), repeated reads (-r), --raw and --csv output, a
// script on stdin, and --pipe mass insertion.
func TestRedisCLI(t *testing.T) {
	if out, err := exec.Command("redis-cli", "--version").CombinedOutput(); err != nil {
		t.Fatalf("redis-cli is missing (Debian redis-tools): %v", err)
	} else {
		t.Log(strings.TrimSpace(string(out)))
	}
	newSides(t).compare(t, func(addr, backdoor string) string {
		var b strings.Builder
		cli := func(stdin string, args ...string) {
			fmt.Fprintf(&b, "$ redis-cli %s\n%s", strings.Join(args, " "), redisTool(t, "redis-cli", addr, stdin, args...))
		}
		cli("", "set", "cli:hot", "hello world")
		cli("", "-r", "100", "get", "cli:hot")
		cli("", "hset", "cli:h", "f", "1", "g", "2")
		cli("", "-r", "50", "hget", "cli:h", "f")
		cli("", "-3", "hgetall", "cli:h")
		cli("", "-3", "get", "cli:hot")
		cli("", "--raw", "get", "cli:hot")
		cli("", "--csv", "hgetall", "cli:h")
		cli("", "incr", "cli:hot")
		cli("", "nosuchcommand")
		cli("multi\nset cli:a 1\nincr cli:a\nexec\nget cli:hot\nget cli:hot\n")
		var mass strings.Builder
		for i := range 1000 {
			k, v := fmt.Sprintf("cli:mass:%d", i), fmt.Sprintf("value-%d", i)
			fmt.Fprintf(&mass, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(k), k, len(v), v)
		}
		cli(mass.String(), "--pipe")
		cli("", "-r", "20", "get", "cli:mass:7")
		cli("", "dbsize")
		return b.String()
	})
}

// TestRedisBenchmark: redis-benchmark's standard tests through Cicada
// complete without errors and leave Redis in the state they leave it in
// directly (counters, list lengths, the key space's size).
func TestRedisBenchmark(t *testing.T) {
	ctx := context.Background()
	newSides(t).compare(t, func(addr, backdoor string) string {
		var b strings.Builder
		for _, p := range []string{"1", "16"} {
			out := redisTool(t, "redis-benchmark", addr, "", "-q", "-n", "2000", "-c", "10", "-P", p,
				"-t", "ping,set,get,incr,lpush,rpush,lpop,sadd,hset,mset")
			if strings.Contains(strings.ToLower(out), "error") {
				t.Errorf("redis-benchmark -P %s through %s reported errors:\n%s", p, addr, out)
			}
			for _, line := range strings.Split(strings.ReplaceAll(out, "\r", "\n"), "\n") {
				if name, _, ok := strings.Cut(line, ": "); ok && strings.Contains(line, "requests per second") {
					fmt.Fprintf(&b, "-P %s %s done\n", p, name)
				}
			}
		}
		rc := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
		defer rc.Close()
		fmt.Fprintf(&b, "dbsize %v\n", rc.DBSize(ctx).Val())
		fmt.Fprintf(&b, "counter %v\n", rc.Get(ctx, "counter:__rand_int__").Val())
		fmt.Fprintf(&b, "mylist %v\n", rc.LLen(ctx, "mylist").Val())
		fmt.Fprintf(&b, "myset %v\n", rc.SCard(ctx, "myset").Val())
		fmt.Fprintf(&b, "key %v\n", len(rc.Get(ctx, "key:__rand_int__").Val()))
		// Hot reads so that the comparison also covers cache answers,
		// once the writes above (thousands of key:__rand_int__ in the
		// last second, which make caching it look worthless) have left
		// the admission's 1-s window.
		time.Sleep(detector.Window + 100*time.Millisecond)
		fmt.Fprint(&b, redisTool(t, "redis-benchmark", addr, "", "-q", "-n", "5000", "-c", "5", "-P", "8", "-t", "get") != "")
		return b.String()
	})
}
