package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// writeFile writes content to a new file in a test temp dir and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustLoad(t *testing.T, args, environ []string) *Config {
	t.Helper()
	c, err := Load(args, environ)
	if err != nil {
		t.Fatalf("Load(%q, %q): %v", args, environ, err)
	}
	return c
}

func defaultLoops() int { return autoLoops(startProcs, startCPUs, procsSet) }

func TestDefaults(t *testing.T) {
	got := mustLoad(t, nil, nil)
	got.origin = nil // every value from the defaults
	want := &Config{
		Listen:                 ":6380",
		Upstream:               "127.0.0.1:6379",
		Admin:                  ":9121",
		LocalAdmin:             "127.0.0.1:9122",
		HotThreshold:           1,
		Loops:                  defaultLoops(),
		CacheMaxValue:          65536,
		CacheCapacity:          100000,
		CacheMaxBytes:          64 << 20,
		CacheEnabled:           true,
		CacheDeny:              []string{},
		ClusterAddressMap:      []string{},
		ConfigureNotifications: true,
		DialTimeout:            2 * time.Second,
		ShutdownTimeout:        10 * time.Second,
		CommandstatsInterval:   100 * time.Millisecond,
		ClientQueryBufferLimit: 1 << 30,
		Multiplex:              true,
		MaxClients:             10000,
		MaxClientMemory:        1 << 30,
		LogLevel:               "info",
		LogFormat:              "json",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

// TestSettingsMatchConfig: the settings table is the one declaration of
// every Config field (each exported field is one setting's, and no two
// settings share one), and Redacted shows each setting.
func TestSettingsMatchConfig(t *testing.T) {
	c := &Config{}
	v := reflect.ValueOf(c).Elem()
	fieldAt := map[uintptr]string{}
	for i := range v.NumField() {
		if v.Type().Field(i).IsExported() {
			fieldAt[v.Field(i).Addr().Pointer()] = v.Type().Field(i).Name
		}
	}
	var keys []string
	owner := map[string]string{}
	for _, s := range settings {
		keys = append(keys, s.key)
		name, ok := fieldAt[reflect.ValueOf(s.field(c)).Pointer()]
		switch {
		case !ok:
			t.Errorf("setting %s: its field is not an exported field of Config", s.key)
		case owner[name] != "":
			t.Errorf("settings %s and %s share Config.%s", owner[name], s.key, name)
		default:
			owner[name] = s.key
		}
	}
	for _, name := range fieldAt {
		if owner[name] == "" {
			t.Errorf("Config.%s belongs to no setting", name)
		}
	}
	r := (&Config{}).Redacted()
	if len(r) != len(keys) {
		t.Errorf("Redacted has %d keys, want %d", len(r), len(keys))
	}
	for _, k := range keys {
		if _, ok := r[k]; !ok {
			t.Errorf("Redacted lacks %q", k)
		}
	}
}

// TestDenyListSpaces: spaces around each pattern of --cache-deny are
// dropped, in every layer, but not a space a backslash escapes.
func TestDenyListSpaces(t *testing.T) {
	want := []string{`session:*`, `x\ `, `a\,b`}
	for name, c := range map[string]*Config{
		"flag": mustLoad(t, []string{"--cache-deny", ` session:* , x\ ,a\,b`}, nil),
		"env":  mustLoad(t, nil, []string{`CICADA_CACHE_DENY= session:* , x\ ,a\,b`}),
		"file": mustLoad(t, []string{"--config", writeFile(t, "c.yaml", "cache-deny: [\" session:* \", 'x\\ ', 'a\\,b']\n")}, nil),
	} {
		if !slices.Equal(c.CacheDeny, want) {
			t.Errorf("%s: cache-deny %q, want %q", name, c.CacheDeny, want)
		}
	}
}

func TestLayersOverride(t *testing.T) {
	file := writeFile(t, "c.yaml", `
listen: "127.0.0.1:7001"
hot-threshold: 10
cache-max-value: 1kb
dial-timeout: 1s
configure-notifications: false
log-level: debug
`)
	env := []string{
		"CICADA_HOT_THRESHOLD=20",
		"CICADA_CACHE_MAX_VALUE=2kb",
		"CICADA_DIAL_TIMEOUT=3s",
		"CICADA_CONFIGURE_NOTIFICATIONS=true",
	}
	flags := []string{"--config", file, "--cache-max-value=3kb", "--dial-timeout", "5s", "--configure-notifications=false"}

	tests := []struct {
		name    string
		args    []string
		environ []string
		wantVal []any // listen, hot-threshold, cache-max-value, dial-timeout, configure-notifications, log-level
	}{
		{"file over defaults", []string{"--config", file}, nil,
			[]any{"127.0.0.1:7001", uint32(10), 1024, time.Second, false, "debug"}},
		{"env over file", []string{"--config", file}, env,
			[]any{"127.0.0.1:7001", uint32(20), 2048, 3 * time.Second, true, "debug"}},
		{"flag over env", flags, env,
			[]any{"127.0.0.1:7001", uint32(20), 3072, 5 * time.Second, false, "debug"}},
		{"flag over file", flags, nil,
			[]any{"127.0.0.1:7001", uint32(10), 3072, 5 * time.Second, false, "debug"}},
		{"flag over defaults", []string{"--listen", ":1", "--hot-threshold", "7", "--log-level", "warn"}, nil,
			[]any{":1", uint32(7), 65536, 2 * time.Second, true, "warn"}},
		{"env over defaults", nil, []string{"CICADA_LISTEN=:2", "CICADA_LOG_LEVEL=error"},
			[]any{":2", uint32(1), 65536, 2 * time.Second, true, "error"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, tt.args, tt.environ)
			got := []any{c.Listen, c.HotThreshold, c.CacheMaxValue, c.DialTimeout, c.ConfigureNotifications, c.LogLevel}
			if !reflect.DeepEqual(got, tt.wantVal) {
				t.Errorf("got %v, want %v", got, tt.wantVal)
			}
		})
	}
}

// TestUnsetFlagKeepsLowerLayers: flags left at their defaults must not hide
// values from the file or the environment, while set flags still apply.
func TestUnsetFlagKeepsLowerLayers(t *testing.T) {
	file := writeFile(t, "c.yaml", "upstream: redis:6379\ncache-capacity: 5\nshutdown-timeout: 0s\n")
	env := []string{"CICADA_ADMIN=:9999", "CICADA_LOOPS=3"}
	c := mustLoad(t, []string{"--config", file, "--log-format", "console"}, env)
	got := []any{c.Upstream, c.CacheCapacity, c.ShutdownTimeout, c.Admin, c.Loops, c.LogFormat}
	want := []any{"redis:6379", 5, time.Duration(0), ":9999", 3, "console"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestConfigFromEnv(t *testing.T) {
	file := writeFile(t, "c.yaml", "hot-threshold: 42\n")
	c := mustLoad(t, nil, []string{"CICADA_CONFIG=" + file})
	if c.HotThreshold != 42 {
		t.Errorf("HotThreshold got %d, want 42", c.HotThreshold)
	}
}

func TestEnvIgnored(t *testing.T) {
	// Kubernetes service links, other programs' variables and empty values
	// leave the configuration alone.
	env := []string{
		"CICADA_SERVICE_HOST=10.0.0.1", "CICADA_PORT=tcp://10.0.0.1:6380",
		"HOT_THRESHOLD=5", "cicada_hot_threshold=5", "CICADA_LOOPS=", "CICADA_LISTEN",
	}
	c := mustLoad(t, nil, env)
	if c.HotThreshold != 1 || c.Loops != defaultLoops() || c.Listen != ":6380" {
		t.Errorf("got hot-threshold %d loops %d listen %q, want defaults", c.HotThreshold, c.Loops, c.Listen)
	}
}

func TestYAMLNullAndEmptyFile(t *testing.T) {
	c := mustLoad(t, []string{"--config", writeFile(t, "c.yaml", "listen:\nupstream-user: ~\n")}, nil)
	if c.Listen != ":6380" || c.UpstreamUser != "" {
		t.Errorf("got listen %q user %q, want defaults", c.Listen, c.UpstreamUser)
	}
	c = mustLoad(t, []string{"--config", writeFile(t, "empty.yaml", "")}, nil)
	if c.Listen != ":6380" {
		t.Errorf("empty file: got listen %q, want :6380", c.Listen)
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  error // nil, strconv.ErrSyntax or strconv.ErrRange
	}{
		{"0", 0, nil},
		{"65536", 65536, nil},
		{"1b", 1, nil},
		{"1k", 1000, nil},
		{"1kb", 1024, nil},
		{"64KB", 64 << 10, nil},
		{"64Kb", 64 << 10, nil},
		{"1m", 1000000, nil},
		{"1mb", 1 << 20, nil},
		{"1M", 1000000, nil},
		{"1g", 1000000000, nil},
		{"1gb", 1 << 30, nil},
		{"3GB", 3 << 30, nil},
		{" 2kb ", 2048, nil},
		{"9223372036854775807", 9223372036854775807, nil},
		{"-1", -1, nil}, // no size accepts it: the caller says the range
		{"-1kb", -1024, nil},
		{"9223372036854775808", 0, strconv.ErrRange},
		{"99999999999999999999", 0, strconv.ErrRange},
		{"9000000000gb", 0, strconv.ErrRange},
		{"12qb", 0, strconv.ErrSyntax},
		{"kb", 0, strconv.ErrSyntax},
		{"", 0, strconv.ErrSyntax},
		{"--1", 0, strconv.ErrSyntax},
		{"1.5mb", 0, strconv.ErrSyntax},
		{"1 kb", 0, strconv.ErrSyntax},
		{"1kib", 0, strconv.ErrSyntax},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if got != tt.want || !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
			t.Errorf("parseSize(%q) = %d, %v; want %d, %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestSizesInEveryLayer(t *testing.T) {
	file := writeFile(t, "c.yaml", "cache-max-bytes: 2mb\nclient-query-buffer-limit: 1048576\ncache-max-value: 1e3\n")
	c := mustLoad(t, []string{"--config", file}, nil)
	if c.CacheMaxBytes != 2<<20 || c.ClientQueryBufferLimit != 1<<20 || c.CacheMaxValue != 1000 {
		t.Errorf("file: got %d %d %d, want %d %d 1000", c.CacheMaxBytes, c.ClientQueryBufferLimit, c.CacheMaxValue, 2<<20, 1<<20)
	}
	c = mustLoad(t, nil, []string{"CICADA_CACHE_MAX_BYTES=3m", "CICADA_CLIENT_QUERY_BUFFER_LIMIT=1GB"})
	if c.CacheMaxBytes != 3000000 || c.ClientQueryBufferLimit != 1<<30 {
		t.Errorf("env: got %d %d, want 3000000 %d", c.CacheMaxBytes, c.ClientQueryBufferLimit, 1<<30)
	}
	c = mustLoad(t, []string{"--cache-max-bytes", "5k", "--client-query-buffer-limit=2gb", "--cache-max-value", "0"}, nil)
	if c.CacheMaxBytes != 5000 || c.ClientQueryBufferLimit != 2<<30 || c.CacheMaxValue != 0 {
		t.Errorf("flags: got %d %d %d, want 5000 %d 0", c.CacheMaxBytes, c.ClientQueryBufferLimit, c.CacheMaxValue, 2<<30)
	}
}

func TestDurations(t *testing.T) {
	c := mustLoad(t, []string{"--dial-timeout", "750ms"}, []string{"CICADA_SHUTDOWN_TIMEOUT=1m30s"})
	if c.DialTimeout != 750*time.Millisecond || c.ShutdownTimeout != 90*time.Second {
		t.Errorf("got %v %v, want 750ms 1m30s", c.DialTimeout, c.ShutdownTimeout)
	}
	file := writeFile(t, "c.yaml", "dial-timeout: 250ms\n")
	if c := mustLoad(t, []string{"--config", file}, nil); c.DialTimeout != 250*time.Millisecond {
		t.Errorf("file: got %v, want 250ms", c.DialTimeout)
	}
}

// TestAutoLoops: a CPU budget of Cicada's own (GOMAXPROCS set, or a limit
// below the CPUs) gets a loop per CPU of it; a whole machine, one CPU less
// for Redis.
func TestAutoLoops(t *testing.T) {
	for _, c := range []struct {
		procs, cpus int
		set         bool
		want        int
	}{
		{1, 1, false, 1},
		{2, 2, false, 1},
		{8, 8, false, 7},
		{2, 8, false, 2},  // a container limit of 2 CPUs
		{1, 8, false, 1},  // a limit of 500m, rounded up by Go
		{2, 2, true, 2},   // GOMAXPROCS=2 on 2 CPUs
		{16, 4, true, 16}, // GOMAXPROCS above the CPUs
		{1000, 1000, false, 256},
		{1000, 2000, false, 256},
	} {
		if got := autoLoops(c.procs, c.cpus, c.set); got != c.want {
			t.Errorf("autoLoops(%d, %d, %v) = %d, want %d", c.procs, c.cpus, c.set, got, c.want)
		}
	}
}

// TestProcsFromEnv: only a value the runtime takes counts as GOMAXPROCS
// set.
func TestProcsFromEnv(t *testing.T) {
	for v, want := range map[string]bool{"": false, "2": true, "1": true, "0": false, "-1": false, "two": false, "2x": false, "+2": false, "99999999999": false} {
		if got := procsFromEnv(v); got != want {
			t.Errorf("procsFromEnv(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestLoopsZeroIsAutomatic(t *testing.T) {
	for _, args := range [][]string{nil, {"--loops", "0"}} {
		if c := mustLoad(t, args, nil); c.Loops != defaultLoops() || c.Loops < 1 {
			t.Errorf("%q: got loops %d, want %d", args, c.Loops, defaultLoops())
		}
	}
	if c := mustLoad(t, []string{"--loops", "256"}, nil); c.Loops != 256 {
		t.Errorf("got loops %d, want 256", c.Loops)
	}
}

func TestPassword(t *testing.T) {
	t.Run("env", func(t *testing.T) {
		c := mustLoad(t, nil, []string{"CICADA_UPSTREAM_PASSWORD=s3cret"})
		if c.UpstreamPassword != "s3cret" {
			t.Errorf("got %q, want s3cret", c.UpstreamPassword)
		}
	})
	t.Run("config file", func(t *testing.T) {
		file := writeFile(t, "c.yaml", "upstream-user: cicada\nupstream-password: \"123456\"\n")
		c := mustLoad(t, []string{"--config", file}, nil)
		if c.UpstreamUser != "cicada" || c.UpstreamPassword != "123456" {
			t.Errorf("got %q/%q, want cicada/123456", c.UpstreamUser, c.UpstreamPassword)
		}
	})
	t.Run("password file via flag and env", func(t *testing.T) {
		pw := writeFile(t, "pw", "from-file\r\n")
		for _, tc := range []struct{ args, env []string }{
			{[]string{"--upstream-password-file", pw}, nil},
			{nil, []string{"CICADA_UPSTREAM_PASSWORD_FILE=" + pw}},
		} {
			c := mustLoad(t, tc.args, tc.env)
			if c.UpstreamPassword != "from-file" || c.UpstreamPasswordFile != pw {
				t.Errorf("got %q from %q, want from-file from %q", c.UpstreamPassword, c.UpstreamPasswordFile, pw)
			}
			if err := c.Validate(); err != nil {
				t.Errorf("Validate on a loaded Config: %v", err)
			}
		}
	})
	t.Run("no flag", func(t *testing.T) {
		for _, args := range [][]string{{"--upstream-password", "x"}, {"--upstream-password=x"}} {
			_, err := Load(args, nil)
			if err == nil || !strings.HasPrefix(err.Error(), "unknown flag: --upstream-password ") {
				t.Errorf("%q: got error %v, want unknown flag: --upstream-password ...", args, err)
			}
		}
	})
	t.Run("both sources", func(t *testing.T) {
		pw := writeFile(t, "pw", "a\n")
		_, err := Load([]string{"--upstream-password-file", pw}, []string{"CICADA_UPSTREAM_PASSWORD=b"})
		want := "--upstream-password-file: cannot be used together with upstream-password (CICADA_UPSTREAM_PASSWORD); set only one"
		if err == nil || err.Error() != want {
			t.Errorf("got %v, want %s", err, want)
		}
	})
	t.Run("malformed, never echoed", func(t *testing.T) {
		const secret = "Hunter2secret"
		for _, tc := range []struct {
			name string
			args []string
		}{
			{"YAML tag", []string{"--config", writeFile(t, "tag.yaml", "upstream-password: !!int "+secret+"\n")}},
			{"YAML alias", []string{"--config", writeFile(t, "alias.yaml", "upstream-password: *"+secret+"\n")}},
			{"YAML mapping", []string{"--config", writeFile(t, "map.yaml", "upstream-password:\n  "+secret+": 1\n")}},
			{"single dash flag", []string{"-upstream-password=" + secret}},
			{"triple dash flag", []string{"---upstream-password=" + secret}},
		} {
			_, err := Load(tc.args, nil)
			if err == nil || strings.Contains(err.Error(), secret[1:]) {
				t.Errorf("%s: got %v, want an error without the password", tc.name, err)
			}
		}
	})
	t.Run("file too long", func(t *testing.T) {
		_, err := Load([]string{"--upstream-password-file", "/dev/zero"}, nil)
		if want := "--upstream-password-file: /dev/zero is longer than 65536 bytes"; err == nil || err.Error() != want {
			t.Errorf("got %v, want %s", err, want)
		}
	})
	t.Run("empty or missing file", func(t *testing.T) {
		empty := writeFile(t, "pw", "\n")
		_, err := Load([]string{"--upstream-password-file", empty}, nil)
		if want := "--upstream-password-file: " + empty + " is empty"; err == nil || err.Error() != want {
			t.Errorf("got %v, want %s", err, want)
		}
		_, err = Load([]string{"--upstream-password-file", "/nonexistent/pw"}, nil)
		if want := "--upstream-password-file: open /nonexistent/pw: no such file or directory"; err == nil || err.Error() != want {
			t.Errorf("got %v, want %s", err, want)
		}
	})
}

func TestSecretNeverPrinted(t *testing.T) {
	c := mustLoad(t, nil, []string{"CICADA_UPSTREAM_PASSWORD=hunter2"})
	if got := c.Redacted()["upstream-password"]; got != "***" {
		t.Errorf("Redacted password got %v, want ***", got)
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(format, c); strings.Contains(s, "hunter2") {
			t.Errorf("%s prints the password: %s", format, s)
		}
	}
	if got := (&Config{}).Redacted()["upstream-password"]; got != "" {
		t.Errorf("Redacted unset password got %v, want empty", got)
	}
	// A wrongly typed password must not be echoed in the error either.
	file := writeFile(t, "c.yaml", "upstream-password: 987654\n")
	_, err := Load([]string{"--config", file}, nil)
	if err == nil || strings.Contains(err.Error(), "987654") {
		t.Errorf("got error %v, want an error without the value", err)
	}
}

func TestValidateErrors(t *testing.T) {
	valid := func() Config {
		c := mustLoad(t, nil, nil)
		return *c
	}
	tests := []struct {
		name   string
		modify func(c *Config)
		want   string
	}{
		{"listen", func(c *Config) { c.Listen = "6380" }, `listen: must be host:port, got "6380"`},
		{"listen port", func(c *Config) { c.Listen = ":http" }, `listen: must be host:port, got ":http"`},
		{"upstream", func(c *Config) { c.Upstream = "localhost" }, `upstream: must be host:port with a port from 1 to 65535, got "localhost"`},
		{"upstream port 0", func(c *Config) { c.Upstream = "localhost:0" }, `upstream: must be host:port with a port from 1 to 65535, got "localhost:0"`},
		{"admin", func(c *Config) { c.Admin = ":65536" }, `admin: must be host:port, got ":65536"`},
		{"local-admin", func(c *Config) { c.LocalAdmin = "9122" }, `local-admin: must be host:port, or "" for none, got "9122"`},
		{"hot-threshold", func(c *Config) { c.HotThreshold = 0 }, "hot-threshold: must be between 1 and 4294967295, got 0"},
		{"loops negative", func(c *Config) { c.Loops = -1 }, "loops: must be between 0 and 256, 0 = automatic, got -1"},
		{"loops too many", func(c *Config) { c.Loops = 257 }, "loops: must be between 0 and 256, 0 = automatic, got 257"},
		{"cache-max-value", func(c *Config) { c.CacheMaxValue = -1 }, "cache-max-value: must be >= 0, got -1"},
		{"cache-capacity", func(c *Config) { c.CacheCapacity = 0 }, "cache-capacity: must be between 1 and 16777216, or 0 with cache-max-value 0 (the cache off), got 0"},
		{"cache-capacity too many", func(c *Config) { c.CacheCapacity = 1<<24 + 1 }, "cache-capacity: must be between 1 and 16777216, or 0 with cache-max-value 0 (the cache off), got 16777217"},
		{"cache-capacity negative, cache off", func(c *Config) { c.CacheMaxValue, c.CacheCapacity = 0, -1 }, "cache-capacity: must be between 1 and 16777216, or 0 with cache-max-value 0 (the cache off), got -1"},
		{"cache-max-bytes", func(c *Config) { c.CacheMaxBytes = 0 }, "cache-max-bytes: must be >= 1, or 0 with cache-max-value 0 (the cache off), got 0"},
		{"password twice", func(c *Config) { c.UpstreamPassword, c.UpstreamPasswordFile = "a", "/pw" }, "upstream-password-file: cannot be used together with upstream-password; set only one"},
		{"dial-timeout", func(c *Config) { c.DialTimeout = 0 }, "dial-timeout: must be > 0, got 0s"},
		{"shutdown-timeout", func(c *Config) { c.ShutdownTimeout = -time.Second }, "shutdown-timeout: must be >= 0s, got -1s"},
		{"commandstats-interval short", func(c *Config) { c.CommandstatsInterval = 9 * time.Millisecond }, "commandstats-interval: must be between 10ms and 1m, got 9ms"},
		{"commandstats-interval long", func(c *Config) { c.CommandstatsInterval = time.Hour }, "commandstats-interval: must be between 10ms and 1m, got 1h0m0s"},
		{"client-query-buffer-limit", func(c *Config) { c.ClientQueryBufferLimit = 1<<20 - 1 }, "client-query-buffer-limit: must be >= 1mb (1048576), Redis's minimum, got 1048575"},
		{"maxclients", func(c *Config) { c.MaxClients = 0 }, "maxclients: must be >= 1, got 0"},
		{"max-client-memory", func(c *Config) { c.MaxClientMemory = -1 }, "max-client-memory: must be >= 0, got -1"},
		{"log-level", func(c *Config) { c.LogLevel = "verbose" }, `log-level: must be debug, info, warn or error, got "verbose"`},
		{"log-format", func(c *Config) { c.LogFormat = "xml" }, `log-format: must be json or console, got "xml"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.modify(&c)
			err := c.Validate()
			if err == nil || err.Error() != tt.want {
				t.Errorf("got %v, want %s", err, tt.want)
			}
		})
	}

	// Edge values that are valid.
	ok := []func(c *Config){
		func(c *Config) { c.Loops = 0 },
		func(c *Config) { c.Listen, c.Admin, c.LocalAdmin = "127.0.0.1:0", "[::1]:0", "" },
		func(c *Config) { c.LocalAdmin = "localhost:0" },
		func(c *Config) { c.Upstream = ":6379" },
		func(c *Config) { c.CacheMaxValue, c.CacheCapacity, c.CacheMaxBytes = 0, 0, 0 },
		func(c *Config) { c.ShutdownTimeout = 0 },
	}
	for i, modify := range ok {
		c := valid()
		modify(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("valid case %d: got %v, want nil", i, err)
		}
	}
}

// TestLoadErrors checks the one-line errors of decoding and of the file,
// through the whole of Load.
func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	typo := writeFile(t, "typo.yaml", "hot-treshold: 5\n")
	nested := writeFile(t, "nested.yaml", "cache:\n  capacity: 5\n")
	underscored := writeFile(t, "underscored.yaml", "hot_threshold: 5\n")
	broken := writeFile(t, "broken.yaml", "listen: [\n")
	dup := writeFile(t, "dup.yaml", "listen: a:1\nlisten: b:2\n")
	list := writeFile(t, "list.yaml", "- a\n- b\n")
	tests := []struct {
		name    string
		args    []string
		environ []string
		want    string
	}{
		{"missing file", []string{"--config", dir + "/x.yaml"}, nil, "--config: open " + dir + "/x.yaml: no such file or directory"},
		{"missing file from the environment", nil, []string{"CICADA_CONFIG=" + dir + "/x.yaml"}, "CICADA_CONFIG: open " + dir + "/x.yaml: no such file or directory"},
		{"unknown key", []string{"--config", typo}, nil, typo + `: unknown setting "hot-treshold"`},
		{"unknown key with underscores", []string{"--config", underscored}, nil, underscored + `: unknown setting "hot_threshold" (did you mean "hot-threshold"?)`},
		{"unknown nested key", []string{"--config", nested}, nil, nested + `: unknown setting "cache.capacity"`},
		{"bad boolean flag", []string{"--cache-enabled=maybe"}, nil, `--cache-enabled: invalid boolean "maybe"`},
		{"broken yaml", []string{"--config", broken}, nil, "config: " + broken + ": yaml: line 1: did not find expected node content"},
		{"validation via env", nil, []string{"CICADA_HOT_THRESHOLD=0"}, "CICADA_HOT_THRESHOLD: must be between 1 and 4294967295, got 0"},
		{"bad size env", nil, []string{"CICADA_CACHE_MAX_VALUE=12qb"}, `CICADA_CACHE_MAX_VALUE: invalid size "12qb"`},
		{"bad size flag", []string{"--cache-max-value", "12qb"}, nil, `--cache-max-value: invalid size "12qb"`},
		{"bad integer env", nil, []string{"CICADA_LOOPS=four"}, `CICADA_LOOPS: invalid integer "four"`},
		{"uint32 overflow", nil, []string{"CICADA_HOT_THRESHOLD=4294967296"}, "CICADA_HOT_THRESHOLD: must be between 1 and 4294967295, got 4294967296"},
		{"negative uint32", nil, []string{"CICADA_HOT_THRESHOLD=-1"}, "CICADA_HOT_THRESHOLD: must be between 1 and 4294967295, got -1"},
		{"bad bool env", nil, []string{"CICADA_CONFIGURE_NOTIFICATIONS=yes"}, `CICADA_CONFIGURE_NOTIFICATIONS: invalid boolean "yes"`},
		{"bad duration env", nil, []string{"CICADA_DIAL_TIMEOUT=2"}, `CICADA_DIAL_TIMEOUT: invalid duration "2" (use Go syntax such as 750ms or 2s)`},
		{"bad log level", []string{"--log-level", "trace"}, nil, `--log-level: must be debug, info, warn or error, got "trace"`},
		{"flag parse", []string{"--loops", "x"}, nil, `--loops: invalid integer "x"`},
		{"flag without value", []string{"--listen"}, nil, "flag needs an argument: --listen"},
		{"file not a mapping", []string{"--config", list}, nil, "config: " + list + ": must be a YAML mapping of settings (lines of \"setting: value\")"},
		{"unknown flag", []string{"--hot-treshold", "5"}, nil, "unknown flag: --hot-treshold"},
		{"positional", []string{"extra"}, nil, `unexpected argument "extra": cicada takes only flags`},
		{"bad address map", []string{"--cluster-address-map", "127.0.0.1:7000=:7100"}, nil,
			`--cluster-address-map: cluster: address map: port-only side paired with a host side: "127.0.0.1:7000=:7100"`},
		{"address map port", nil, []string{"CICADA_CLUSTER_ADDRESS_MAP=:6379=:0"}, `CICADA_CLUSTER_ADDRESS_MAP: cluster: address map: bad port: ":6379=:0": "0": want 1-65535`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.args, tt.environ)
			if err == nil || err.Error() != tt.want {
				t.Errorf("got %v, want %s", err, tt.want)
			}
		})
	}

	// Errors stay on one line even when the YAML library's do not.
	if _, err := Load([]string{"--config", dup}, nil); err == nil || strings.Contains(err.Error(), "\n") {
		t.Errorf("duplicate key: got %q, want a one-line error", err)
	}
	// A wrongly typed YAML value names the file and its setting.
	for _, body := range []string{"listen: [a]\n", "admin: 9121\n", "loops: two\n", "configure-notifications: 1\n", "dial-timeout: 5\n", "hot-threshold: 1.5\n", "cache-max-value: 1e30\n", "cache-capacity: true\n"} {
		key, _, _ := strings.Cut(body, ":")
		path := writeFile(t, "c.yaml", body)
		_, err := Load([]string{"--config", path}, nil)
		if want := path + ": " + key + ": "; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%q: got %v, want an error starting with %q", body, err, want)
		}
	}
}

// TestClusterAddressMap: the map comes as a comma-separated flag or
// variable, or a YAML list; blanks are dropped.
func TestClusterAddressMap(t *testing.T) {
	want := []string{"127.0.0.1:7000=127.0.0.1:7100", ":6379=:6380"}
	file := writeFile(t, "map.yaml", "cluster-address-map:\n  - 127.0.0.1:7000=127.0.0.1:7100\n  - :6379=:6380\n")
	for _, c := range []struct{ args, environ []string }{
		{[]string{"--cluster-address-map", "127.0.0.1:7000=127.0.0.1:7100, :6379=:6380,"}, nil},
		{nil, []string{"CICADA_CLUSTER_ADDRESS_MAP=127.0.0.1:7000=127.0.0.1:7100,:6379=:6380"}},
		{[]string{"--config", file}, nil},
	} {
		if got := mustLoad(t, c.args, c.environ).ClusterAddressMap; !reflect.DeepEqual(got, want) {
			t.Errorf("%v %v: got %q, want %q", c.args, c.environ, got, want)
		}
	}
}

func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"--loops", "3", "-h"}} {
		if _, err := Load(args, nil); !errors.Is(err, ErrHelp) {
			t.Errorf("%q: got %v, want ErrHelp", args, err)
		}
	}
	// --version wins over a broken configuration.
	if _, err := Load([]string{"--version", "--config", "/nonexistent"}, []string{"CICADA_LOOPS=x"}); !errors.Is(err, ErrVersion) {
		t.Errorf("got %v, want ErrVersion", err)
	}

	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, nil, &out, &errOut); code != 0 || !strings.Contains(out.String(), "--hot-threshold") || strings.Contains(out.String(), "--upstream-password ") {
		t.Errorf("--help: exit %d, output %q", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"--version"}, nil, &out, &errOut); code != 0 || out.String() != "cicada "+version+"\n" {
		t.Errorf("--version: exit %d, output %q", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"--hot-threshold", "0"}, nil, &out, &errOut); code != 2 || errOut.String() != "cicada: --hot-threshold: must be between 1 and 4294967295, got 0\n" {
		t.Errorf("bad setting: exit %d, stderr %q", code, errOut.String())
	}
}

// TestCheckConfig: --check-config prints the settings it would run with,
// the password redacted, and exits 0; a bad setting exits 2 as a run would.
func TestCheckConfig(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--check-config", "--loops", "3"}, []string{"CICADA_UPSTREAM_PASSWORD=s3cret"}, &out, &errOut)
	if code != 0 || !strings.Contains(out.String(), " loops=3 ") || !strings.Contains(out.String(), " upstream-password=*** ") || strings.Contains(out.String(), "s3cret") {
		t.Errorf("exit %d, output %q", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"--check-config", "--loops", "-1"}, nil, &out, &errOut); code != 2 || out.Len() != 0 {
		t.Errorf("bad setting: exit %d, output %q", code, out.String())
	}
}

// TestUsageMarksLive: --help marks "(live)" every setting that changes
// without a restart, and only those.
func TestUsageMarksLive(t *testing.T) {
	var b bytes.Buffer
	printUsage(&b)
	_, flags, ok := strings.Cut(b.String(), "\nFlags:\n")
	if !ok {
		t.Fatalf("no Flags: section in\n%s", b.String())
	}
	var marked, all []string
	for _, line := range strings.Split(flags, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "--") {
			continue
		}
		key := strings.TrimPrefix(f[0], "--")
		all = append(all, key)
		if strings.Count(line, "(live)") > 1 {
			t.Errorf("--%s marked live twice: %q", key, line)
		}
		if strings.Contains(line, "(live)") {
			marked = append(marked, key)
		}
	}
	want := []string{"hot-threshold", "cache-max-value", "cache-capacity", "cache-max-bytes", "cache-enabled", "cache-deny", "log-level"}
	if !slices.Equal(marked, want) {
		t.Errorf("marked (live): %q, want %q (of %q)", marked, want, all)
	}
	if !slices.Equal(liveKeys, want) {
		t.Errorf("liveKeys %q, want %q", liveKeys, want)
	}
}

// TestBoundWording: a number out of its setting's range gets the same
// words whichever layer it came from and whether the decoder (a value
// beyond the field's type) or Validate (one the type holds) caught it,
// and every error names where the value came from: the flag, the
// environment variable, or the file and key.
func TestBoundWording(t *testing.T) {
	type layer struct {
		name string
		// load returns Load's arguments setting key to value, and the
		// label errors about it must start with.
		load func(t *testing.T, key, value string) (args, environ []string, label string)
	}
	layers := []layer{
		{"flag", func(_ *testing.T, key, value string) ([]string, []string, string) {
			return []string{"--" + key + "=" + value}, nil, "--" + key
		}},
		{"env", func(_ *testing.T, key, value string) ([]string, []string, string) {
			name := "CICADA_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
			return nil, []string{name + "=" + value}, name
		}},
		{"file", func(t *testing.T, key, value string) ([]string, []string, string) {
			path := writeFile(t, "c.yaml", key+": "+value+"\n") // unquoted: YAML types it
			return []string{"--config", path}, nil, path + ": " + key
		}},
	}
	same := []struct{ key, value, want string }{
		{"hot-threshold", "-1", "must be between 1 and 4294967295, got -1"},                 // decoder: not a uint32
		{"hot-threshold", "0", "must be between 1 and 4294967295, got 0"},                   // Validate
		{"hot-threshold", "4294967296", "must be between 1 and 4294967295, got 4294967296"}, // decoder
		{"hot-threshold", "abc", `invalid integer "abc"`},
		{"loops", "257", "must be between 0 and 256, 0 = automatic, got 257"},
		{"loops", "-1", "must be between 0 and 256, 0 = automatic, got -1"},
		{"cache-capacity", "0", "must be between 1 and 16777216, or 0 with cache-max-value 0 (the cache off), got 0"},
		{"cache-capacity", "-1", "must be between 1 and 16777216, or 0 with cache-max-value 0 (the cache off), got -1"},
		{"cache-max-value", "-1", "must be >= 0, got -1"},
		{"client-query-buffer-limit", "1048575", "must be >= 1mb (1048576), Redis's minimum, got 1048575"},
		{"client-query-buffer-limit", "-1", "must be >= 1mb (1048576), Redis's minimum, got -1"},
		{"client-query-buffer-limit", "0", "must be >= 1mb (1048576), Redis's minimum, got 0"},
		{"max-client-memory", "-1", "must be >= 0, got -1"},
		{"maxclients", "0", "must be >= 1, got 0"},
		{"commandstats-interval", "9ms", "must be between 10ms and 1m, got 9ms"},
		{"dial-timeout", "0s", "must be > 0, got 0s"},
		{"shutdown-timeout", "-1s", "must be >= 0s, got -1s"},
		{"local-admin", "nonsense", `must be host:port, or "" for none, got "nonsense"`},
		{"log-format", "xml", `must be json or console, got "xml"`},
		{"cache-deny", "x{a,b", "bad pattern \"x{a,b\": glob: syntax error at 5: unclosed `{`"},
		{"cache-deny", "a:*,{user}:*,{b", "bad pattern \"{b\": glob: syntax error at 2: unclosed `{`"},
		{"cache-deny", `a:*,x\`, `bad pattern "x\\": glob: syntax error at 2: trailing backslash (a pattern that ends in a space is written "x\ ", in a YAML file in single quotes)`},
	}
	for _, l := range layers {
		for _, tt := range same {
			t.Run(l.name+"/"+tt.key+"="+tt.value, func(t *testing.T) {
				args, environ, label := l.load(t, tt.key, tt.value)
				_, err := Load(args, environ)
				if want := label + ": " + tt.want; err == nil || err.Error() != want {
					t.Errorf("got %v, want %s", err, want)
				}
			})
		}
	}

	// Values only some layers can write.
	file := func(body string) []string { return []string{"--config", writeFile(t, "c.yaml", body)} }
	for _, tt := range []struct {
		name          string
		args, environ []string
		want          string // after the label
	}{
		{"env beyond int64", nil, []string{"CICADA_HOT_THRESHOLD=99999999999999999999"}, "must be between 1 and 4294967295, got 99999999999999999999"},
		{"flag beyond int64", []string{"--hot-threshold", "99999999999999999999"}, nil, "must be between 1 and 4294967295, got 99999999999999999999"},
		{"size beyond int64", []string{"--cache-max-bytes", "9000000000gb"}, nil, "must be at most 9223372036854775807, got 9000000000gb"},
		{"open range beyond int64", []string{"--maxclients", "99999999999999999999"}, nil, "must be at most 9223372036854775807, got 99999999999999999999"},
		{"open range below int64", []string{"--maxclients", "-99999999999999999999"}, nil, "must be >= 1, got -99999999999999999999"},
		{"file beyond int64", file("hot-threshold: 99999999999999999999\n"), nil, "must be between 1 and 4294967295, got 1e+20"},
		{"file boolean", file("hot-threshold: true\n"), nil, "invalid integer: got a boolean"},
		{"file fraction", file("hot-threshold: 1.5\n"), nil, "invalid integer 1.5: not a whole number"},
		{"env fraction", nil, []string{"CICADA_HOT_THRESHOLD=1.5"}, `invalid integer "1.5"`},
		{"negative size with a unit", nil, []string{"CICADA_MAX_CLIENT_MEMORY=-1kb"}, "must be >= 0, got -1024"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.args, tt.environ)
			if err == nil || !strings.HasSuffix(err.Error(), ": "+tt.want) {
				t.Errorf("got %v, want ...: %s", err, tt.want)
			}
		})
	}
}

// TestErrorNamesWinningLayer: an error is about the value in force, so it
// names the highest layer that set it; a bad value a higher layer
// overrides is no error. A password's value never shows.
func TestErrorNamesWinningLayer(t *testing.T) {
	bad := writeFile(t, "c.yaml", "hot-threshold: 0\n")
	pw := writeFile(t, "pw", "x\n")
	tests := []struct {
		name          string
		args, environ []string
		want          string // "" for no error
	}{
		{"file", []string{"--config", bad}, nil, bad + ": hot-threshold: must be between 1 and 4294967295, got 0"},
		{"env over file", []string{"--config", bad}, []string{"CICADA_HOT_THRESHOLD=abc"}, `CICADA_HOT_THRESHOLD: invalid integer "abc"`},
		{"flag over env", []string{"--hot-threshold", "-1"}, []string{"CICADA_HOT_THRESHOLD=5"}, "--hot-threshold: must be between 1 and 4294967295, got -1"},
		{"flag fixes file", []string{"--config", bad, "--hot-threshold", "5"}, nil, ""},
		{"env fixes file", []string{"--config", bad}, []string{"CICADA_HOT_THRESHOLD=5"}, ""},
		{"last variable wins", nil, []string{"CICADA_HOT_THRESHOLD=5", "CICADA_HOT_THRESHOLD=0"}, "CICADA_HOT_THRESHOLD: must be between 1 and 4294967295, got 0"},
		{"default key", []string{"--cache-max-value", "1"}, []string{"CICADA_CACHE_CAPACITY=0"}, "CICADA_CACHE_CAPACITY: must be between 1 and 16777216, or 0 with cache-max-value 0 (the cache off), got 0"},
		{"password twice", []string{"--upstream-password-file", pw}, []string{"CICADA_UPSTREAM_PASSWORD=hunter2"},
			"--upstream-password-file: cannot be used together with upstream-password (CICADA_UPSTREAM_PASSWORD); set only one"},
		{"password typed wrong", []string{"--config", writeFile(t, "p.yaml", "upstream-password: 987654\n")}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.args, tt.environ)
			switch {
			case tt.name == "password typed wrong":
				if err == nil || strings.Contains(err.Error(), "987654") || !strings.HasSuffix(err.Error(), ": upstream-password: must be a string (quote it in YAML), got a number") {
					t.Errorf("got %v, want the file and key, without the value", err)
				}
			case tt.want == "" && err != nil:
				t.Errorf("got %v, want no error", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Errorf("got %v, want %s", err, tt.want)
			case err != nil && strings.Contains(err.Error(), "hunter2"):
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

// TestBoundsValidated: Validate checks every bounded setting (a Config
// built by hand has not been through the decoder), in the decoder's
// words.
func TestBoundsValidated(t *testing.T) {
	checked := 0
	defer func() {
		if checked < 12 {
			t.Errorf("%d values checked, want every bounded setting's", checked)
		}
	}()
	for _, s := range settings {
		if s.bound == nil {
			continue
		}
		var outside []int64
		if s.bound.lo > math.MinInt64 {
			outside = append(outside, s.bound.lo-1)
		}
		if s.bound.hi < math.MaxInt64 {
			outside = append(outside, s.bound.hi+1)
		}
		for _, n := range outside {
			c := *mustLoad(t, nil, nil)
			f := reflect.ValueOf(s.field(&c)).Elem()
			switch {
			case f.CanInt() && !f.OverflowInt(n):
				f.SetInt(n)
			case f.CanUint() && n >= 0 && !f.OverflowUint(uint64(n)):
				f.SetUint(uint64(n))
			default:
				continue // the field cannot hold it
			}
			want := s.key + ": " + s.outside(n, false)
			checked++
			if err := c.Validate(); err == nil || err.Error() != want || !strings.Contains(want, s.rangeText()) {
				t.Errorf("%s = %d: Validate %v, want %s", s.key, n, err, want)
			}
		}
	}
}

// TestLocalAdminDefault: the pages that list key names and profile the
// process listen on loopback unless told otherwise, and "" (from the file
// or the flag) turns them off.
func TestLocalAdminDefault(t *testing.T) {
	c := mustLoad(t, nil, nil)
	host, _, err := net.SplitHostPort(c.LocalAdmin)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		t.Errorf("default local-admin %q, want a loopback address", c.LocalAdmin)
	}
	for _, args := range [][]string{{"--local-admin", ""}, {"--local-admin="}, {"--config", writeFile(t, "c.yaml", "local-admin: \"\"\n")}} {
		if got := mustLoad(t, args, nil).LocalAdmin; got != "" {
			t.Errorf("%q: local-admin %q, want off", args, got)
		}
	}
}
