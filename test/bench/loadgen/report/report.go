// Package report is the load generator's -json output: one Run per line,
// written by test/bench/loadgen and read by the bench harness, so that the
// two cannot disagree on a field's name.
package report

// Run is one load generator run. Latencies are in µs, measured from each
// request's intended send time in the open loop (coordinated omission
// included) and from its send in the closed loop; CPU is the generator's
// own (getrusage, user + system).
type Run struct {
	Scenario   string  `json:"scenario"`              // "closed" or "open"
	Addr       string  `json:"addr"`                  // target host:port
	Conns      int     `json:"conns"`                 // connections
	Pipeline   int     `json:"pipeline,omitempty"`    // closed loop: requests per round trip
	TargetRate float64 `json:"target_rate,omitempty"` // open loop: ops/s asked for
	Ops        int64   `json:"ops"`                   // replies received in the measured time
	DurationS  float64 `json:"duration_s"`            // measured time, s
	OpsPerSec  float64 `json:"ops_per_sec"`           // Ops / DurationS
	P50us      float64 `json:"p50_us"`
	P99us      float64 `json:"p99_us"`
	P999us     float64 `json:"p999_us"`
	MaxUs      float64 `json:"max_us"`
	Errors     int64   `json:"errors"` // error replies
	Late       int64   `json:"late"`   // open loop: sends later than -late-slack after their intended time
	Missed     int64   `json:"missed"` // open loop: intended sends never made before the run ended
	// Open loop: latency from the actual send, without the queueing
	// and timer delay before it. The gap to P50us/P99us is the delay.
	SvcP50us float64 `json:"service_p50_us,omitempty"`
	SvcP99us float64 `json:"service_p99_us,omitempty"`
	// Latency of GETs and of SETs apart, as P50us and P99us, when each
	// round trip carries one request (the open loop, the closed loop at
	// -P 1); zero otherwise, or when the run sent none of that kind.
	GetP50us  float64 `json:"get_p50_us,omitempty"`
	GetP99us  float64 `json:"get_p99_us,omitempty"`
	SetP50us  float64 `json:"set_p50_us,omitempty"`
	SetP99us  float64 `json:"set_p99_us,omitempty"`
	CPUs      float64 `json:"cpu_s"`               // generator CPU, s
	CPUsPer1M float64 `json:"cpu_s_per_1m_ops"`    // generator CPU per million ops, s
	CPUPct    float64 `json:"cpu_pct_of_one_core"` // generator CPU / DurationS, % of one core
}
