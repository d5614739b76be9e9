package e2e

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// setupData writes the same data of every type on both servers and makes
// "hot", "hot2", "absent" and hash h field f cached in Cicada.
func setupData(t *testing.T, p *pair) {
	t.Helper()
	p.both(t, "SET", "hot", "hot-value")
	p.both(t, "SET", "absent-not", "x")
	p.both(t, "SET", "hot2", "\x00\r\nbinary\xff")
	p.both(t, "HSET", "h", "f", "field-value", "g", "other")
	p.both(t, "RPUSH", "list", "a", "b", "c")
	p.both(t, "SADD", "set", "x")
	p.both(t, "ZADD", "zset", "1", "one", "2", "two")
	p.both(t, "XADD", "stream", "1-1", "k", "v")
	p.both(t, "PFADD", "hll", "a", "b")
	p.both(t, "GEOADD", "geo", "13.361389", "38.115556", "Palermo")
	p.both(t, "SETBIT", "bits", "7", "1")
	p.both(t, "SET", "counter", "10")
	warmAll(t, p)
}

func warmAll(t *testing.T, p *pair) {
	p.warm(t, "GET", "hot")
	p.warm(t, "GET", "hot2")
	p.warm(t, "GET", "absent")
	p.warm(t, "HGET", "h", "f")
}

// TestTransparency sends the same conversations to Redis directly and
// through Cicada and compares every byte and the connection's close.
func TestTransparency(t *testing.T) {
	p := newPair(t, nil, cicadatest.Options{})
	setupData(t, p)
	tests := []struct {
		name     string
		steps    []step
		wantHits bool
	}{
		{"every data type", []step{send(cmds(
			[]string{"GET", "hot"}, []string{"GET", "hot2"}, []string{"GET", "absent"}, []string{"HGET", "h", "f"},
			[]string{"HGET", "h", "nofield"}, []string{"HGETALL", "h"}, []string{"LRANGE", "list", "0", "-1"},
			[]string{"SMEMBERS", "set"}, []string{"ZRANGE", "zset", "0", "-1", "WITHSCORES"},
			[]string{"XRANGE", "stream", "-", "+"}, []string{"PFCOUNT", "hll"}, []string{"GEOPOS", "geo", "Palermo"},
			[]string{"GETBIT", "bits", "7"}, []string{"INCR", "counter"}, []string{"GET", "list"}, []string{"TYPE", "geo"},
			[]string{"GET"}, []string{"GET", "a", "b"}, []string{"HGET", "h"}, []string{"NOSUCHCOMMAND", "x"},
		))}, true},
		{"pipeline mixing hits and forwards", []step{send(cmds(
			[]string{"GET", "hot"}, []string{"SET", "x", "1"}, []string{"GET", "hot"}, []string{"GET", "x"},
			[]string{"HGET", "h", "f"}, []string{"INCR", "counter"}, []string{"GET", "hot"}, []string{"GET", "absent"},
			[]string{"LPOP", "list"}, []string{"GET", "hot2"},
		))}, true},
		{"hit behind a blocking command", []step{
			send(cmds([]string{"BLPOP", "queue", "0"}, []string{"GET", "hot"}, []string{"GET", "hot2"})),
			sideCmd("RPUSH", "queue", "job"),
			send(cmd("GET", "hot")),
		}, true},
		{"hit behind a blocking timeout", []step{send(cmds([]string{"BLPOP", "empty", "0.2"}, []string{"GET", "hot"})), pause(400 * time.Millisecond)}, true},
		{"write then read in one pipeline", []step{send(cmds(
			[]string{"SET", "hot", "new"}, []string{"GET", "hot"}, []string{"DEL", "hot"}, []string{"GET", "hot"},
			[]string{"SET", "hot", "hot-value"}, []string{"GET", "hot"},
		))}, false},
		{"MULTI EXEC", []step{send(cmds(
			[]string{"MULTI"}, []string{"GET", "hot"}, []string{"SET", "y", "2"}, []string{"HGET", "h", "f"}, []string{"EXEC"},
			[]string{"GET", "hot"}, []string{"MULTI"}, []string{"GET", "hot"}, []string{"DISCARD"}, []string{"GET", "hot"},
			[]string{"MULTI"}, []string{"GET"}, []string{"EXEC"}, []string{"EXEC"}, []string{"DISCARD"},
			[]string{"WATCH", "hot"}, []string{"MULTI"}, []string{"GET", "hot"}, []string{"EXEC"},
		))}, true},
		{"SELECT", []step{send(cmds(
			[]string{"SELECT", "1"}, []string{"GET", "hot"}, []string{"SET", "hot", "db1"}, []string{"GET", "hot"},
			[]string{"SELECT", "0"}, []string{"GET", "hot"}, []string{"SELECT", "99"}, []string{"GET", "hot"},
			[]string{"SELECT", "x"}, []string{"GET", "hot"},
		))}, true},
		{"HELLO 3 and RESET", []step{send(cmds(
			[]string{"GET", "absent"}, []string{"HELLO", "3"}, []string{"GET", "absent"}, []string{"GET", "hot"},
			[]string{"HGET", "h", "nofield"}, []string{"HGET", "h", "f"}, []string{"HGETALL", "h"}, []string{"RESET"},
			[]string{"GET", "absent"}, []string{"HELLO", "4"}, []string{"GET", "absent"}, []string{"HELLO", "2"}, []string{"GET", "absent"},
		))}, true},
		{"inline commands", []step{send("GET hot\r\nPING\r\n\r\n   \nSET \"in line\" 'x y'\r\nGET \"in line\"\r\nGET hot\nHGET h f\r\n")}, false},
		{"RESP2 pub/sub", []step{
			send(cmds([]string{"SUBSCRIBE", "ch", "ch2"}, []string{"GET", "hot"}, []string{"PING"}, []string{"PING", "x"})),
			sideCmd("PUBLISH", "ch", "hello"),
			send(cmds([]string{"PSUBSCRIBE", "c*"})),
			sideCmd("PUBLISH", "ch2", "again"),
			send(cmds([]string{"UNSUBSCRIBE", "ch2"}, []string{"UNSUBSCRIBE"}, []string{"PUNSUBSCRIBE"}, []string{"UNSUBSCRIBE"}, []string{"GET", "hot"})),
		}, true},
		{"RESP3 pub/sub", []step{
			send(cmds([]string{"HELLO", "3"}, []string{"SUBSCRIBE", "ch"}, []string{"GET", "hot"}, []string{"GET", "absent"})),
			sideCmd("PUBLISH", "ch", "hello"),
			send(cmds([]string{"GET", "hot"}, []string{"SSUBSCRIBE", "sh"}, []string{"SUNSUBSCRIBE"}, []string{"UNSUBSCRIBE", "ch", "nope"}, []string{"GET", "hot"})),
		}, true},
		{"RESP3 message then GET: never overtaken", []step{
			send(cmds([]string{"HELLO", "3"}, []string{"SUBSCRIBE", "ch"})),
			sideCmd("PUBLISH", "ch", "first"),
			send(cmd("GET", "hot")),
			sideCmd("PUBLISH", "ch", "second"),
			send(cmd("GET", "hot")),
		}, false},
		{"CLIENT REPLY", []step{send(cmds(
			[]string{"PING"}, []string{"GET", "hot"}, []string{"CLIENT", "REPLY", "SKIP"}, []string{"GET", "hot"}, []string{"GET", "hot2"},
			[]string{"CLIENT", "REPLY", "OFF"}, []string{"GET", "hot"}, []string{"SET", "z", "1"}, []string{"CLIENT", "REPLY", "ON"},
			[]string{"GET", "z"}, []string{"GET", "hot"},
		))}, true},
		{"CLIENT TRACKING on the client's connection", []step{
			send(cmds([]string{"HELLO", "3"}, []string{"CLIENT", "TRACKING", "ON"}, []string{"GET", "hot"})),
			sideCmd("SET", "hot", "changed"),
			send(cmds([]string{"GET", "hot"}, []string{"CLIENT", "TRACKING", "OFF"})),
			sideCmd("SET", "hot", "hot-value"),
		}, false},
		{"big and binary values", []step{send(cmds(
			[]string{"SET", "big", strings.Repeat("\x00\r\n\xfe", 300000)}, []string{"GET", "big"}, []string{"STRLEN", "big"},
			[]string{"SET", "mid", strings.Repeat("ab\r\n", 10000)}, []string{"GET", "mid"}, []string{"GET", "mid"}, []string{"GET", "mid"},
		))}, false},
		{"QUIT", []step{send(cmds([]string{"PING"}, []string{"GET", "hot"}, []string{"QUIT"}, []string{"GET", "hot"}))}, true},
		{"first request of a connection goes to Redis", []step{send(cmd("GET", "hot"))}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warmAll(t, p)
			before := hits(p.proxy)
			p.compare(t, tt.steps...)
			if got := hits(p.proxy) > before; got != tt.wantHits && tt.wantHits {
				t.Errorf("local answers during the conversation: %v, want %v", got, tt.wantHits)
			}
		})
	}
}

// TestProtocolErrors checks that malformed requests get Redis's error and
// the connection closes, after the valid requests before them are answered.
func TestProtocolErrors(t *testing.T) {
	p := newPair(t, nil, cicadatest.Options{})
	setupData(t, p)
	bad := []string{
		"*x\r\n", "*1\r\n$-5\r\n", "*03\r\n", "*1\r\nx4\r\n", "GET \"hot\r\n", "SET \"a\"b c\r\n",
		"*1\r\n$536870913\r\n", "*2\r\n$3\r\nGET\r\n$3\r\nhotxx*1\r\n$4\r\nPING\r\n",
		"*" + strings.Repeat("9", 30) + "\r\n", "*1\r\n$" + strings.Repeat("1", 70000),
	}
	for _, b := range bad {
		name := b
		if len(name) > 30 {
			name = name[:30]
		}
		t.Run(name, func(t *testing.T) {
			p.compare(t, send(cmd("GET", "hot")+b+cmd("GET", "hot")))
		})
	}
	// A request whose NUL byte hides the line end waits, like Redis.
	p.compare(t, send("ECHO a\x00b\r\n"+cmd("GET", "hot")))
}

// TestLocalAnswersReachNoRedis proves hits are served by Cicada: Redis's
// INFO commandstats does not count them.
func TestLocalAnswersReachNoRedis(t *testing.T) {
	p := newPair(t, nil, cicadatest.Options{})
	setupData(t, p)
	before := commandCalls(t, p.behind.Addr, "get")
	const n = 5000
	var pipeline bytes.Buffer
	for range n {
		pipeline.WriteString(cmd("GET", "hot"))
	}
	out, _ := converse(t, p.proxy.Addr, []step{send(pipeline.String())}, 300*time.Millisecond)
	if want := bytes.Repeat([]byte("$9\r\nhot-value\r\n"), n); !bytes.Equal(out, want) {
		t.Fatalf("got %d bytes, want %d bytes of %q", len(out), len(want), "$9\r\nhot-value\r\n")
	}
	if grown := commandCalls(t, p.behind.Addr, "get") - before; grown > n/20 {
		t.Errorf("cmdstat_get grew by %d for %d GETs, want at most 5%%", grown, n)
	}
}

// TestStateChangesInMulti: SELECT, HELLO and CLIENT TRACKING queued in a
// transaction take effect at EXEC; Cicada must not answer with the state
// from before it.
func TestStateChangesInMulti(t *testing.T) {
	p := newPair(t, nil, cicadatest.Options{})
	setupData(t, p)
	p.both(t, "SELECT", "0")
	p.compare(t, send(cmds(
		[]string{"MULTI"}, []string{"SELECT", "1"}, []string{"EXEC"}, []string{"GET", "hot"}, []string{"SET", "hot", "db1"},
		[]string{"GET", "hot"},
	)))
	p.compare(t, send(cmds(
		[]string{"MULTI"}, []string{"HELLO", "3"}, []string{"EXEC"}, []string{"GET", "absent"},
	)))
	warmAll(t, p)
	p.compare(t, send(cmds([]string{"GET", "hot"})))
}

// TestSegmented sends requests cut at awkward points and receives Redis's
// replies cut after their first byte; nothing may be lost or garbled.
func TestSegmented(t *testing.T) {
	direct := redistest.Start(t)
	behind := redistest.Start(t)
	p := &pair{direct: direct, behind: behind}
	p.proxy = cicadatest.Start(t, segmentingRelay(t, behind.Addr), cicadatest.Options{})
	setupData(t, p)
	ms := 30 * time.Millisecond
	p.compare(t, send("GET ho"), pause(ms), send("t\r\n"+cmd("GET", "hot")[:7]), pause(ms), send(cmd("GET", "hot")[7:]))
	p.compare(t, send(cmd("BLPOP", "q", "0.2")), pause(ms), send(cmd("GET", "hot")), pause(400*ms/30*10))
	p.compare(t, send(cmd("INCR", "counter")), send(cmd("GET", "hot")), send(cmd("HGET", "h", "f")))
	p.compare(t, send(cmds([]string{"PING"}, []string{"GET", "hot2"}, []string{"LRANGE", "list", "0", "-1"}, []string{"PING"})))
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
	setupData(t, p)
	p.compare(t, send(cmd("PING")+"GET hot"+strings.Repeat(" ", 200000)))
	before := hits(p.proxy)
	got, closed := converse(t, p.proxy.Addr, []step{send(cmd("PING") + "GET hot" + strings.Repeat(" ", 100000) + "\r\n")}, 300*time.Millisecond)
	taken := string(got) == "+PONG\r\n$9\r\nhot-value\r\n" && !closed
	refused := string(got) == "+PONG\r\n-ERR Protocol error: too big inline request\r\n" && closed
	if !taken && !refused {
		t.Fatalf("100 KB inline GET: got %q closed=%v, want Redis's reply or its protocol error", got, closed)
	}
	if hits(p.proxy) != before {
		t.Error("a line Redis may refuse was answered from the cache")
	}
}
