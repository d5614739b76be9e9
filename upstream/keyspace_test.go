package upstream

import (
	"fmt"
	"testing"
)

func TestParseChannel(t *testing.T) {
	tests := []struct {
		in   string
		db   int
		key  string
		okay bool
	}{
		{"__keyspace@0__:k", 0, "k", true},
		{"__keyspace@15__:a:b__:c", 15, "a:b__:c", true},
		{"__keyspace@3__:", 3, "", true},
		{"__keyevent@0__:set", 0, "", false},
		{"__keyspace@x__:k", 0, "", false},
		{"__keyspace@-1__:k", 0, "", false},
		{"__keyspace@__:k", 0, "", false},
	}
	for _, tt := range tests {
		db, key, ok := parseChannel([]byte(tt.in))
		if ok != tt.okay || (ok && (db != tt.db || string(key) != tt.key)) {
			t.Errorf("parseChannel(%q) = %d, %q, %v; want %d, %q, %v", tt.in, db, key, ok, tt.db, tt.key, tt.okay)
		}
	}
}

func TestMissingClasses(t *testing.T) {
	for flags, want := range map[string]string{
		"": "Kg$lshzxetd", "AK": "", "KA": "", "Ex": "Kg$lshzetd", "AKE": "", "A": "K", "K": "g$lshzxetd",
		"Kg$lshzxetd": "", "AEm": "K",
	} {
		if got := missingClasses(flags, needed); got != want {
			t.Errorf("missingClasses(%q) = %q, want %q", flags, got, want)
		}
	}
}

func TestParseCalls(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_get:calls=10,usec=5,usec_per_call=0.5\r\n" +
		"cmdstat_swapdb:calls=2,usec=1,usec_per_call=0.5,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|set:calls=7,usec=1\r\n# Stats\r\ntotal_commands_processed:123\r\n"
	got := parseCalls(info, []string{"swapdb", "config|set", "flushall"})
	if s := fmt.Sprint(got); s != "map[config|set:7 swapdb:2 total_commands_processed:123]" {
		t.Errorf("parseCalls = %s", s)
	}
}

func TestParseOutputLimits(t *testing.T) {
	got, ok := parseOutputLimits("normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60")
	if want := (outputLimits{{0, 0, 0}, {33554432, 8388608, 60}}); !ok || got != want {
		t.Errorf("parseOutputLimits = %v, %v; want %v", got, ok, want)
	}
	for _, bad := range []string{"", "normal 0 0", "normal 0 0 0", "normal x 0 0 pubsub 1 1 1", "normal -1 0 0 pubsub 1 1 1"} {
		if _, ok := parseOutputLimits(bad); ok {
			t.Errorf("parseOutputLimits(%q) accepted", bad)
		}
	}
}
