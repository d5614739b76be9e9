package linearizability

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/difftest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// faultEnv is one fault test's Redis, Cicada and a direct connection.
type faultEnv struct {
	redis  *redistest.Server
	proxy  *cicadatest.Proxy
	direct *redis.Client
	args   []string
}

// metric returns the value of one of Cicada's metrics (labels as
// name=value pairs), as Prometheus would scrape it.
func (f *faultEnv) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(f.proxy.Server.Collector())
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
	next:
		for _, m := range fam.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				for _, l := range m.GetLabel() {
					if l.GetName() == labels[i] && l.GetValue() != labels[i+1] {
						continue next
					}
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}

func (f *faultEnv) do(t *testing.T, args ...any) any {
	t.Helper()
	v, err := f.direct.Do(context.Background(), args...).Result()
	if err != nil && err != redis.Nil {
		t.Fatalf("%v: %v", args, err)
	}
	return v
}

// recovered waits until Cicada answers a hot key from its cache again.
func (f *faultEnv) recovered(t *testing.T) {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: f.proxy.Addr, DisableIdentity: true, MaxRetries: 3})
	defer rc.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		before := f.proxy.Server.Hits()
		rc.Get(context.Background(), "recovery-probe")
		rc.Get(context.Background(), "recovery-probe")
		if f.proxy.Server.Hits() > before && f.metric(t, "cicada_keyspace_subscription_up") == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("Cicada did not serve from its cache again within 15 s of the fault's end")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFaults records a history through Cicada while a fault happens to
// Redis or to Cicada's notification connection, checks it is linearizable
// (no read returned a value Redis would not have returned then), that
// Cicada serves from its cache again once the fault is over, and that its
// metrics show the fault.
func TestFaults(t *testing.T) {
	tests := []struct {
		name      string
		redisArgs []string
		evictable bool   // Redis loses keys by itself in this fault
		writes    []Kind // default AllWrites
		setup     func(t *testing.T, f *faultEnv)
		inject    func(t *testing.T, f *faultEnv) // runs 1 s into the recording
		check     func(t *testing.T, f *faultEnv, before snapshot)
	}{
		{name: "CLIENT KILL TYPE pubsub",
			inject: func(t *testing.T, f *faultEnv) {
				for i := 0; i < 3; i++ {
					f.do(t, "CLIENT", "KILL", "TYPE", "pubsub")
					time.Sleep(300 * time.Millisecond)
				}
			},
			check: func(t *testing.T, f *faultEnv, before snapshot) {
				if got := f.metric(t, "cicada_keyspace_subscriptions_total"); got < before.subs+1 {
					t.Errorf("cicada_keyspace_subscriptions_total %v, want > %v after the kills", got, before.subs)
				}
			}},
		{name: "CLIENT KILL of the lanes",
			inject: func(t *testing.T, f *faultEnv) {
				killed := 0
				for i := 0; i < 3; i++ {
					for _, line := range strings.Split(fmt.Sprint(f.do(t, "CLIENT", "LIST")), "\n") {
						if strings.Contains(line, " name=cicada-lane ") {
							id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
							f.do(t, "CLIENT", "KILL", "ID", id)
							killed++
						}
					}
					time.Sleep(300 * time.Millisecond)
				}
				if cicadatest.Multiplexed() && killed == 0 {
					t.Error("no lane to kill: the fault did not happen")
				}
			}},
		{name: "pubsub output buffer limit",
			inject: func(t *testing.T, f *faultEnv) {
				f.do(t, "CONFIG", "SET", "client-output-buffer-limit", "pubsub 1024 1024 0")
				// 20,000 events at once: far more than Cicada drains while
				// Redis writes them.
				f.do(t, "EVAL", "for i = 1, 20000 do redis.call('SET', 'junk' .. i, 'x') end", 0)
				time.Sleep(500 * time.Millisecond)
				f.do(t, "CONFIG", "SET", "client-output-buffer-limit", "pubsub 32mb 8mb 60")
			},
			check: func(t *testing.T, f *faultEnv, before snapshot) {
				if got := f.metric(t, "cicada_keyspace_subscriptions_total"); got < before.subs+1 {
					t.Errorf("cicada_keyspace_subscriptions_total %v, want > %v: Redis should have dropped the subscription", got, before.subs)
				}
			}},
		{name: "Redis restart", evictable: true, writes: without(FCallSet), // the restart forgets the library
			inject: func(t *testing.T, f *faultEnv) {
				f.redis.Stop()
				time.Sleep(500 * time.Millisecond)
				f.redis = redistest.StartPort(t, f.redis.Port, f.args...)
				f.direct = redis.NewClient(&redis.Options{Addr: f.redis.Addr, DisableIdentity: true})
				t.Cleanup(func() { _ = f.direct.Close() })
			},
			check: func(t *testing.T, f *faultEnv, before snapshot) {
				cfg := f.do(t, "CONFIG", "GET", "notify-keyspace-events")
				if s := fmt.Sprint(cfg); !strings.ContainsAny(s, "KA") {
					t.Errorf("notify-keyspace-events after restart %v: Cicada did not set it again", s)
				}
				if got := f.metric(t, "cicada_keyspace_subscriptions_total"); got < before.subs+1 {
					t.Errorf("cicada_keyspace_subscriptions_total %v, want > %v", got, before.subs)
				}
			}},
		{name: "SIGSTOP 3 s",
			inject: func(t *testing.T, f *faultEnv) {
				_ = f.redis.Cmd.Process.Signal(syscall.SIGSTOP)
				time.Sleep(3 * time.Second)
				_ = f.redis.Cmd.Process.Signal(syscall.SIGCONT)
			}},
		{name: "notify-keyspace-events emptied",
			inject: func(t *testing.T, f *faultEnv) {
				f.do(t, "CONFIG", "SET", "notify-keyspace-events", "")
				time.Sleep(time.Second)
			},
			check: func(t *testing.T, f *faultEnv, before snapshot) {
				cfg := fmt.Sprint(f.do(t, "CONFIG", "GET", "notify-keyspace-events"))
				if !strings.ContainsAny(cfg, "KA") {
					t.Errorf("notify-keyspace-events %v: Cicada did not restore it", cfg)
				}
				if got := f.metric(t, "cicada_cache_evictions_total", "reason", "flush"); got <= before.flushed {
					t.Errorf(`cicada_cache_evictions_total{reason="flush"} %v, want > %v: the cache was not emptied`, got, before.flushed)
				}
			}},
		{name: "maxmemory eviction", evictable: true, writes: without(FlushAll, FlushDB),
			redisArgs: []string{"--maxmemory", "8mb", "--maxmemory-policy", "allkeys-random"},
			inject: func(t *testing.T, f *faultEnv) {
				// Flushes would free the memory before Redis must evict:
				// the writers here send none.
				big := strings.Repeat("x", 256<<10)
				for i := 0; i < 200; i++ {
					// An OOM refusal is possible while Redis evicts.
					f.direct.Set(context.Background(), fmt.Sprintf("filler:%d", i), big, 0)
				}
			},
			check: func(t *testing.T, f *faultEnv, before snapshot) {
				info := fmt.Sprint(f.do(t, "INFO", "stats"))
				if !strings.Contains(info, "evicted_keys:") || strings.Contains(info, "evicted_keys:0\r") {
					t.Errorf("Redis evicted nothing: the fault did not happen\n%s", info)
				}
				if got := f.metric(t, "cicada_cache_evictions_total", "reason", "notification"); got <= before.notified {
					t.Errorf(`cicada_cache_evictions_total{reason="notification"} %v, want > %v`, got, before.notified)
				}
			}},
		{name: "short TTL among 200000 long TTLs", writes: []Kind{Set, PExpire, PExpire, PExpire, Append, Incr, HSet, Multi},
			setup: func(t *testing.T, f *faultEnv) {
				f.do(t, "DEBUG", "POPULATE", 200000, "long")
				f.do(t, "EVAL", "for i = 0, 199999 do redis.call('EXPIRE', 'long:' .. i, 3600) end", 0)
			},
			check: func(t *testing.T, f *faultEnv, before snapshot) {
				if got := f.metric(t, "cicada_cache_evictions_total", "reason", "expired"); got <= before.expired {
					t.Errorf(`cicada_cache_evictions_total{reason="expired"} %v, want > %v: no cached TTL ran out`, got, before.expired)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--enable-debug-command", "yes"}, tt.redisArgs...)
			f := &faultEnv{redis: redistest.Start(t, args...), args: args}
			f.proxy = cicadatest.Start(t, f.redis.Addr, cicadatest.Options{})
			f.direct = redis.NewClient(&redis.Options{Addr: f.redis.Addr, DisableIdentity: true})
			t.Cleanup(func() { _ = f.direct.Close() })
			f.do(t, "FUNCTION", "LOAD", "REPLACE", difftest.FunctionLibrary)
			if tt.setup != nil {
				tt.setup(t, f)
			}
			before := snapshot{
				subs:     f.metric(t, "cicada_keyspace_subscriptions_total"),
				flushed:  f.metric(t, "cicada_cache_evictions_total", "reason", "flush"),
				notified: f.metric(t, "cicada_cache_evictions_total", "reason", "notification"),
				expired:  f.metric(t, "cicada_cache_evictions_total", "reason", "expired"),
			}
			var wg sync.WaitGroup
			if tt.inject != nil {
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Second)
					tt.inject(t, f)
				}()
			}
			history, err := Record(context.Background(), Workload{Addr: f.proxy.Addr, Readers: []int{0, 0, 1},
				Writers: []int{0, 1}, Writes: tt.writes, Duration: 5 * time.Second, Pause: 500 * time.Microsecond,
				Tolerate: true})
			wg.Wait()
			if err != nil {
				t.Fatal(err)
			}
			res, files, err := Check(NewModel(tt.evictable), history, 5*time.Minute, artifacts(),
				fmt.Sprintf("cicada-fault-%d", time.Now().UnixNano()))
			if err != nil {
				t.Fatal(err)
			}
			if res != porcupine.Ok {
				t.Fatalf("%d operations: %s; kept in %v", len(history), res, files)
			}
			f.recovered(t)
			if tt.check != nil {
				tt.check(t, f, before)
			}
			t.Logf("%d operations, linearizable; %v answered from the cache", len(history), f.metric(t, "cicada_cache_hits_total"))
		})
	}
}

// snapshot holds metrics read before a fault.
type snapshot struct{ subs, flushed, notified, expired float64 }

// without returns AllWrites but kinds.
func without(kinds ...Kind) []Kind {
	var w []Kind
	for _, k := range AllWrites {
		if !slices.Contains(kinds, k) {
			w = append(w, k)
		}
	}
	return w
}
