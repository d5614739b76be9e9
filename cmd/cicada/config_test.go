package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
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

func defaultLoops() int { return min(runtime.GOMAXPROCS(0), maxLoops) }

func TestDefaults(t *testing.T) {
	got := mustLoad(t, nil, nil)
	want := &Config{
		Listen:                 ":6380",
		Upstream:               "127.0.0.1:6379",
		Admin:                  ":9121",
		HotThreshold:           1000,
		Loops:                  defaultLoops(),
		CacheMaxValue:          65536,
		CacheCapacity:          10000,
		CacheMaxBytes:          64 << 20,
		CacheEnabled:           true,
		CacheDeny:              []string{},
		ClusterAddressMap:      []string{},
		ConfigureNotifications: true,
		DialTimeout:            2 * time.Second,
		ShutdownTimeout:        10 * time.Second,
		CommandstatsInterval:   100 * time.Millisecond,
		ClientQueryBufferLimit: 1 << 30,
		MaxClients:             10000,
		MaxClientMemory:        1 << 30,
		LogLevel:               "info",
		LogFormat:              "json",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

// TestSettingsMatchConfig keeps the settings table, the Config tags and
// Redacted in step.
func TestSettingsMatchConfig(t *testing.T) {
	var tags []string
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		if tag := typ.Field(i).Tag.Get("koanf"); tag != "" {
			tags = append(tags, tag)
		}
	}
	var keys []string
	for _, s := range settings {
		keys = append(keys, s.key)
	}
	if !reflect.DeepEqual(tags, keys) {
		t.Errorf("Config koanf tags %q, settings %q", tags, keys)
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
			[]any{":2", uint32(1000), 65536, 2 * time.Second, true, "error"}},
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
	if c.HotThreshold != 1000 || c.Loops != defaultLoops() || c.Listen != ":6380" {
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
		ok   bool
	}{
		{"0", 0, true},
		{"65536", 65536, true},
		{"1b", 1, true},
		{"1k", 1000, true},
		{"1kb", 1024, true},
		{"64KB", 64 << 10, true},
		{"64Kb", 64 << 10, true},
		{"1m", 1000000, true},
		{"1mb", 1 << 20, true},
		{"1M", 1000000, true},
		{"1g", 1000000000, true},
		{"1gb", 1 << 30, true},
		{"3GB", 3 << 30, true},
		{" 2kb ", 2048, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"9223372036854775808", 0, false},
		{"9000000000gb", 0, false},
		{"12qb", 0, false},
		{"kb", 0, false},
		{"", 0, false},
		{"-1", 0, false},
		{"1.5mb", 0, false},
		{"1 kb", 0, false},
		{"1kib", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseSize(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseSize(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
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

func TestLoopsZeroIsGOMAXPROCS(t *testing.T) {
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
		want := "upstream-password-file: cannot be used together with upstream-password; set only one"
		if err == nil || err.Error() != want {
			t.Errorf("got %v, want %s", err, want)
		}
	})
	t.Run("empty or missing file", func(t *testing.T) {
		empty := writeFile(t, "pw", "\n")
		_, err := Load([]string{"--upstream-password-file", empty}, nil)
		if want := "upstream-password-file: " + empty + " is empty"; err == nil || err.Error() != want {
			t.Errorf("got %v, want %s", err, want)
		}
		_, err = Load([]string{"--upstream-password-file", "/nonexistent/pw"}, nil)
		if want := "upstream-password-file: open /nonexistent/pw: no such file or directory"; err == nil || err.Error() != want {
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
		{"hot-threshold", func(c *Config) { c.HotThreshold = 0 }, "hot-threshold: must be >= 1, got 0"},
		{"loops negative", func(c *Config) { c.Loops = -1 }, "loops: must be between 0 (GOMAXPROCS) and 256, got -1"},
		{"loops too many", func(c *Config) { c.Loops = 257 }, "loops: must be between 0 (GOMAXPROCS) and 256, got 257"},
		{"cache-max-value", func(c *Config) { c.CacheMaxValue = -1 }, "cache-max-value: must be >= 0, got -1"},
		{"cache-capacity", func(c *Config) { c.CacheCapacity = 0 }, "cache-capacity: must be >= 1 (or cache-max-value 0 to disable the cache), got 0"},
		{"cache-capacity negative, cache off", func(c *Config) { c.CacheMaxValue, c.CacheCapacity = 0, -1 }, "cache-capacity: must be >= 1 (or cache-max-value 0 to disable the cache), got -1"},
		{"cache-max-bytes", func(c *Config) { c.CacheMaxBytes = 0 }, "cache-max-bytes: must be >= 1 (or cache-max-value 0 to disable the cache), got 0"},
		{"password twice", func(c *Config) { c.UpstreamPassword, c.UpstreamPasswordFile = "a", "/pw" }, "upstream-password-file: cannot be used together with upstream-password; set only one"},
		{"dial-timeout", func(c *Config) { c.DialTimeout = 0 }, "dial-timeout: must be > 0, got 0s"},
		{"shutdown-timeout", func(c *Config) { c.ShutdownTimeout = -time.Second }, "shutdown-timeout: must be >= 0, got -1s"},
		{"commandstats-interval short", func(c *Config) { c.CommandstatsInterval = 9 * time.Millisecond }, "commandstats-interval: must be between 10ms and 1m, got 9ms"},
		{"commandstats-interval long", func(c *Config) { c.CommandstatsInterval = time.Hour }, "commandstats-interval: must be between 10ms and 1m, got 1h0m0s"},
		{"client-query-buffer-limit", func(c *Config) { c.ClientQueryBufferLimit = 1<<20 - 1 }, "client-query-buffer-limit: must be >= 1mb (1048576), as Redis requires, got 1048575"},
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
		func(c *Config) { c.Listen, c.Admin = "127.0.0.1:0", "[::1]:0" },
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
	broken := writeFile(t, "broken.yaml", "listen: [\n")
	dup := writeFile(t, "dup.yaml", "listen: a:1\nlisten: b:2\n")
	list := writeFile(t, "list.yaml", "- a\n- b\n")
	tests := []struct {
		name    string
		args    []string
		environ []string
		want    string
	}{
		{"missing file", []string{"--config", dir + "/x.yaml"}, nil, "config: open " + dir + "/x.yaml: no such file or directory"},
		{"unknown key", []string{"--config", typo}, nil, `config file: unknown setting "hot-treshold"`},
		{"unknown nested key", []string{"--config", nested}, nil, `config file: unknown setting "cache.capacity"`},
		{"broken yaml", []string{"--config", broken}, nil, "config: " + broken + ": yaml: line 1: did not find expected node content"},
		{"validation via env", nil, []string{"CICADA_HOT_THRESHOLD=0"}, "hot-threshold: must be >= 1, got 0"},
		{"bad size env", nil, []string{"CICADA_CACHE_MAX_VALUE=12qb"}, `cache-max-value: invalid size "12qb"`},
		{"bad size flag", []string{"--cache-max-value", "12qb"}, nil, `cache-max-value: invalid size "12qb"`},
		{"bad integer env", nil, []string{"CICADA_LOOPS=four"}, `loops: invalid integer "four"`},
		{"uint32 overflow", nil, []string{"CICADA_HOT_THRESHOLD=4294967296"}, "hot-threshold: 4294967296 is out of range [0, 4294967295]"},
		{"negative uint32", nil, []string{"CICADA_HOT_THRESHOLD=-1"}, "hot-threshold: -1 is out of range [0, 4294967295]"},
		{"bad bool env", nil, []string{"CICADA_CONFIGURE_NOTIFICATIONS=yes"}, `configure-notifications: invalid boolean "yes"`},
		{"bad duration env", nil, []string{"CICADA_DIAL_TIMEOUT=2"}, `dial-timeout: invalid duration "2" (use Go syntax such as 750ms or 2s)`},
		{"bad log level", []string{"--log-level", "trace"}, nil, `log-level: must be debug, info, warn or error, got "trace"`},
		{"flag parse", []string{"--loops", "x"}, nil, `loops: invalid integer "x"`},
		{"flag without value", []string{"--listen"}, nil, "flag needs an argument: --listen"},
		{"file not a mapping", []string{"--config", list}, nil, "config: " + list + ": must be a YAML mapping of settings (lines of \"setting: value\")"},
		{"unknown flag", []string{"--hot-treshold", "5"}, nil, "unknown flag: --hot-treshold"},
		{"positional", []string{"extra"}, nil, `unexpected argument "extra": cicada takes only flags`},
		{"bad address map", []string{"--cluster-address-map", "127.0.0.1:7000=:7100"}, nil,
			`cluster-address-map: cluster: address map: port-only side paired with a host side: "127.0.0.1:7000=:7100"`},
		{"address map port", nil, []string{"CICADA_CLUSTER_ADDRESS_MAP=:6379=:0"}, `cluster-address-map: cluster: address map: bad port: ":6379=:0": "0": want 1-65535`},
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
	// A wrongly typed YAML value names its setting.
	for _, body := range []string{"listen: [a]\n", "admin: 9121\n", "loops: two\n", "configure-notifications: 1\n", "dial-timeout: 5\n", "hot-threshold: 1.5\n", "cache-max-value: 1e30\n", "cache-capacity: true\n"} {
		key, _, _ := strings.Cut(body, ":")
		_, err := Load([]string{"--config", writeFile(t, "c.yaml", body)}, nil)
		if err == nil || !strings.HasPrefix(err.Error(), key+": ") {
			t.Errorf("%q: got %v, want an error starting with %q", body, err, key+": ")
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
	if code := run(context.Background(), []string{"--hot-threshold", "0"}, nil, &out, &errOut); code != 2 || errOut.String() != "cicada: hot-threshold: must be >= 1, got 0\n" {
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
