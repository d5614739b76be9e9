package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/test/cicadatest"
)

// TestProtoMaxBulkLenChanged: proto-max-bulk-len changed at run time (by
// CONFIG SET through Cicada or on Redis directly) applies at once to
// connections already open, both ways, at once and 1.5 s later (by when
// Cicada has read Redis's configuration again).
func TestProtoMaxBulkLenChanged(t *testing.T) {
	p := newPair(t, []string{"--proto-max-bulk-len", "2mb"}, cicadatest.Options{})
	p.LoadSample(t)
	setBig := cmd("SET", "bulkkey", strings.Repeat("b", 3_000_000)) + cmd("STRLEN", "bulkkey") + cmd("GET", "hot")
	setMid := cmd("SET", "bulkkey", strings.Repeat("m", 1_500_000)) + cmd("GET", "hot")
	// onRedis returns a function that runs CONFIG SET on both Redis servers
	// directly 100 ms after it is called, while the conversation pauses.
	onRedis := func(value string) func() error {
		return func() error {
			time.Sleep(100 * time.Millisecond)
			for _, addr := range []string{p.Direct.Addr, p.Behind.Addr} {
				rc := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
				err := rc.ConfigSet(context.Background(), "proto-max-bulk-len", value).Err()
				_ = rc.Close()
				if err != nil {
					return err
				}
			}
			return nil
		}
	}
	tests := []struct {
		name   string
		before func() error // run while the conversation runs
		steps  []step
	}{
		{"raised through Cicada, at once", nil, []step{send(cmd("PING")), sideCmd("CONFIG", "SET", "proto-max-bulk-len", "8mb"),
			send(setBig)}},
		{"raised through Cicada, 1.5 s later", nil, []step{send(cmd("PING")), sideCmd("CONFIG", "SET", "proto-max-bulk-len", "8mb"),
			pause(1500 * time.Millisecond), send(setBig)}},
		{"raised on Redis, 1.5 s later", onRedis("8mb"), []step{send(cmd("PING")), pause(1500 * time.Millisecond), send(setBig)}},
		{"lowered through Cicada, at once", nil, []step{send(cmd("PING")), sideCmd("CONFIG", "SET", "proto-max-bulk-len", "1mb"),
			send(setMid)}},
		{"lowered on Redis, 1.5 s later", onRedis("1mb"), []step{send(cmd("PING")), pause(1500 * time.Millisecond), send(setMid)}},
		{"over the limit", nil, []step{send(cmd("PING") + setBig)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.Both(t, []string{"CONFIG", "SET", "proto-max-bulk-len", "2mb"})
			p.WarmSample(t)
			done := make(chan error, 1)
			go func() {
				if tt.before == nil {
					done <- nil
					return
				}
				done <- tt.before()
			}()
			p.Compare(t, tt.steps...)
			if err := <-done; err != nil {
				t.Fatalf("CONFIG SET on Redis: %v", err)
			}
		})
	}
}
