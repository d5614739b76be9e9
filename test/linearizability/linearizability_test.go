package linearizability

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/difftest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

var (
	runs      = flag.Int("lin.runs", 2, "histories to record and check (make conformance: 20)")
	duration  = flag.Duration("lin.duration", 2*time.Second, "length of each history (make conformance: 10s)")
	keepViews = flag.Bool("lin.keep-views", false, "write the visualizations of testdata's failing histories next to them")
)

// artifacts is where failing histories are written: $CICADA_ARTIFACTS, or
// the system's temporary directory.
func artifacts() string {
	if d := os.Getenv("CICADA_ARTIFACTS"); d != "" {
		return d
	}
	return os.TempDir()
}

// TestLinearizable records histories through Cicada (every key hot from
// its first read, so many reads are answered from the cache) with writers
// using every write kind (odd runs: mostly millisecond TTLs), and checks
// each is linearizable.
func TestLinearizable(t *testing.T) {
	r := redistest.Start(t)
	p := cicadatest.Start(t, r.Addr, cicadatest.Options{})
	rc := redis.NewClient(&redis.Options{Addr: p.Addr, DisableIdentity: true})
	defer rc.Close()
	ctx := context.Background()
	if err := rc.Do(ctx, "FUNCTION", "LOAD", "REPLACE", difftest.FunctionLibrary).Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < *runs; i++ {
		if err := rc.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		hits := p.Server.Hits()
		// Odd runs write mostly TTLs, so that cached keys expire while
		// readers read them.
		writes := AllWrites
		if i%2 == 1 {
			writes = []Kind{Set, SetTTL, SetTTL, PExpire, PExpire, PExpire, Append, Incr, HSet, GetDel, Multi}
		}
		history, err := Record(ctx, Workload{Addr: p.Addr, Readers: []int{0, 0, 1}, Writers: []int{0, 0, 1}, Writes: writes,
			Duration: *duration, Pause: 300 * time.Microsecond, WriterPause: 3 * time.Millisecond, Seed: uint64(i)})
		if err != nil {
			t.Fatal(err)
		}
		reads := 0
		for _, o := range history {
			if k := o.Input.(Input).Kind; k == Get || k == HGet {
				reads++
			}
		}
		res, files, err := Check(NewModel(false), history, 5*time.Minute, artifacts(), fmt.Sprintf("cicada-history-%d-%d", time.Now().Unix(), i))
		if err != nil {
			t.Fatal(err)
		}
		if res != porcupine.Ok {
			t.Fatalf("run %d: %d operations: %s; kept in %v", i, len(history), res, files)
		}
		t.Logf("run %d: %d operations (%d reads, %d answered from the cache): linearizable",
			i, len(history), reads, p.Server.Hits()-hits)
	}
}

// TestCheckerRejects keeps the checker honest: histories that are not
// linearizable (a stale read after an acknowledged write, a read of an
// expired key) must be rejected, with a visualization written.
// notify-emptied.json is from a real failure (TestFaults, before the fix
// of TestNotifyEventsEmptiedDirectly in test/e2e): the operations on key b
// of db 0 in its last 10 ms, after a first SET (client 9) that recreates
// b's value at the excerpt's start; notify-emptied.html is porcupine's
// view of it.
func TestCheckerRejects(t *testing.T) {
	for _, name := range []string{"stale-read", "read-after-expiry", "stale-after-swapdb", "notify-emptied"} {
		t.Run(name, func(t *testing.T) {
			history, err := Load("testdata/" + name + ".json")
			if err != nil {
				t.Fatal(err)
			}
			res, files, err := Check(NewModel(false), history, time.Minute, t.TempDir(), name)
			if err != nil {
				t.Fatal(err)
			}
			if res != porcupine.Illegal || len(files) != 2 {
				t.Fatalf("checker says %s, want %s with a visualization", res, porcupine.Illegal)
			}
			if st, err := os.Stat(files[0]); err != nil || st.Size() == 0 {
				t.Fatalf("visualization %s: %v", files[0], err)
			}
			if *keepViews {
				b, _ := os.ReadFile(files[0])
				if err := os.WriteFile("testdata/"+name+".html", b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// The same history without its last read is linearizable.
			if res, _, _ := Check(NewModel(false), history[:len(history)-1], time.Minute, t.TempDir(), name); res != porcupine.Ok {
				t.Fatalf("without the bad read the checker says %s, want %s", res, porcupine.Ok)
			}
		})
	}
}

// TestExpiryFollowsWallClock checks that the model places a key's expiry
// by the wall clock, as Redis does (mstime): SET b, PEXPIRE b 20, then a
// GET 10 ms later by the monotonic clock finds b gone when the wall clock
// stepped 20 ms forward meanwhile (a CI run on Redis 8.0 saw two keys
// expire 8 and 15 ms early by the monotonic clock), and finds it there when
// the wall clock stepped back; without a step the nil is not linearizable.
func TestExpiryFollowsWallClock(t *testing.T) {
	const ms = int64(time.Millisecond)
	op := func(client int, in Input, out Output, call, ret, wallStep int64) porcupine.Operation {
		in.Call, in.Return, in.WallCall, in.WallReturn = call, ret, call+wallStep, ret+wallStep
		return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
	}
	history := func(got Output, mono, wallStep int64) []porcupine.Operation {
		return []porcupine.Operation{
			op(0, Input{Kind: Set, Key: keyB, Val: "v"}, Output{Str: "OK"}, 0, ms/10, 0),
			op(0, Input{Kind: PExpire, Key: keyB, TTL: 20}, intOut(1), ms/5, ms*3/10, 0),
			op(1, Input{Kind: Get, Key: keyB}, got, mono, mono+ms/10, wallStep),
		}
	}
	for _, tt := range []struct {
		name           string
		got            Output
		mono, wallStep int64
		want           porcupine.CheckResult
	}{
		{"gone after a forward step", Output{Nil: true}, 10 * ms, 20 * ms, porcupine.Ok},
		{"there after a backward step", Output{Str: "v"}, 30 * ms, -20 * ms, porcupine.Ok},
		{"gone early without a step", Output{Nil: true}, 10 * ms, 0, porcupine.Illegal},
		{"there late without a step", Output{Str: "v"}, 30 * ms, 0, porcupine.Illegal},
	} {
		if res := porcupine.CheckOperations(NewModel(false), history(tt.got, tt.mono, tt.wallStep)); res != (tt.want == porcupine.Ok) {
			t.Errorf("%s: linearizable %v, want %s", tt.name, res, tt.want)
		}
	}
}
