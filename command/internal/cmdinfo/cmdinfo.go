// Package cmdinfo reads the command table of a live redis-server: a minimal
// RESP2 client (Dial, Do) and a parser for the Redis 7.0 COMMAND reply.
//
// It serves the table generator (internal/gen) and the tests of package
// command, which both talk to a trusted local server. It is not for the data
// path: replies decode into `any` values. Lengths are still bounded so that a
// wrong address cannot make it allocate without limit.
package cmdinfo

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Limits on what Do accepts from the server.
const (
	// MaxBulkBytes bounds one bulk string: 64 MiB.
	MaxBulkBytes = 64 << 20
	// MaxArrayLen bounds the element count of one array.
	MaxArrayLen = 1 << 20
	// MaxDepth bounds array nesting.
	MaxDepth = 32
)

// Errors returned by this package, wrapped with context.
var (
	// ErrProtocol reports a reply that is not valid RESP2 or exceeds a limit.
	ErrProtocol = errors.New("cmdinfo: protocol error")
	// ErrShape reports a COMMAND reply whose structure is not the 7.0 one.
	ErrShape = errors.New("cmdinfo: unexpected COMMAND reply shape")
)

// Error is a Redis error reply ("-ERR ..."), returned as a value by Do, not
// as a Go error: it is data sent by the server.
type Error string

// Error returns the reply text without the leading '-'.
func (e Error) Error() string { return string(e) }

// Conn is one connection to redis-server. It is not safe for concurrent use.
type Conn struct {
	nc      net.Conn
	r       *bufio.Reader
	timeout time.Duration // deadline for each Do round trip
}

// Dial connects to addr ("host:port"). timeout bounds the dial and every later
// Do round trip; 0 means 5 s.
func Dial(addr string, timeout time.Duration) (*Conn, error) {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	nc, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("cmdinfo: dial %s: %w", addr, err)
	}
	return &Conn{nc: nc, r: bufio.NewReader(nc), timeout: timeout}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

// Do sends one command and reads its reply: a simple or bulk string as
// string, an integer as int64, an array as []any, a null as nil, an error
// reply as Error. The returned error is for transport and protocol failures.
func (c *Conn) Do(args ...string) (any, error) {
	if err := c.nc.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return nil, fmt.Errorf("cmdinfo: set deadline: %w", err)
	}
	var b []byte
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	if _, err := c.nc.Write(b); err != nil {
		return nil, fmt.Errorf("cmdinfo: write %s: %w", args[0], err)
	}
	v, err := readValue(c.r, 0)
	if err != nil {
		return nil, fmt.Errorf("cmdinfo: reply to %s: %w", args[0], err)
	}
	return v, nil
}

// readValue reads one RESP2 value nested depth arrays deep.
func readValue(r *bufio.Reader, depth int) (any, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("%w: nesting deeper than %d", ErrProtocol, MaxDepth)
	}
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	if len(line) == 0 {
		return nil, fmt.Errorf("%w: empty line", ErrProtocol)
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return Error(body), nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: integer %q", ErrProtocol, body)
		}
		return n, nil
	case '$':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil || n < -1 || n > MaxBulkBytes {
			return nil, fmt.Errorf("%w: bulk length %q", ErrProtocol, body)
		}
		if n == -1 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return nil, fmt.Errorf("%w: bulk string without CRLF", ErrProtocol)
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil || n < -1 || n > MaxArrayLen {
			return nil, fmt.Errorf("%w: array length %q", ErrProtocol, body)
		}
		if n == -1 {
			return nil, nil
		}
		arr := make([]any, 0, n)
		for i := int64(0); i < n; i++ {
			v, err := readValue(r, depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		return arr, nil
	default:
		return nil, fmt.Errorf("%w: type byte %q", ErrProtocol, line[0])
	}
}

// readLine reads one CRLF-terminated line (at most 64 KiB) without the CRLF.
func readLine(r *bufio.Reader) (string, error) {
	var sb strings.Builder
	for {
		frag, err := r.ReadSlice('\n')
		sb.Write(frag)
		if sb.Len() > 64<<10 {
			return "", fmt.Errorf("%w: line longer than 64 KiB", ErrProtocol)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return "", err
		}
		break
	}
	s := sb.String()
	if len(s) < 2 || s[len(s)-2] != '\r' {
		return "", fmt.Errorf("%w: line without CRLF", ErrProtocol)
	}
	return s[:len(s)-2], nil
}

// Command is one entry of the Redis 7.0 COMMAND reply.
type Command struct {
	Name  string   // lower case; a subcommand is "parent|sub"
	Arity int      // N: exactly N arguments; -N: at least N
	Flags []string // e.g. "write", "denyoom", in server order
	// First, Last and Step are the legacy key positions.
	First, Last, Step int
	// KeySpecs are the command's key specifications, in server order.
	KeySpecs []KeySpec
	// Subcommands are the entries of a container command, e.g. "client|id".
	Subcommands []Command
}

// Commands runs COMMAND on c and parses the reply.
func Commands(c *Conn) ([]Command, error) {
	v, err := c.Do("COMMAND")
	if err != nil {
		return nil, err
	}
	if e, ok := v.(Error); ok {
		return nil, fmt.Errorf("cmdinfo: COMMAND: %w", e)
	}
	return ParseCommands(v)
}

// ParseCommands parses a decoded COMMAND reply (an array of 10-element
// command entries, subcommands nested in the 10th element).
func ParseCommands(v any) ([]Command, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: reply is %T, not an array", ErrShape, v)
	}
	out := make([]Command, 0, len(arr))
	for i, e := range arr {
		cmd, err := parseCommand(e)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		out = append(out, cmd)
	}
	return out, nil
}

// parseCommand parses one [name, arity, flags, first, last, step, acl
// categories, tips, key specs, subcommands] entry.
func parseCommand(v any) (Command, error) {
	var c Command
	e, ok := v.([]any)
	if !ok || len(e) < 10 {
		return c, fmt.Errorf("%w: entry is not a 10-element array", ErrShape)
	}
	name, ok1 := e[0].(string)
	arity, ok2 := e[1].(int64)
	flags, ok3 := stringList(e[2])
	first, ok4 := e[3].(int64)
	last, ok5 := e[4].(int64)
	step, ok6 := e[5].(int64)
	specs, ok7 := e[8].([]any)
	subs, ok8 := e[9].([]any)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7 && ok8) {
		return c, fmt.Errorf("%w: entry %v", ErrShape, e[0])
	}
	c = Command{
		Name: strings.ToLower(name), Arity: int(arity), Flags: flags,
		First: int(first), Last: int(last), Step: int(step),
	}
	for _, s := range specs {
		ks, err := parseKeySpec(s)
		if err != nil {
			return c, fmt.Errorf("%s: %w", c.Name, err)
		}
		c.KeySpecs = append(c.KeySpecs, ks)
	}
	for _, s := range subs {
		sc, err := parseCommand(s)
		if err != nil {
			return c, fmt.Errorf("%s: %w", c.Name, err)
		}
		c.Subcommands = append(c.Subcommands, sc)
	}
	return c, nil
}

// KeySpec is one key specification of a COMMAND entry (Redis 7.0 and
// later): where the search for keys begins and how keys are found from
// there, as described in https://redis.io/docs/latest/develop/reference/key-specs/.
type KeySpec struct {
	// Flags are the spec's flags, e.g. ["RW", "access", "update"].
	Flags []string
	// BeginSearch is "index" (Index is the first key's argument position),
	// "keyword" (search for Keyword from StartFrom: positive counts from
	// the start, negative from the end, towards the other end) or
	// "unknown".
	BeginSearch string
	Index       int
	Keyword     string
	StartFrom   int
	// FindKeys is "range" (LastKey: the last key relative to the first, or
	// negative from the end of the arguments; KeyStep between keys; Limit,
	// when LastKey is negative, keeps only 1/Limit of the rest), "keynum"
	// (the key count is at KeyNumIdx past the first position, the keys
	// start FirstKey past it, KeyStep apart) or "unknown".
	FindKeys                string
	LastKey, KeyStep, Limit int
	KeyNumIdx, FirstKey     int
}

// parseKeySpec parses one key specification: a flat map of "flags",
// "begin_search", "find_keys" (and "notes"), each search a map of "type"
// and "spec".
func parseKeySpec(v any) (KeySpec, error) {
	var ks KeySpec
	m, ok := v.([]any)
	if !ok || len(m)%2 != 0 {
		return ks, fmt.Errorf("%w: key spec is not a map", ErrShape)
	}
	for i := 0; i < len(m); i += 2 {
		k, _ := m[i].(string)
		var err error
		switch k {
		case "flags":
			if ks.Flags, ok = stringList(m[i+1]); !ok {
				return ks, fmt.Errorf("%w: key spec flags", ErrShape)
			}
		case "begin_search":
			var f map[string]any
			if ks.BeginSearch, f, err = search(m[i+1]); err == nil {
				ks.Index, ks.StartFrom = intField(f, "index"), intField(f, "startfrom")
				ks.Keyword, _ = f["keyword"].(string)
			}
		case "find_keys":
			var f map[string]any
			if ks.FindKeys, f, err = search(m[i+1]); err == nil {
				ks.LastKey, ks.KeyStep, ks.Limit = intField(f, "lastkey"), intField(f, "keystep"), intField(f, "limit")
				ks.KeyNumIdx, ks.FirstKey = intField(f, "keynumidx"), intField(f, "firstkey")
			}
		}
		if err != nil {
			return ks, err
		}
	}
	return ks, nil
}

// search parses a begin_search or find_keys map: its type and its spec's
// fields. A type other than a string, or a spec that is not a map, is
// ErrShape; an absent or empty search is "unknown".
func search(v any) (kind string, fields map[string]any, err error) {
	m, ok := v.([]any)
	if !ok || len(m)%2 != 0 {
		return "", nil, fmt.Errorf("%w: key search is not a map", ErrShape)
	}
	kind, fields = "unknown", map[string]any{}
	for i := 0; i < len(m); i += 2 {
		switch k, _ := m[i].(string); k {
		case "type":
			if kind, ok = m[i+1].(string); !ok {
				return "", nil, fmt.Errorf("%w: key search type", ErrShape)
			}
		case "spec":
			f, ok := m[i+1].([]any)
			if !ok || len(f)%2 != 0 {
				return "", nil, fmt.Errorf("%w: key search spec is not a map", ErrShape)
			}
			for j := 0; j < len(f); j += 2 {
				if name, ok := f[j].(string); ok {
					fields[name] = f[j+1]
				}
			}
		}
	}
	return kind, fields, nil
}

// intField returns f[name] when it is an integer, else 0.
func intField(f map[string]any, name string) int {
	n, _ := f[name].(int64)
	return int(n)
}

// stringList converts an array of strings.
func stringList(v any) ([]string, bool) {
	arr, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(arr))
	for _, e := range arr {
		s, ok := e.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// Flatten returns cmds with every subcommand following its parent, in order.
func Flatten(cmds []Command) []Command {
	var out []Command
	for _, c := range cmds {
		out = append(out, c)
		out = append(out, Flatten(c.Subcommands)...)
	}
	return out
}
