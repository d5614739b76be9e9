package upstream

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// TestRoleWatch runs the subscriber against a one-node cluster (a master
// with every slot): its view is read, and a master's view is trusted only
// while the role watch's WAIT is blocked. An upstream user without +wait
// gets a warning, once, and no trust, not even while a retried WAIT waits
// for its refusal; given +wait, the watch arms.
func TestRoleWatch(t *testing.T) {
	r := redistest.Start(t, "--cluster-enabled", "yes")
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rc.Close()
	for _, cmd := range [][]any{
		{"CLUSTER", "ADDSLOTSRANGE", 0, cluster.Slots - 1},
		{"ACL", "SETUSER", "cicada", "on", ">pw", "~*", "&*", "+@all", "-wait"},
	} {
		if err := rc.Do(ctx, cmd...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	cache, err := hotcache.New(hotcache.Config{Capacity: 10, MaxBytes: 1 << 20, MaxValue: 100, StrictHolds: true})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	s := New(Config{Addr: r.Addr, Username: "cicada", Password: "pw", Configure: true,
		CheckInterval: 200 * time.Millisecond, CountersInterval: 50 * time.Millisecond, Logger: zap.New(core)}, cache)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	scratch := make([]byte, 16<<10)
	waitFor(t, "a master's view of every slot", func() bool {
		v := s.Cluster().View()
		return s.Ready() && v != nil && v.Role == cluster.RoleMaster && v.OK && v.ServedCount() == cluster.Slots
	})
	waitFor(t, "the refusal logged", func() bool {
		return logs.FilterMessageSnippet("role watch refused").Len() > 0
	})
	// Asked without a pause through one more refusal (retried each
	// second): not trusted while the retried WAIT waits for its refusal.
	for end := time.Now().Add(1200 * time.Millisecond); time.Now().Before(end); {
		if _, all := s.Unapplied(nil, scratch); !all {
			t.Fatal("a master's view trusted without a role watch")
		}
	}
	if n := logs.FilterMessageSnippet("role watch refused").Len(); n != 1 {
		t.Fatalf("refusal logged %d times", n)
	}
	if err := rc.Do(ctx, "ACL", "SETUSER", "cicada", "+wait").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the role watch armed", func() bool {
		_, all := s.Unapplied(nil, scratch)
		return !all
	})
	clients := rc.ClientList(ctx).Val()
	if !strings.Contains(clients, "name=cicada-role-watch") || !strings.Contains(clients, "cmd=wait") {
		t.Fatalf("no blocked role watch in CLIENT LIST:\n%s", clients)
	}
}
