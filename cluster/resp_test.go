package cluster

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// This file is a test oracle, written apart from rewrite.go: a recursive
// RESP decoder and encoder, and the address rewriting of SEMANTICS done on
// decoded trees with a plain list of entries.

// tv is a decoded RESP2/RESP3 value.
type tv struct {
	T    byte
	S    string // line or payload
	Null bool
	Kids []tv // aggregates; maps as name, value, ...; attributes as name, value, ..., annotated value
}

var errShort = errors.New("short or bad RESP")

// decode reads one value from b and returns it with the bytes after it.
func decode(b string) (tv, string, error) {
	nl := strings.Index(b, "\r\n")
	if nl < 1 {
		return tv{}, "", errShort
	}
	v := tv{T: b[0]}
	line, rest := b[1:nl], b[nl+2:]
	switch v.T {
	case '+', '-', ':', ',', '#', '(':
		v.S = line
	case '_':
		v.Null = true
	case '$', '=', '!':
		n, err := strconv.Atoi(line)
		if err != nil {
			return tv{}, "", errShort
		}
		if n < 0 {
			v.Null = true
			break
		}
		if len(rest) < n+2 || rest[n:n+2] != "\r\n" {
			return tv{}, "", errShort
		}
		v.S, rest = rest[:n], rest[n+2:]
	case '*', '%', '~', '>', '|':
		n, err := strconv.Atoi(line)
		if err != nil {
			return tv{}, "", errShort
		}
		if n < 0 {
			v.Null = true
			break
		}
		switch v.T {
		case '%':
			n *= 2
		case '|': // the pairs, then the value they annotate
			n = 2*n + 1
		}
		for range n {
			var k tv
			if k, rest, err = decode(rest); err != nil {
				return tv{}, "", err
			}
			v.Kids = append(v.Kids, k)
		}
	default:
		return tv{}, "", fmt.Errorf("type %q: %w", v.T, errShort)
	}
	return v, rest, nil
}

// encode writes v as Redis does.
func encode(v tv) string {
	switch {
	case v.T == '_':
		return "_\r\n"
	case v.Null:
		return string(v.T) + "-1\r\n"
	}
	switch v.T {
	case '$', '=', '!':
		return fmt.Sprintf("%c%d\r\n%s\r\n", v.T, len(v.S), v.S)
	case '*', '%', '~', '>', '|':
		n := len(v.Kids)
		switch v.T {
		case '%':
			n /= 2
		case '|':
			n = (n - 1) / 2
		}
		s := fmt.Sprintf("%c%d\r\n", v.T, n)
		for _, k := range v.Kids {
			s += encode(k)
		}
		return s
	}
	return string(v.T) + v.S + "\r\n"
}

// ent is one address map entry; fromHost "" for a port-only one.
type ent struct {
	fromHost string
	fromPort int
	toHost   string
	toPort   int
}

func (e ent) String() string {
	side := func(h string, p int) string {
		if strings.Contains(h, ":") {
			h = "[" + h + "]"
		}
		return h + ":" + strconv.Itoa(p)
	}
	return side(e.fromHost, e.fromPort) + "=" + side(e.toHost, e.toPort)
}

type oracle []ent

func (o oracle) entries() []string {
	var s []string
	for _, e := range o {
		s = append(s, e.String())
	}
	return s
}

// match is the entry for a node: exact on the first host that has one, in
// order, else port-only.
func (o oracle) match(port int, hosts ...string) (ent, bool) {
	for _, h := range hosts {
		for _, e := range o {
			if h != "" && e.fromHost == h && e.fromPort == port {
				return e, true
			}
		}
	}
	for _, e := range o {
		if e.fromHost == "" && e.fromPort == port {
			return e, true
		}
	}
	return ent{}, false
}

func (e ent) host(h string) string {
	if e.fromHost != "" && h == e.fromHost {
		return e.toHost
	}
	return h
}

func isStr(v tv) bool { return (v.T == '$' || v.T == '+') && !v.Null }

// expect returns v rewritten as Rewrite(kind) should.
func (o oracle) expect(kind Reply, v tv) tv {
	switch kind {
	case ReplySlots:
		for _, r := range v.Kids {
			for _, n := range r.Kids[2:] {
				o.slotsNode(n.Kids)
			}
		}
	case ReplyShards:
		for _, s := range v.Kids {
			for i := 0; i < len(s.Kids); i += 2 {
				if s.Kids[i].S == "nodes" {
					for _, n := range s.Kids[i+1].Kids {
						o.mapNode(n.Kids, nil)
					}
				}
			}
		}
	case ReplyNodes:
		if v.T == '*' {
			for i := range v.Kids {
				v.Kids[i].S = o.nodesText(v.Kids[i].S)
			}
		} else if v.T == '=' {
			v.S = v.S[:4] + o.nodesText(v.S[4:])
		} else {
			v.S = o.nodesText(v.S)
		}
	}
	return v
}

// slotsNode rewrites [endpoint, port, id, metadata] in place.
func (o oracle) slotsNode(n []tv) {
	var meta []tv
	if len(n) > 3 {
		meta = n[3].Kids
	}
	o.mapNode(meta, n)
}

// mapNode rewrites a node: fields is a name/value list ("endpoint",
// "port", "ip", "hostname"), slots the [endpoint, port] of CLUSTER SLOTS.
func (o oracle) mapNode(fields []tv, slots []tv) {
	var ep, port, ip, hn *tv
	if slots != nil {
		ep, port = &slots[0], &slots[1]
	}
	for i := 0; i+1 < len(fields); i += 2 {
		switch fields[i].S {
		case "endpoint":
			ep = &fields[i+1]
		case "port":
			port = &fields[i+1]
		case "ip":
			ip = &fields[i+1]
		case "hostname":
			hn = &fields[i+1]
		}
	}
	if port == nil {
		return
	}
	p, _ := strconv.Atoi(port.S)
	var hosts []string
	for _, h := range []*tv{ep, ip} {
		if h != nil && isStr(*h) {
			hosts = append(hosts, h.S)
		}
	}
	e, ok := o.match(p, hosts...)
	if !ok {
		return
	}
	port.S = strconv.Itoa(e.toPort)
	for _, h := range []*tv{ep, ip, hn} {
		if h != nil && isStr(*h) {
			h.S = e.host(h.S)
		}
	}
}

// nodesText rewrites CLUSTER NODES lines.
func (o oracle) nodesText(text string) string {
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		f := strings.Split(line, " ")
		if len(f) < 2 {
			continue
		}
		addr, after, _ := strings.Cut(f[1], "@")
		c := strings.LastIndex(addr, ":")
		host, ps := addr[:c], addr[c+1:]
		port, _ := strconv.Atoi(ps)
		bus := strings.Split(after, ",") // cport, hostname, more
		name := ""
		if len(bus) > 1 {
			name = bus[1]
		}
		e, ok := o.match(port, host, name)
		if !ok {
			continue
		}
		if len(bus) > 1 {
			bus[1] = e.host(bus[1])
		}
		f[1] = e.host(host) + ":" + strconv.Itoa(e.toPort) + "@" + strings.Join(bus, ",")
		lines[i] = strings.Join(f, " ")
	}
	return strings.Join(lines, "\n")
}
