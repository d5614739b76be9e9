// Command flood measures what clients that read nothing cost the others,
// against Redis or Cicada: -n flood clients each pipeline GETs of a large
// key and never read a reply, and reconnect as soon as the server closes
// them (Redis's maxmemory-clients, Cicada's --max-client-memory); one probe
// client meanwhile GETs a small key every millisecond and reads the reply.
// At the end it prints the probe's latency percentiles and how many flood
// connections were closed per second.
//
// It first SETs the large key (-big-bytes of 'b') and the small one, and
// reads each 20 times so that Cicada caches both. Bounded by -d (the probe
// fails if the server has not answered 10 s after it); refuses addresses
// that are not loopback. docs/limits.md has its figures.
//
// Usage: flood -addr 127.0.0.1:7902 -n 8 -d 10s
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cicada-proxy/cicada/resp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "Redis or Cicada address host:port")
	n := flag.Int("n", 8, "flood clients")
	d := flag.Duration("d", 10*time.Second, "how long the flood and the probe run")
	bigBytes := flag.Int("big-bytes", 1<<20, "size in bytes of the value the flood clients GET")
	flag.Parse()
	if err := run(*addr, *n, *d, *bigBytes); err != nil {
		fmt.Fprintln(os.Stderr, "flood:", err)
		os.Exit(1)
	}
}

func run(addr string, n int, d time.Duration, bigBytes int) error {
	if err := loopback(addr); err != nil {
		return err
	}
	probe, err := dial(addr)
	if err != nil {
		return err
	}
	defer probe.Close()
	if err := probe.do("SET", "big", strings.Repeat("b", bigBytes)); err != nil {
		return err
	}
	if err := probe.do("SET", "small", "s"); err != nil {
		return err
	}
	for range 20 {
		if err := probe.do("GET", "big"); err != nil {
			return err
		}
		if err := probe.do("GET", "small"); err != nil {
			return err
		}
	}

	stop := time.Now().Add(d)
	var closes atomic.Int64
	var wg sync.WaitGroup
	batch := []byte(strings.Repeat("*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n", 64))
	for range n {
		wg.Go(func() {
			for time.Now().Before(stop) {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					time.Sleep(time.Millisecond)
					continue
				}
				_ = c.SetWriteDeadline(stop)
				for {
					if _, err := c.Write(batch); err != nil {
						break // closed by the server, or the end
					}
				}
				_ = c.Close()
				if time.Now().Before(stop) {
					closes.Add(1)
				}
			}
		})
	}
	var lat []time.Duration
	var perr error
	// A server that stops answering fails the probe soon after the end.
	if err := probe.SetDeadline(stop.Add(10 * time.Second)); err != nil {
		return err
	}
	for time.Now().Before(stop) {
		t := time.Now()
		if perr = probe.do("GET", "small"); perr != nil {
			break
		}
		lat = append(lat, time.Since(t))
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	if perr != nil {
		return fmt.Errorf("probe: %w", perr)
	}
	if len(lat) == 0 {
		return errors.New("probe: no reads")
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
	fmt.Printf("probe %d reads: p50 %v p99 %v max %v; flood connections closed %d (%.0f/s)\n",
		len(lat), q(0.5), q(0.99), lat[len(lat)-1], closes.Load(), float64(closes.Load())/d.Seconds())
	return nil
}

// loopback refuses an address whose host is not a loopback IP: the flood
// is meant for a server on this machine only.
func loopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%s is not a loopback address", addr)
	}
	return nil
}

// conn is a RESP2 connection that sends one command and reads its reply.
type conn struct {
	net.Conn
	r *bufio.Reader
}

func dial(addr string) (*conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, r: bufio.NewReader(c)}, nil
}

// do sends args as a RESP array and reads the reply: a simple string or a
// bulk string (its bytes are discarded); an error reply is returned as an
// error.
func (c *conn) do(args ...string) error {
	bs := make([][]byte, len(args))
	for i, a := range args {
		bs[i] = []byte(a)
	}
	b := resp.AppendCommand(nil, bs...)
	if _, err := c.Write(b); err != nil {
		return err
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	switch line[0] {
	case '+':
		return nil
	case '$':
		size, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil || size < 0 {
			return err // a nil reply: nothing follows
		}
		_, err = io.CopyN(io.Discard, c.r, int64(size)+2)
		return err
	default:
		return fmt.Errorf("reply %q", strings.TrimSpace(line))
	}
}
