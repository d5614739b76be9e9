package resources

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/cicada-proxy/cicada/resp"
	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// liveHeap returns Cicada's heap in use right after a garbage collection
// (the heap profile's gc=1 runs one).
func liveHeap(t *testing.T, p *cicadatest.Binary) float64 {
	t.Helper()
	c := http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + p.LocalAdmin + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return p.Metric(t, "go_memstats_heap_inuse_bytes")
}

// bigCommands returns one command of 1,000 arguments (about 58 KB), of
// kind i%2: SADD of 998 members to one key, or DEL of 999 keys (whose
// names the cache's write bookkeeping also follows).
func bigCommand(i int) []byte {
	args := [][]byte{[]byte("SADD"), []byte(fmt.Sprintf("set%d", i))}
	if i%2 == 1 {
		args = [][]byte{[]byte("DEL")}
	}
	for j := len(args); j < 1000; j++ {
		args = append(args, []byte(fmt.Sprintf("%d-%052d", i, j)))
	}
	return resp.AppendCommand(nil, args...)
}

// TestIdleAfterBigCommand: 2,000 connections each send one command of
// 1,000 arguments and then idle. Within a few seconds what Cicada holds
// per connection must be back near what an idle connection costs (as
// Redis shrinks the query buffer of an idle client): the parser's copies
// of the arguments and the keys of the write are let go (a regression:
// each connection kept about 105 KB, 3,000 of them 381 MB of live heap).
//
//	go test -run TestIdleAfterBigCommand -v ./test/resources/
func TestIdleAfterBigCommand(t *testing.T) {
	const n = 2000
	raiseFiles(t)
	r := redistest.Start(t, "--maxclients", fmt.Sprint(4*n))
	p := cicadatest.StartBinary(t, r.Addr, "--max-client-memory", "64mb")

	base := liveHeap(t, p)
	conns := idleConns(t, p.Addr, n)
	idle := (liveHeap(t, p) - base) / n
	closeAll(conns)
	for deadline := time.Now().Add(10 * time.Second); p.Metric(t, "cicada_client_connections") != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("idle connections not closed after 10 s")
		}
	}

	base = liveHeap(t, p)
	rssBase := cicadatest.RSS(t, p.Pid)
	conns = make([]net.Conn, n)
	defer func() { closeAll(conns) }()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				c, err := net.Dial("tcp", p.Addr)
				if err != nil {
					errs <- err
					return
				}
				conns[i] = c
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := c.Write(bigCommand(i)); err != nil {
					errs <- err
					return
				}
				if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line[0] != ':' {
					errs <- fmt.Errorf("connection %d: reply %q, %v", i, line, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	busy := (liveHeap(t, p) - base) / n
	var after float64
	start := time.Now()
	for {
		after = (liveHeap(t, p) - base) / n
		if after <= idle+2048 || time.Since(start) > 10*time.Second {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("live heap per connection: idle %.1f KB; after a 1,000-argument command %.1f KB, %.1f KB %v later (RSS per connection then %.1f KB)",
		idle/1024, busy/1024, after/1024, time.Since(start).Round(100*time.Millisecond),
		float64(cicadatest.RSS(t, p.Pid)-rssBase)/1024/n)
	if after > idle+2048 {
		t.Errorf("10 s after one command of 1,000 arguments each, Cicada holds %.1f KB per connection; an idle connection costs %.1f KB",
			after/1024, idle/1024)
	}
}
