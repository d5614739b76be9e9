package difftest

import (
	"bytes"
	"fmt"
	"strings"
)

// Diff compares what each connection received directly from Redis (want)
// and through Cicada (got). It returns "" when a client cannot tell them
// apart, else a description of the first difference.
func Diff(want, got *Transcript) string {
	if len(want.Clients) != len(got.Clients) {
		return fmt.Sprintf("%d connections, want %d", len(got.Clients), len(want.Clients))
	}
	for i := range want.Clients {
		w, g := want.Clients[i], got.Clients[i]
		if d := diffClient(w, g); d != "" {
			return fmt.Sprintf("connection %d: %s", i, d)
		}
	}
	return ""
}

func diffClient(w, g *Received) string {
	if w.Timeout || g.Timeout {
		return fmt.Sprintf("replies missing after %v: direct %v, through Cicada %v\n got %s\nwant %s",
			replyTimeout, w.Timeout, g.Timeout, clip(g.Bytes), clip(w.Bytes))
	}
	wv, wrest := items(w)
	gv, grest := items(g)
	if w.Counted && g.Counted {
		if d := diffSplit(wv, gv); d != "" {
			return d
		}
	} else if d := diffSeq(wv, gv); d != "" {
		return d
	}
	if !bytes.Equal(wrest, grest) {
		return fmt.Sprintf("trailing bytes differ:\n got %s\nwant %s", clip(grest), clip(wrest))
	}
	if w.Closed != g.Closed {
		return fmt.Sprintf("closed by the server: %v, want %v", g.Closed, w.Closed)
	}
	return ""
}

// diffSeq compares two value sequences element by element.
func diffSeq(wv, gv []item) string {
	for k := 0; k < len(wv) || k < len(gv); k++ {
		if k >= len(wv) || k >= len(gv) || wv[k].norm != gv[k].norm {
			var gs, ws, cmd string
			if k < len(gv) {
				gs = clip(gv[k].raw)
			}
			if k < len(wv) {
				ws, cmd = clip(wv[k].raw), wv[k].cmd
			}
			return fmt.Sprintf("value %d (reply to %s) differs:\n got %s\nwant %s", k, cmd, gs, ws)
		}
	}
	return ""
}

// diffSplit compares replies, invalidation pushes and other pushes as
// three sequences, and allows a push to arrive through Cicada before the
// reply it followed directly, never after. Where Redis puts a push among
// the replies of one pipeline depends on how the pipeline reached it (a
// CLIENT TRACKING BCAST invalidation goes out once per event-loop
// iteration, so a pipeline split in two TCP segments gets it earlier, its
// keys grouped otherwise, or one more of them, when tracking is turned off
// later in the pipeline); but a push Redis queued before a reply must
// reach the client before that reply. So through Cicada the invalidations
// (one per key) must contain Redis's in order, each no later, and may have
// more. Keys within one push are in Redis's key order (a radix tree), not
// in the order of the writes, so a push's keys may match in any order.
func diffSplit(wv, gv []item) string {
	wr, wi, wp := split(wv)
	gr, gi, gp := split(gv)
	if d := diffSeq(wr, gr); d != "" {
		return d
	}
	if d := diffSeq(wp, gp); d != "" {
		return "push " + d
	}
	if d := notLater(wp, gp); d != "" {
		return d
	}
	var matched []item
	used := make([]bool, len(gi))
	pos := 0 // Cicada's invalidations before pos follow an earlier push
	for i := 0; i < len(wi); {
		end := pos
		for j := i; j < len(wi) && wi[j].push == wi[i].push; j++ {
			k := pos
			for k < len(gi) && (used[k] || gi[k].norm != wi[j].norm) {
				k++
			}
			if k == len(gi) {
				return fmt.Sprintf("invalidation push %s missing through Cicada", clip(wi[j].raw))
			}
			used[k], matched, end = true, append(matched, gi[k]), max(end, k+1)
			i = j + 1
		}
		pos = end
	}
	return notLater(wi, matched)
}

// notLater checks that each push of g came after no more replies than the
// same push of w.
func notLater(w, g []item) string {
	for k := range w {
		if g[k].before > w[k].before {
			return fmt.Sprintf("push %s arrived after reply %d; directly it came before it", clip(w[k].raw), w[k].before)
		}
	}
	return ""
}

// split separates replies, invalidations (one per key) and other pushes,
// noting for each push how many replies preceded it.
func split(v []item) (replies, invalidations, pushes []item) {
	for _, it := range v {
		if it.cmd != "push" {
			replies = append(replies, it)
			continue
		}
		it.before = len(replies)
		it.push = len(pushes) + len(invalidations) // distinct per push
		keys := invalidated(it.value)
		if keys == nil {
			pushes = append(pushes, it)
		}
		for _, k := range keys {
			one := it
			one.norm = "invalidate " + string(k.Raw)
			invalidations = append(invalidations, one)
		}
	}
	return replies, invalidations, pushes
}

// unsubscribed reports whether v confirms an UNSUBSCRIBE, PUNSUBSCRIBE or
// SUNSUBSCRIBE (RESP2 array or RESP3 push).
func unsubscribed(v Value) bool {
	if len(v.Elems) != 3 {
		return false
	}
	switch string(v.Elems[0].Raw) {
	case "$11\r\nunsubscribe\r\n", "$12\r\npunsubscribe\r\n", "$12\r\nsunsubscribe\r\n":
		return true
	}
	return false
}

// invalidated returns the keys of a CLIENT TRACKING invalidation push
// (nil for a flush or another push).
func invalidated(v Value) []Value {
	if len(v.Elems) == 2 && string(v.Elems[0].Raw) == "$10\r\ninvalidate\r\n" && len(v.Elems[1].Elems) > 0 {
		return v.Elems[1].Elems
	}
	return nil
}

// item is one received value in comparable form.
type item struct {
	norm, cmd string
	raw       []byte
	value     Value
	before    int // for a push: the replies before it
	push      int // for an invalidation: which push of its connection it came in
}

// items splits a connection's bytes into values, normalized per command
// when the connection's replies can be matched to its commands, and
// returns the bytes after the last complete value.
func items(r *Received) ([]item, []byte) {
	b := r.Bytes
	var owners [][]string
	for _, c := range r.Cmds {
		for i := 0; i < c.Replies; i++ {
			owners = append(owners, c.Args)
		}
	}
	var out []item
	replies := 0
	for len(b) > 0 {
		v, n, err := parseValue(b)
		if err != nil {
			break
		}
		it := item{norm: unmatched(v.Raw), raw: v.Raw, value: v, cmd: "?"}
		if v.Push() {
			it.cmd = "push"
		} else {
			if r.Counted && replies < len(owners) {
				it.cmd = summary(owners[replies])
				it.norm = normalized(owners[replies], v)
			}
			replies++
		}
		if unsubscribed(v) {
			// UNSUBSCRIBE without channels confirms each in the order of
			// the server's hash table of them: compare the counts only.
			it.norm = string(v.Type) + string(v.Elems[0].Raw) + string(v.Elems[2].Raw)
		}
		out = append(out, it)
		b = b[n:]
	}
	return out, b
}

func summary(args []string) string {
	s := strings.Join(args, " ")
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return fmt.Sprintf("%q", s)
}

func clip(b []byte) string {
	if len(b) > 300 {
		return fmt.Sprintf("%q... (%d bytes)", b[:300], len(b))
	}
	return fmt.Sprintf("%q", b)
}
