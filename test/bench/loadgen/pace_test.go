package main

import (
	"testing"
	"time"
)

// TestPacerNeverEarly: sleepUntil returns at its time or after, never
// before (a request sent early would shorten its measured latency), and
// at once for a time already past.
func TestPacerNeverEarly(t *testing.T) {
	p, err := newPacer()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 200 {
		at := time.Now().Add(time.Duration(50+i*5) * time.Microsecond)
		if err := p.sleepUntil(at); err != nil {
			t.Fatal(err)
		}
		if now := time.Now(); now.Before(at) {
			t.Fatalf("woke %v before its time", at.Sub(now))
		}
	}
	for _, past := range []time.Time{time.Now().Add(-time.Second), {}} { // {}: before boot
		if err := p.sleepUntil(past); err != nil {
			t.Fatal(err)
		}
	}
}
