package zipf

import (
	"math"
	"math/rand/v2"
	"testing"
)

// zipfPMF is the exact Zipf(n, s) pmf: p(k) = k^-s / H(n, s), k = 1..n.
func zipfPMF(n int, s float64) []float64 {
	p := make([]float64, n+1)
	var sum float64
	for k := 1; k <= n; k++ {
		p[k] = math.Pow(float64(k), -s)
		sum += p[k]
	}
	for k := range p {
		p[k] /= sum
	}
	return p
}

// chiSquare compares observed counts with the pmf over ranks 1..n.
func chiSquare(counts []int, pmf []float64, draws int) float64 {
	var x2 float64
	for k := 1; k < len(pmf); k++ {
		e := pmf[k] * float64(draws)
		d := float64(counts[k]) - e
		x2 += d * d / e
	}
	return x2
}

// TestZipfMatchesPMF draws 400,000 ranks (fixed seed) for small n and
// exponents on both sides of 1, and checks the chi-square statistic against
// the exact pmf at the 0.1% critical value. It also checks the test has
// power: the same counts are rejected against the pmf of a neighbouring
// exponent.
func TestZipfMatchesPMF(t *testing.T) {
	// Chi-square 0.999 quantiles by degrees of freedom (n-1).
	crit := map[int]float64{9: 27.88, 19: 43.82}
	const draws = 400_000
	for _, tc := range []struct {
		n int
		s float64
	}{{10, 0.99}, {20, 0.99}, {10, 0.5}, {10, 1.0}, {20, 1.5}, {1, 0.99}} {
		z := New(rand.New(rand.NewPCG(42, uint64(tc.n))), tc.n, tc.s)
		counts := make([]int, tc.n+1)
		for range draws {
			k := z.Next()
			if k < 1 || k > tc.n {
				t.Fatalf("n=%d s=%v: next() = %d, want 1..%d", tc.n, tc.s, k, tc.n)
			}
			counts[k]++
		}
		if tc.n == 1 {
			continue
		}
		x2 := chiSquare(counts, zipfPMF(tc.n, tc.s), draws)
		if x2 > crit[tc.n-1] {
			t.Errorf("n=%d s=%v: chi-square %.1f, want <= %.1f; counts %v", tc.n, tc.s, x2, crit[tc.n-1], counts)
		}
		if wrong := chiSquare(counts, zipfPMF(tc.n, tc.s+0.05), draws); wrong <= crit[tc.n-1] {
			t.Errorf("n=%d s=%v: chi-square against s+0.05 is %.1f, want > %.1f (test has no power)", tc.n, tc.s, wrong, crit[tc.n-1])
		}
	}
}

// TestZipfLargeN checks, for the benchmark's own shape (n = 1e6, s = 0.99),
// the frequency of the hottest ranks against the pmf within 3%.
func TestZipfLargeN(t *testing.T) {
	const n, s, draws = 1_000_000, 0.99, 400_000
	pmf := zipfPMF(n, s)
	z := New(rand.New(rand.NewPCG(7, 7)), n, s)
	counts := make([]int, 4)
	for range draws {
		if k := z.Next(); k <= 3 {
			counts[k]++
		}
	}
	for k := 1; k <= 3; k++ {
		want := pmf[k] * draws
		if rel := math.Abs(float64(counts[k])-want) / want; rel > 0.03 {
			t.Errorf("rank %d: %d draws, want %.0f (±3%%), off by %.1f%%", k, counts[k], want, 100*rel)
		}
	}
}

func BenchmarkZipf(b *testing.B) {
	z := New(rand.New(rand.NewPCG(1, 1)), 1_000_000, 0.99)
	b.ReportAllocs()
	for b.Loop() {
		z.Next()
	}
}
