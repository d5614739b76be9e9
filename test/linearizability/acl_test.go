package linearizability

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// TestBypassACLRevocation measures how long a read permission revoked on
// a direct Redis connection (ACL SETUSER, bypassing Cicada) stays in force
// for a Cicada client reading a cached key: Redis sends no notification of
// ACL changes, so Cicada sees them in INFO commandstats, read every
// --commandstats-interval (default 100 ms, used here). Each round grants
// alice the key, warms it into the cache through alice's connection,
// revokes the grant directly, and has alice read until Redis's -NOPERM
// comes back. The window is the start of the last read answered with the
// value minus the revocation's acknowledgement (0 if none was). It logs
// p50 and max of the windows, and fails if a revocation is not in force
// after 2 s or a refused read's error is not Redis's:
//
//	go test -run TestBypassACLRevocation -v ./test/linearizability/
func TestBypassACLRevocation(t *testing.T) {
	r := redistest.Start(t)
	p := cicadatest.StartBinary(t, r.Addr)
	ctx := context.Background()
	direct := redis.NewClient(&redis.Options{Addr: r.Addr, DisableIdentity: true})
	defer direct.Close()
	if err := direct.Set(ctx, "public:x", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	const rounds = 20
	// Redis's words for it, which differ by version: alice's own GET on a
	// direct connection once the grant is revoked.
	aliceDirect := redis.NewClient(&redis.Options{Addr: r.Addr, Username: "alice", Password: "pw", DisableIdentity: true})
	defer aliceDirect.Close()
	noperm := ""
	var windows []time.Duration
	for round := 0; round < rounds; round++ {
		if err := direct.Do(ctx, "ACL", "SETUSER", "alice", "reset", "on", ">pw", "~public:*", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
		alice := redis.NewClient(&redis.Options{Addr: p.Addr, Username: "alice", Password: "pw", DisableIdentity: true, PoolSize: 1})
		hits := p.Metric(t, "cicada_cache_hits_total")
		for p.Metric(t, "cicada_cache_hits_total") < hits+3 {
			if v, err := alice.Get(ctx, "public:x").Result(); v != "v" || err != nil {
				t.Fatalf("round %d: warm-up GET = %q, %v", round, v, err)
			}
		}
		if err := direct.Do(ctx, "ACL", "SETUSER", "alice", "resetkeys", "~other:*").Err(); err != nil {
			t.Fatal(err)
		}
		revoked := time.Now()
		if noperm == "" {
			err := aliceDirect.Get(ctx, "public:x").Err()
			if err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
				t.Fatalf("direct GET as alice after revocation: %v, want NOPERM", err)
			}
			noperm = err.Error()
			revoked = time.Now()
		}
		var window time.Duration
		for {
			at := time.Now()
			v, err := alice.Get(ctx, "public:x").Result()
			if err != nil {
				if err.Error() != noperm {
					t.Fatalf("round %d: GET after revocation: %v, want %s", round, err, noperm)
				}
				break
			}
			if v != "v" {
				t.Fatalf("round %d: GET = %q", round, v)
			}
			window = at.Sub(revoked)
			if window > 2*time.Second {
				t.Fatalf("round %d: alice still reads 2 s after her permission was revoked", round)
			}
		}
		windows = append(windows, window)
		alice.Close()
		time.Sleep(time.Duration(round%7) * 13 * time.Millisecond) // revoke at varied phases of the interval
	}
	slices.Sort(windows)
	t.Logf("revoked read permission still in force through Cicada over %d rounds: p50 %v, max %v (all: %s)",
		rounds, windows[rounds/2], windows[rounds-1], fmtDurations(windows))
}

func fmtDurations(d []time.Duration) string {
	s := make([]string, len(d))
	for i, x := range d {
		s[i] = x.Round(100 * time.Microsecond).String()
	}
	return strings.Join(s, " ")
}
