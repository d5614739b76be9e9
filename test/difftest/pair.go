// Package difftest is the differential conformance harness: it sends the
// same client conversations to a redis-server directly and, through
// Cicada, to another redis-server holding the same data, and compares
// what every connection receives, byte for byte, and whether the server
// closes it. Replies that legitimately differ between two servers (TIME,
// CLIENT ID, INFO, RANDOMKEY, TTLs) are compared by shape (normalize.go).
//
// Conversations are written by hand (test/conformance) or generated from
// a grammar of real commands by a seeded, reproducible generator (gen.go).
// A failing generated conversation is shrunk to a minimal one (Minimize)
// and printed with its seed.
package difftest

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// Pair is a redis-server reached directly and a Cicada in front of a second
// redis-server started with the same arguments. Fields are read-only.
type Pair struct {
	Direct, Behind *redistest.Server
	Proxy          *cicadatest.Proxy
	// AuthErrorsDropped: the servers drop a failed AUTH's error behind
	// pending replies (Redis 7.2+, Valkey): Run applies SplitAuth.
	AuthErrorsDropped bool
}

// NewPair starts both servers with redisArgs and Cicada with o; all stop
// when the test ends.
func NewPair(t testing.TB, redisArgs []string, o cicadatest.Options) *Pair {
	t.Helper()
	p := &Pair{Direct: redistest.Start(t, redisArgs...), Behind: redistest.Start(t, redisArgs...)}
	p.Proxy = cicadatest.Start(t, p.Behind.Addr, o)
	p.AuthErrorsDropped = redistest.BinaryVersion(t).AtLeast(7, 2)
	return p
}

// Both runs each command on the direct Redis and through Cicada, in order,
// and fails the test if the replies differ (setup data). Running the setup
// through Cicada makes its writes visible to Cicada's cache at once.
func (p *Pair) Both(t testing.TB, cmds ...[]string) {
	t.Helper()
	conv := Conversation{Quiet: 1}
	for _, c := range cmds {
		conv.Steps = append(conv.Steps, Step{Cmds: []Cmd{{Args: c, Replies: 1}}})
	}
	if d := p.Diff(t, conv); d != "" {
		t.Fatalf("setup %q: %s", cmds, d)
	}
}

// Diff runs conv on both sides at once and returns Diff's verdict ("" for
// identical). It fails the test only when an endpoint cannot be reached.
func (p *Pair) Diff(t testing.TB, conv Conversation) string {
	t.Helper()
	want, got := p.Run(t, conv)
	for i, c := range want.Clients {
		if c.Timeout {
			return fmt.Sprintf("invalid conversation: Redis itself did not answer every counted command on connection %d; it sent %q",
				i, c.Bytes)
		}
	}
	return Diff(want, got)
}

// Run runs conv directly (want) and through Cicada (got) at the same time;
// the run through Cicada ends no earlier than its connections have as many
// replies as the direct ones (or have ended, or 5 s passed). It fails the
// test only when an endpoint cannot be reached.
func (p *Pair) Run(t testing.TB, conv Conversation) (want, got *Transcript) {
	t.Helper()
	if p.AuthErrorsDropped {
		conv = SplitAuth(conv)
	}
	var werr, gerr error
	var wg sync.WaitGroup
	wg.Add(2)
	ref := make(chan *Transcript, 1) // Cicada's side waits for Redis's replies
	go func() { defer wg.Done(); want, werr = Run(p.Direct.Addr, conv); ref <- want }()
	go func() { defer wg.Done(); got, gerr = run(p.Proxy.Addr, conv, ref) }()
	wg.Wait()
	if werr != nil || gerr != nil {
		t.Fatalf("run conversation: direct %v, through Cicada %v", werr, gerr)
	}
	return want, got
}

// Format renders conv as Go source for a Conversation literal, to paste
// into a regression test.
func Format(conv Conversation) string {
	var b strings.Builder
	b.WriteString("difftest.Conversation{Steps: []difftest.Step{\n")
	for _, s := range conv.Steps {
		fmt.Fprintf(&b, "\t{Client: %d", s.Client)
		if s.Wait > 0 {
			fmt.Fprintf(&b, ", Wait: %d", s.Wait)
		}
		switch {
		case s.Side != nil:
			fmt.Fprintf(&b, ", Side: %#v", s.Side)
		case s.Cmds != nil:
			b.WriteString(", Cmds: []difftest.Cmd{")
			for i, c := range s.Cmds {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "{Args: %#v, Replies: %d", c.Args, c.Replies)
				if c.Inline {
					b.WriteString(", Inline: true")
				}
				b.WriteString("}")
			}
			b.WriteString("}")
		default:
			fmt.Fprintf(&b, ", Raw: []byte(%q), Closes: %v", s.Raw, s.Closes)
		}
		b.WriteString("},\n")
	}
	b.WriteString("}}")
	return b.String()
}

// Minimize shrinks a generated conversation for which fails returns true:
// it drops steps, then commands within steps, while the failure remains,
// recounting replies (Recount) after each cut, and returns the smallest
// conversation found (conv itself when the failure does not reproduce).
func Minimize(conv Conversation, fails func(Conversation) bool) Conversation {
	fails0 := fails
	fails = func(c Conversation) bool {
		c, ok := Recount(c)
		return ok && fails0(c)
	}
	for progress := true; progress; {
		progress = false
		for i := len(conv.Steps) - 1; i >= 0; i-- {
			try := conv
			try.Steps = append(append([]Step(nil), conv.Steps[:i]...), conv.Steps[i+1:]...)
			if fails(try) {
				conv, progress = try, true
			}
		}
		for i := range conv.Steps {
			for j := len(conv.Steps[i].Cmds) - 1; j >= 0 && len(conv.Steps[i].Cmds) > 1; j-- {
				try := conv
				try.Steps = append([]Step(nil), conv.Steps...)
				cmds := conv.Steps[i].Cmds
				try.Steps[i].Cmds = append(append([]Cmd(nil), cmds[:j]...), cmds[j+1:]...)
				if fails(try) {
					conv, progress = try, true
				}
			}
		}
	}
	conv, _ = Recount(conv)
	return conv
}
