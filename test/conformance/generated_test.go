package conformance

import (
	"flag"
	"strconv"
	"strings"
	"testing"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/difftest"
)

var (
	conversations = flag.Int("conformance.n", 300, "generated conversations to run (make conformance: 10000)")
	firstSeed     = flag.Uint64("conformance.seed", 1, "seed of the first generated conversation; conversation i uses seed+i")
	workers       = flag.Int("conformance.workers", 1, "pairs of servers running conversations in parallel")
)

// generatedRedisArgs keep every hash and set in its listpack or intset
// encoding, whose iteration order is the insertion order: a hashtable's
// order depends on each server's random hash seed, which would make
// HGETALL inside EXEC differ between two servers for reasons of their own.
var generatedRedisArgs = []string{
	"--hash-max-listpack-entries", "100000", "--hash-max-listpack-value", "1000000",
	"--set-max-intset-entries", "100000",
}

// TestGenerated runs seeded random conversations directly and through
// Cicada (every key hot from its first read) and fails on the first
// difference, printing the seed and a minimal conversation that shows it.
// Every tenth conversation is opaque (see difftest.Generator) and runs on
// a pair of its own. Reproduce one with -conformance.seed=S
// -conformance.n=1 (S a multiple of 10 for an opaque one).
func TestGenerated(t *testing.T) {
	for w := 0; w < *workers; w++ {
		t.Run("worker"+strconv.Itoa(w), func(t *testing.T) {
			t.Parallel()
			plain := difftest.NewPair(t, generatedRedisArgs, cicadatest.Options{})
			opaque := difftest.NewPair(t, generatedRedisArgs, cicadatest.Options{})
			plain.Both(t, difftest.Once...)
			opaque.Both(t, difftest.Once...)
			ran := 0
			for i := w; i < *conversations; i += *workers {
				seed := *firstSeed + uint64(i)
				if seed%10 == 0 {
					runSeed(t, opaque, seed)
				} else {
					runSeed(t, plain, seed)
				}
				ran++
			}
			hits := plain.Proxy.Server.Hits() + opaque.Proxy.Server.Hits()
			if ran >= 20 && plain.Proxy.Server.Hits() == 0 {
				t.Fatal("Cicada answered nothing from its cache: the conversations did not test it")
			}
			t.Logf("%d conversations: no difference; %d answers from Cicada's cache", ran, hits)
		})
	}
}

// runSeed runs the conversation generated from seed and fails the test,
// with a minimal conversation, if Cicada's replies differ from Redis's.
func runSeed(t *testing.T, p *difftest.Pair, seed uint64) {
	t.Helper()
	g := difftest.NewGenerator(seed)
	g.Opaque = seed%10 == 0
	conv := g.Conversation()
	fails := func(c difftest.Conversation) bool {
		p.Both(t, difftest.Setup...)
		d := p.Diff(t, c)
		return d != "" && !strings.HasPrefix(d, "invalid conversation")
	}
	p.Both(t, difftest.Setup...)
	d := p.Diff(t, conv)
	if d == "" {
		return
	}
	if strings.HasPrefix(d, "invalid conversation") {
		t.Fatalf("seed %d: the generator made a conversation Redis does not answer: %s\n%s", seed, d, difftest.Format(conv))
	}
	min := difftest.Minimize(conv, fails)
	p.Both(t, difftest.Setup...)
	t.Fatalf("seed %d: Cicada differs from Redis (after difftest.Setup); minimal conversation:\n%s\n%s",
		seed, difftest.Format(min), p.Diff(t, min))
}
