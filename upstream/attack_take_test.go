package upstream

// Adversarial tests of watchedConn.take (an event loop that gets mu takes
// the keyspace notifications at the head of the socket's queue off it and
// applies them). Each feeds exact bytes through fakeWatched-like
// connections and checks:
//
//  1. every notification is applied exactly once, in stream order;
//  2. go-redis (readOnce/Read) gets every other reply whole, in order;
//  3. unapplied never says all=false while a notification that has reached
//     the socket is neither applied nor named;
//  4. nothing blocks: unapplied never, Close never deadlocks with readers;
//  5. no data race (-race).

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cicada-proxy/cicada/hotcache"
)

const (
	kNotif = iota
	kReply
	kFlush
)

type aFrame struct {
	b    string
	kind int
	db   int
	key  string
}

func aN(db int, key string) aFrame {
	return aFrame{b: pmsg(itoa(db), key), kind: kNotif, db: db, key: key}
}
func aR(b string) aFrame { return aFrame{b: b, kind: kReply} }

// A flush: a tracking message with a null payload.
const aFlushMsg = "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*-1\r\n"

func aFlush() aFrame { return aFrame{b: aFlushMsg, kind: kFlush} }

type aModel struct {
	frames []aFrame
	start  []int
	stream []byte
}

func newModel(frames []aFrame) aModel {
	m := aModel{frames: frames}
	for _, f := range frames {
		m.start = append(m.start, len(m.stream))
		m.stream = append(m.stream, f.b...)
	}
	return m
}

type appliedRec struct {
	h       uint64
	flushes uint64 // s.Flushes() when it was applied
}

// rig is one connection driven from one goroutine: the test plays both
// go-redis's reader and the event loops, in the order it chooses.
type rig struct {
	t            *testing.T
	w            *watchedConn
	srv          net.Conn
	s            *Subscriber
	log          []appliedRec // appended by Invalidated, under w.mu
	got          []byte       // go-redis's view
	p            []byte
	sc           []byte
	big          []byte
	lfViolations int
	fBase        uint64
	evBase       uint64
}

func newRig(t *testing.T, pSize, scSize int) *rig {
	w, srv, s := fakeWatched(t)
	r := &rig{t: t, w: w, srv: srv, s: s, p: make([]byte, pSize), sc: make([]byte, scSize), big: make([]byte, 1<<20)}
	s.cfg.Invalidated = func(h uint64) { r.log = append(r.log, appliedRec{h, s.Flushes()}) }
	return r
}

func (r *rig) queueLen() int {
	n, errno := peek(r.w.fd, r.big)
	if errno != 0 || n < 0 {
		return 0
	}
	return n
}

// goRead is one step of w.Read that does not block: replies left in out
// first, else one readOnce if bytes are queued.
func (r *rig) goRead() error {
	w := r.w
	if len(w.out) > 0 {
		n := copy(r.p, w.out)
		if w.out = w.out[n:]; len(w.out) == 0 {
			w.out = nil
		}
		r.got = append(r.got, r.p[:n]...)
		return nil
	}
	if r.queueLen() == 0 {
		return nil
	}
	n, err := w.readOnce(r.p)
	r.got = append(r.got, r.p[:n]...)
	return err
}

// violation checks invariant 3 on one unapplied result: every
// notification of m with a byte written (and arrived) before the call is
// applied, or named, or all is set; a flush started and not applied forces
// all. It describes the first violation, or returns "".
func (r *rig) violation(m aModel, written int, h []uint64, all bool) string {
	if all {
		return ""
	}
	applied := map[uint64]bool{}
	for _, a := range r.log {
		applied[a.h] = true
	}
	flushes := 0
	for i, f := range m.frames {
		if m.start[i] >= written {
			break
		}
		switch f.kind {
		case kNotif:
			hh := hotcache.Hash(f.db, []byte(f.key))
			if !applied[hh] && !slices.Contains(h, hh) {
				return fmt.Sprintf("notification %d (db %d key %q, bytes [%d,%d) of %d written) neither applied nor named, all=false; named %x; pend %q",
					i, f.db, f.key, m.start[i], m.start[i]+len(f.b), written, h, r.w.pend)
			}
		case kFlush:
			if uint64(flushes) >= r.s.Flushes()-r.fBase {
				return fmt.Sprintf("flush %d (frame %d, bytes [%d,%d) of %d written) queued, not applied, all=false; pend %q",
					flushes, i, m.start[i], m.start[i]+len(f.b), written, r.w.pend)
			}
			flushes++
		}
	}
	return ""
}

func (r *rig) check(m aModel, written int, h []uint64, all bool, ctx string) bool {
	r.t.Helper()
	if v := r.violation(m, written, h, all); v != "" {
		r.t.Errorf("%s: %s", ctx, v)
		return false
	}
	return true
}

func (r *rig) op(c byte, m aModel, written int, ctx string) bool {
	r.t.Helper()
	switch c {
	case 'U': // an event loop that gets mu: take
		h, all := r.w.unapplied(nil, r.sc)
		return r.check(m, written, h, all, ctx+" U")
	case 'L': // an event loop that does not get mu: the lock-free peek
		r.w.mu.Lock()
		h, all := r.w.unapplied(nil, r.sc)
		r.w.mu.Unlock()
		if v := r.violation(m, written, h, all); v != "" && r.lfViolations < 3 {
			r.lfViolations++
			r.t.Errorf("%s L: %s", ctx, v)
		}
		return true
	case 'R':
		if err := r.goRead(); err != nil {
			r.t.Errorf("%s: go-redis read: %v", ctx, err)
			return false
		}
	}
	return true
}

// round writes m's stream in the chunks cuts defines (cuts ascending,
// inside (0, len)), runs ops[i] after chunk i has arrived, then drains
// the queue as go-redis would (with U between reads) and checks that every
// notification was applied once in order and go-redis got every reply.
func (r *rig) round(m aModel, cuts []int, ops []string, ctx string) bool {
	r.t.Helper()
	r.log = r.log[:0]
	r.got = r.got[:0]
	r.fBase, r.evBase = r.s.Flushes(), r.s.Events()
	bounds := append(append([]int{0}, cuts...), len(m.stream))
	for i := 1; i < len(bounds); i++ {
		from, to := bounds[i-1], bounds[i]
		q0 := r.queueLen()
		consumed := from - q0
		if to > from {
			if _, err := r.srv.Write(m.stream[from:to]); err != nil {
				r.t.Fatal(err)
			}
			queued(r.t, r.w, to-consumed)
		}
		if i-1 < len(ops) {
			for _, c := range []byte(ops[i-1]) {
				if !r.op(c, m, to, fmt.Sprintf("%s chunk %d [%d,%d)", ctx, i-1, from, to)) {
					return false
				}
			}
		}
	}
	for guard := 0; ; guard++ {
		if !r.op('U', m, len(m.stream), ctx+" drain") {
			return false
		}
		if r.queueLen() == 0 && len(r.w.out) == 0 {
			break
		}
		if !r.op('R', m, len(m.stream), ctx+" drain") {
			return false
		}
		if guard > 1<<20 {
			r.t.Fatalf("%s: drain never ends", ctx)
		}
	}
	if h, all := r.w.unapplied(nil, r.sc); all || len(h) > 0 {
		r.t.Errorf("%s: everything applied, queue empty: unapplied = %x, %v; want none, false", ctx, h, all)
		return false
	}
	// Invariants 1 and 2.
	var want []uint64
	var wantFl []uint64
	var replies []byte
	fl := uint64(0)
	for _, f := range m.frames {
		switch f.kind {
		case kNotif:
			want = append(want, hotcache.Hash(f.db, []byte(f.key)))
			wantFl = append(wantFl, fl)
		case kFlush:
			fl++
		case kReply:
			replies = append(replies, f.b...)
		}
	}
	var gotH, gotFl []uint64
	for _, a := range r.log {
		gotH = append(gotH, a.h)
		gotFl = append(gotFl, a.flushes-r.fBase)
	}
	ok := true
	if !slices.Equal(gotH, want) {
		r.t.Errorf("%s: applied %x; want %x (once each, in order)", ctx, gotH, want)
		ok = false
	}
	if !slices.Equal(gotFl, wantFl) {
		r.t.Errorf("%s: flushes applied before each notification %v; want %v (order of flushes and notifications)", ctx, gotFl, wantFl)
		ok = false
	}
	if !bytes.Equal(r.got, replies) {
		r.t.Errorf("%s: go-redis got %q; want %q", ctx, r.got, replies)
		ok = false
	}
	if d := r.s.Events() - r.evBase; d != uint64(len(want)) {
		r.t.Errorf("%s: %d events counted; want %d", ctx, d, len(want))
		ok = false
	}
	if d := r.s.Flushes() - r.fBase; d != fl {
		r.t.Errorf("%s: %d flushes counted; want %d", ctx, d, fl)
		ok = false
	}
	if r.w.partial.Load() || len(r.w.pend) > 0 || r.w.broken.Load() {
		r.t.Errorf("%s: after the drain partial=%v pend=%q broken=%v", ctx, r.w.partial.Load(), r.w.pend, r.w.broken.Load())
		ok = false
	}
	return ok
}

// attackFrames is a stream mixing notifications (keys with CRLF, a fake
// frame, a fake pong, an empty key, dbs 0, 3, 12) with every kind of reply
// go-redis must get and a flush. sfx makes the keys unique per round.
func attackFrames(sfx string) []aFrame {
	return []aFrame{
		aN(0, "a"+sfx),
		aN(3, "k\r\n*4\r\n$8\r\npmessage\r\n$1\r\nx"+sfx), // CRLF and a fake frame in the key
		aR("+PONG\r\n"),
		aN(0, "c"+sfx),
		aFlush(),
		aN(12, "d"+sfx),
		aR("*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$3\r\nabc\r\n"), // tracking message, not a flush
		aR("-ERR x\r\n"),
		aN(0, "e"+sfx+"\r\n+PONG\r\n"),
		aR("*3\r\n$10\r\npsubscribe\r\n$16\r\n__keyspace@*__:*\r\n:1\r\n"),
		aR("*2\r\n$4\r\npong\r\n$5\r\nalive\r\n"),
		aN(0, ""),
		aN(0, "f"+sfx),
	}
}

// splitEveryOffset writes the stream in two pieces, split at every byte
// offset, and interleaves take (U), the lock-free peek (L) and go-redis's
// reads (R, with a pSize-byte buffer) at the split.
func splitEveryOffset(t *testing.T, pSize, scSize int, seqs ...string) {
	for _, seq := range seqs {
		t.Run(fmt.Sprintf("p=%d,scratch=%d,ops=%s", pSize, scSize, seq), func(t *testing.T) {
			r := newRig(t, pSize, scSize)
			total := len(newModel(attackFrames("00000")).stream)
			for off := 0; off <= total; off++ {
				m := newModel(attackFrames(fmt.Sprintf("%05d", off)))
				cuts, ops := []int{off}, []string{seq, "U"}
				if off == 0 || off == len(m.stream) {
					cuts, ops = nil, []string{seq}
				}
				if !r.round(m, cuts, ops, fmt.Sprintf("split at %d", off)) {
					return
				}
			}
		})
	}
}

func TestAttackSplitEveryOffset(t *testing.T) {
	splitEveryOffset(t, 7, 16<<10, "U", "RU", "URU")
}

func TestAttackSplitEveryOffsetBigRead(t *testing.T) {
	splitEveryOffset(t, 4096, 16<<10, "RU", "RRRUU")
}

func TestAttackSplitEveryOffsetSmallScratch(t *testing.T) {
	splitEveryOffset(t, 7, 64, "U", "RU")
}

// The lock-free path, for comparison (it is unchanged by the commit).
func TestAttackSplitEveryOffsetLockFree(t *testing.T) {
	splitEveryOffset(t, 7, 16<<10, "LU", "RLRU")
}

// threePieces: two random split points, random op sequences of letters.
func threePieces(t *testing.T, letters string) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, pSize := range []int{1, 13, 4096} {
		t.Run(fmt.Sprintf("p=%d", pSize), func(t *testing.T) {
			r := newRig(t, pSize, 16<<10)
			for i := range 300 {
				m := newModel(attackFrames(fmt.Sprintf("%05d", i)))
				a, b := 1+rng.IntN(len(m.stream)-1), 1+rng.IntN(len(m.stream)-1)
				if a > b {
					a, b = b, a
				}
				cuts := []int{a}
				if b != a {
					cuts = append(cuts, b)
				}
				var ops []string
				for range len(cuts) + 1 {
					var s []byte
					for range rng.IntN(5) {
						s = append(s, letters[rng.IntN(len(letters))])
					}
					ops = append(ops, string(s))
				}
				if !r.round(m, cuts, ops, fmt.Sprintf("round %d cuts %v ops %q", i, cuts, ops)) {
					return
				}
			}
		})
	}
}

func TestAttackThreePieces(t *testing.T) { threePieces(t, "UUR") }

// With the lock-free path (L) in the mix, for comparison.
func TestAttackThreePiecesLockFree(t *testing.T) { threePieces(t, "UURLR") }

// TestAttackHugeFrames: notifications (and a reply) bigger than the 16 KiB
// scratch, alone at the head, behind small ones, and split around the
// scratch's size; a notification that fills the scratch exactly.
func TestAttackHugeFrames(t *testing.T) {
	huge := strings.Repeat("h\r\n", 7000) // a 21 KB key
	cases := []struct {
		name   string
		frames func(sfx string) []aFrame
	}{
		{"huge notification at the head", func(sfx string) []aFrame {
			return []aFrame{aN(0, huge+sfx), aN(0, "b"+sfx), aR("+PONG\r\n"), aN(0, "c"+sfx)}
		}},
		{"huge notification behind small ones", func(sfx string) []aFrame {
			return []aFrame{aN(0, "a"+sfx), aN(0, "b"+sfx), aN(0, huge+sfx), aN(0, "c"+sfx)}
		}},
		{"huge reply between notifications", func(sfx string) []aFrame {
			v := strings.Repeat("v", 40000)
			return []aFrame{aN(0, "a"+sfx), aR("$40000\r\n" + v + "\r\n"), aN(0, "c"+sfx)}
		}},
		{"huge notification behind a reply", func(sfx string) []aFrame {
			return []aFrame{aR("+PONG\r\n"), aN(0, huge+sfx), aN(0, "c"+sfx)}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, pSize := range []int{1000, 16 << 10} {
				r := newRig(t, pSize, 16<<10)
				total := len(newModel(c.frames("00000")).stream)
				offs := []int{0, 1, 100, 16<<10 - 1, 16 << 10, 16<<10 + 1, total - 1}
				for i := 0; i < 12; i++ {
					offs = append(offs, total*i/12)
				}
				for i, off := range offs {
					m := newModel(c.frames(fmt.Sprintf("%05d", i)))
					var cuts []int
					if off > 0 && off < len(m.stream) {
						cuts = []int{off}
					}
					for _, seq := range []string{"U", "RU", "URUU"} {
						if !r.round(m, cuts, []string{seq, "U"}, fmt.Sprintf("p=%d split at %d ops %s", pSize, off, seq)) {
							return
						}
						m = newModel(c.frames(fmt.Sprintf("%05d%s", i, seq)))
					}
				}
			}
		})
	}
	t.Run("notification exactly the scratch's size", func(t *testing.T) {
		sc := 16 << 10
		key := ""
		for k := sc; k > 0; k-- {
			if len(pmsg("0", strings.Repeat("x", k))) == sc {
				key = strings.Repeat("x", k)
				break
			}
		}
		if len(pmsg("0", key)) != sc {
			t.Fatalf("could not build a %d-byte frame", sc)
		}
		r := newRig(t, 4096, sc)
		m := newModel([]aFrame{aN(0, key)})
		r.srv.Write(m.stream)
		queued(t, r.w, len(m.stream))
		h, all := r.w.unapplied(nil, r.sc)
		r.check(m, len(m.stream), h, all, "exact")
		t.Logf("a lone notification of exactly len(scratch) bytes: unapplied = %x, all=%v; applied %d (taken off, but all=true: the peek cannot tell there is no more)", h, all, len(r.log))
		if !r.round(newModel([]aFrame{aN(0, key+"2")}), nil, []string{"U"}, "after") {
			return
		}
	})
}

// TestAttackOddFrames compares, for frames that are odd pmessages or odd
// RESP2, what take does with what go-redis's reader alone does: the same
// keys applied in the same order and the same bytes handed on, and all
// reported while anything of a notification is queued.
func TestAttackOddFrames(t *testing.T) {
	ch := func(c string) string { return "$" + itoa(len(c)) + "\r\n" + c + "\r\n" }
	pat := ch("__keyspace@*__:*")
	odd := []struct {
		name  string
		b     string
		isKey bool // what frame.notification() says (both paths agree)
		db    int
		key   string
	}{
		{"3 elements", "*3\r\n$8\r\npmessage\r\n" + pat + ch("__keyspace@0__:k3"), false, 0, ""},
		{"5 elements", "*5\r\n$8\r\npmessage\r\n" + pat + ch("__keyspace@0__:k5") + "$3\r\nset\r\n$1\r\nz\r\n", true, 0, "k5"},
		{"channel as a simple string", "*4\r\n$8\r\npmessage\r\n" + pat + "+__keyspace@0__:ks\r\n$3\r\nset\r\n", true, 0, "ks"},
		{"channel as an integer", "*4\r\n$8\r\npmessage\r\n" + pat + ":7\r\n$3\r\nset\r\n", false, 0, ""},
		{"nested array as pattern", "*4\r\n$8\r\npmessage\r\n*2\r\n*1\r\n:1\r\n$1\r\nx\r\n" + ch("__keyspace@0__:kn") + "$3\r\nset\r\n", true, 0, "kn"},
		{"nested array as event", "*4\r\n$8\r\npmessage\r\n" + pat + ch("__keyspace@0__:ke") + "*2\r\n$1\r\na\r\n*0\r\n", true, 0, "ke"},
		{"null channel", "*4\r\n$8\r\npmessage\r\n" + pat + "$-1\r\n$3\r\nset\r\n", false, 0, ""},
		{"db of 9 digits", "*4\r\n$8\r\npmessage\r\n" + pat + ch("__keyspace@999999999__:k9") + "$3\r\nset\r\n", true, 999999999, "k9"},
		{"db of 10 digits", "*4\r\n$8\r\npmessage\r\n" + pat + ch("__keyspace@1000000000__:k10") + "$3\r\nset\r\n", false, 0, ""},
		{"db negative", "*4\r\n$8\r\npmessage\r\n" + pat + ch("__keyspace@-1__:kneg") + "$3\r\nset\r\n", false, 0, ""},
		{"db with a leading zero", "*4\r\n$8\r\npmessage\r\n" + pat + ch("__keyspace@01__:klz") + "$3\r\nset\r\n", false, 0, ""},
		{"db non-numeric", "*4\r\n$8\r\npmessage\r\n" + pat + ch("__keyspace@x__:kx") + "$3\r\nset\r\n", false, 0, ""},
		{"db empty", "*4\r\n$8\r\npmessage\r\n" + pat + ch("__keyspace@__:ke0") + "$3\r\nset\r\n", false, 0, ""},
		{"keyevent channel", "*4\r\n$8\r\npmessage\r\n" + pat + ch("__keyevent@0__:set") + ch("kev"), false, 0, ""},
		{"message, not pmessage", "*3\r\n$7\r\nmessage\r\n" + ch("__keyspace@0__:km") + "$3\r\nset\r\n", false, 0, ""},
		{"PMESSAGE upper case", "*4\r\n$8\r\nPMESSAGE\r\n" + pat + ch("__keyspace@0__:kup") + "$3\r\nset\r\n", false, 0, ""},
		{"flush with a $-1 payload", "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n", false, 0, ""},
		{"null array", "*-1\r\n", false, 0, ""},
		{"empty array", "*0\r\n", false, 0, ""},
		{"integer", ":42\r\n", false, 0, ""},
	}
	for _, o := range odd {
		t.Run(o.name, func(t *testing.T) {
			var f frame
			if m, err := scanFrame([]byte(o.b), &f); m != len(o.b) || err != nil {
				t.Fatalf("scanFrame = %d, %v", m, err)
			}
			db, key, isKey, isFlush := f.notification()
			if isKey != o.isKey || (isKey && (db != o.db || string(key) != o.key)) {
				t.Logf("classified isKey=%v db=%d key=%q flush=%v (table said %v)", isKey, db, key, isFlush, o.isKey)
			}
			// The odd frame between two plain notifications and a pong,
			// with the odd frame in the model as what it classifies as.
			mk := func(sfx string) []aFrame {
				of := aR(o.b)
				switch {
				case isKey:
					of = aFrame{b: o.b, kind: kNotif, db: db, key: string(key)}
				case isFlush:
					of = aFrame{b: o.b, kind: kFlush}
				}
				return []aFrame{aN(0, "a"+sfx), of, aN(0, "b"+sfx), aR("+PONG\r\n"), aN(0, "c"+sfx)}
			}
			for _, pSize := range []int{5} {
				r := newRig(t, pSize, 16<<10)
				n := len(newModel(mk("0000")).stream)
				for off := 0; off <= n; off += 1 + off/40 {
					m := newModel(mk(fmt.Sprintf("%04d", off)))
					var cuts []int
					if off > 0 && off < n {
						cuts = []int{off}
					}
					for _, seq := range []string{"U", "RU"} {
						if !r.round(m, cuts, []string{seq, "U"}, fmt.Sprintf("p=%d split %d ops %s", pSize, off, seq)) {
							return
						}
					}
				}
			}
		})
	}
}

// TestAttackNotRESP2: a RESP3 type, a push frame, garbage, at the head of
// the queue or behind notifications or a reply. take must not apply or
// hand on anything past it, unapplied must say all from then on, and
// go-redis's reader must end with errNotRESP2 (not get the bytes).
func TestAttackNotRESP2(t *testing.T) {
	bad := map[string]string{
		"map":            "%1\r\n+a\r\n+b\r\n",
		"push":           ">4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$17\r\n__keyspace@0__:kp\r\n$3\r\nset\r\n",
		"null":           "_\r\n",
		"bool":           "#t\r\n",
		"double":         ",1.5\r\n",
		"garbage":        "hello\r\n",
		"bad length":     "$abc\r\n",
		"huge length":    "$99999999999999999999\r\n",
		"negative len":   "*-2\r\n",
		"push in array":  "*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n>1\r\n+x\r\n$3\r\nset\r\n",
		"LF without CR":  "+PONG\n",
		"bulk wrong end": "$3\r\nabcXY",
	}
	for name, b := range bad {
		for _, where := range []string{"head", "behind notifications", "behind a reply"} {
			t.Run(name+"/"+where, func(t *testing.T) {
				w, srv, s := fakeWatched(t)
				var log []uint64
				s.cfg.Invalidated = func(h uint64) { log = append(log, h) }
				hA, hZ := hotcache.Hash(0, []byte("kA")), hotcache.Hash(0, []byte("kZ"))
				var before string
				switch where {
				case "behind notifications":
					before = pmsg("0", "kA")
				case "behind a reply":
					before = "+PONG\r\n"
				}
				after := pmsg("0", "kZ")
				stream := before + b + after
				srv.Write([]byte(stream))
				queued(t, w, len(stream))
				sc := make([]byte, 16<<10)
				h, all := w.unapplied(nil, sc)
				if !all {
					t.Errorf("non-RESP2 bytes queued (kZ behind them): unapplied = %x, all=false", h)
				}
				if where == "behind notifications" && !slices.Equal(log, []uint64{hA}) {
					t.Errorf("kA at the head: applied %x; want kA", log)
				}
				if slices.Contains(log, hZ) {
					t.Errorf("kZ behind the bad bytes was applied by take")
				}
				var got []byte
				p := make([]byte, 4096)
				var err error
				for i := 0; i < 10 && err == nil; i++ {
					if len(w.out) == 0 && func() bool { n, _ := peek(w.fd, sc); return n <= 0 }() {
						break
					}
					var n int
					n, err = w.Read(p)
					got = append(got, p[:n]...)
				}
				if string(got) != "" && string(got) != "+PONG\r\n" {
					t.Errorf("go-redis got %q", got)
				}
				if !errors.Is(err, errNotRESP2) {
					// Some of these are incomplete rather than invalid:
					// they stay pending; unapplied must still say all.
					if h, all := w.unapplied(nil, sc); !all {
						t.Errorf("after go-redis read (err %v): unapplied = %x, all=false; pend %q", err, h, w.pend)
					}
					t.Logf("go-redis read ended with %v (pend %q, partial %v)", err, w.pend, w.partial.Load())
					return
				}
				if h, all := w.unapplied(nil, sc); !all {
					t.Errorf("broken: unapplied = %x, all=false", h)
				}
			})
		}
	}
}

// TestAttackPeerEnds: the peer closes (FIN) or resets (SO_LINGER 0) the
// connection with notifications, a reply, or half a notification queued.
func TestAttackPeerEnds(t *testing.T) {
	for _, reset := range []bool{false, true} {
		for _, tail := range []string{"", "half", "reply"} {
			t.Run(fmt.Sprintf("reset=%v,tail=%s", reset, tail), func(t *testing.T) {
				w, srv, s := fakeWatched(t)
				var log []uint64
				s.cfg.Invalidated = func(h uint64) { log = append(log, h) }
				hA, hB, hC := hotcache.Hash(0, []byte("kA")), hotcache.Hash(0, []byte("kB")), hotcache.Hash(0, []byte("kC"))
				stream := pmsg("0", "kA") + pmsg("0", "kB")
				switch tail {
				case "half":
					c := pmsg("0", "kC")
					stream += c[:len(c)/2]
				case "reply":
					stream += "+PONG\r\n" + pmsg("0", "kC")
				}
				srv.Write([]byte(stream))
				queued(t, w, len(stream))
				if reset {
					srv.(*net.TCPConn).SetLinger(0)
				}
				srv.Close()
				time.Sleep(20 * time.Millisecond)
				sc := make([]byte, 16<<10)
				h, all := w.unapplied(nil, sc)
				applied := func(x uint64) bool { return slices.Contains(log, x) }
				for _, x := range []uint64{hA, hB, hC} {
					if !all && !applied(x) && !slices.Contains(h, x) && !(x == hC && tail == "") {
						t.Errorf("after the peer's end: %x neither applied nor named, all=false (h=%x log=%x)", x, h, log)
					}
				}
				t.Logf("first unapplied: h=%x all=%v applied=%x", h, all, log)
				// Everything the kernel still holds goes to somebody,
				// once.
				p := make([]byte, 4096)
				var got []byte
				var err error
				for i := 0; i < 10 && err == nil; i++ {
					var n int
					w.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
					n, err = w.Read(p)
					got = append(got, p[:n]...)
				}
				if h, all := w.unapplied(nil, sc); !all {
					t.Errorf("connection ended (%v): unapplied = %x, all=false", err, h)
				}
				for _, x := range log {
					if n := len(slices.DeleteFunc(slices.Clone(log), func(y uint64) bool { return y != x })); n != 1 {
						t.Errorf("%x applied %d times", x, n)
					}
				}
				t.Logf("go-redis got %q then %v; applied %x", got, err, log)
				if tail == "reply" && !reset && string(got) != "+PONG\r\n" {
					t.Errorf("go-redis got %q before EOF; want the pong", got)
				}
			})
		}
	}
}

// TestAttackScratchSizes: a zero-length, 1-byte and frame-sized scratch.
func TestAttackScratchSizes(t *testing.T) {
	a := pmsg("0", "kA")
	for _, sz := range []int{0, 1, len(a) - 1, len(a), len(a) + 1} {
		t.Run(fmt.Sprint(sz), func(t *testing.T) {
			r := newRig(t, 4096, sz)
			m := newModel([]aFrame{aN(0, "kA"), aN(0, "kB")})
			r.srv.Write(m.stream)
			queued(t, r.w, len(m.stream))
			h, all := r.w.unapplied(nil, r.sc)
			r.check(m, len(m.stream), h, all, "first")
			t.Logf("scratch %d: unapplied = %x, %v; applied %d", sz, h, all, len(r.log))
		})
	}
}

// TestAttackReusedDescriptorWithNotifications: after Close, the number
// names another socket whose queue holds whole notifications: take must
// not read them (they are another connection's).
func TestAttackReusedDescriptorWithNotifications(t *testing.T) {
	w, _, s := fakeWatched(t)
	var log []uint64
	s.cfg.Invalidated = func(h uint64) { log = append(log, h) }
	fd := w.fd
	w.Close()
	other, srv, _ := fakeWatched(t)
	b := pmsg("0", "kO")
	srv.Write([]byte(b))
	queued(t, other, len(b))
	if other.fd != fd {
		if err := unix.Dup2(other.fd, fd); err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
	}
	if _, all := w.unapplied(nil, make([]byte, 16<<10)); !all {
		t.Error("closed: all=false")
	}
	queued(t, other, len(b)) // still there
	if len(log) != 0 {
		t.Errorf("the closed connection applied %x from another socket", log)
	}
}

// TestAttackConcurrentMixed: like TestUnappliedTakesConcurrently, with
// flushes, CRLF keys, a 17-byte go-redis buffer and three event loops, one
// of which holds mu now and then (forcing the lock-free path).
func TestAttackConcurrentMixed(t *testing.T) {
	w, srv, s := fakeWatched(t)
	var log []appliedRec
	s.cfg.Invalidated = func(h uint64) { log = append(log, appliedRec{h, s.Flushes()}) }
	var frames []aFrame
	for i := range 3000 {
		switch {
		case i%11 == 5:
			frames = append(frames, aR("+PONG "+itoa(i)+"\r\n"))
		case i%17 == 3:
			frames = append(frames, aFlush())
		case i%13 == 1:
			frames = append(frames, aR("*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$3\r\nabc\r\n"))
		default:
			frames = append(frames, aN(i%16, "k\r\n"+itoa(i)))
		}
	}
	m := newModel(frames)
	go func() {
		rng := rand.New(rand.NewPCG(3, 4))
		for b := m.stream; len(b) > 0; {
			n := min(len(b), 1+rng.IntN(600))
			if _, err := srv.Write(b[:n]); err != nil {
				return
			}
			b = b[n:]
		}
	}()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := make([]byte, []int{16 << 10, 64, 300}[i])
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				runtime.Gosched()
				if i == 2 && n%5 == 0 {
					w.mu.Lock()
					w.unapplied(nil, sc)
					w.mu.Unlock()
				} else {
					w.unapplied(nil, sc)
				}
			}
		}()
	}
	var replies []byte
	var want []uint64
	var wantFl []uint64
	fl := uint64(0)
	for _, f := range frames {
		switch f.kind {
		case kReply:
			replies = append(replies, f.b...)
		case kFlush:
			fl++
		case kNotif:
			want = append(want, hotcache.Hash(f.db, []byte(f.key)))
			wantFl = append(wantFl, fl)
		}
	}
	var got []byte
	p := make([]byte, 17)
	t0 := time.Now()
	defer func() { t.Logf("read phase %v", time.Since(t0)) }()
	for len(got) < len(replies) {
		w.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := w.Read(p)
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatal(err)
		}
		got = append(got, p[:n]...)
	}
	for {
		w.mu.Lock()
		n := len(log)
		w.mu.Unlock()
		if n >= len(want) {
			break
		}
		if w.partial.Load() || func() bool { n, _ := peek(w.fd, make([]byte, 1)); return n > 0 }() {
			w.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			w.readOnce(p)
		}
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
	if !bytes.Equal(got, replies) {
		t.Errorf("go-redis got %d bytes; want the %d bytes of replies in order", len(got), len(replies))
	}
	var gotH, gotFl []uint64
	for _, a := range log {
		gotH, gotFl = append(gotH, a.h), append(gotFl, a.flushes)
	}
	if !slices.Equal(gotH, want) {
		t.Errorf("applied %d notifications; want %d once each in order", len(gotH), len(want))
	}
	if !slices.Equal(gotFl, wantFl) {
		t.Errorf("notifications and flushes applied out of order")
	}
}

func stacksOf(substr ...string) string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, s := range substr {
			if strings.Contains(g, s) {
				out = append(out, g)
				break
			}
		}
	}
	return strings.Join(out, "\n\n")
}

// TestAttackCloseDeadlockBehindTake: an event loop's take holds mu (here
// while it applies: Invalidated waits); go-redis's Close (the session's
// ps.Close, from control's fail or context.AfterFunc) waits for mu; then
// go-redis's reader enters raw.Read (taking a reference on the descriptor)
// and its callback waits for mu. The take ends: Close gets mu first (it
// waited first) and, in net.Conn.Close, waits for the reader's reference
// to the descriptor to go (poll.FD.Close's csema); the reader waits for
// mu. Neither returned while Close held mu across net.Conn.Close; it now
// only passes through mu.
func TestAttackCloseDeadlockBehindTake(t *testing.T) {
	w, srv, s := dialFake(t)
	inTake, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.cfg.Invalidated = func(uint64) { once.Do(func() { close(inTake); <-release }) }
	a := pmsg("0", "kA")
	srv.Write([]byte(a))
	queued(t, w, len(a))
	go w.unapplied(nil, make([]byte, 16<<10))
	<-inTake
	closeDone := make(chan error, 1)
	go func() { closeDone <- w.Close() }()
	waitFor(t, "Close to set closed and wait for mu", w.closed.Load)
	time.Sleep(50 * time.Millisecond)
	readDone := make(chan error, 1)
	go func() {
		_, err := w.readOnce(make([]byte, 64))
		readDone <- err
	}()
	time.Sleep(50 * time.Millisecond) // the reader's callback waits for mu
	close(release)
	var cerr, rerr error
	timeout := time.After(2 * time.Second)
	for closeDone != nil || readDone != nil {
		select {
		case cerr = <-closeDone:
			closeDone = nil
		case rerr = <-readDone:
			readDone = nil
		case <-timeout:
			t.Errorf("DEADLOCK: Close returned=%v, reader returned=%v after 2 s\n%s",
				closeDone == nil, readDone == nil, stacksOf("watchedConn"))
			return // the goroutines stay blocked; no Close in Cleanup
		}
	}
	t.Logf("Close = %v, reader = %v", cerr, rerr)
}

// TestAttackCloseDeadlockReadLoop: no event loop at all. go-redis's reader
// loops in Read over a stream of notifications (readOnce returns 0 bytes,
// so Read calls it again at once) while another goroutine closes the
// connection, as the session's ps.Close does. When Close held mu across
// net.Conn.Close and took it between the reader's raw.Read taking its
// reference and its callback locking mu, the same deadlock followed.
// Tried many times with random timing.
func TestAttackCloseDeadlockReadLoop(t *testing.T) {
	for _, loops := range []int{0, 1} {
		t.Run(fmt.Sprintf("eventLoops=%d", loops), func(t *testing.T) {
			deadline := time.Now().Add(3 * time.Second)
			tries := 0
			for ; time.Now().Before(deadline); tries++ {
				w, srv, _ := dialFake(t)
				stopW := make(chan struct{})
				go func() { // the notifications keep coming
					b := []byte(strings.Repeat(pmsg("0", "k"), 20))
					for {
						select {
						case <-stopW:
							return
						default:
						}
						if _, err := srv.Write(b); err != nil {
							return
						}
					}
				}()
				stopL := spinLoops(loops, func(sc []byte) { w.unapplied(nil, sc) })
				readDone := make(chan error, 1)
				go func() {
					p := make([]byte, 512)
					for {
						if _, err := w.Read(p); err != nil {
							readDone <- err
							return
						}
					}
				}()
				time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				closeDone := make(chan error, 1)
				go func() { closeDone <- w.Close() }()
				to := time.After(time.Second)
				var hung bool
				for closeDone != nil || readDone != nil {
					select {
					case <-closeDone:
						closeDone = nil
					case <-readDone:
						readDone = nil
					case <-to:
						hung = true
					}
					if hung {
						break
					}
				}
				stopL()
				close(stopW)
				if hung {
					t.Errorf("DEADLOCK on try %d: Close returned=%v, Read returned=%v\n%s",
						tries, closeDone == nil, readDone == nil, stacksOf("watchedConn"))
					return
				}
				srv.Close()
			}
			t.Logf("%d tries, no deadlock", tries)
		})
	}
}

// TestAttackCloseVersusUnapplied: Close while event loops call unapplied
// in a tight loop and go-redis reads: after Close returns, unapplied must
// say all; nothing may hang or race.
func TestAttackCloseVersusUnapplied(t *testing.T) {
	for try := range 30 {
		w, srv, _ := dialFake(t)
		b := []byte(strings.Repeat(pmsg("0", "k"), 50))
		srv.Write(b)
		var closedRet atomic.Bool
		var bad atomic.Int64
		stop := spinLoops(2, func(sc []byte) {
			after := closedRet.Load()
			if _, all := w.unapplied(nil, sc); after && !all {
				bad.Add(1)
			}
		})
		time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		done := make(chan struct{})
		go func() { w.Close(); closedRet.Store(true); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Fatalf("try %d: Close hung\n%s", try, stacksOf("watchedConn"))
		}
		time.Sleep(time.Millisecond)
		stop()
		if bad.Load() > 0 {
			t.Errorf("try %d: unapplied said all=false %d times after Close returned", try, bad.Load())
		}
		srv.Close()
	}
}

// TestAttackResetMidStream: the peer resets the connection (SO_LINGER 0)
// at a random moment of a stream while go-redis reads and two event loops
// take. Nothing may hang or race; what was applied is a prefix of the
// notifications, in order, once each; once go-redis has seen the error,
// unapplied says all.
func TestAttackResetMidStream(t *testing.T) {
	for try := range 20 {
		w, srv, s := fakeWatched(t)
		var log []uint64
		s.cfg.Invalidated = func(h uint64) { log = append(log, h) }
		var stream []byte
		var want []uint64
		for i := range 400 {
			if i%9 == 4 {
				stream = append(stream, "+PONG\r\n"...)
				continue
			}
			k := "k" + itoa(i)
			stream = append(stream, pmsg("0", k)...)
			want = append(want, hotcache.Hash(0, []byte(k)))
		}
		cut := rand.IntN(len(stream))
		go func() {
			srv.Write(stream[:cut])
			time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
			srv.(*net.TCPConn).SetLinger(0)
			srv.Close()
		}()
		stop := spinLoops(2, func(sc []byte) { w.unapplied(nil, sc) })
		p := make([]byte, 100)
		var err error
		for err == nil {
			w.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, err = w.Read(p)
		}
		if _, all := w.unapplied(nil, make([]byte, 16<<10)); !all {
			t.Errorf("try %d: go-redis saw %v; unapplied all=false", try, err)
		}
		stop()
		w.mu.Lock()
		got := slices.Clone(log)
		w.mu.Unlock()
		if len(got) > len(want) || !slices.Equal(got, want[:len(got)]) {
			t.Errorf("try %d: applied %d, not a prefix of the notifications in order", try, len(got))
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("try %d: go-redis read timed out instead of seeing the reset", try)
		}
	}
}
