package cluster

import (
	"math"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The checkers must reject what they are there to find: each history is
// judged by staleReads (count) and porcupine (result).
func TestHistoryCheckers(t *testing.T) {
	w := func(client int, v string, call, ret int64) op {
		return op{Client: client, Key: "k", Write: true, Value: v, Call: call, Return: ret}
	}
	unknown := func(client int, v string, call int64) op {
		return op{Client: client, Key: "k", Write: true, Value: v, Unknown: true, Call: call, Return: math.MaxInt64}
	}
	r := func(client int, v string, call, ret int64) op {
		return op{Client: client, Key: "k", Value: v, Call: call, Return: ret}
	}
	for _, c := range []struct {
		name    string
		history []op
		stale   int
		lin     porcupine.CheckResult
	}{
		{"in order", []op{w(0, "a", 0, 10), r(1, "a", 11, 20), w(0, "b", 21, 30), r(1, "b", 31, 40)}, 0, porcupine.Ok},
		{"overwritten before the read", []op{w(0, "a", 0, 10), w(0, "b", 11, 20), r(1, "a", 21, 30)}, 1, porcupine.Illegal},
		{"concurrent with the overwrite", []op{w(0, "a", 0, 10), w(0, "b", 11, 25), r(1, "a", 21, 30)}, 0, porcupine.Ok},
		{"never written", []op{w(0, "a", 0, 10), r(1, "x", 11, 20)}, 1, porcupine.Illegal},
		{"written after the read", []op{r(1, "a", 0, 10), w(0, "a", 11, 20)}, 1, porcupine.Illegal},
		{"missing key", []op{w(0, "a", 0, 10), r(1, "", 11, 20)}, 1, porcupine.Illegal},
		{"unknown write never read", []op{w(0, "a", 0, 10), unknown(0, "b", 11), r(1, "a", 50, 60)}, 0, porcupine.Ok},
		{"unknown write never read, then a stale read", []op{w(0, "a", 0, 10), unknown(0, "b", 11), w(2, "c", 12, 20),
			r(1, "c", 50, 60), r(1, "a", 61, 70)}, 1, porcupine.Illegal},
		{"unknown write read later", []op{w(0, "a", 0, 10), unknown(0, "b", 11), w(2, "c", 12, 20), r(1, "b", 50, 60)}, 0, porcupine.Ok},
		// Once b is read, c (written before) cannot be read again: only
		// porcupine sees that.
		{"unknown write read, then an older one", []op{w(0, "a", 0, 10), unknown(0, "b", 11), w(2, "c", 12, 20),
			r(1, "b", 50, 60), r(1, "c", 61, 70)}, 0, porcupine.Illegal},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := staleReads(c.history); len(got) != c.stale {
				t.Errorf("staleReads found %d (%v), want %d", len(got), got, c.stale)
			}
			res, _, err := checkLinearizable(c.history, 10*time.Second, t.TempDir(), "h")
			if err != nil {
				t.Fatal(err)
			}
			if res != c.lin {
				t.Errorf("porcupine says %s, want %s", res, c.lin)
			}
		})
	}
}
