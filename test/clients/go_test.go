package clients

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// transcript collects a scenario's steps, one line each.
type transcript struct{ strings.Builder }

func (tr *transcript) out(step string, v ...any) { fmt.Fprintf(tr, "%s: %v\n", step, v) }

// TestGoRedis: go-redis v9 in its default RESP3, with a connection pool:
// hot reads, pipelines, a WATCH transaction aborted by a write from
// elsewhere, pub/sub, Lua, errors.
func TestGoRedis(t *testing.T) {
	ctx := context.Background()
	newSides(t).compare(t, func(addr, backdoor string) string {
		var tr transcript
		r := redis.NewClient(&redis.Options{Addr: addr})
		back := redis.NewClient(&redis.Options{Addr: backdoor})
		defer r.Close()
		defer back.Close()
		tr.out("set", r.Set(ctx, "go:hot", "v1", 0).Val())
		seen := map[string]int{}
		for range 200 {
			seen[r.Get(ctx, "go:hot").Val()]++
		}
		tr.out("hot reads", seen)
		tr.out("hset", r.HSet(ctx, "go:h", "f1", "a", "f2", "b").Val())
		seen = map[string]int{}
		for range 200 {
			seen[r.HGet(ctx, "go:h", "f1").Val()]++
		}
		tr.out("hot hget", seen)

		cmds, err := r.Pipelined(ctx, func(p redis.Pipeliner) error {
			for range 50 {
				p.Get(ctx, "go:hot")
			}
			p.Set(ctx, "go:hot", "v2", 0)
			p.Get(ctx, "go:hot")
			p.Incr(ctx, "go:hot")
			p.HGetAll(ctx, "go:h")
			p.Get(ctx, "go:missing")
			return nil
		})
		tr.out("pipeline error", err)
		for _, c := range cmds {
			tr.out("  "+c.Name(), c.String())
		}

		err = r.Watch(ctx, func(tx *redis.Tx) error {
			if err := back.Set(ctx, "go:w", "changed", 0).Err(); err != nil {
				return err
			}
			_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "go:w", "mine", 0)
				return nil
			})
			return err
		}, "go:w")
		tr.out("watch aborted", errors.Is(err, redis.TxFailedErr), r.Get(ctx, "go:w").Val())

		tr.out("eval", r.Eval(ctx, "redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1])", []string{"go:hot"}, "lua").Val())
		seen = map[string]int{}
		for range 50 {
			seen[r.Get(ctx, "go:hot").Val()]++
		}
		tr.out("reads after eval", seen)
		tr.out("wrongtype", r.HGet(ctx, "go:hot", "f").Err())

		sub := r.Subscribe(ctx, "go:ch")
		_, err = sub.Receive(ctx)
		tr.out("subscribed", err)
		tr.out("publish", back.Publish(ctx, "go:ch", "hello").Val())
		msg, err := sub.ReceiveMessage(ctx)
		tr.out("message", msg.Channel, msg.Payload, err)
		tr.out("unsubscribe", sub.Close())

		tr.out("del", r.Del(ctx, "go:hot", "go:h", "go:w").Val())
		tr.out("get deleted", r.Get(ctx, "go:hot").Err())
		return tr.String()
	})
}

// TestRueidis: rueidis, whose DoCache is server-assisted client-side
// caching (RESP3 CLIENT TRACKING): invalidations of a write through another
// connection and of a write straight to Redis reach it through Cicada.
// Also auto-pipelining under concurrent use, and a MULTI/EXEC.
func TestRueidis(t *testing.T) {
	ctx := context.Background()
	newSides(t).compare(t, func(addr, backdoor string) string {
		var tr transcript
		newClient := func(a string, noCache bool) rueidis.Client {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, DisableCache: noCache, DisableRetry: true})
			if err != nil {
				t.Fatalf("rueidis %s: %v", a, err)
			}
			return c
		}
		r, plain, back := newClient(addr, false), newClient(addr, true), newClient(backdoor, true)
		defer r.Close()
		defer plain.Close()
		defer back.Close()
		do := func(c rueidis.Client, cmd rueidis.Completed) string {
			v, err := c.Do(ctx, cmd).ToAny()
			if err != nil {
				return "err " + err.Error()
			}
			return fmt.Sprint(v)
		}
		cached := func() (string, bool) {
			res := r.DoCache(ctx, r.B().Get().Key("ru:hot").Cache(), time.Minute)
			s, err := res.ToString()
			if err != nil {
				return "err " + err.Error(), res.IsCacheHit()
			}
			return s, res.IsCacheHit()
		}
		// waitFor polls the cached read until it shows want: invalidation
		// pushes arrive asynchronously, directly as through Cicada.
		waitFor := func(want string) string {
			for range 200 {
				if v, _ := cached(); v == want {
					return v
				}
				time.Sleep(10 * time.Millisecond)
			}
			v, _ := cached()
			return v
		}
		tr.out("set", do(plain, plain.B().Set().Key("ru:hot").Value("v1").Build()))
		hits := 0
		for range 50 {
			if _, hit := cached(); hit {
				hits++
			}
		}
		tr.out("client cache hits", hits > 0)
		seen := map[string]int{}
		for range 100 {
			seen[do(plain, plain.B().Get().Key("ru:hot").Build())]++
		}
		tr.out("hot reads", seen)
		tr.out("write elsewhere", do(plain, plain.B().Set().Key("ru:hot").Value("v2").Build()))
		tr.out("after write", waitFor("v2"))
		tr.out("write to redis", do(back, back.B().Set().Key("ru:hot").Value("v3").Build()))
		tr.out("after backdoor write", waitFor("v3"))

		// Auto-pipelining: concurrent Do calls share the connection.
		done := make(chan string, 64)
		for range 64 {
			go func() { done <- do(plain, plain.B().Get().Key("ru:hot").Build()) }()
		}
		seen = map[string]int{}
		for range 64 {
			seen[<-done]++
		}
		tr.out("concurrent reads", seen)

		for i, res := range plain.DoMulti(ctx,
			plain.B().Multi().Build(),
			plain.B().Set().Key("ru:a").Value("1").Build(),
			plain.B().Incr().Key("ru:a").Build(),
			plain.B().Exec().Build()) {
			v, err := res.ToAny()
			tr.out(fmt.Sprintf("multi %d", i), v, err)
		}
		tr.out("del", do(plain, plain.B().Del().Key("ru:hot", "ru:a").Build()))
		tr.out("after del", waitFor("err redis nil message"))
		return tr.String()
	})
}
