package hotkeys

import (
	"strings"
	"testing"
	"time"
)

func words(s string) [][]byte {
	var out [][]byte
	for _, w := range strings.Fields(s) {
		if w == "<nil>" {
			out = append(out, nil)
			continue
		}
		out = append(out, []byte(w))
	}
	return out
}

// The messages and their order are hotkeysCommand's in Redis 8.6's
// src/hotkeys.c (redis/redis, the START branch: "METRICS is required and
// must be the first argument", the metrics loop, then the options loop with
// the SLOTS branch's "if (!server.cluster_enabled)").
func TestParseStart(t *testing.T) {
	tests := []struct {
		args string
		want Options
		msg  string
	}{
		{"HOTKEYS START", Options{}, "METRICS parameter is required"},
		{"HOTKEYS START METRICS", Options{}, "METRICS parameter is required"},
		{"HOTKEYS START COUNT 1", Options{}, "METRICS parameter is required"},
		{"HOTKEYS START METRICS 0", Options{}, "METRICS count must be > 0 and <= 2"},
		{"HOTKEYS START METRICS -1", Options{}, "METRICS count must be > 0 and <= 2"},
		{"HOTKEYS START METRICS 3 CPU NET", Options{}, "METRICS count must be > 0 and <= 2"},
		{"HOTKEYS START METRICS 01 CPU", Options{}, "METRICS count must be > 0 and <= 2"},
		{"HOTKEYS START METRICS +1 CPU", Options{}, "METRICS count must be > 0 and <= 2"},
		{"HOTKEYS START METRICS <nil> CPU", Options{}, "METRICS count must be > 0 and <= 2"},
		{"HOTKEYS START METRICS 2 CPU", Options{}, "METRICS count does not match number of metric types provided"},
		{"HOTKEYS START METRICS 1 CPU NET", Options{}, "syntax error"},
		{"HOTKEYS START METRICS 2 CPU CPU", Options{}, "METRICS CPU defined more than once!"},
		{"HOTKEYS START METRICS 2 net NET", Options{}, "METRICS NET defined more than once!"},
		{"HOTKEYS START METRICS 1 GPU", Options{}, "METRICS no valid metrics passed. Supported: CPU|NET"},
		{"HOTKEYS START METRICS 2 GPU NYET", Options{}, "METRICS no valid metrics passed. Supported: CPU|NET"},
		{"HOTKEYS START METRICS 1 CPU COUNT 0", Options{}, "COUNT must be between 1 and 64"},
		{"HOTKEYS START METRICS 1 CPU COUNT 65", Options{}, "COUNT must be between 1 and 64"},
		{"HOTKEYS START METRICS 1 CPU COUNT x", Options{}, "COUNT must be between 1 and 64"},
		{"HOTKEYS START METRICS 1 CPU COUNT", Options{}, "syntax error"},
		{"HOTKEYS START METRICS 1 CPU DURATION 0", Options{}, "DURATION must be between 1 and 1000000"},
		{"HOTKEYS START METRICS 1 CPU DURATION 1000001", Options{}, "DURATION must be between 1 and 1000000"},
		{"HOTKEYS START METRICS 1 CPU SAMPLE 0", Options{}, "SAMPLE ratio must be positive"},
		{"HOTKEYS START METRICS 1 CPU SAMPLE 2147483648", Options{}, "SAMPLE ratio must be positive"},
		{"HOTKEYS START METRICS 1 CPU SLOTS 2 0 5", Options{}, "SLOTS parameter cannot be used in non-cluster mode"},
		{"HOTKEYS START METRICS 1 CPU SLOTS x", Options{}, "SLOTS parameter cannot be used in non-cluster mode"},
		{"HOTKEYS START METRICS 1 CPU SLOTS", Options{}, "syntax error"},
		{"HOTKEYS START METRICS 1 CPU BOGUS 1", Options{}, "syntax error"},
		{"HOTKEYS START METRICS 1 CPU COUNT 0 SLOTS 1 0", Options{}, "COUNT must be between 1 and 64"},
		{"hotkeys start metrics 2 GPU cpu", Options{Metrics: CPU, Count: 10, Sample: 1}, ""},
		{"HOTKEYS START METRICS 2 NET CPU COUNT 3 DURATION 5 SAMPLE 7 COUNT 4",
			Options{Metrics: CPU | NET, Count: 4, Duration: 5 * time.Second, Sample: 7}, ""},
		{"HOTKEYS START METRICS 1 NET SAMPLE 2147483647", Options{Metrics: NET, Count: 10, Sample: 1<<31 - 1}, ""},
	}
	for _, tt := range tests {
		got, msg := ParseStart(words(tt.args))
		if msg != tt.msg {
			t.Errorf("%s: got %q, want %q", tt.args, msg, tt.msg)
			continue
		}
		if msg == "" && got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.args, got, tt.want)
		}
	}
}

// Lookup follows Redis's processCommand: commandCheckExistence ("unknown
// subcommand '%.128s'. Try %s HELP.", CR/LF mapped to spaces) and
// commandCheckArity ("wrong number of arguments for '%s' command" with the
// full name); arities from src/commands/hotkeys*.json (container -2, START
// -2, STOP/GET/RESET/HELP 2).
func TestLookup(t *testing.T) {
	long := strings.Repeat("x", 200)
	tests := []struct {
		args  [][]byte
		sub   Sub
		reply string
	}{
		{words("HOTKEYS"), 0, "-ERR wrong number of arguments for 'hotkeys' command\r\n"},
		{words("hotkeys foo"), 0, "-ERR unknown subcommand 'foo'. Try HOTKEYS HELP.\r\n"},
		{words("HotKeys foo"), 0, "-ERR unknown subcommand 'foo'. Try HOTKEYS HELP.\r\n"},
		{[][]byte{[]byte("hotkeys"), []byte("a\r\nb")}, 0, "-ERR unknown subcommand 'a  b'. Try HOTKEYS HELP.\r\n"},
		{[][]byte{[]byte("hotkeys"), []byte(long)}, 0, "-ERR unknown subcommand '" + long[:128] + "'. Try HOTKEYS HELP.\r\n"},
		{words("hotkeys get x"), 0, "-ERR wrong number of arguments for 'hotkeys|get' command\r\n"},
		{words("hotkeys STOP x"), 0, "-ERR wrong number of arguments for 'hotkeys|stop' command\r\n"},
		{words("hotkeys reset x y"), 0, "-ERR wrong number of arguments for 'hotkeys|reset' command\r\n"},
		{words("hotkeys help x"), 0, "-ERR wrong number of arguments for 'hotkeys|help' command\r\n"},
		{words("hotkeys start"), SubStart, ""},
		{words("hotkeys Get"), SubGet, ""},
		{words("hotkeys help"), SubHelp, ""},
	}
	for _, tt := range tests {
		sub, reply, ok := Lookup(nil, tt.args, int64(len(tt.args)))
		if sub != tt.sub || string(reply) != tt.reply || ok != (tt.reply == "") {
			t.Errorf("%q: got %v %q %v, want %v %q", tt.args, sub, reply, ok, tt.sub, tt.reply)
		}
	}
}

// The GET layout of Redis 8.6.0 (src/hotkeys.c, the GET branch after
// "We return an array of map"): an array of one map, 7 fields plus the
// metric ones, selected-slots [[0, 16383]] on a non-cluster server.
func TestAppendReport(t *testing.T) {
	r := &Report{Active: true, Metrics: CPU | NET, Sample: 1, StartUnixMs: 1700000000123, DurationMs: 42,
		CPUUserMs: 3, CPUSysMs: 4, AllCommandsUs: 220, AllNetBytes: 200, TotalNetBytes: 190,
		ByCPU: []Entry{{"x", 104}, {"y", 98}}, ByNet: []Entry{{"x", 150}}}
	fields := "$15\r\ntracking-active\r\n:1\r\n" +
		"$12\r\nsample-ratio\r\n:1\r\n" +
		"$14\r\nselected-slots\r\n*1\r\n*2\r\n:0\r\n:16383\r\n" +
		"$25\r\nall-commands-all-slots-us\r\n:220\r\n" +
		"$32\r\nnet-bytes-all-commands-all-slots\r\n:200\r\n" +
		"$29\r\ncollection-start-time-unix-ms\r\n:1700000000123\r\n" +
		"$22\r\ncollection-duration-ms\r\n:42\r\n" +
		"$22\r\ntotal-cpu-time-user-ms\r\n:3\r\n" +
		"$21\r\ntotal-cpu-time-sys-ms\r\n:4\r\n" +
		"$15\r\ntotal-net-bytes\r\n:190\r\n" +
		"$14\r\nby-cpu-time-us\r\n*4\r\n$1\r\nx\r\n:104\r\n$1\r\ny\r\n:98\r\n" +
		"$12\r\nby-net-bytes\r\n*2\r\n$1\r\nx\r\n:150\r\n"
	if got := string(AppendReport(nil, r, 2)); got != "*1\r\n*24\r\n"+fields {
		t.Errorf("RESP2:\ngot  %q\nwant %q", got, "*1\r\n*24\r\n"+fields)
	}
	if got := string(AppendReport(nil, r, 3)); got != "*1\r\n%12\r\n"+fields {
		t.Errorf("RESP3:\ngot  %q\nwant %q", got, "*1\r\n%12\r\n"+fields)
	}
	r.Metrics, r.ByCPU = NET, nil
	got := string(AppendReport(nil, r, 3))
	if !strings.HasPrefix(got, "*1\r\n%9\r\n") || strings.Contains(got, "cpu-time") || !strings.Contains(got, "by-net-bytes") {
		t.Errorf("NET only: %q", got)
	}
}

func TestHelp(t *testing.T) {
	got := string(appendHelp(nil, []byte("hotkeys")))
	if !strings.HasPrefix(got, "*18\r\n+HOTKEYS <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n") ||
		!strings.HasSuffix(got, "+HELP\r\n+    Print this help.\r\n") || strings.Count(got, "\r\n") != 19 {
		t.Errorf("help = %q", got)
	}
}
