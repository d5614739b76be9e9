package hotkeys

import (
	"errors"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Metrics is the set of metrics a session ranks keys by.
type Metrics uint8

const (
	// CPU ranks keys by the event-loop time Cicada spent on their
	// requests (not Redis's time: Cicada cannot see it).
	CPU Metrics = 1 << iota
	// NET ranks keys by the bytes of their requests and replies through
	// Cicada.
	NET
)

// Limits of HOTKEYS START, as Redis 8.6 checks them.
const (
	// DefaultCount is the number of keys reported per metric without COUNT.
	DefaultCount = 10
	// MaxCount is the largest COUNT.
	MaxCount = 64
	// MaxDuration is the longest DURATION, in seconds.
	MaxDuration = 1000000
	// countersPerKey is how many Space-Saving counters each loop keeps per
	// reported key (Redis's own implementation tracks 10 × COUNT keys).
	countersPerKey = 10
)

// Errors of the session lifecycle. Their text is Redis 8.6's error reply
// (without "ERR "), see Execute.
var (
	ErrActive      = errors.New("hotkey tracking session already in progress")
	ErrResetActive = errors.New("hotkey tracking session in progress, stop tracking first")
)

// Options are a session's settings, from HOTKEYS START.
type Options struct {
	// Metrics to rank keys by; at least one.
	Metrics Metrics
	// Count is k of the top-k reported per metric, 1 to MaxCount.
	Count int
	// Duration stops the session on its own after this long (checked by
	// Tick, so up to one tick later); 0 means until STOP.
	Duration time.Duration
	// Sample is the ratio of SAMPLE: each keyed request feeds the top-k
	// with probability 1/Sample; >= 1.
	Sample int
}

// Entry is one ranked key: its name and its amount (bytes for NET,
// microseconds for CPU).
type Entry struct {
	Key   string
	Value uint64
}

// Report is what HOTKEYS GET returns, from Cicada's own measurements.
type Report struct {
	Active      bool
	Metrics     Metrics
	Sample      int
	StartUnixMs int64 // wall clock at START
	DurationMs  int64 // since START while active; the session's length once stopped
	// CPUUserMs and CPUSysMs are the user and system CPU time of the whole
	// Cicada process since START (getrusage RUSAGE_SELF), as Redis reports
	// its own; only with CPU.
	CPUUserMs, CPUSysMs int64
	// AllCommandsUs is the event-loop time of every keyed request, in µs:
	// measured on the sampled ones and multiplied by Sample.
	AllCommandsUs uint64
	// AllNetBytes is the bytes of every keyed request and its reply.
	AllNetBytes uint64
	// TotalNetBytes is the bytes of the sampled keyed requests and replies
	// (the weight the NET ranking was built from); only with NET.
	TotalNetBytes uint64
	// ByCPU and ByNet are the top Count keys, largest first (ties by key).
	ByCPU, ByNet []Entry
}

// session is one HOTKEYS START to RESET. Options, gen and the start
// readings are immutable; active is atomic; stopped fields are guarded by
// Tracker.mu.
type session struct {
	gen       uint64
	opts      Options
	startWall time.Time // carries the monotonic reading too
	ruUser    time.Duration
	ruSys     time.Duration
	active    atomic.Bool
	duration  time.Duration // set when stopped
}

// Ticket is what Begin hands the event loop for one keyed request and
// Record takes back: the session it counts in and whether it is sampled
// (feeds the top-k and has its time measured).
type Ticket struct {
	gen     uint64
	Sampled bool
}

// Tracker holds Cicada's hot-key session, the state behind HOTKEYS. One
// per process, shared by every client connection, like Redis's server-wide
// session.
//
// Ownership: each event loop records into its own loopRec (Begin and
// Record take the loop's index and must be called only from that loop's
// goroutine); the loop's mutex is contended only by Report merging the
// loops at HOTKEYS GET. Start, Stop, Reset, Tick and Report serialize on
// mu and are safe from any goroutine. On is one atomic load.
type Tracker struct {
	on  atomic.Bool // a session is active: the hot path's only question
	_   [56]byte
	cur atomic.Pointer[session] // nil: none (never started, or RESET)

	mu  sync.Mutex // guards the following and session lifecycles
	gen uint64

	loops  []loopRec
	now    func() time.Time
	rusage func() (user, sys time.Duration)
}

// loopRec is one event loop's share of the session. rng is touched only by
// the owner loop; the rest is guarded by mu.
type loopRec struct {
	_        [64]byte
	rng      uint64
	mu       sync.Mutex
	gen      uint64 // session the fields below count for
	netAll   uint64
	cpuNs    uint64 // sampled requests' event-loop time
	net, cpu *summary
	_        [64]byte
}

// NewTracker returns a Tracker for loops event loops. now is the clock
// (nil: time.Now) and rusage the process CPU time reader (nil:
// getrusage(RUSAGE_SELF)); tests inject both.
func NewTracker(loops int, now func() time.Time, rusage func() (user, sys time.Duration)) *Tracker {
	if now == nil {
		now = time.Now
	}
	if rusage == nil {
		rusage = processCPU
	}
	t := &Tracker{loops: make([]loopRec, loops), now: now, rusage: rusage}
	for i := range t.loops {
		t.loops[i].rng = uint64(i)*0x9e3779b97f4a7c15 + 0x2545f4914f6cdd1d
	}
	return t
}

func processCPU() (user, sys time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// On reports whether a session is active: one atomic load, the only cost
// Cicada's request path pays when no session runs. Safe from any
// goroutine.
func (t *Tracker) On() bool { return t.on.Load() }

// Begin starts counting one keyed request on loop (the caller's own event
// loop index): ok=false when no session is active. With probability
// 1/Sample the ticket is Sampled. Loop goroutine only; no allocation.
func (t *Tracker) Begin(loop int) (tk Ticket, ok bool) {
	s := t.cur.Load()
	if s == nil || !s.active.Load() {
		return tk, false
	}
	tk.gen = s.gen
	tk.Sampled = true
	if r := s.opts.Sample; r > 1 {
		l := &t.loops[loop]
		// xorshift64*: per-loop, so sampling shares no state.
		l.rng ^= l.rng >> 12
		l.rng ^= l.rng << 25
		l.rng ^= l.rng >> 27
		hi, _ := bits.Mul64(l.rng*0x2545f4914f6cdd1d, uint64(r))
		tk.Sampled = hi == 0
	}
	return tk, true
}

// Record counts a keyed request begun with tk on loop: netBytes of request
// and reply through Cicada, and cpuNs of event-loop time (measured only
// when tk.Sampled; ignored otherwise). A request of a session that was
// stopped or replaced since Begin is dropped. Loop goroutine only.
func (t *Tracker) Record(loop int, tk Ticket, key []byte, netBytes uint64, cpuNs int64) {
	s := t.cur.Load()
	if s == nil || s.gen != tk.gen || !s.active.Load() {
		return
	}
	l := &t.loops[loop]
	l.mu.Lock()
	if l.gen != s.gen {
		l.startSession(s)
	}
	l.netAll += netBytes
	if tk.Sampled {
		if cpuNs < 0 {
			cpuNs = 0
		}
		l.cpuNs += uint64(cpuNs)
		if s.opts.Metrics&NET != 0 {
			l.net.add(key, netBytes)
		}
		if s.opts.Metrics&CPU != 0 {
			l.cpu.add(key, uint64(cpuNs))
		}
	}
	l.mu.Unlock()
}

// startSession empties the loop's share for session s. l.mu held.
func (l *loopRec) startSession(s *session) {
	l.gen, l.netAll, l.cpuNs = s.gen, 0, 0
	n := s.opts.Count * countersPerKey
	for _, p := range []**summary{&l.net, &l.cpu} {
		if *p == nil || (*p).capacity != n {
			*p = newSummary(n)
		} else {
			(*p).reset()
		}
	}
}

// Start begins a session, replacing a stopped one; ErrActive if one is
// active.
func (t *Tracker) Start(o Options) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.cur.Load(); s != nil && s.active.Load() {
		return ErrActive
	}
	t.gen++
	u, sy := t.rusage()
	s := &session{gen: t.gen, opts: o, startWall: t.now(), ruUser: u, ruSys: sy}
	s.active.Store(true)
	t.cur.Store(s)
	t.on.Store(true)
	return nil
}

// Stop ends the active session, keeping its results; false if none is
// active.
func (t *Tracker) Stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.cur.Load()
	if s == nil || !s.active.Load() {
		return false
	}
	t.stopLocked(s)
	return true
}

func (t *Tracker) stopLocked(s *session) {
	s.duration = t.now().Sub(s.startWall)
	s.active.Store(false)
	t.on.Store(false)
}

// Reset forgets a stopped session (nothing to forget is fine);
// ErrResetActive while one is active.
func (t *Tracker) Reset() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.cur.Load(); s != nil && s.active.Load() {
		return ErrResetActive
	}
	t.cur.Store(nil)
	return nil
}

// Tick stops an active session whose DURATION has passed, as Redis's cron
// does (its collection-duration-ms is then the time at this tick). Called
// periodically (every 100 ms) by one goroutine.
func (t *Tracker) Tick() {
	if !t.on.Load() {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.cur.Load()
	if s != nil && s.active.Load() && s.opts.Duration > 0 && t.now().Sub(s.startWall) >= s.opts.Duration {
		t.stopLocked(s)
	}
}

// Report merges the loops' shares of the current session; ok=false when
// there is none (never started, or RESET). The merged ranking sums each
// loop's Space-Saving counts for a key: each loop overestimates a key it
// holds by at most its total/(10 × Count) and may miss a key lighter than
// that, so a reported amount is within that many bytes (or µs) per loop.
// Safe from any goroutine.
func (t *Tracker) Report() (r Report, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.cur.Load()
	if s == nil {
		return r, false
	}
	o := s.opts
	r = Report{Active: s.active.Load(), Metrics: o.Metrics, Sample: o.Sample, StartUnixMs: s.startWall.UnixMilli()}
	d := s.duration
	if r.Active {
		d = t.now().Sub(s.startWall)
	}
	r.DurationMs = d.Milliseconds()
	if o.Metrics&CPU != 0 {
		u, sy := t.rusage()
		r.CPUUserMs, r.CPUSysMs = (u - s.ruUser).Milliseconds(), (sy - s.ruSys).Milliseconds()
	}
	net, cpu := map[string]uint64{}, map[string]uint64{}
	var cpuNs uint64
	for i := range t.loops {
		l := &t.loops[i]
		l.mu.Lock()
		if l.gen == s.gen {
			r.AllNetBytes += l.netAll
			cpuNs += l.cpuNs
			r.TotalNetBytes += l.net.total
			l.net.mergeInto(net)
			l.cpu.mergeInto(cpu)
		}
		l.mu.Unlock()
	}
	r.AllCommandsUs = cpuNs * uint64(o.Sample) / 1000
	if o.Metrics&NET == 0 {
		r.TotalNetBytes = 0
	} else {
		r.ByNet = top(net, o.Count, 1)
	}
	if o.Metrics&CPU != 0 {
		r.ByCPU = top(cpu, o.Count, 1000)
	}
	return r, true
}

// top returns the k largest amounts of m divided by unit, largest first,
// leaving out those that round to 0 (Redis lists no key with a 0 count).
func top(m map[string]uint64, k int, unit uint64) []Entry {
	es := make([]Entry, 0, len(m))
	for key, v := range m {
		if v /= unit; v > 0 {
			es = append(es, Entry{Key: key, Value: v})
		}
	}
	slices.SortFunc(es, func(a, b Entry) int {
		switch {
		case a.Value > b.Value:
			return -1
		case a.Value < b.Value:
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	if len(es) > k {
		es = es[:k]
	}
	return es
}
