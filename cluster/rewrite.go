package cluster

import (
	"bytes"
	"slices"
	"strconv"

	"github.com/cicada-proxy/cicada/resp"
)

// Reply names a topology command whose reply carries node addresses.
type Reply uint8

// The topology replies Rewrite knows.
const (
	// ReplyNone: not a topology command; its reply is forwarded as is.
	ReplyNone Reply = iota
	// ReplySlots: CLUSTER SLOTS.
	ReplySlots
	// ReplyShards: CLUSTER SHARDS.
	ReplyShards
	// ReplyNodes: CLUSTER NODES, CLUSTER REPLICAS, CLUSTER SLAVES.
	ReplyNodes
)

var (
	cmdCluster  = []byte("cluster")
	subSlots    = []byte("slots")
	subShards   = []byte("shards")
	subNodes    = []byte("nodes")
	subReplicas = []byte("replicas")
	subSlaves   = []byte("slaves")

	movedPrefix = []byte("-MOVED ")
	askPrefix   = []byte("-ASK ")
)

// TopologyCommand says which Reply a request's reply is: args as parsed,
// args[0] the command name and args[1] the subcommand, both compared
// case-insensitively. ReplyNone for anything else. The argument count is not
// checked: Redis answers a wrong one with an error, which Rewrite leaves
// alone. It does not allocate.
func TopologyCommand(args [][]byte) Reply {
	if len(args) < 2 || !bytes.EqualFold(args[0], cmdCluster) {
		return ReplyNone
	}
	switch sub := args[1]; {
	case bytes.EqualFold(sub, subSlots):
		return ReplySlots
	case bytes.EqualFold(sub, subShards):
		return ReplyShards
	case bytes.EqualFold(sub, subNodes), bytes.EqualFold(sub, subReplicas), bytes.EqualFold(sub, subSlaves):
		return ReplyNodes
	}
	return ReplyNone
}

// RewriteRedirect rewrites the address of a redirect. reply is one whole
// simple-error reply as Redis sends it: "-MOVED <slot> <endpoint>:<port>\r\n"
// or "-ASK <slot> <endpoint>:<port>\r\n", where endpoint is what Redis's
// preferred endpoint type gives (cluster.c, getPreferredEndpoint): an IP
// (IPv6 without brackets, "-MOVED 1 ::1:6379"), a hostname, "?" (hostname
// preferred but unknown) or "" (unknown-endpoint: the client reuses the
// host it is connected to). A port-only entry applies to all of them; an
// exact entry needs its host.
//
// It returns a new reply and true when reply is a redirect whose address
// the map changes; (nil, false) otherwise. reply is not modified. A reply
// not starting with "-MOVED " or "-ASK " costs two prefix checks and no
// allocation.
func (m *AddrMap) RewriteRedirect(reply []byte) ([]byte, bool) {
	var prefix []byte
	switch {
	case bytes.HasPrefix(reply, movedPrefix):
		prefix = movedPrefix
	case bytes.HasPrefix(reply, askPrefix):
		prefix = askPrefix
	default:
		return nil, false
	}
	if m.Len() == 0 || !bytes.HasSuffix(reply, crlf) {
		return nil, false
	}
	rest := reply[len(prefix) : len(reply)-2]
	sp := bytes.IndexByte(rest, ' ')
	if sp < 1 {
		return nil, false
	}
	if n, ok := resp.ParseInt(rest[:sp]); !ok || n < 0 {
		return nil, false
	}
	slot, addr := rest[:sp], rest[sp+1:]
	colon := bytes.LastIndexByte(addr, ':')
	if colon < 0 || bytes.ContainsAny(addr, " \r\n") {
		return nil, false
	}
	host := addr[:colon]
	port, ok := parsePort(addr[colon+1:])
	if !ok {
		return nil, false
	}
	t, ok := m.find(host, nil, port)
	if !ok {
		return nil, false
	}
	newHost := host
	if t.from != "" {
		newHost = []byte(t.to)
	}
	if t.port == port && bytes.Equal(newHost, host) {
		return nil, false
	}
	out := make([]byte, 0, len(reply)+len(newHost)+8)
	out = append(out, prefix...)
	out = append(out, slot...)
	out = append(out, ' ')
	out = append(out, newHost...)
	out = append(out, ':')
	out = strconv.AppendInt(out, int64(t.port), 10)
	return append(out, crlf...), true
}

// Rewrite returns reply, one complete RESP2 or RESP3 reply to a command of
// kind, with every node address the map matches rewritten; it never fails
// and never panics. An error reply, a reply not of the shape below, or one
// without a matching address is returned unchanged (the same slice); a
// rewritten reply is a new slice with lengths re-encoded. Shapes, as
// redis-server 7.0 sends them:
//
//   - ReplySlots: an array of [start, end, node...], each node [endpoint,
//     port, id, metadata]; endpoint a bulk string (the IP, the hostname or
//     "?") or a null (unknown-endpoint); metadata a map (RESP3) or a flat
//     name/value array (RESP2) that may hold "ip" and "hostname".
//   - ReplyShards: an array of shards, each a map {"slots": [...],
//     "nodes": [node...]}, each node a map with "id", "port", "tls-port",
//     "ip", "endpoint", "hostname", "role", "replication-offset", "health"
//     (maps are flat name/value arrays in RESP2).
//   - ReplyNodes: a bulk string (RESP2) or verbatim string "txt:..."
//     (RESP3) of lines "<id> <ip>:<port>@<cport>[,<hostname>] <flags> ...",
//     or an array of such lines as bulk strings (CLUSTER REPLICAS).
//
// A node of CLUSTER SLOTS or SHARDS matches an exact entry on (endpoint,
// port), else on (ip, port), else a port-only entry on port; a CLUSTER
// NODES line the same way on (ip, port), then (hostname, port). A null,
// "?" or "" endpoint matches only through ip or a port-only entry. The
// node's port becomes the entry's; for an exact entry every ip, endpoint
// and hostname equal to the entry's from-host becomes its to-host. All
// other bytes are kept, among them the cluster bus port and "tls-port":
// Cicada does not speak TLS, so a TLS port still leads to Redis itself.
func (m *AddrMap) Rewrite(kind Reply, reply []byte) []byte {
	if m.Len() == 0 || len(reply) == 0 {
		return reply
	}
	w := rewriter{reader: reader{sc: resp.NewScanner(reply)}, m: m}
	var ok bool
	switch kind {
	case ReplySlots:
		ok = w.slots()
	case ReplyShards:
		ok = w.shards()
	case ReplyNodes:
		ok = w.nodes()
	}
	if !ok || w.sc.Offset() != len(reply) || len(w.edits) == 0 {
		return reply
	}
	return w.apply()
}

// edit replaces reply[start:end] (one whole scalar value) with repl.
// ExecElem names an element of EXEC's reply that answers a topology
// command queued in the transaction: its index in the array, and which.
type ExecElem struct {
	Index int
	Kind  Reply
}

// RewriteExec returns reply, one complete reply to EXEC, with the node
// addresses rewritten as Rewrite does in the elements elems names (sorted
// by Index). A reply that is not an array (the transaction did not run),
// and an element that is an error or not of its command's shape, are left
// as they are; like Rewrite it never fails.
func (m *AddrMap) RewriteExec(reply []byte, elems []ExecElem) []byte {
	if m.Len() == 0 || len(elems) == 0 {
		return reply
	}
	w := rewriter{reader: reader{sc: resp.NewScanner(reply)}, m: m}
	top, ok := w.next()
	if !ok || top.Type != '*' || top.Null {
		return reply
	}
	j := 0
	for i := range top.N {
		kind := ReplyNone
		for j < len(elems) && elems[j].Index < i {
			j++
		}
		if j < len(elems) && elems[j].Index == i {
			kind = elems[j].Kind
		}
		start, edits := w.sc.Offset(), len(w.edits)
		done := false
		switch kind {
		case ReplySlots:
			done = w.slots()
		case ReplyShards:
			done = w.shards()
		case ReplyNodes:
			done = w.nodes()
		}
		if !done { // not one to rewrite, or not of its shape: skip it whole
			w.sc.SetOffset(start)
			w.edits = w.edits[:edits]
			if !w.skip(1) {
				return reply
			}
		}
	}
	if w.sc.Offset() != len(reply) || len(w.edits) == 0 {
		return reply
	}
	return w.apply()
}

type edit struct {
	start, end int
	repl       []byte
}

// node holds the address fields of one node of CLUSTER SLOTS or CLUSTER
// SHARDS as they were read; a field's typ is 0 when absent.
type node struct {
	endpoint, ip, hostname, port resp.Token
}

// rewriter walks one reply and collects edits; the reply is left as is.
type rewriter struct {
	reader
	m     *AddrMap
	edits []edit
}

// next reads a value the walk examines. A RESP3 attribute there (Redis
// sends none in these replies) makes the reply one of an unknown shape;
// values read with reader.next only to be skipped may carry attributes.
func (w *rewriter) next() (resp.Token, bool) {
	v, ok := w.reader.next()
	return v, ok && v.Type != '|'
}

func (w *rewriter) apply() []byte {
	slices.SortFunc(w.edits, func(a, b edit) int { return a.start - b.start })
	n := len(w.sc.Bytes())
	for _, e := range w.edits {
		n += len(e.repl) - (e.end - e.start)
	}
	out := make([]byte, 0, n)
	last := 0
	for _, e := range w.edits {
		out = append(out, w.sc.Bytes()[last:e.start]...)
		out = append(out, e.repl...)
		last = e.end
	}
	return append(out, w.sc.Bytes()[last:]...)
}

// slots walks a CLUSTER SLOTS reply.
func (w *rewriter) slots() bool {
	top, ok := w.next()
	if !ok || top.Type != '*' {
		return false
	}
	for range top.N {
		r, ok := w.next()
		if !ok || r.Type != '*' || r.N < 2 || !w.skip(2) {
			return false
		}
		for range r.N - 2 {
			if !w.slotsNode() {
				return false
			}
		}
	}
	return true
}

// slotsNode walks [endpoint, port, id, metadata, ...] of CLUSTER SLOTS.
func (w *rewriter) slotsNode() bool {
	v, ok := w.next()
	if !ok || v.Type != '*' || v.N < 2 {
		return false
	}
	var nd node
	if nd.endpoint, ok = w.next(); !ok || !w.skipRest(nd.endpoint) {
		return false
	}
	if nd.port, ok = w.next(); !ok || !w.skipRest(nd.port) {
		return false
	}
	for i := 2; i < v.N; i++ {
		e, ok := w.reader.next() // an id or metadata with an attribute is skipped
		if !ok {
			return false
		}
		if i == 3 {
			if pairs, isMap := mapLen(e); isMap {
				if !w.fields(pairs, &nd, false) {
					return false
				}
				continue
			}
		}
		if !w.skipRest(e) {
			return false
		}
	}
	w.rewriteNode(&nd)
	return true
}

// shards walks a CLUSTER SHARDS reply.
func (w *rewriter) shards() bool {
	top, ok := w.next()
	if !ok || top.Type != '*' {
		return false
	}
	for range top.N {
		s, ok := w.next()
		pairs, isMap := mapLen(s)
		if !ok || !isMap {
			return false
		}
		for range pairs {
			k, ok := w.next()
			if !ok || !str(&k) {
				return false
			}
			v, ok := w.reader.next()
			if !ok {
				return false
			}
			if string(k.Data) != "nodes" || v.Type != '*' {
				if !w.skipRest(v) {
					return false
				}
				continue
			}
			for range v.N {
				nv, ok := w.next()
				np, isMap := mapLen(nv)
				if !ok || !isMap {
					return false
				}
				var nd node
				if !w.fields(np, &nd, true) {
					return false
				}
				w.rewriteNode(&nd)
			}
		}
	}
	return true
}

// fields reads pairs name/value pairs of a node map, keeping "ip",
// "hostname" and, with all, "endpoint" and "port" in nd.
func (w *rewriter) fields(pairs int, nd *node, all bool) bool {
	for range pairs {
		k, ok := w.next()
		if !ok || !str(&k) {
			return false
		}
		v, ok := w.next()
		if !ok || !w.skipRest(v) {
			return false
		}
		switch string(k.Data) {
		case "ip":
			nd.ip = v
		case "hostname":
			nd.hostname = v
		case "endpoint":
			if all {
				nd.endpoint = v
			}
		case "port":
			if all {
				nd.port = v
			}
		}
	}
	return true
}

// rewriteNode adds the edits for one node, if an entry matches it.
func (w *rewriter) rewriteNode(nd *node) {
	if nd.port.Type != ':' {
		return
	}
	port, ok := parsePort(nd.port.Data)
	if !ok {
		return
	}
	var ep, ip []byte
	if str(&nd.endpoint) {
		ep = nd.endpoint.Data
	}
	if str(&nd.ip) {
		ip = nd.ip.Data
	}
	t, found := w.m.find(ep, ip, port)
	if !found {
		return
	}
	if t.port != port {
		repl := strconv.AppendInt([]byte{':'}, int64(t.port), 10)
		w.edits = append(w.edits, edit{nd.port.Start, nd.port.End, append(repl, crlf...)})
	}
	if t.from == "" || t.from == t.to {
		return
	}
	for _, h := range [...]*resp.Token{&nd.endpoint, &nd.ip, &nd.hostname} {
		if str(h) && string(h.Data) == t.from {
			w.edits = append(w.edits, edit{h.Start, h.End, appendStr(nil, h.Type, t.to)})
		}
	}
}

// nodes walks a CLUSTER NODES reply (a bulk or verbatim string) or a
// CLUSTER REPLICAS one (an array of them).
func (w *rewriter) nodes() bool {
	v, ok := w.next()
	if !ok {
		return false
	}
	if v.Type != '*' {
		return w.nodesText(v)
	}
	for range v.N {
		e, ok := w.next()
		if !ok || !w.nodesText(e) {
			return false
		}
	}
	return true
}

// nodesText rewrites one bulk or verbatim string of CLUSTER NODES lines.
func (w *rewriter) nodesText(v resp.Token) bool {
	var head []byte // the verbatim format, "txt:"
	switch {
	case v.Type == '$' && !v.Null:
	case v.Type == '=' && len(v.Data) >= 4 && v.Data[3] == ':':
		head = v.Data[:4]
	default:
		return false
	}
	text, changed := w.m.rewriteLines(v.Data[len(head):])
	if !changed {
		return true
	}
	repl := make([]byte, 0, len(head)+len(text)+16)
	repl = append(repl, v.Type)
	repl = strconv.AppendInt(repl, int64(len(head)+len(text)), 10)
	repl = append(repl, crlf...)
	repl = append(repl, head...)
	repl = append(repl, text...)
	repl = append(repl, crlf...)
	w.edits = append(w.edits, edit{v.Start, v.End, repl})
	return true
}

// rewriteLines rewrites the address field of each CLUSTER NODES line,
// "<ip>:<port>@<cport>[,<hostname>[,...]]" (older Redis: "<ip>:<port>"),
// matched on (ip, port), else (hostname, port). The cluster bus port and
// the fields after the hostname are kept.
func (m *AddrMap) rewriteLines(text []byte) ([]byte, bool) {
	var out []byte
	done := 0 // text[:done] is in out
	for start := 0; start < len(text); {
		end := bytes.IndexByte(text[start:], '\n')
		if end < 0 {
			end = len(text)
		} else {
			end += start
		}
		fStart, fEnd, repl := m.rewriteLine(text, start, end)
		if repl != nil {
			out = append(out, text[done:fStart]...)
			out = append(out, repl...)
			done = fEnd
		}
		start = end + 1
	}
	if out == nil {
		return text, false
	}
	return append(out, text[done:]...), true
}

// rewriteLine returns the new address field text[fStart:fEnd] of the line
// text[start:end], or a nil repl when it does not change.
func (m *AddrMap) rewriteLine(text []byte, start, end int) (fStart, fEnd int, repl []byte) {
	sp := bytes.IndexByte(text[start:end], ' ')
	if sp < 0 {
		return 0, 0, nil
	}
	fStart = start + sp + 1
	field := text[fStart:end]
	if e := bytes.IndexByte(field, ' '); e >= 0 {
		field = field[:e]
	}
	fEnd = fStart + len(field)
	addrEnd := bytes.IndexAny(field, "@,")
	if addrEnd < 0 {
		addrEnd = len(field)
	}
	colon := bytes.LastIndexByte(field[:addrEnd], ':')
	if colon < 0 {
		return 0, 0, nil
	}
	host := field[:colon]
	port, ok := parsePort(field[colon+1 : addrEnd])
	if !ok {
		return 0, 0, nil
	}
	// rest is "@<cport>" and "," before the hostname; name the hostname;
	// tail what follows it.
	rest, name, tail := field[addrEnd:], []byte(nil), []byte(nil)
	if c := bytes.IndexByte(rest, ','); c >= 0 {
		rest, name = rest[:c+1], rest[c+1:]
		if e := bytes.IndexByte(name, ','); e >= 0 {
			name, tail = name[:e], name[e:]
		}
	}
	t, ok := m.find(host, name, port)
	if !ok {
		return 0, 0, nil
	}
	if t.from != "" && string(host) == t.from {
		host = []byte(t.to)
	}
	if t.from != "" && string(name) == t.from {
		name = []byte(t.to)
	}
	repl = make([]byte, 0, len(field)+len(t.to)+8)
	repl = append(repl, host...)
	repl = append(repl, ':')
	repl = strconv.AppendInt(repl, int64(t.port), 10)
	repl = append(repl, rest...)
	repl = append(repl, name...)
	repl = append(repl, tail...)
	if bytes.Equal(repl, field) {
		return 0, 0, nil
	}
	return fStart, fEnd, repl
}

// appendStr appends s as a string value of type typ ('$' bulk or '+'
// simple).
func appendStr(dst []byte, typ byte, s string) []byte {
	dst = append(dst, typ)
	if typ == '$' {
		dst = strconv.AppendInt(dst, int64(len(s)), 10)
		dst = append(dst, crlf...)
	}
	dst = append(dst, s...)
	return append(dst, crlf...)
}

var crlf = []byte("\r\n")

// str reports whether v is a string Rewrite may replace: a non-null bulk
// string or a simple string.
func str(v *resp.Token) bool { return (v.Type == '$' || v.Type == '+') && !v.Null }

// mapLen returns the pair count of a RESP3 map or of a RESP2 flat
// name/value array; ok is false for anything else.
func mapLen(v resp.Token) (pairs int, ok bool) {
	switch {
	case v.Type == '%' && !v.Null:
		return v.N / 2, true
	case v.Type == '*' && !v.Null && v.N%2 == 0:
		return v.N / 2, true
	}
	return 0, false
}

// reader reads the reply with resp.Scanner; a value that is incomplete
// in a complete reply is as invalid as one that is not RESP.
type reader struct{ sc resp.Scanner }

// next reads one value: a scalar whole, an aggregate's header only.
func (r *reader) next() (resp.Token, bool) {
	t, st := r.sc.Next()
	return t, st == resp.ScanOK
}

// skip skips n whole values.
func (r *reader) skip(n int) bool { return r.sc.Skip(n) == resp.ScanOK }

// skipRest skips what follows v when v is an aggregate: its elements and,
// for an attribute, the value it annotates.
func (r *reader) skipRest(v resp.Token) bool { return r.sc.SkipRest(v) == resp.ScanOK }
