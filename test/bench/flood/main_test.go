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
}
