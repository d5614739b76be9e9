package detector_test

import (
	"fmt"
	"hash/maphash"
	"time"

	"github.com/cicada-proxy/cicada/detector"
)

// Example shows the three roles: an event loop counting accesses, a ticker
// advancing the window, and a reader asking whether a key is hot. A fixed
// start time stands in for time.Now.
func Example() {
	seed := maphash.MakeSeed() // one seed for the whole process
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	d, err := detector.New(detector.Config{Threshold: 3, Loops: 1}, start)
	if err != nil {
		panic(err)
	}
	h := maphash.String(seed, "stock:42")

	// Event loop 0, on each GET of the key.
	for range 3 {
		d.Observe(0, h)
	}
	fmt.Println("hot:", d.Estimate(h) >= d.Threshold(), "estimate:", d.Estimate(h))

	// The ticker, every 100 ms or less; here 1.1 s later with no traffic.
	for t := 100 * time.Millisecond; t <= 1100*time.Millisecond; t += 100 * time.Millisecond {
		d.Advance(start.Add(t))
	}
	fmt.Println("cold:", 2*d.Estimate(h) < d.Threshold(), "estimate:", d.Estimate(h))
	// Output:
	// hot: true estimate: 3
	// cold: true estimate: 0
}
