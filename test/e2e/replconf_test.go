package e2e

import (
	"net"
	"testing"

	"github.com/cicada-proxy/cicada/test/cicadatest"
)

// TestReplconf: REPLCONF ACK and GETACK from a normal client get no reply
// from Redis (replconfCommand returns before its +OK), unless an option
// before them fails or Redis refuses the command (ACL, MULTI queues it);
// the replies after them must not shift. Through Cicada, the connection
// keeps every reply, and no request stays counted as awaiting one.
func TestReplconf(t *testing.T) {
	p := newPair(t, nil, cicadatest.Options{})
	p.LoadSample(t)
	p.Both(t, []string{"ACL", "SETUSER", "noadmin", "on", ">pw", "~*", "&*", "+@all", "-@admin"})
	get := []string{"GET", "hot"}
	tests := []struct {
		name  string
		steps []step
	}{
		{"ACK", []step{send(cmds([]string{"REPLCONF", "ACK", "0"}, []string{"SELECT", "1"}, []string{"PING"}, get))}},
		{"ACK after a hit", []step{send(cmds([]string{"PING"}, get)), send(cmds([]string{"REPLCONF", "ack", "5"}, get, []string{"SET", "x", "1"}, get))}},
		{"GETACK", []step{send(cmds([]string{"REPLCONF", "GETACK", "*"}, []string{"PING"}, get))}},
		{"inline ACK", []step{send("REPLCONF ACK 0\r\nPING\r\n" + cmd("GET", "hot"))}},
		{"ACK after an option", []step{send(cmds([]string{"REPLCONF", "listening-port", "1", "ack", "1"}, get))}},
		{"ACK after a bad option value", []step{send(cmds([]string{"REPLCONF", "listening-port", "x", "ack", "1"}, []string{"PING"}, get))}},
		{"ACK after an unknown option", []step{send(cmds([]string{"REPLCONF", "foo", "bar", "ack", "1"}, []string{"PING"}, get))}},
		{"ACK without a value", []step{send(cmds([]string{"REPLCONF", "ACK"}, []string{"PING"}, get))}},
		{"no option", []step{send(cmds([]string{"REPLCONF"}, []string{"REPLCONF", "capa", "eof"}, []string{"PING"}, get))}},
		{"ACK refused by ACL", []step{send(cmds([]string{"AUTH", "noadmin", "pw"}, []string{"REPLCONF", "ACK", "1"}, []string{"PING"}, get))}},
		{"ACK queued in MULTI", []step{send(cmds([]string{"MULTI"}, []string{"REPLCONF", "ACK", "1"}, []string{"PING"},
			[]string{"EXEC"}, []string{"PING"}, get))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.WarmSample(t)
			p.Compare(t, tt.steps...)
		})
	}

	// The connection stays open with nothing outstanding: no request may
	// stay counted in flight (a graceful shutdown waits for those).
	c, err := net.Dial("tcp", p.Proxy.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(cmds([]string{"REPLCONF", "ACK", "0"}, []string{"PING"}))); err != nil {
		t.Fatal(err)
	}
	expectBytes(t, c, "+PONG\r\n")
	waitFor(t, func() bool { return metric(t, p.Proxy, "cicada_inflight_requests", "") == 0 })
	_, _ = c.Write([]byte(cmd("GET", "hot")))
	expectBytes(t, c, "$9\r\nhot-value\r\n")
	waitFor(t, func() bool { return metric(t, p.Proxy, "cicada_inflight_requests", "") == 0 })
}
