// Package hotkeys is Cicada's answer to Redis 8.6's HOTKEYS command family
// (START, STOP, GET, RESET, and HELP as 8.6.1 added it): a hot-key session
// that ranks keys by what they cost Cicada, reported in Redis's own reply
// format so redis-cli and client libraries read it unchanged, whatever
// Redis version runs behind Cicada.
//
// # Flow
//
//	HOTKEYS START ... ─► Lookup (subcommand, arity) ─► Check (ACL, by the
//	    proxy) ─► Execute: ParseStart, Tracker.Start ─► On() is true
//	event loop i, per request with one key, while On():
//	    Begin(i) ─► Ticket{Sampled: 1 in SAMPLE} ... Record(i, ticket, key,
//	    bytes, ns) ─► loop i's share: totals, two Space-Saving summaries
//	HOTKEYS GET ─► Report: lock each loop's share in turn, merge, top COUNT
//	janitor every 100 ms ─► Tick: DURATION's auto-stop
//
// # What is measured
//
// NET is the bytes of a key's requests and their replies through Cicada,
// whether Cicada answered from its cache or Redis did. CPU is the time
// Cicada's event loops spent on a key's requests, in microseconds, measured
// on the sampled requests only: the cost a key puts on Cicada, not on Redis,
// whose time Cicada cannot see. The totals follow Redis's definitions
// (all-commands-* cover every request with a key, total-net-bytes the
// sampled ones), and total-cpu-time-user-ms/sys-ms are the whole Cicada
// process's getrusage, as Redis reports its own.
//
// # Algorithm
//
// Each loop ranks keys with a weighted Space-Saving summary per metric
// (Metwally, Agrawal and El Abbadi, "Efficient Computation of Frequent and
// Top-k Elements in Data Streams", ICDT 2005) of 10 × COUNT counters,
// COUNT <= 64: memory is bounded by 640 counters per metric per loop, each
// holding a key of at most 4 KiB (longer keys are not captured by the
// request parser and not counted). A key's count overestimates its weight
// by at most total/(10 × COUNT) of its loop; GET sums the loops' counts.
//
// # Ownership
//
// Tracker.On is one atomic load, the only cost while no session runs.
// Begin and Record for loop i run only on loop i's goroutine and take loop
// i's mutex, which only Report (HOTKEYS GET) also takes: nothing on the
// request path is shared between loops. Start, Stop, Reset, Tick and Report
// serialize on the Tracker's mutex and are safe from any goroutine.
package hotkeys
