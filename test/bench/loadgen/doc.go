// Command loadgen is a Redis load generator for the two scenarios
// redis-benchmark cannot run: skewed keys and a fixed-rate open loop.
//
//	go build ./test/bench/loadgen
//	./loadgen -addr 127.0.0.1:7801 -prefill -duration 0        # SET key:0..key:999999 once
//	./loadgen -addr 127.0.0.1:7801 -duration 10s               # closed loop, 200 connections
//	./loadgen -addr 127.0.0.1:7801 -scenario open -rate 20000  # open loop, 20,000 ops/s
//	./loadgen ... -json                                        # one JSON object per run
//
// # Workload
//
// Every request is a GET (probability -get-ratio, 0.9) or a SET with a
// -value-size (100) byte value (and EX -set-ttl seconds when it is above 0),
// of the key "key:<i>", i in [0, -keys) (1,000,000), drawn from Zipf(s =
// -zipf, 0.99): P(i) ∝ 1/(i+1)^s, so key:0 is the hottest (about 7% of
// requests at the defaults). Go's math/rand Zipf needs s > 1, so the sampler
// is rejection-inversion (W. Hörmann and G. Derflinger, "Rejection-inversion
// to generate variates from monotone discrete distributions", ACM TOMACS
// 6(3), 1996), as in Apache Commons RNG: exact for any s > 0, O(1) memory,
// about one uniform per draw. Each connection has its own PCG stream (seed
// -seed, stream = connection index). -prefill first SETs every key over 4
// connections, 1000 per pipeline.
//
// # Closed loop (-scenario closed)
//
// -c connections (200), each sends -P requests (1) and waits for all their
// replies before sending again. Each request is charged its round trip, from
// just before the write to the last reply. Throughput is requests/s over the
// run; the latency is the service time seen by a client that only sends when
// answered, so it hides queueing (coordinated omission): use it for
// throughput and for comparing like with like.
//
// # Open loop (-scenario open)
//
// A fixed -rate is split over the -c connections: connection j sends its
// k-th request at the intended time start + j*T/c + k*T with T = c/rate,
// one at a time. Latency is measured from the intended time, not the send:
// if a connection is still waiting for an earlier reply (or woke late), that
// delay counts, as it would for a user whose request arrived then (the
// coordinated-omission correction of wrk2 / HdrHistogram). All connections
// run on one OS thread with an epoll instance of its own (open.go): the
// next intended time is epoll_pwait2's timeout (nanoseconds, the thread's
// timer slack set to 1 ns; epoll_wait's whole milliseconds, and Go's timers
// on an idle process, woke up to 1 ms late, which counted as latency the
// server never caused), and each reply is read when its socket turns
// readable. The sockets are nonblocking descriptors outside Go's netpoller,
// so no request costs a goroutine hand-off between threads. "late"
// counts sends more than -late-slack (1 ms) after their intended time;
// "missed" counts intended times still unsent when the run ended (not in
// the histogram: a run with missed > 0 understates the tail). ops_per_sec is
// completed requests / -duration. service_p50_us and service_p99_us are the
// same requests timed from the actual send; the gap to p50/p99 is the
// queueing and wake-up delay.
//
// # Output
//
// A human line, or with -json one object: scenario, addr, conns, pipeline,
// target_rate, ops, duration_s, ops_per_sec, p50_us, p99_us, p999_us,
// max_us, errors (error replies plus failed connections), late, missed,
// service_p50_us, service_p99_us, get_p50_us, get_p99_us, set_p50_us,
// set_p99_us (GETs and SETs apart, when a round trip carries one request:
// the open loop and -P 1; through Cicada, a GET may be a hit, a SET never
// is), cpu_s, cpu_s_per_1m_ops, cpu_pct_of_one_core. Latencies are HDR
// histograms (hdrhistogram-go, 1 ns to 10 s, 3 significant digits), one
// per connection, merged at the end.
//
// # Cost of the generator
//
// Raw RESP over TCP: requests are encoded with resp.AppendCommand into a
// reused buffer, replies are skipped without allocating (the closed loop:
// ReadSlice and Discard on a bufio.Reader; the open loop: resp.Scanner over
// the connection's read buffer); a closed-loop round trip allocates nothing
// (TestClosedStepNoAllocs). The closed loop runs a goroutine per
// connection, the open loop one thread for all (above). cpu_s is this
// process's user+system time (getrusage) during the run. Measured on the
// project's 2-core machine against redis-server on loopback: closed loop,
// c=200, P=1: 6.6-7.1 CPU s per 1M requests (85-94% of one core at
// 120-145k ops/s; two syscalls and a goroutine wake-up per request
// dominate); c=50, P=16: 0.94 s per 1M. Open loop at 20,000/s: 32-33 s per
// 1M against Redis, 29-31 through Cicada (one epoll_pwait2, one write and
// one read per request, 0.8 context switches: each wake-up of an idle vCPU
// costs this VM far more than the calls' own work); a goroutine per
// connection on a timerfd cost 40-43 and 34-39 in the same run, alternating
// (2026-12-06, four rounds of 6 s each). On two cores the generator
// competes with what it measures: report its share with the figures.
package main
