package linearizability

import (
	"context"
	"flag"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

var loadPipeline = flag.Int("bypass.pipeline", 16, "GETs per pipeline of each of TestBypassStaleness's 4 load clients")

// TestBypassStaleness measures how long after a write on a direct Redis
// connection (bypassing Cicada) was acknowledged a Cicada reader can still
// read the value before it, with other clients loading Cicada meanwhile.
// Cicada runs as its own process (bin built here), as in production: in
// the test's process its goroutines would wait for the load generator's.
// For each write, its stale window is the latest start of a Cicada read
// that returned an older value, minus the write's acknowledgement (0 when
// no read was stale). It logs p50, p99 and max of the windows. It fails if
// a write stays invisible for 1 s (a lost invalidation) or if more than 5%
// of writes are read stale: with the socket peek working, only those that
// land between Redis's reply to the writer and its notification are
// (0.3-0.9% here); without it, 23% (a mutation test):
//
//	go test -run TestBypassStaleness -v ./test/linearizability/
func TestBypassStaleness(t *testing.T) {
	r := redistest.Start(t)
	p := cicadatest.StartBinary(t, r.Addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	direct := redis.NewClient(&redis.Options{Addr: r.Addr, DisableIdentity: true})
	defer direct.Close()
	if err := direct.Set(ctx, "k", "0", 0).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	// client runs body on its own connection to Cicada until the end.
	client := func(body func(rc *redis.Client)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc := redis.NewClient(&redis.Options{Addr: p.Addr, DisableIdentity: true, PoolSize: 1})
			defer rc.Close()
			for ctx.Err() == nil {
				body(rc)
			}
		}()
	}
	// Load: 4 clients pipelining GETs of other hot keys through Cicada.
	for c := 0; c < 4; c++ {
		client(func(rc *redis.Client) {
			pipe := rc.Pipeline()
			for i := 0; i < *loadPipeline; i++ {
				pipe.Get(ctx, "load"+strconv.Itoa(i))
			}
			_, _ = pipe.Exec(ctx)
		})
	}
	// Readers: (start of the read, version read).
	type read struct {
		at      time.Duration
		version int
	}
	reads := make([][]read, 2)
	for c := range reads {
		client(func(rc *redis.Client) {
			at := time.Since(start)
			if v, err := rc.Get(ctx, "k").Int(); err == nil {
				reads[c] = append(reads[c], read{at, v})
			}
		})
	}
	const writes = 3000
	acked := make([]time.Duration, writes+1)
	for i := 1; i <= writes; i++ {
		if err := direct.Set(ctx, "k", i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		acked[i] = time.Since(start)
		time.Sleep(time.Duration(100+i%400) * time.Microsecond)
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	wg.Wait()
	hitsAt := p.Metric(t, "cicada_cache_hits_total")
	windows := make([]time.Duration, writes+1)
	for _, rs := range reads {
		for _, rd := range rs {
			// Every write acknowledged before the read began and newer
			// than what it returned was missed by this read.
			for i := rd.version + 1; i <= writes && acked[i] < rd.at; i++ {
				windows[i] = max(windows[i], rd.at-acked[i])
			}
		}
	}
	windows = windows[1:]
	slices.Sort(windows)
	stale := 0
	for _, w := range windows {
		if w > 0 {
			stale++
		}
	}
	if worst := windows[len(windows)-1]; worst > time.Second {
		t.Fatalf("a bypass write stayed invisible through Cicada for %v", worst)
	}
	t.Logf("%d direct writes, %d Cicada reads (%v cache hits in all) under load: stale window p50 %v, p99 %v, max %v; %d writes read stale at least once",
		writes, len(reads[0])+len(reads[1]), hitsAt, windows[len(windows)/2], windows[len(windows)*99/100], windows[len(windows)-1], stale)
	if stale > writes/20 {
		t.Errorf("%d of %d bypass writes were read stale through Cicada: Unapplied is not holding back reads of keys whose notification arrived", stale, writes)
	}
}
