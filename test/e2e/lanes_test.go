package e2e

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// laneIDs returns the ids of Cicada's lanes, as Redis lists them.
func laneIDs(t *testing.T, direct *redis.Client) []string {
	t.Helper()
	var ids []string
	for _, line := range strings.Split(direct.ClientList(context.Background()).Val(), "\n") {
		if strings.Contains(line, " name=cicada-lane ") {
			id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
			ids = append(ids, id)
		}
	}
	return ids
}

// TestLaneKilledMidPipeline: a lane killed while it carries a client's
// pipeline (its write held by CLIENT PAUSE WRITE) closes that client after
// the replies Redis sent, and the held write never runs, as with the
// client's own connection; a client idle on the lane carries on, on a new
// one.
func TestLaneKilledMidPipeline(t *testing.T) {
	if !cicadatest.Multiplexed() {
		t.Skip("MULTIPLEX=false: no lanes")
	}
	r, p := newProxied(t, cicadatest.Options{Loops: 1})
	direct := client(t, r.Addr, 2)
	ctx := context.Background()
	mustDo(t, direct, "SET", "a", "va")
	a, abr := readyConn(t, p.Addr)
	b, bbr := readyConn(t, p.Addr)
	lanes := laneIDs(t, direct)
	if len(lanes) != 1 {
		t.Fatalf("lanes: %v, want one for both clients", lanes)
	}
	mustDo(t, direct, "CLIENT", "PAUSE", "10000", "WRITE")
	defer direct.Do(ctx, "CLIENT", "UNPAUSE")
	sendBytes(t, a, cmd("GET", "a")+cmd("SET", "x", "1")+cmd("GET", "a"))
	if got, err := redistest.ReadReply(abr); err != nil || string(got) != "$2\r\nva\r\n" {
		t.Fatalf("GET before the held SET: %q, %v", got, err)
	}
	mustDo(t, direct, "CLIENT", "KILL", "ID", lanes[0])
	_ = a.SetReadDeadline(time.Now().Add(5 * time.Second))
	if rest, err := io.ReadAll(abr); len(rest) != 0 || err != nil {
		t.Fatalf("the client with requests in flight on the killed lane got %q then %v, want nothing then the close", rest, err)
	}
	mustDo(t, direct, "CLIENT", "UNPAUSE")
	sendBytes(t, b, cmd("GET", "a"))
	if got, err := redistest.ReadReply(bbr); err != nil || string(got) != "$2\r\nva\r\n" {
		t.Fatalf("the idle client after the kill: %q, %v; want the value on a new lane", got, err)
	}
	if err := direct.Get(ctx, "x").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET x: %v, want nil: the held SET of the killed lane ran", err)
	}
	if ids := laneIDs(t, direct); len(ids) != 1 || ids[0] == lanes[0] {
		t.Errorf("lanes after the kill: %v, want one new one", ids)
	}
}

// TestLaneClientStates: clients of every state the lanes carry share them
// (one lane per state per loop, however many clients), and a client that
// needs a connection of its own gets it with its db, protocol and name.
func TestLaneClientStates(t *testing.T) {
	if !cicadatest.Multiplexed() {
		t.Skip("MULTIPLEX=false: no lanes")
	}
	p := newPair(t, nil, cicadatest.Options{Loops: 1})
	direct := client(t, p.Behind.Addr, 2)
	const clients = 20
	for i := range clients {
		// Each client: a db, a protocol, a name, reads and writes on
		// lanes, then a transaction and CLIENT GETNAME on its own
		// connection, in the state it had.
		db := strconv.Itoa(i % 3)
		p.Compare(t,
			send(cmds([]string{"SELECT", db}, []string{"HELLO", "3"}, []string{"CLIENT", "SETNAME", "c" + db},
				[]string{"SET", "k", db}, []string{"GET", "k"}, []string{"GET", "k"})),
			send(cmds([]string{"MULTI"}, []string{"INCR", "n"}, []string{"EXEC"}, []string{"CLIENT", "GETNAME"}, []string{"GET", "k"})),
		)
	}
	if got := len(laneIDs(t, direct)); got != 6 {
		t.Errorf("%d lanes, want 6 (dbs 0, 1 and 2, each in RESP2 then RESP3)", got)
	}
	if got := metric(t, p.Proxy, "cicada_upstream_pins_total", ""); got != clients {
		t.Errorf("cicada_upstream_pins_total %v, want %d (one per client, at its MULTI)", got, clients)
	}
}
