// Package cachesim holds an offline simulation of Cicada's cache and its
// admission (hotcache.Cache driven by detector.Admission as the proxy
// drives them) under a seeded Zipf trace of reads and writes on an
// injected clock: no network, no Redis, seconds per run. It answers how
// much of a sustained skewed load the cache would answer and what it
// costs in fills, so that admission and eviction can be compared quickly;
// the live figures come from `make bench` (docs/performance.md).
package cachesim
