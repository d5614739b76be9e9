package main

import (
	"testing"
	"time"

	"github.com/cicada-proxy/cicada/test/redistest"
)

// TestRun floods a real Redis that closes clients over maxmemory-clients:
// the probe reads through it and the flood clients are closed and come back.
func TestRun(t *testing.T) {
	r := redistest.Start(t, "--maxmemory-clients", "8mb")
	if err := run(r.Addr, 2, 500*time.Millisecond, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := run("192.0.2.1:6379", 1, time.Millisecond, 1); err == nil || err.Error() != "192.0.2.1:6379 is not a loopback address" {
		t.Fatalf("a non-loopback address: %v", err)
	}
}
