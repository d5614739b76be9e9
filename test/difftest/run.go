package difftest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cmd is one command of a step, with the number of replies (not counting
// RESP3 pushes) Redis gives it: 1 for most, 0 for a RESP3 SUBSCRIBE (its
// confirmation is a push), REPLCONF ACK or GETACK, or under CLIENT REPLY
// OFF.
type Cmd struct {
	Args    []string
	Replies int
	Inline  bool // sent as an inline command (arguments must need no quoting)
}

// Step is one action of a conversation. Exactly one of Cmds, Raw and Side
// is set.
//
// A step with Cmds writes them as one pipeline and waits until all their
// replies have arrived (or the connection closed, or 5 s passed). A Raw
// step writes its bytes and does not wait. A Side step runs one command on
// a fresh connection to the same endpoint (a PUBLISH, a write by another
// client) and waits for its reply.
type Step struct {
	Client int           // connection index; connections open on first use
	Cmds   []Cmd         // counted commands
	Raw    []byte        // bytes written as they are
	Closes bool          // after Raw, wait until the server closes the connection
	Side   []string      // command on a separate connection
	Wait   time.Duration // pause before the step
}

// Conversation is what one test sends: steps in order over one or more
// connections to the same endpoint.
type Conversation struct {
	Steps []Step
	// Quiet is how long every connection must stay silent before the
	// conversation ends; default 100 ms.
	Quiet time.Duration
}

// replyTimeout bounds the wait for a counted step's replies.
const replyTimeout = 5 * time.Second

// Transcript is what each connection of one run received.
type Transcript struct {
	Clients []*Received
}

// Received is everything one connection got: the bytes, whether the server
// closed it, and the counted commands sent on it. Counted is false when
// commands followed raw bytes, whose replies cannot be matched to commands;
// then values are compared byte for byte, connection IDs aside.
type Received struct {
	Bytes   []byte
	Closed  bool
	Timeout bool // a counted step's replies did not all arrive in time
	Cmds    []Cmd
	Counted bool
}

// conn reads a connection in the background. mu guards the fields after it;
// the reader goroutine appends, the conversation goroutine reads.
type conn struct {
	c      net.Conn
	notify chan struct{} // signalled after each read
	mu     sync.Mutex
	buf    []byte
	closed bool // the server closed the connection (or reset it)
	done   bool // the reader goroutine has exited
}

func dialConn(addr string) (*conn, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	cn := &conn{c: c, notify: make(chan struct{}, 1)}
	go cn.read()
	return cn, nil
}

func (cn *conn) read() {
	b := make([]byte, 1<<16)
	for {
		n, err := cn.c.Read(b)
		cn.mu.Lock()
		cn.buf = append(cn.buf, b[:n]...)
		if err != nil {
			cn.closed = !errors.Is(err, net.ErrClosed)
			cn.done = true
		}
		cn.mu.Unlock()
		select {
		case cn.notify <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

// snapshot returns the bytes received so far, and whether reading ended.
func (cn *conn) snapshot() ([]byte, bool) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.buf, cn.done
}

// waitReplies waits until want non-push values have arrived, the
// connection ended, or the timeout passed (false).
func (cn *conn) waitReplies(want int, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		b, done := cn.snapshot()
		if countReplies(b) >= want || done {
			return true
		}
		select {
		case <-cn.notify:
		case <-deadline.C:
			return false
		}
	}
}

// waitClosed waits until the connection ended, at most timeout (false).
func (cn *conn) waitClosed(timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		if _, done := cn.snapshot(); done {
			return true
		}
		select {
		case <-cn.notify:
		case <-deadline.C:
			return false
		}
	}
}

// waitQuiet waits until nothing has arrived for quiet (or the connection
// ended), at most 10 s.
func (cn *conn) waitQuiet(quiet time.Duration) {
	limit := time.Now().Add(10 * time.Second)
	for time.Now().Before(limit) {
		if _, done := cn.snapshot(); done {
			return
		}
		select {
		case <-cn.notify:
		case <-time.After(quiet):
			return
		}
	}
}

// countReplies counts the complete non-push values at the start of b.
func countReplies(b []byte) int {
	n := 0
	for len(b) > 0 {
		v, m, err := parseValue(b)
		if err != nil {
			return n
		}
		if !v.Push() {
			n++
		}
		b = b[m:]
	}
	return n
}

// Run sends conv to the endpoint at addr and returns what each connection
// received. Errors are only for failures to connect.
func Run(addr string, conv Conversation) (*Transcript, error) {
	return run(addr, conv, nil)
}

// run is Run; when ref is not nil, it also waits (up to replyTimeout per
// connection) until each connection has as many replies as the same
// connection of the transcript ref delivers (nil: none), or has ended,
// before its last quiet wait. A quiet period alone ends a conversation of
// raw steps too early when the endpoint is slower than the other one
// (Cicada dialing a connection of a client's own on a CPU-starved
// machine took longer than 250 ms), and the missing replies looked like
// a difference. Replies of raw steps may so come up to replyTimeout late,
// as a counted step's always could: the harness compares bytes and
// closes, not latency.
func run(addr string, conv Conversation, ref <-chan *Transcript) (*Transcript, error) {
	quiet := conv.Quiet
	if quiet == 0 {
		quiet = 100 * time.Millisecond
	}
	var conns []*conn
	defer func() {
		for _, cn := range conns {
			if cn != nil {
				_ = cn.c.Close()
			}
		}
	}()
	tr := &Transcript{}
	want := map[int]int{}
	sawRaw := map[int]bool{} // replies after raw bytes cannot be matched to commands
	for _, s := range conv.Steps {
		for len(conns) <= s.Client {
			conns = append(conns, nil)
			tr.Clients = append(tr.Clients, &Received{Counted: true})
		}
		rec := tr.Clients[s.Client]
		if s.Wait > 0 {
			time.Sleep(s.Wait)
		}
		if s.Side != nil {
			if err := sideRun(addr, s.Side); err != nil {
				return nil, err
			}
			continue
		}
		if conns[s.Client] == nil {
			cn, err := dialConn(addr)
			if err != nil {
				return nil, err
			}
			conns[s.Client] = cn
		}
		cn := conns[s.Client]
		if _, done := cn.snapshot(); done || rec.Timeout {
			continue // closed by the server: later steps are not sent
		}
		if s.Cmds == nil {
			sawRaw[s.Client] = true
			_, _ = cn.c.Write(s.Raw)
			if s.Closes && !cn.waitClosed(replyTimeout) {
				rec.Timeout = true
			}
			continue
		}
		if sawRaw[s.Client] {
			rec.Counted = false
		}
		_, _ = cn.c.Write(Encode(s.Cmds))
		for _, c := range s.Cmds {
			rec.Cmds = append(rec.Cmds, c)
			want[s.Client] += c.Replies
		}
		if !cn.waitReplies(want[s.Client], replyTimeout) {
			rec.Timeout = true
		}
	}
	var wg sync.WaitGroup
	for _, cn := range conns {
		if cn != nil {
			wg.Add(1)
			go func() { defer wg.Done(); cn.waitQuiet(quiet) }()
		}
	}
	wg.Wait()
	if ref != nil {
		if other := <-ref; other != nil {
			for i, cn := range conns {
				if cn == nil || i >= len(other.Clients) {
					continue
				}
				if b, _ := cn.snapshot(); countReplies(b) >= countReplies(other.Clients[i].Bytes) {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					cn.waitReplies(countReplies(other.Clients[i].Bytes), replyTimeout)
					cn.waitQuiet(quiet)
				}()
			}
			wg.Wait()
		}
	}
	for i, cn := range conns {
		if cn == nil {
			continue
		}
		_ = cn.c.Close()
		b, _ := cn.snapshot()
		cn.mu.Lock()
		tr.Clients[i].Bytes, tr.Clients[i].Closed = append([]byte(nil), b...), cn.closed
		cn.mu.Unlock()
	}
	return tr, nil
}

// sideRun runs one command on its own connection; a Redis error reply is
// not a failure (the conversation may expect it).
func sideRun(addr string, args []string) error {
	rc := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	defer rc.Close()
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	err := rc.Do(context.Background(), a...).Err()
	var rerr redis.Error
	if err != nil && !errors.Is(err, redis.Nil) && !errors.As(err, &rerr) {
		return fmt.Errorf("side command %q: %w", args, err)
	}
	return nil
}

// Encode returns cmds as RESP arrays of bulk strings, or inline lines for
// the ones marked Inline.
func Encode(cmds []Cmd) []byte {
	var b []byte
	for _, c := range cmds {
		if c.Inline {
			b = append(b, strings.Join(c.Args, " ")...)
			b = append(b, "\r\n"...)
			continue
		}
		b = AppendCommand(b, c.Args...)
	}
	return b
}

// AppendCommand appends args as one RESP array of bulk strings.
func AppendCommand(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, "\r\n"...)
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, "\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}
