package cluster

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Errors of ParseAddrMap. Each is wrapped with the entry it was found in.
var (
	// ErrAddrSyntax: an entry is not "from=to" with each side "host:port"
	// or ":port" (IPv6 hosts in brackets), or a host is not an IP address
	// or a hostname of letters, digits, '-', '_' and '.'.
	ErrAddrSyntax = errors.New("cluster: address map: bad syntax")
	// ErrAddrPort: a port is not a decimal number from 1 to 65535.
	ErrAddrPort = errors.New("cluster: address map: bad port")
	// ErrAddrMixed: one side of an entry is ":port" and the other
	// "host:port".
	ErrAddrMixed = errors.New("cluster: address map: port-only side paired with a host side")
	// ErrAddrDuplicate: two entries map the same "from".
	ErrAddrDuplicate = errors.New("cluster: address map: duplicate from")
)

// target is where one entry sends an address.
type target struct {
	from string // the entry's from-host ("" for a port-only entry)
	to   string // the entry's to-host ("" for a port-only entry)
	port int
}

// AddrMap maps Redis node addresses to sidecar addresses. Immutable after
// ParseAddrMap; safe for concurrent use. A nil *AddrMap maps nothing.
//
// Hosts are compared byte for byte as Redis prints them: IP literals in
// their canonical form without brackets ("::1", "10.0.0.1"), hostnames as
// announced (no case folding).
type AddrMap struct {
	exact map[string]target // key: host + " " + decimal port
	ports map[int]int       // port-only entries: from-port -> to-port
}

// ParseAddrMap parses entries "from=to", each side "host:port" or ":port".
//
// "host:port=host2:port2" maps that exact endpoint; ":6379=:6380" maps
// port 6379 on any host to port 6380 on the same host (the Kubernetes
// sidecar case: every pod has Redis on 6379 and Cicada on 6380). An exact
// entry wins over a port-only one. Hosts may be IPv4, IPv6 in brackets
// ("[::1]:6379"; stored canonical and unbracketed, as Redis prints them), or
// hostnames. No entries give an empty map.
//
// Errors wrap ErrAddrSyntax, ErrAddrPort, ErrAddrMixed or ErrAddrDuplicate
// and name the bad entry.
func ParseAddrMap(entries []string) (*AddrMap, error) {
	m := &AddrMap{exact: map[string]target{}, ports: map[int]int{}}
	for _, e := range entries {
		from, to, ok := strings.Cut(e, "=")
		if !ok || strings.Contains(to, "=") {
			return nil, fmt.Errorf("%w: %q: want from=to", ErrAddrSyntax, e)
		}
		fh, fp, err := parseSide(e, from)
		if err != nil {
			return nil, err
		}
		th, tp, err := parseSide(e, to)
		if err != nil {
			return nil, err
		}
		if (fh == "") != (th == "") {
			return nil, fmt.Errorf("%w: %q", ErrAddrMixed, e)
		}
		if fh == "" {
			if _, dup := m.ports[fp]; dup {
				return nil, fmt.Errorf("%w: %q: port %d already mapped", ErrAddrDuplicate, e, fp)
			}
			m.ports[fp] = tp
			continue
		}
		k := exactKey(fh, fp)
		if _, dup := m.exact[k]; dup {
			return nil, fmt.Errorf("%w: %q: %s already mapped", ErrAddrDuplicate, e, net.JoinHostPort(fh, strconv.Itoa(fp)))
		}
		m.exact[k] = target{from: fh, to: th, port: tp}
	}
	return m, nil
}

// parseSide parses one side of entry e: "host:port", "[ipv6]:port" or
// ":port". host is "" for ":port".
func parseSide(e, s string) (host string, port int, err error) {
	h, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %q: %q: want host:port or :port", ErrAddrSyntax, e, s)
	}
	port, ok := parsePort(p)
	if !ok {
		return "", 0, fmt.Errorf("%w: %q: %q: want 1-65535", ErrAddrPort, e, p)
	}
	bracketed := strings.HasPrefix(s, "[")
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Is6() != bracketed {
			return "", 0, fmt.Errorf("%w: %q: %q: brackets are for IPv6 addresses only", ErrAddrSyntax, e, s)
		}
		return a.String(), port, nil
	}
	if bracketed || !hostname(h) {
		return "", 0, fmt.Errorf("%w: %q: bad host %q", ErrAddrSyntax, e, h)
	}
	return h, port, nil
}

// parsePort parses a decimal port 1-65535 (digits only, no sign).
func parsePort[T string | []byte](p T) (int, bool) {
	if len(p) == 0 || len(p) > 5 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return 0, false
		}
		n = n*10 + int(p[i]-'0')
	}
	return n, n >= 1 && n <= 65535
}

// hostname reports whether h is "" (the port-only form) or made of the
// bytes a DNS name may hold (letters, digits, '-', '_', '.'): nothing that
// would break a CLUSTER NODES line or a -MOVED error.
func hostname(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func exactKey(host string, port int) string {
	return host + " " + strconv.Itoa(port)
}

// Len returns the number of entries (0 for a nil map).
func (m *AddrMap) Len() int {
	if m == nil {
		return 0
	}
	return len(m.exact) + len(m.ports)
}

// Map returns where host:port should be announced, and whether an entry
// matched. host is as Redis prints it (IPv6 without brackets). Without a
// match it returns host, port, false; a port-only entry keeps host.
func (m *AddrMap) Map(host string, port int) (string, int, bool) {
	t, ok := m.find([]byte(host), nil, port)
	if !ok {
		return host, port, false
	}
	if t.from == "" {
		return host, t.port, true
	}
	return t.to, t.port, true
}

// find returns the entry for host a and port, else for host b and port,
// else the port-only entry for port (whose from and to are ""): an exact
// entry wins over a port-only one. An empty host is skipped. It does not
// allocate for hosts up to 64 bytes.
func (m *AddrMap) find(a, b []byte, port int) (target, bool) {
	if m == nil {
		return target{}, false
	}
	for _, h := range [2][]byte{a, b} {
		if len(h) == 0 || len(m.exact) == 0 {
			continue
		}
		var buf [72]byte
		k := append(buf[:0], h...)
		k = append(k, ' ')
		k = strconv.AppendInt(k, int64(port), 10)
		if t, ok := m.exact[string(k)]; ok {
			return t, true
		}
	}
	if p, ok := m.ports[port]; ok {
		return target{port: p}, true
	}
	return target{}, false
}
