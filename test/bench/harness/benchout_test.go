package main

import (
	"errors"
	"os"
	"testing"
)

// The testdata files are redis-benchmark 7.0.15 output captured from real
// runs against redis-server 7.0.15 on loopback.
func TestParseBenchOutput(t *testing.T) {
	tests := []struct {
		file string
		want benchResult
	}{
		{"get-p16.txt", benchResult{Requests: 200000, RPS: 869565.19, P50Ms: 0.615, P99Ms: 2.047, P999Ms: 6.415, MaxMs: 7.599}},
		{"hget-p1.txt", benchResult{Requests: 50000, RPS: 47303.69, P50Ms: 0.487, P99Ms: 4.431, P999Ms: 5.615, MaxMs: 6.479}},
		{"set-p1-r.txt", benchResult{Requests: 50000, RPS: 45167.12, P50Ms: 0.551, P99Ms: 4.335, P999Ms: 5.903, MaxMs: 10.815}},
	}
	for _, tt := range tests {
		out, err := os.ReadFile("testdata/" + tt.file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseBenchOutput(out)
		if err != nil {
			t.Fatalf("%s: %v", tt.file, err)
		}
		if got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.file, got, tt.want)
		}
	}
}

func TestParseBenchOutputIncomplete(t *testing.T) {
	out, err := os.ReadFile("testdata/get-p16.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{0, len(out) / 3} {
		if _, err := parseBenchOutput(out[:cut]); !errors.Is(err, errNoSummary) {
			t.Errorf("cut at %d of %d: got %v, want %v", cut, len(out), err, errNoSummary)
		}
	}
	// Cut inside the latency summary's figures: some error, no result.
	if _, err := parseBenchOutput(out[:len(out)-30]); err == nil {
		t.Errorf("cut at %d of %d: got nil error, want one", len(out)-30, len(out))
	}
}
