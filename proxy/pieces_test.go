package proxy

import (
	"slices"
	"testing"
)

// TestPiece: down and writeOut cut a slice into powers of two from 4 KiB
// up to 1 MiB, so that gnet's buffer for each piece it queues (the next
// power of two) is no larger than the piece, but for a last piece under
// 4 KiB.
func TestPiece(t *testing.T) {
	for _, c := range []struct{ n, want int }{
		{1, 1}, {100, 100}, {4096, 4096}, {4097, 4096}, {8191, 4096}, {8192, 8192},
		{65536 + 10, 65536}, {1<<20 + 10, 1 << 20}, {3 << 20, 1 << 20},
	} {
		if got := piece(c.n); got != c.want {
			t.Errorf("piece(%d) = %d, want %d", c.n, got, c.want)
		}
	}
	// The pieces of a cached 1 MB value's reply: 1 MiB, then the rest
	// whole.
	for _, c := range []struct {
		n    int
		want []int
	}{
		{1<<20 + 10, []int{1 << 20, 10}},
		{70000, []int{65536, 4096, 368}},
		{3<<20 + 5000, []int{1 << 20, 1 << 20, 1 << 20, 4096, 904}},
	} {
		var got []int
		for n := c.n; n > 0; n -= piece(n) {
			got = append(got, piece(n))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("pieces of %d: %v, want %v", c.n, got, c.want)
		}
	}
}
