package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestParseLoadgenJSON reads the load generator's -json line (as printed by
// a closed-loop run against redis-server 7.0.15) and refuses runs with
// errors or nothing done; missed requests are counted, and GET and SET
// latencies taken when the line has them.
func TestParseLoadgenJSON(t *testing.T) {
	line := `{"scenario":"closed","addr":"127.0.0.1:7801","conns":200,"pipeline":1,"ops":1395211,"duration_s":10.0002,"ops_per_sec":139518.3,"p50_us":1151,"p99_us":6531,"p999_us":13711,"max_us":40127,"errors":0,"late":0,"missed":0,"cpu_s":9.3,"cpu_s_per_1m_ops":6.66,"cpu_pct_of_one_core":93}` + "\n"
	got, err := parseLoadgenJSON([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := benchResult{Requests: 1395211, RPS: 139518.3, P50Ms: 1.151, P99Ms: 6.531, P999Ms: 13.711, MaxMs: 40.127}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	kinds := `{"ops":10,"p50_us":2000,"get_p50_us":1500,"get_p99_us":9000,"set_p50_us":3500,"set_p99_us":12000}`
	if got, err := parseLoadgenJSON([]byte(kinds)); err != nil || got.GetP50Ms != 1.5 || got.GetP99Ms != 9 || got.SetP50Ms != 3.5 || got.SetP99Ms != 12 {
		t.Errorf("GET and SET apart: got %+v, %v; want GET 1.5/9 ms, SET 3.5/12 ms", got, err)
	}
	if got, err := parseLoadgenJSON([]byte(`{"ops":10,"missed":3}`)); err != nil || got.Missed != 3 {
		t.Errorf("missed: got %+v, %v; want Missed 3", got, err)
	}
	for _, bad := range []string{
		`{"ops":10,"errors":1}`,
		`{"ops":0}`,
		`ops=10`,
	} {
		if _, err := parseLoadgenJSON([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// TestSettle: scenarios 4 to 6 settle a Cicada target with their own load
// and -duration 15s, on keys of their own (a seed no measured run uses),
// and -settle 0 settles nothing; each measured round has a seed of its
// own, the same for every target, and the warm-up the load generator's
// default.
func TestSettle(t *testing.T) {
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	bin := filepath.Join(dir, "loadgen")
	script := "#!/bin/sh\necho \"$@\" >> " + args + "\necho '{\"ops\":10}'\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sc := range goScenarios(scenarioConfig{Loadgen: bin, GoDuration: 4 * time.Second, OpenRate: 20000}) {
		if sc.Settle != nil {
			t.Errorf("%s: a settle at -settle 0", sc.Name)
		}
	}
	scs := goScenarios(scenarioConfig{Loadgen: bin, GoDuration: 4 * time.Second, OpenRate: 20000, Settle: 15 * time.Second})
	for _, sc := range scs {
		if sc.Settle == nil {
			t.Fatalf("%s: no settle at -settle 15s", sc.Name)
		}
		if err := sc.Settle("127.0.0.1:1", 2); err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
	}
	b, err := os.ReadFile(args)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != len(scs) {
		t.Fatalf("%d runs, want %d:\n%s", len(lines), len(scs), b)
	}
	for i, l := range lines {
		want := strings.Join(scs[i].Load.Args("127.0.0.1:1")[1:], " ")
		want = strings.Replace(want, "-duration 4s", "-duration 15s", 1) + " -seed 4294967298"
		if l != want {
			t.Errorf("%s settled with %q, want %q", scs[i].Name, l, want)
		}
	}
	sc := scs[0]
	if a := sc.Load.Args("x"); slices.Contains(a, "-seed") {
		t.Errorf("warm-up args %q: want the load generator's default seed", a)
	}
	for r, want := range []string{"2", "3", "4"} {
		a := sc.forRound(r).Load.Args("x")
		if i := slices.Index(a, "-seed"); i < 0 || a[i+1] != want {
			t.Errorf("round %d: args %q, want -seed %s", r, a, want)
		}
	}
}

// TestAloneWhereWrites: every scenario whose load writes (redis-benchmark
// -t set; the load generator, 10% SETs) runs each target with no other
// Cicada subscribed to Redis's keyspace notifications, and the read-only
// ones keep their Cicadas running between rounds (a hot key stays cached).
func TestAloneWhereWrites(t *testing.T) {
	scs := scenarios(scenarioConfig{NP1: 1000, NP16: 1000, Clients: 50, Bench: "redis-benchmark",
		Loadgen: "loadgen", GoDuration: time.Second, OpenRate: 1000, Settle: time.Second})
	var alone int
	for _, sc := range scs {
		_, generated := sc.Load.(goLoad)
		writes := generated || strings.Contains(strings.Join(sc.Load.Args("127.0.0.1:1"), " "), " -t set ")
		if sc.Alone != writes {
			t.Errorf("%s: Alone %v, its load writes: %v", sc.Name, sc.Alone, writes)
		}
		if sc.Alone {
			alone++
		}
	}
	if alone != 5 { // 3 miss SET -P1 and -P16, 4, 5, 6
		t.Errorf("%d scenarios alone, want 5", alone)
	}
}
