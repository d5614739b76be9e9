package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/difftest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// TestLocalAnswersReachNoRedis proves hits are served by Cicada: Redis's
// INFO commandstats does not count them.
func TestLocalAnswersReachNoRedis(t *testing.T) {
	p := newPair(t, nil, cicadatest.Options{})
	p.LoadSample(t)
	before := commandCalls(t, p.Behind.Addr, "get")
	const n = 5000
	var pipeline bytes.Buffer
	for range n {
		pipeline.WriteString(cmd("GET", "hot"))
	}
	out, _ := converse(t, p.Proxy.Addr, []step{send(pipeline.String())}, 300*time.Millisecond)
	if want := bytes.Repeat([]byte("$9\r\nhot-value\r\n"), n); !bytes.Equal(out, want) {
		t.Fatalf("got %d bytes, want %d bytes of %q", len(out), len(want), "$9\r\nhot-value\r\n")
	}
	if grown := commandCalls(t, p.Behind.Addr, "get") - before; grown > n/20 {
		t.Errorf("cmdstat_get grew by %d for %d GETs, want at most 5%%", grown, n)
	}
}

// TestStateChangesInMulti: SELECT, HELLO and CLIENT TRACKING queued in a
// transaction take effect at EXEC; Cicada must not answer with the state
// from before it.
func TestStateChangesInMulti(t *testing.T) {
	p := newPair(t, nil, cicadatest.Options{})
	p.LoadSample(t)
	p.Both(t, []string{"SELECT", "0"})
	p.Compare(t, send(cmds(
		[]string{"MULTI"}, []string{"SELECT", "1"}, []string{"EXEC"}, []string{"GET", "hot"}, []string{"SET", "hot", "db1"},
		[]string{"GET", "hot"},
	)))
	p.Compare(t, send(cmds(
		[]string{"MULTI"}, []string{"HELLO", "3"}, []string{"EXEC"}, []string{"GET", "absent"},
	)))
	p.WarmSample(t)
	p.Compare(t, send(cmds([]string{"GET", "hot"})))
}

// TestSegmented sends requests cut at awkward points and receives Redis's
// replies cut after their first byte; nothing may be lost or garbled.
func TestSegmented(t *testing.T) {
	direct := redistest.Start(t)
	behind := redistest.Start(t)
	p := &difftest.Pair{Direct: direct, Behind: behind}
	p.Proxy = cicadatest.Start(t, segmentingRelay(t, behind.Addr), cicadatest.Options{})
	p.LoadSample(t)
	ms := 30 * time.Millisecond
	p.Compare(t, send("GET ho"), pause(ms), send("t\r\n"+cmd("GET", "hot")[:7]), pause(ms), send(cmd("GET", "hot")[7:]))
	p.Compare(t, send(cmd("BLPOP", "q", "0.2")), pause(ms), send(cmd("GET", "hot")), pause(400*ms/30*10))
	p.Compare(t, send(cmd("INCR", "counter")), send(cmd("GET", "hot")), send(cmd("HGET", "h", "f")))
	p.Compare(t, send(cmds([]string{"PING"}, []string{"GET", "hot2"}, []string{"LRANGE", "list", "0", "-1"}, []string{"PING"})))
}

// TestRequestsInPieces sends big requests in many small segments (Cicada
// keeps such a request out of gnet's buffer while it grows, and resumes
// parsing where it stopped), each followed by cached reads.
func TestRequestsInPieces(t *testing.T) {
	p := newPair(t, nil, cicadatest.Options{})
	p.LoadSample(t)
	tenArgs := []string{"MSET"}
	for i := 0; i < 4; i++ {
		tenArgs = append(tenArgs, "k"+strings.Repeat("k", i), strings.Repeat(string(rune('a'+i)), 4000))
	}
	tenArgs = append(tenArgs, "hot", "hot-value")
	thousand := []string{"RPUSH", "biglist"}
	for i := 0; i < 998; i++ {
		thousand = append(thousand, strings.Repeat(string(rune('a'+i%26)), 50))
	}
	requests := []string{
		cmd(tenArgs...) + cmd("GET", "hot"),
		cmd(thousand...) + cmd("GET", "hot"),
		"ECHO " + strings.Repeat("i", 20000) + "\r\n" + cmd("GET", "hot"),
		cmd("HGET", "h", strings.Repeat("f", 4000)) + cmd("GET", "hot") + cmd("HGET", "h", "f"),
		cmd("GET", "hot") + cmd("HGET", "h", "f") + "*1\r\n$" + strings.Repeat("7", 6000),
		cmd("GET", "hot") + cmd("SET", "x", strings.Repeat("y", 100000)) + cmd("GET", "hot"),
	}
	for i, r := range requests {
		for _, size := range []int{1000, 4097} {
			var steps []step
			for len(r) > 0 {
				n := min(size, len(r))
				steps = append(steps, send(r[:n]), pause(time.Millisecond))
				r = r[n:]
			}
			t.Run(fmt.Sprintf("%d in %d-byte pieces", i, size), func(t *testing.T) {
				p.WarmSample(t)
				p.Compare(t, steps...)
			})
			r = requests[i]
		}
	}
}

// TestCloseAfterBigReply: when Redis closes a connection right after a big
// reply (QUIT, a protocol error), the client still gets every byte before
// the close, even when it reads slowly.
func TestCloseAfterBigReply(t *testing.T) {
	r, p := newProxied(t, cicadatest.Options{})
	big := strings.Repeat("x", 8<<20)
	mustDo(t, client(t, r.Addr, 2), "SET", "big", big)
	for _, tail := range []string{cmd("QUIT"), "*x\r\n"} {
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(cmd("GET", "big") + tail)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // let buffers fill while the client does not read
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		want := len("$8388608\r\n") + len(big) + 2
		if err != nil || len(got) < want {
			t.Fatalf("%q: read %d bytes (%v), want at least %d and then the close", tail, len(got), err, want)
		}
	}
}

// TestInlineLimit: an unterminated inline request longer than any Redis
// read can take gets Redis's protocol error. A terminated line between 64
// and 160 KiB is one Redis itself takes or refuses depending on how its
// reads fall; Cicada passes it to Redis, never answers it, and the client
// gets one of Redis's two answers.
func TestInlineLimit(t *testing.T) {
	p := newPair(t, nil, cicadatest.Options{})
	p.LoadSample(t)
	p.Compare(t, send(cmd("PING")+"GET hot"+strings.Repeat(" ", 200000)))
	before := hits(p.Proxy)
	got, closed := converse(t, p.Proxy.Addr, []step{send(cmd("PING") + "GET hot" + strings.Repeat(" ", 100000) + "\r\n")}, 300*time.Millisecond)
	taken := string(got) == "+PONG\r\n$9\r\nhot-value\r\n" && !closed
	refused := string(got) == "+PONG\r\n-ERR Protocol error: too big inline request\r\n" && closed
	if !taken && !refused {
		t.Fatalf("100 KB inline GET: got %q closed=%v, want Redis's reply or its protocol error", got, closed)
	}
	if hits(p.Proxy) != before {
		t.Error("a line Redis may refuse was answered from the cache")
	}
}
