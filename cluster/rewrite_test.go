package cluster

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func mustMap(t testing.TB, entries ...string) *AddrMap {
	t.Helper()
	m, err := ParseAddrMap(entries)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTopologyCommand(t *testing.T) {
	for _, tc := range []struct {
		args string
		want Reply
	}{
		{"CLUSTER SLOTS", ReplySlots},
		{"cluster slots", ReplySlots},
		{"Cluster Shards", ReplyShards},
		{"CLUSTER NODES", ReplyNodes},
		{"CLUSTER REPLICAS 0123", ReplyNodes},
		{"cluster slaves 0123", ReplyNodes},
		{"CLUSTER SLOTS extra", ReplySlots}, // Redis answers an error; Rewrite keeps it
		{"CLUSTER", ReplyNone},
		{"CLUSTER INFO", ReplyNone},
		{"CLUSTER MYID", ReplyNone},
		{"CLUSTER SLOT", ReplyNone},
		{"CLUSTERS SLOTS", ReplyNone},
		{"GET slots", ReplyNone},
		{"", ReplyNone},
	} {
		var args [][]byte
		for _, a := range strings.Fields(tc.args) {
			args = append(args, []byte(a))
		}
		if got := TopologyCommand(args); got != tc.want {
			t.Errorf("TopologyCommand(%q) = %d, want %d", tc.args, got, tc.want)
		}
	}
	args := [][]byte{[]byte("cluster"), []byte("replicas"), []byte("x")}
	if n := testing.AllocsPerRun(100, func() { TopologyCommand(args) }); n != 0 {
		t.Errorf("TopologyCommand allocates %v times, want 0", n)
	}
}

func TestRewriteRedirect(t *testing.T) {
	m := mustMap(t,
		":7102=:8102",
		"127.0.0.1:7100=10.0.0.1:8100",
		"[::1]:7103=[::2]:8103",
		"redis-7104.example:7104=cicada-4.example:8104",
		"127.0.0.1:7105=127.0.0.1:7105", // maps to itself: no change
	)
	for _, tc := range []struct{ in, want string }{
		// Captured from redis-server 7.0.15 (testdata/).
		{"-MOVED 15495 127.0.0.1:7102\r\n", "-MOVED 15495 127.0.0.1:8102\r\n"},
		{"-ASK 15495 127.0.0.1:7100\r\n", "-ASK 15495 10.0.0.1:8100\r\n"},
		{"-MOVED 15495 redis-7102.example:7102\r\n", "-MOVED 15495 redis-7102.example:8102\r\n"},
		{"-MOVED 15495 ?:7102\r\n", "-MOVED 15495 ?:8102\r\n"},
		{"-MOVED 15495 :7102\r\n", "-MOVED 15495 :8102\r\n"},
		{"-MOVED 15495 ::1:7102\r\n", "-MOVED 15495 ::1:8102\r\n"},
		// Made up in the same form.
		{"-MOVED 0 ::1:7103\r\n", "-MOVED 0 ::2:8103\r\n"},
		{"-ASK 16383 redis-7104.example:7104\r\n", "-ASK 16383 cicada-4.example:8104\r\n"},
		{"-MOVED 1 127.0.0.1:7101\r\n", ""}, // no entry
		{"-MOVED 1 127.0.0.2:7100\r\n", ""}, // other host
		{"-MOVED 1 ?:7100\r\n", ""},         // an exact entry needs the host
		{"-MOVED 1 127.0.0.1:7105\r\n", ""},
		// Not redirects, or not as Redis writes them.
		{"-ERR unknown command 'MOVED'\r\n", ""},
		{"-MOVED 1 127.0.0.1:7102", ""},
		{"-MOVED 1 127.0.0.1:7102\n", ""},
		{"-MOVED 1 127.0.0.1:7102 \r\n", ""},
		{"-MOVED 1 127.0.0.1:7102\r\n+OK\r\n", ""},
		{"-MOVED x 127.0.0.1:7102\r\n", ""},
		{"-MOVED  127.0.0.1:7102\r\n", ""},
		{"-MOVED 1 127.0.0.1\r\n", ""},
		{"-MOVED 1 127.0.0.1:\r\n", ""},
		{"-MOVED 1 127.0.0.1:99999\r\n", ""},
		{"-MOVED\r\n", ""},
		{"-ASK\r\n", ""},
		{"-moved 1 127.0.0.1:7102\r\n", ""},
		{"-MOVEDX 1 127.0.0.1:7102\r\n", ""},
		{"+MOVED 1 127.0.0.1:7102\r\n", ""},
		{"!24\r\nMOVED 1 127.0.0.1:7102\r\n", ""},
		{"", ""},
	} {
		got, ok := m.RewriteRedirect([]byte(tc.in))
		if string(got) != tc.want || ok != (tc.want != "") {
			t.Errorf("RewriteRedirect(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
}

func TestRewriteRedirectAllocs(t *testing.T) {
	m := mustMap(t, ":7102=:8102", "127.0.0.1:7100=10.0.0.1:8100")
	for _, in := range []string{
		"-ERR unknown command\r\n",
		"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
		"-CLUSTERDOWN Hash slot not served\r\n",
		"-MOVED 15495 127.0.0.1:7101\r\n", // a redirect the map does not change
	} {
		b := []byte(in)
		if n := testing.AllocsPerRun(100, func() { m.RewriteRedirect(b) }); n != 0 {
			t.Errorf("RewriteRedirect(%q) allocates %v times, want 0", in, n)
		}
	}
}

// fixtureKind is the Reply a testdata file answers, from its name.
func fixtureKind(name string) Reply {
	switch {
	case strings.HasPrefix(name, "slots-"):
		return ReplySlots
	case strings.HasPrefix(name, "shards-"):
		return ReplyShards
	case strings.HasPrefix(name, "nodes-"), strings.HasPrefix(name, "replicas-"):
		return ReplyNodes
	}
	return ReplyNone
}

// fixtures returns the replies captured from redis-server 7.0.15 (see
// testdata/README).
func fixtures(t testing.TB) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob("testdata/*.resp*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = b
	}
	return out
}

// fixtureOracles are maps over the captured clusters (ports 7100-7105 on
// 127.0.0.1 or ::1, hostnames redis-<port>.example).
var fixtureOracles = map[string]oracle{
	"port-only": {
		{"", 7100, "", 8100}, {"", 7101, "", 8101}, {"", 7102, "", 8102},
		{"", 7103, "", 8103}, {"", 7104, "", 8104}, {"", 7105, "", 8105},
	},
	"exact-ip": {
		{"127.0.0.1", 7100, "cicada-0.example", 8100},
		{"127.0.0.1", 7101, "10.1.2.3", 8101},
		{"127.0.0.1", 7103, "127.0.0.1", 8103},
		{"::1", 7100, "::2", 8100},
		{"::1", 7101, "cicada-1.example", 8101},
		{"", 7105, "", 9105}, // port-only, beside exact ones
	},
	"exact-hostname": {
		{"redis-7100.example", 7100, "cicada-0.example", 8100},
		{"redis-7101.example", 7101, "cicada-1.example", 8101},
		{"127.0.0.1", 7101, "10.9.9.9", 9101}, // CLUSTER NODES: ip first
		{"redis-7102.example", 7102, "cicada-2.example", 8102},
		{"", 7102, "", 9102}, // loses to the exact ones
		{"127.0.0.1", 7104, "10.4.4.4", 8104},
	},
}

// TestRewriteFixtures checks every captured reply against the oracle, byte
// for byte: Rewrite's output must be the encoding of the oracle's tree.
func TestRewriteFixtures(t *testing.T) {
	for name, reply := range fixtures(t) {
		kind := fixtureKind(name)
		if kind == ReplyNone {
			testRedirectFixture(t, name, reply)
			continue
		}
		orig, rest, err := decode(string(reply))
		if err != nil || rest != "" || encode(orig) != string(reply) {
			t.Fatalf("%s: fixture does not round-trip (%v, %d bytes left)", name, err, len(rest))
		}
		for oname, o := range fixtureOracles {
			got := mustMap(t, o.entries()...).Rewrite(kind, reply)
			orig, _, _ := decode(string(reply))
			want := encode(o.expect(kind, orig))
			if string(got) != want {
				t.Errorf("%s, %s map:\n got %q\nwant %q", name, oname, got, want)
			}
			if want == string(reply) && &got[0] != &reply[0] {
				t.Errorf("%s, %s map: unchanged reply copied", name, oname)
			}
		}
	}
}

// testRedirectFixture checks a captured -MOVED or -ASK against the oracle.
func testRedirectFixture(t *testing.T, name string, reply []byte) {
	f := strings.Fields(strings.TrimSuffix(string(reply), "\r\n"))
	if len(f) != 3 || (f[0] != "-MOVED" && f[0] != "-ASK") {
		t.Fatalf("%s: not a redirect: %q", name, reply)
	}
	c := strings.LastIndex(f[2], ":")
	host := f[2][:c]
	port, _ := strconv.Atoi(f[2][c+1:])
	for oname, o := range fixtureOracles {
		want := ""
		if e, ok := o.match(port, host); ok {
			want = fmt.Sprintf("%s %s %s:%d\r\n", f[0], f[1], e.host(host), e.toPort)
		}
		got, ok := mustMap(t, o.entries()...).RewriteRedirect(reply)
		if string(got) != want || ok != (want != "") {
			t.Errorf("%s, %s map: RewriteRedirect = %q, %v; want %q", name, oname, got, ok, want)
		}
	}
}

// TestRewriteFixturesChange makes sure the fixture test tests something:
// each map changes the replies it is meant for.
func TestRewriteFixturesChange(t *testing.T) {
	fx := fixtures(t)
	for _, tc := range []struct{ file, oracle, has string }{
		{"slots-ip.resp2", "port-only", "127.0.0.1\r\n:8103\r\n"},
		{"slots-ip.resp3", "exact-ip", "$16\r\ncicada-0.example\r\n:8100\r\n"},
		{"slots-ipv6.resp3", "exact-ip", "$3\r\n::2\r\n:8100\r\n"},
		{"slots-hostname.resp2", "exact-hostname", "$16\r\ncicada-1.example\r\n:8101\r\n"},
		{"slots-hostname.resp2", "port-only", "$1\r\n?\r\n:8105\r\n"},
		{"slots-unknown.resp3", "exact-ip", "_\r\n:8100\r\n"},
		{"slots-unknown.resp3", "exact-ip", "$2\r\nip\r\n$16\r\ncicada-0.example\r\n"},
		{"slots-hostname-ip.resp3", "exact-hostname", "$8\r\n10.4.4.4\r\n:8104\r\n"},
		{"shards-ip.resp2", "exact-ip", "$4\r\nport\r\n:8101\r\n$2\r\nip\r\n$8\r\n10.1.2.3\r\n$8\r\nendpoint\r\n$8\r\n10.1.2.3\r\n"},
		{"shards-hostname.resp3", "exact-hostname", ":8100\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$16\r\ncicada-0.example\r\n$8\r\nhostname\r\n$16\r\ncicada-0.example\r\n"},
		{"shards-unknown.resp2", "exact-hostname", "$4\r\nport\r\n:8104\r\n$2\r\nip\r\n$8\r\n10.4.4.4\r\n$8\r\nendpoint\r\n$0\r\n\r\n"},
		{"nodes-ip.resp2", "exact-ip", " cicada-0.example:8100@17100 myself,master"},
		{"nodes-ip.resp3", "port-only", "=749\r\ntxt:"},
		{"nodes-hostname.resp3", "exact-hostname", " 10.9.9.9:9101@17101,redis-7101.example master"},
		{"nodes-hostname.resp3", "exact-hostname", " 127.0.0.1:8100@17100,cicada-0.example myself"},
		{"nodes-ipv6.resp2", "exact-ip", " ::2:8100@17100 "},
		{"nodes-migrating.resp2", "port-only", "127.0.0.1:8102@17102 myself,master - 0 1796017888000 3 connected 10923-16383 [15495->-46d8"},
		{"replicas-ip.resp3", "exact-ip", "*1\r\n$136\r\n6cbc3eb6201f2a3026fdd060fdf187d3f9b36f3d 127.0.0.1:8103@17103 slave"},
		{"replicas-hostname.resp2", "exact-ip", "*1\r\n$155\r\n6cbc3eb6201f2a3026fdd060fdf187d3f9b36f3d 127.0.0.1:8103@17103,redis-7103.example slave"},
	} {
		got := mustMap(t, fixtureOracles[tc.oracle].entries()...).Rewrite(fixtureKind(tc.file), fx[tc.file])
		if !bytes.Contains(got, []byte(tc.has)) {
			t.Errorf("%s, %s map: no %q in\n%q", tc.file, tc.oracle, tc.has, got)
		}
	}
}

// TestRewriteLiteral shows the rewriting on small replies, byte for byte.
func TestRewriteLiteral(t *testing.T) {
	m := mustMap(t, ":6379=:6380", "10.0.0.1:7000=sidecar-1:7001", "[::1]:7000=[::1]:7002")
	node := func(ep, port, meta string) string {
		return "*4\r\n" + ep + ":" + port + "\r\n$2\r\nid\r\n" + meta
	}
	slots := func(nodes ...string) string {
		return fmt.Sprintf("*1\r\n*%d\r\n:0\r\n:16383\r\n", 2+len(nodes)) + strings.Join(nodes, "")
	}
	for _, tc := range []struct {
		name string
		kind Reply
		in   string
		want string // "" for unchanged
	}{
		{"slots port-only", ReplySlots,
			slots(node("$8\r\n10.0.0.9\r\n", "6379", "*0\r\n"), node("$8\r\n10.0.0.9\r\n", "6378", "*0\r\n")),
			slots(node("$8\r\n10.0.0.9\r\n", "6380", "*0\r\n"), node("$8\r\n10.0.0.9\r\n", "6378", "*0\r\n"))},
		{"slots exact RESP2 metadata", ReplySlots,
			slots(node("$8\r\n10.0.0.1\r\n", "7000", "*4\r\n$2\r\nip\r\n$8\r\n10.0.0.1\r\n$8\r\nhostname\r\n$8\r\n10.0.0.1\r\n")),
			slots(node("$9\r\nsidecar-1\r\n", "7001", "*4\r\n$2\r\nip\r\n$9\r\nsidecar-1\r\n$8\r\nhostname\r\n$9\r\nsidecar-1\r\n"))},
		{"slots null endpoint, ip in RESP3 metadata", ReplySlots,
			slots(node("_\r\n", "7000", "%1\r\n$2\r\nip\r\n$8\r\n10.0.0.1\r\n")),
			slots(node("_\r\n", "7001", "%1\r\n$2\r\nip\r\n$9\r\nsidecar-1\r\n"))},
		{"slots ipv6, port only changes", ReplySlots,
			slots(node("$3\r\n::1\r\n", "7000", "%0\r\n")),
			slots(node("$3\r\n::1\r\n", "7002", "%0\r\n"))},
		{"slots before Redis 7: no metadata", ReplySlots,
			"*1\r\n*3\r\n:0\r\n:1\r\n*3\r\n$8\r\n10.0.0.1\r\n:7000\r\n$2\r\nid\r\n",
			"*1\r\n*3\r\n:0\r\n:1\r\n*3\r\n$9\r\nsidecar-1\r\n:7001\r\n$2\r\nid\r\n"},
		{"slots simple-string endpoint", ReplySlots,
			"*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n+10.0.0.1\r\n:7000\r\n",
			"*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n+sidecar-1\r\n:7001\r\n"},
		{"slots empty", ReplySlots, "*0\r\n", ""},
		{"slots no match", ReplySlots, slots(node("$8\r\n10.0.0.2\r\n", "7000", "*0\r\n")), ""},
		{"slots error", ReplySlots, "-ERR This instance has cluster support disabled\r\n", ""},
		{"slots node not an array", ReplySlots, "*1\r\n*3\r\n:0\r\n:1\r\n$8\r\n10.0.0.1\r\n", ""},
		{"slots trailing bytes", ReplySlots, slots(node("$8\r\n10.0.0.1\r\n", "7000", "*0\r\n")) + "+OK\r\n", ""},
		{"slots truncated", ReplySlots, slots(node("$8\r\n10.0.0.1\r\n", "7000", "*0\r\n"))[:40], ""},
		{"slots port a bulk string", ReplySlots, "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$8\r\n10.0.0.1\r\n$4\r\n7000\r\n", ""},
		{"slots attribute on the endpoint", ReplySlots, "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n|1\r\n+a\r\n+b\r\n$8\r\n10.0.0.1\r\n:7000\r\n", ""},
		{"slots attribute skipped in the id", ReplySlots,
			"*1\r\n*3\r\n:0\r\n:1\r\n*3\r\n$8\r\n10.0.0.1\r\n:7000\r\n|1\r\n+a\r\n+b\r\n$2\r\nid\r\n",
			"*1\r\n*3\r\n:0\r\n:1\r\n*3\r\n$9\r\nsidecar-1\r\n:7001\r\n|1\r\n+a\r\n+b\r\n$2\r\nid\r\n"},
		{"slots odd metadata skipped", ReplySlots,
			slots(node("$8\r\n10.0.0.1\r\n", "7000", "*1\r\n$2\r\nip\r\n")),
			slots(node("$9\r\nsidecar-1\r\n", "7001", "*1\r\n$2\r\nip\r\n"))},
		{"shards RESP3", ReplyShards,
			"*1\r\n%2\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n%6\r\n$2\r\nid\r\n$2\r\nid\r\n$4\r\nport\r\n:7000\r\n$8\r\ntls-port\r\n:7000\r\n$2\r\nip\r\n$8\r\n10.0.0.1\r\n$8\r\nendpoint\r\n$8\r\n10.0.0.1\r\n$6\r\nhealth\r\n$6\r\nonline\r\n",
			"*1\r\n%2\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n%6\r\n$2\r\nid\r\n$2\r\nid\r\n$4\r\nport\r\n:7001\r\n$8\r\ntls-port\r\n:7000\r\n$2\r\nip\r\n$9\r\nsidecar-1\r\n$8\r\nendpoint\r\n$9\r\nsidecar-1\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"},
		{"shards endpoint '?' falls back to ip", ReplyShards,
			"*1\r\n*2\r\n$5\r\nnodes\r\n*1\r\n*6\r\n$4\r\nport\r\n:7000\r\n$2\r\nip\r\n$8\r\n10.0.0.1\r\n$8\r\nendpoint\r\n$1\r\n?\r\n",
			"*1\r\n*2\r\n$5\r\nnodes\r\n*1\r\n*6\r\n$4\r\nport\r\n:7001\r\n$2\r\nip\r\n$9\r\nsidecar-1\r\n$8\r\nendpoint\r\n$1\r\n?\r\n"},
		{"shards TLS without port: nothing to map", ReplyShards,
			"*1\r\n*2\r\n$5\r\nnodes\r\n*1\r\n*4\r\n$8\r\ntls-port\r\n:7000\r\n$2\r\nip\r\n$8\r\n10.0.0.1\r\n", ""},
		{"shards odd RESP2 map", ReplyShards, "*1\r\n*1\r\n$5\r\nnodes\r\n", ""},
		{"nodes RESP2", ReplyNodes,
			"$57\r\nid1 10.0.0.1:7000@17000,10.0.0.1 myself,master - 0 0 1 c\n\r\n",
			"$59\r\nid1 sidecar-1:7001@17000,sidecar-1 myself,master - 0 0 1 c\n\r\n"},
		{"nodes RESP3 verbatim", ReplyNodes,
			"=70\r\ntxt:id1 10.0.0.1:7000@17000 master - 0 0 1 c\nid2 ::1:7000@17000 slave\n\r\n",
			"=71\r\ntxt:id1 sidecar-1:7001@17000 master - 0 0 1 c\nid2 ::1:7002@17000 slave\n\r\n"},
		{"nodes hostname then aux fields kept", ReplyNodes,
			"$43\r\nid1 10.0.0.9:6379@16379,,shard-id=ab master\r\n",
			"$43\r\nid1 10.0.0.9:6380@16379,,shard-id=ab master\r\n"},
		{"nodes before Redis 4: no bus port", ReplyNodes,
			"$24\r\nid1 10.0.0.9:6379 master\r\n",
			"$24\r\nid1 10.0.0.9:6380 master\r\n"},
		{"nodes noaddr", ReplyNodes, "$22\r\nid1 :0@0 master,noaddr\r\n", ""},
		{"replicas", ReplyNodes,
			"*2\r\n$29\r\nid1 10.0.0.9:6379@16379 slave\r\n$29\r\nid2 10.0.0.9:6378@16378 slave\r\n",
			"*2\r\n$29\r\nid1 10.0.0.9:6380@16379 slave\r\n$29\r\nid2 10.0.0.9:6378@16378 slave\r\n"},
		{"replicas none", ReplyNodes, "*0\r\n", ""},
		{"nodes error", ReplyNodes, "-ERR Unknown node 123\r\n", ""},
		{"nodes null", ReplyNodes, "$-1\r\n", ""},
		{"nodes verbatim without format", ReplyNodes, "=2\r\nab\r\n", ""},
		{"nodes bad length", ReplyNodes, "$99\r\nid1 10.0.0.9:6379@16379 slave\r\n", ""},
		{"none", ReplyNone, "$29\r\nid1 10.0.0.9:6379@16379 slave\r\n", ""},
	} {
		got := m.Rewrite(tc.kind, []byte(tc.in))
		want := tc.want
		if want == "" {
			want = tc.in
		}
		if string(got) != want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, want)
		}
		if v, rest, err := decode(tc.want); tc.want != "" && (err != nil || rest != "" || encode(v) != tc.want) {
			t.Errorf("%s: want is not one reply (%v, %q left)", tc.name, err, rest)
		}
	}
}

// TestRewriteExec: topology replies inside EXEC's array are rewritten as
// they are alone (byte for byte), the other elements and an element that
// is an error are left alone, and a reply that is not an array is too.
func TestRewriteExec(t *testing.T) {
	fx := fixtures(t)
	m := mustMap(t, fixtureOracles["port-only"].entries()...)
	slots, nodes, shards := fx["slots-ip.resp3"], fx["nodes-ip.resp3"], fx["shards-ip.resp2"]
	errReply := []byte("-ERR unknown subcommand\r\n")
	join := func(parts ...[]byte) []byte {
		out := []byte("*" + strconv.Itoa(len(parts)) + "\r\n")
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	ok := []byte("+OK\r\n")
	elems := []ExecElem{{1, ReplySlots}, {2, ReplyNodes}, {3, ReplyShards}, {4, ReplySlots}}
	reply := join(ok, slots, nodes, shards, errReply, ok)
	want := join(ok, m.Rewrite(ReplySlots, slots), m.Rewrite(ReplyNodes, nodes), m.Rewrite(ReplyShards, shards), errReply, ok)
	if got := m.RewriteExec(reply, elems); !bytes.Equal(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	if bytes.Equal(want, reply) {
		t.Fatal("the map changed nothing: the test proves nothing")
	}
	for _, same := range [][]byte{[]byte("*-1\r\n"), []byte("-EXECABORT Transaction discarded because of previous errors.\r\n"), join(ok, ok)} {
		if got := m.RewriteExec(same, elems); !bytes.Equal(got, same) {
			t.Errorf("%q: got %q", same, got)
		}
	}
	if got := m.RewriteExec(reply[:len(reply)-1], elems); !bytes.Equal(got, reply[:len(reply)-1]) {
		t.Error("a truncated reply was changed")
	}
}
