package difftest

import (
	"bytes"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// normalized returns what of reply v to args must be equal between Redis
// and Cicada. Replies that differ between two servers holding the same
// data (clock, random choice, connection IDs) are reduced to their shape;
// TTLs to their sign class; everything else is compared byte for byte.
func normalized(args []string, v Value) string {
	if len(args) == 0 || v.Type == '-' {
		return string(v.Raw)
	}
	name := strings.ToUpper(args[0])
	if (name == "CLIENT" || name == "OBJECT") && len(args) > 1 {
		name += " " + strings.ToUpper(args[1])
	}
	switch name {
	case "TIME", "RANDOMKEY", "INFO", "LASTSAVE", "SRANDMEMBER", "HRANDFIELD", "ZRANDMEMBER",
		"CLIENT ID", "CLIENT INFO", "CLIENT LIST", "OBJECT IDLETIME", "OBJECT FREQ":
		return "shape " + shape(v)
	case "TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME":
		if n, err := strconv.ParseInt(string(bytes.TrimSpace(v.Raw[1:])), 10, 64); err == nil && n > 0 {
			return "positive " + string(v.Raw[:1])
		}
	case "HGETALL", "SMEMBERS", "HKEYS", "HVALS", "SINTER", "SUNION", "SDIFF":
		// A hashtable-encoded hash or set iterates in an order that
		// depends on the server's random hash seed.
		return "unordered " + unordered(v, name == "HGETALL")
	case "HELLO":
		return string(clientIDs.ReplaceAll(v.Raw, []byte("id\r\n:ID")))
	}
	return string(v.Raw)
}

// unordered renders an aggregate's elements (or key-value pairs) sorted.
func unordered(v Value, pairs bool) string {
	step := 1
	if pairs || v.Type == '%' {
		step = 2
	}
	var parts []string
	for i := 0; i+step <= len(v.Elems); i += step {
		p := string(v.Elems[i].Raw)
		if step == 2 {
			p += string(v.Elems[i+1].Raw)
		}
		parts = append(parts, p)
	}
	sort.Strings(parts)
	return string(v.Type) + strconv.Itoa(len(v.Elems)) + strings.Join(parts, "")
}

// clientIDs matches the connection ID in a HELLO reply: two servers number
// their connections differently (Cicada opens connections of its own).
var clientIDs = regexp.MustCompile(`id\r\n:[0-9]+`)

// monitorLine matches the time and client address of a MONITOR line.
var monitorLine = regexp.MustCompile(`^\+[0-9]+\.[0-9]+ \[([0-9]+) [^\]]+\]`)

// unmatched normalizes a value that cannot be matched to its command:
// connection IDs and MONITOR times and addresses aside, byte for byte.
func unmatched(raw []byte) string {
	b := clientIDs.ReplaceAll(raw, []byte("id\r\n:ID"))
	return string(monitorLine.ReplaceAll(b, []byte("+TIME [$1 ADDR]")))
}
