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
	// KeySpecFlags holds the "flags" list of each key specification, e.g.
	// ["RW", "access", "update"].
	KeySpecFlags [][]string
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
		m, ok := s.([]any)
		if !ok {
			return c, fmt.Errorf("%w: %s: key spec is not a map", ErrShape, c.Name)
		}
		var f []string
		for i := 0; i+1 < len(m); i += 2 {
			if k, _ := m[i].(string); k == "flags" {
				f, _ = stringList(m[i+1])
			}
		}
		c.KeySpecFlags = append(c.KeySpecFlags, f)
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
