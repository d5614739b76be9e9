package main

// Configuration: four layers merged with koanf, each overriding the one before:
//
//	defaults  <  YAML file (--config or CICADA_CONFIG)  <  environment (CICADA_*)  <  flags
//
// Every layer uses the same keys: the flag names (hot-threshold). The
// environment maps CICADA_HOT_THRESHOLD to hot-threshold. Only flags the user
// set on the command line override; a flag's default never hides a value from
// the file or the environment.
//
// Values are decoded (decode.go) rather than with koanf's Unmarshal so that
// every error is one line naming the setting and the layer its value came
// from, sizes accept redis.conf units in every layer, and no layer can make
// a setting silently take a surprising value. The settings table below is
// the one declaration of each setting: its Config field (decoding,
// Redacted and live changes go through it), default, flag, usage, whether
// it is live (live.go) and, for a number, its bound; flags, environment,
// file, --help, --check-config and POST /config all come from it.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"

	"github.com/cicada-proxy/cicada/proxy"
)

// version is the build's version, set with -ldflags "-X main.version=...".
var version = "dev"

// Sentinel results of Load that are not failures: main prints the usage
// (printUsage), the version, or the checked settings and exits 0.
var (
	ErrHelp    = errors.New("help requested")
	ErrVersion = errors.New("version requested")
	// ErrChecked comes with a valid Config for --check-config.
	ErrChecked = errors.New("configuration checked")
)

// startProcs is GOMAXPROCS as the process started (the CPUs, the
// container's CPU limit, or the GOMAXPROCS environment variable), read
// before main raises it to loops+1; startCPUs the CPUs the process may run
// on; procsSet whether GOMAXPROCS came from the environment. With autoLoops
// they make the default of loops, the same at every reload.
var (
	startProcs = runtime.GOMAXPROCS(0)
	startCPUs  = runtime.NumCPU()
	procsSet   = procsFromEnv(os.Getenv("GOMAXPROCS"))
)

// procsFromEnv reports whether the runtime took GOMAXPROCS from the
// environment variable's value v: a positive integer (the runtime ignores
// any other).
func procsFromEnv(v string) bool {
	n, err := strconv.ParseInt(v, 10, 32)
	return err == nil && n > 0 && v[0] != '+'
}

// autoLoops is the number of event loops when none is configured (loops
// 0), from GOMAXPROCS as the process started (procs), the CPUs it may run
// on (cpus) and whether GOMAXPROCS was set in the environment (set).
//
// A CPU budget of Cicada's own, GOMAXPROCS set or a container CPU limit
// below the CPUs (which Go reads into GOMAXPROCS), gets a loop per CPU of
// it. Without one Cicada shares the machine with the Redis it sits beside,
// and every loop it adds beyond the CPUs Redis leaves free takes turns on
// a CPU with Redis's thread: it leaves one CPU to Redis and runs a loop on
// each other, at least one. On 2 CPUs shared with Redis and the load
// generator (2026-12-07, docs/configuration.md), one loop added less to
// the median latency than two at every fixed rate from 5,000 to 40,000
// requests/s (at 20,000: 0.152 ms against 0.275, direct Redis 0.070), and
// two could not keep up at 40,000; two did more only at saturation.
func autoLoops(procs, cpus int, set bool) int {
	if set || procs < cpus {
		return min(procs, maxLoops)
	}
	return min(max(cpus-1, 1), maxLoops)
}

// maxCacheCapacity bounds cache-capacity: the cache's slot table has a
// power of two at least twice as many slots (16 bytes each), allocated at
// once; 1<<24 replies is a 512 MiB table.
const maxCacheCapacity = 1 << 24

// minQueryBufferLimit is Redis's own minimum for client-query-buffer-limit
// (1mb, config.c).
const minQueryBufferLimit = 1 << 20

const (
	envPrefix = "CICADA_"
	maxLoops  = 256
)

// Config is Cicada's whole configuration after merging. Load returns it
// validated; it is not modified afterwards, so it may be shared read-only.
// Each field's default, range and flag usage, and whether it is live, are
// declared once, in settings; the comments here say what it means.
type Config struct {
	// Listen is the RESP listen address (host:port).
	Listen string
	// Upstream is the Redis address (host:port).
	Upstream string
	// Admin is the HTTP listen address for /metrics, /healthz and /readyz,
	// the pages Prometheus and the kubelet read, and nothing else. On every
	// interface by default.
	Admin string
	// LocalAdmin is the HTTP listen address for the pages that reveal key
	// names, cost CPU or change settings: /debug/pprof/, /debug/hotkeys
	// and /config. Loopback by default; "" turns it off.
	// A host that is not loopback is logged as a warning at start.
	LocalAdmin string
	// HotThreshold is the rate, in operations per second on one key over the
	// 1-s window, at which that key is hot.
	HotThreshold uint32
	// Loops is the number of event loops, 1 to 256. A configured 0 (the
	// default) means autoLoops: GOMAXPROCS if a CPU limit or the
	// environment set it, else the CPUs less one for Redis; Load resolves it,
	// so a loaded Config always has Loops >= 1. run then raises GOMAXPROCS
	// to at least Loops+1 (reserveP).
	Loops int
	// CacheMaxValue is the largest reply value, in bytes, that may be
	// cached; larger ones never are. 0 disables the cache.
	CacheMaxValue int
	// CacheCapacity is the maximum number of cached replies. At least 1
	// unless the cache is disabled.
	CacheCapacity int
	// CacheMaxBytes is the most bytes the cache holds. At least 1
	// unless the cache is disabled.
	CacheMaxBytes int64
	// CacheEnabled turns caching on or off (off: every request is
	// forwarded). Live: changes without a restart.
	CacheEnabled bool
	// CacheDeny are glob patterns (gobwas/glob syntax: * ? [abc] [!abc]
	// {a,b}; * matches any characters) of keys never cached, in any db.
	// From YAML a list, from the environment or the flag a comma-separated
	// string. Live.
	CacheDeny []string
	// ClusterAddressMap are "from=to" entries (cluster.ParseAddrMap:
	// "host:port=host:port", or ":port=:port" for any host) rewriting the
	// node addresses Redis Cluster announces into the sidecars'. From YAML
	// a list, from the environment or the flag comma-separated; none is
	// needed when Redis announces the sidecars itself
	// (cluster-announce-port).
	ClusterAddressMap []string
	// UpstreamUser is the ACL user of Cicada's own control and notification
	// connections; "" (the default) means Redis's default user.
	UpstreamUser string
	// UpstreamPassword is UpstreamUser's password. It comes from the YAML
	// file, CICADA_UPSTREAM_PASSWORD, or (after Load) the content of
	// UpstreamPasswordFile; there is no flag, since flags show in ps. Never
	// log it: use Redacted or String.
	UpstreamPassword string
	// UpstreamPasswordFile names a file whose content, trailing newlines
	// trimmed, is the password. Load reads it into UpstreamPassword. Setting
	// both it and upstream-password is an error.
	UpstreamPasswordFile string
	// ConfigureNotifications makes Cicada merge the keyspace-event classes
	// it needs into Redis's notify-keyspace-events at start.
	ConfigureNotifications bool
	// DialTimeout bounds each upstream dial. Above 0.
	DialTimeout time.Duration
	// ShutdownTimeout is how long in-flight replies may take after SIGTERM;
	// 0 means close at once.
	ShutdownTimeout time.Duration
	// CommandstatsInterval is how often Cicada reads Redis's INFO
	// commandstats to see changes Redis sends no notification of (ACL and
	// requirepass changes, SWAPDB, DEBUG, REPLICAOF made on Redis
	// directly): the longest one can go unseen.
	CommandstatsInterval time.Duration
	// ClientQueryBufferLimit is how many bytes a client's requests may hold
	// in Cicada until Redis answers them (unparsed, waiting to be sent to
	// Redis, and the bookkeeping of those in flight) before Cicada closes
	// it, like Redis's client-query-buffer-limit. At least 1mb
	// (1048576), Redis's minimum.
	ClientQueryBufferLimit int64
	// Multiplex shares upstream connections (lanes) between clients whose
	// connections are in one state, each client moving to a connection
	// of its own at its first request that needs one (proxy.Config.Multiplex);
	// false: one upstream connection per client.
	Multiplex bool
	// MaxClients is how many client connections may be open at once, like
	// Redis's maxclients. Lowered at start to what the
	// open-file limit allows (proxy.MaxClientsFor), as Redis
	// does.
	MaxClients int
	// MaxClientMemory bounds the bytes Cicada holds for all clients
	// (replies they have not read, requests Redis has not answered), like Redis 7's
	// maxmemory-clients: over it, the clients holding the most are closed;
	// 0 means no bound.
	MaxClientMemory int64
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// LogFormat is json or console.
	LogFormat string

	// passwordFromFile is set by Load when it has read UpstreamPassword from
	// UpstreamPasswordFile, so that Validate does not see two sources.
	passwordFromFile bool
	// origin names, per key, the layer Load took its value from (see
	// label); nil for a Config built by hand or from POST /config.
	origin map[string]string
}

// byteSize marks a size setting in the settings table: bytes, or a string
// with a redis.conf unit (see parseSize).
type byteSize int64

// setting is one configuration key: its default, its flag's usage, whether
// it is live, and for a number the values it accepts.
type setting struct {
	key string
	// field points into a Config at the setting's field: *string, *bool,
	// *int, *uint32, *int64 (sizes), *time.Duration or *[]string. Decoding,
	// Redacted and live changes all go through it.
	field func(c *Config) any
	// decode converts the merged value when the field's type alone does
	// not say how (glob patterns, address-map entries, a lower-cased
	// word); nil: by type.
	decode func(d *decoder, key string) any
	def    any // string, bool, int, uint32, byteSize, time.Duration or []string
	usage  string
	noFlag bool // secrets: only from the file or the environment; "***" in Redacted
	// live settings change without a restart (live.go: a --config file
	// edit or POST /config); --help marks them "(live)".
	live bool
	// bound is a number's accepted range, checked alike by the decoder
	// (every layer and POST /config) and by Validate; nil for others.
	bound *bound
}

// bound is the inclusive range of a numeric setting: integers, bytes for
// sizes, nanoseconds for durations. hi math.MaxInt64 means no upper bound
// (none is shown).
type bound struct {
	lo, hi int64
	// note follows the range in the message ("0 = automatic").
	note string
	// offZero: 0 is accepted too while the cache is off
	// (cache-max-value 0), which only Validate can tell.
	offZero bool
}

// settings lists every key in Config order. It is the defaults layer, the
// flag set, and the list of keys accepted from the file and the environment.
var settings = []setting{
	{key: "listen", field: func(c *Config) any { return &c.Listen }, def: ":6380", usage: "RESP listen address (host:port)"},
	{key: "upstream", field: func(c *Config) any { return &c.Upstream }, def: "127.0.0.1:6379", usage: "Redis address (host:port)"},
	{key: "admin", field: func(c *Config) any { return &c.Admin }, def: ":9121", usage: "HTTP address of /metrics, /healthz and /readyz (host:port)"},
	{key: "local-admin", field: func(c *Config) any { return &c.LocalAdmin }, def: "127.0.0.1:9122", usage: `HTTP address of /debug/pprof/, /debug/hotkeys and /config (host:port, keep it on loopback; "" = off)`},
	{key: "hot-threshold", field: func(c *Config) any { return &c.HotThreshold }, def: uint32(1), live: true, bound: &bound{lo: 1, hi: math.MaxUint32},
		usage: "ops/s on one key (1-s window) below which it is never cached, >= 1; keys above it are cached by what they save Redis"},
	{key: "loops", field: func(c *Config) any { return &c.Loops }, def: 0, bound: &bound{lo: 0, hi: maxLoops, note: "0 = automatic"},
		usage: "event loops, at most 256; 0 = automatic: GOMAXPROCS under a CPU limit, else the CPUs less one, left to Redis (GOMAXPROCS is then raised to loops+1)"},
	{key: "cache-max-value", field: func(c *Config) any { return &c.CacheMaxValue }, def: byteSize(64 << 10), live: true, bound: &bound{lo: 0, hi: math.MaxInt},
		usage: "replies with a larger value are not cached; 0 disables the cache"},
	{key: "cache-capacity", field: func(c *Config) any { return &c.CacheCapacity }, def: 100000, live: true, bound: &bound{lo: 1, hi: maxCacheCapacity, offZero: true},
		usage: "maximum number of cached replies"},
	{key: "cache-max-bytes", field: func(c *Config) any { return &c.CacheMaxBytes }, def: byteSize(64 << 20), live: true, bound: &bound{lo: 1, hi: math.MaxInt64, offZero: true},
		usage: "maximum bytes held by the cache"},
	{key: "cache-enabled", field: func(c *Config) any { return &c.CacheEnabled }, def: true, live: true, usage: "cache hot keys; false forwards every request and counts no key"},
	{key: "cache-deny", field: func(c *Config) any { return &c.CacheDeny }, decode: (*decoder).patterns, def: []string{}, live: true, usage: "comma-separated glob patterns of keys never cached, e.g. 'session:*,token:*'"},
	{key: "cluster-address-map", field: func(c *Config) any { return &c.ClusterAddressMap }, decode: (*decoder).addrMap, def: []string{}, usage: "Redis Cluster: comma-separated redisHost:port=sidecarHost:port (or :6379=:6380 for any host) rewriting node addresses in CLUSTER SLOTS/SHARDS/NODES and -MOVED/-ASK; not needed when Redis sets cluster-announce-port"},
	{key: "upstream-user", field: func(c *Config) any { return &c.UpstreamUser }, def: "", usage: `ACL user for Cicada's own Redis connections ("" = default user)`},
	{key: "upstream-password", field: func(c *Config) any { return &c.UpstreamPassword }, def: "", noFlag: true},
	{key: "upstream-password-file", field: func(c *Config) any { return &c.UpstreamPasswordFile }, def: "", usage: "file holding upstream-user's password (trailing newline trimmed)"},
	{key: "configure-notifications", field: func(c *Config) any { return &c.ConfigureNotifications }, def: true, usage: "add the keyspace-event classes Cicada needs to notify-keyspace-events at start"},
	{key: "dial-timeout", field: func(c *Config) any { return &c.DialTimeout }, def: proxy.DefaultDialTimeout, bound: &bound{lo: 1, hi: math.MaxInt64}, usage: "upstream dial timeout, > 0"},
	{key: "shutdown-timeout", field: func(c *Config) any { return &c.ShutdownTimeout }, def: 10 * time.Second, bound: &bound{lo: 0, hi: math.MaxInt64},
		usage: "how long in-flight replies may take after SIGTERM"},
	{key: "commandstats-interval", field: func(c *Config) any { return &c.CommandstatsInterval }, def: 100 * time.Millisecond, bound: &bound{lo: int64(10 * time.Millisecond), hi: int64(time.Minute)},
		usage: "how often INFO commandstats is read to see ACL, requirepass, SWAPDB or DEBUG changes made on Redis directly (10ms to 1m)"},
	{key: "client-query-buffer-limit", field: func(c *Config) any { return &c.ClientQueryBufferLimit }, def: byteSize(proxy.DefaultQueryBufferLimit), bound: &bound{lo: minQueryBufferLimit, hi: math.MaxInt64, note: "Redis's minimum"},
		usage: "bytes a client's requests may hold in Cicada until Redis answers them (unparsed, waiting to be sent, in flight) before it is closed"},
	{key: "multiplex", field: func(c *Config) any { return &c.Multiplex }, def: true,
		usage: "share upstream connections between clients in one state (db, protocol, the default user); false = one upstream connection per client"},
	{key: "maxclients", field: func(c *Config) any { return &c.MaxClients }, def: proxy.DefaultMaxClients, bound: &bound{lo: 1, hi: math.MaxInt},
		usage: "client connections open at once; more are refused as Redis refuses them (lowered to what the open-file limit allows)"},
	{key: "max-client-memory", field: func(c *Config) any { return &c.MaxClientMemory }, def: byteSize(1 << 30), bound: &bound{lo: 0, hi: math.MaxInt64},
		usage: "bytes of unread replies and unanswered requests Cicada holds for all clients before it closes those holding the most (0 = no bound)"},
	{key: "log-level", field: func(c *Config) any { return &c.LogLevel }, decode: (*decoder).lower, def: "info", live: true, usage: "debug, info, warn or error"},
	{key: "log-format", field: func(c *Config) any { return &c.LogFormat }, decode: (*decoder).lower, def: "json", usage: "json or console"},
}

// lookup returns the setting named key, or nil.
func lookup(key string) *setting {
	for i := range settings {
		if settings[i].key == key {
			return &settings[i]
		}
	}
	return nil
}

func isSetting(key string) bool { return lookup(key) != nil }

// Load builds the configuration from args (without the program name) and
// environ (as from os.Environ), reads the --config file and the password
// file if given, and validates the result. It reads no other global state.
//
// It returns ErrHelp for -h/--help, ErrVersion for --version, and the
// Config with ErrChecked for --check-config when the settings are valid;
// every other error is one line naming where the value at fault came from
// (see label): "--hot-threshold: ...", "CICADA_HOT_THRESHOLD: ...",
// "<file>: hot-threshold: ...", or the key for a default.
func Load(args []string, environ []string) (*Config, error) {
	fs := newFlagSet()
	if err := fs.Parse(args); err != nil {
		return nil, flagError(err, args)
	}
	if help, _ := fs.GetBool("help"); help {
		return nil, ErrHelp
	}
	if v, _ := fs.GetBool("version"); v {
		return nil, ErrVersion
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q: cicada takes only flags", fs.Arg(0))
	}

	k := koanf.New(".")
	if err := k.Load(confmap.Provider(defaults(), ""), nil); err != nil {
		return nil, fmt.Errorf("defaults: %w", err)
	}
	path, _ := fs.GetString("config")
	from := "--config"
	if path == "" {
		path, from = lookupEnv(environ, envPrefix+"CONFIG"), envPrefix+"CONFIG"
	}
	origin := map[string]string{} // lowest layer first, so the last one set wins
	if path != "" {
		keys, err := loadFile(k, path, from)
		if err != nil {
			return nil, oneLine(err)
		}
		for _, key := range keys {
			origin[key] = path + ": " + key
		}
	}
	for _, kv := range environ { // as env.Provider reads them: the last one wins
		name, value, _ := strings.Cut(kv, "=")
		if key, _ := envKey(name, value); key != "" && strings.HasPrefix(name, envPrefix) {
			origin[key] = name
		}
	}
	envLayer := env.Provider(".", env.Opt{
		Prefix:        envPrefix,
		TransformFunc: envKey,
		EnvironFunc:   func() []string { return environ },
	})
	if err := k.Load(envLayer, nil); err != nil {
		return nil, fmt.Errorf("environment: %w", err)
	}
	flagLayer := posflag.ProviderWithFlag(fs, ".", k, func(f *pflag.Flag) (string, any) {
		if !isSetting(f.Name) {
			return "", nil // --config, --check-config, --help, --version
		}
		if t, ok := f.Value.(*textFlag); ok {
			return f.Name, t.s // decode parses it (FlagVal would parse by Type and drop errors)
		}
		return f.Name, posflag.FlagVal(fs, f)
	})
	if err := k.Load(flagLayer, nil); err != nil {
		return nil, fmt.Errorf("flags: %w", err)
	}
	fs.Visit(func(f *pflag.Flag) { // the flags set, as posflag loaded them
		if isSetting(f.Name) {
			origin[f.Name] = "--" + f.Name
		}
	})

	c, err := decode(k, origin)
	if err != nil {
		return nil, err
	}
	if c.UpstreamPasswordFile != "" && c.UpstreamPassword == "" {
		b, err := readSmall(c.UpstreamPasswordFile, maxPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.label("upstream-password-file"), err)
		}
		c.UpstreamPassword = strings.TrimRight(string(b), "\r\n")
		if c.UpstreamPassword == "" {
			return nil, fmt.Errorf("%s: %s is empty", c.label("upstream-password-file"), c.UpstreamPasswordFile)
		}
		c.passwordFromFile = true
	}
	if c.Loops == 0 {
		c.Loops = autoLoops(startProcs, startCPUs, procsSet)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if check, _ := fs.GetBool("check-config"); check {
		return c, ErrChecked
	}
	return c, nil
}

// passwordHint says where the password goes instead of a flag.
const passwordHint = " (flags show in ps: set it in the config file, CICADA_UPSTREAM_PASSWORD or --upstream-password-file)"

// flagError is the error for a command line pflag could not parse. An
// argument that tries to give upstream-password (which has no flag, in
// any spelling pflag refuses: -upstream-password=..., ---upstream-password
// ...) has its value replaced by *** in the message, and the message says
// where the password goes.
func flagError(err error, args []string) error {
	msg := err.Error()
	secret := false
	for _, a := range args {
		if !strings.Contains(strings.ToLower(a), "upstream-password") || strings.Contains(strings.ToLower(a), "upstream-password-file") {
			continue
		}
		secret = true
		if _, v, ok := strings.Cut(a, "="); ok && v != "" {
			msg = strings.ReplaceAll(msg, v, "***")
		}
	}
	if secret {
		return errors.New(msg + passwordHint)
	}
	return err
}

// maxPasswordFile bounds upstream-password-file: Redis's own limit on a
// password is far below it, and a mistaken path (/dev/zero) must not be
// read until memory runs out.
const maxPasswordFile = 64 << 10

// readSmall reads the file at path, at most limit bytes; a longer one is
// an error.
func readSmall(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is longer than %d bytes", path, limit)
	}
	return b, nil
}

// newFlagSet defines one flag per setting (except secrets) plus --config,
// --help and --version. It prints nothing: Load returns the errors.
func newFlagSet() *pflag.FlagSet {
	fs := pflag.NewFlagSet("cicada", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.String("config", "", "YAML config file (or CICADA_CONFIG)")
	for _, s := range settings {
		if s.noFlag {
			continue
		}
		usage := s.usage
		if s.live {
			usage += " (live)"
		}
		switch d := s.def.(type) {
		case string:
			fs.String(s.key, d, usage)
		case bool: // as text, so a bad value gets decode's message too
			fs.VarPF(&textFlag{s: strconv.FormatBool(d), typ: "bool"}, s.key, "", usage).NoOptDefVal = "true"
		case int:
			fs.Var(&textFlag{s: strconv.Itoa(d), typ: "int"}, s.key, usage)
		case uint32:
			fs.Var(&textFlag{s: strconv.FormatUint(uint64(d), 10), typ: "uint32"}, s.key, usage)
		case time.Duration:
			fs.Var(&textFlag{s: d.String(), typ: "duration"}, s.key, usage)
		case []string: // kept as text: commas inside {a,b} are not separators
			fs.Var(&textFlag{s: strings.Join(d, ","), typ: "patterns"}, s.key, usage)
		case byteSize:
			fs.Var(&textFlag{s: formatSize(int64(d)), typ: "size"}, s.key, usage)
		default:
			panic(fmt.Sprintf("setting %s: unsupported default type %T", s.key, d))
		}
	}
	fs.Bool("check-config", false, "check the settings, print them (password redacted) and exit: 0 if valid, 2 if not")
	fs.Bool("version", false, "print the version and exit")
	fs.BoolP("help", "h", false, "print this help and exit")
	return fs
}

// printUsage writes the --help text; settings marked live are followed
// by "(live)".
func printUsage(w io.Writer) {
	fmt.Fprintf(w, `Usage: cicada [flags]

Cicada is a transparent Redis sidecar proxy. Settings come from, each
overriding the one before: defaults, the YAML file given by --config (keys as
the flag names, e.g. "hot-threshold: 500"), the environment (CICADA_ plus the
flag name in upper case with "_" for "-", e.g. CICADA_HOT_THRESHOLD=500), and
flags. Sizes take bytes or redis.conf units (1k = 1000, 1kb = 1024, m, mb, g,
gb); durations take Go syntax (750ms, 2s). The Redis password has no flag: set
upstream-password in the file, CICADA_UPSTREAM_PASSWORD, or
--upstream-password-file. Settings marked (live) change without a restart
when the --config file is edited, or with POST /config on local-admin.

Flags:
%s`, newFlagSet().FlagUsages())
}

// defaults returns the lowest layer, as a flat map keyed like the flags.
func defaults() map[string]any {
	m := make(map[string]any, len(settings))
	for _, s := range settings {
		if d, ok := s.def.(byteSize); ok {
			m[s.key] = int64(d)
			continue
		}
		m[s.key] = s.def
	}
	return m
}

// quoted matches what a YAML error quotes: `...`, '...' or "...".
var quoted = regexp.MustCompile("`[^`]*`|'[^']*'|\"[^\"]*\"")

// loadFile merges the YAML file at path (named by from: --config or
// CICADA_CONFIG) into k and returns the keys it set. Unknown keys are an
// error, so a misspelt setting cannot go unnoticed; a key with no value
// (YAML null) is ignored.
func loadFile(k *koanf.Koanf, path, from string) ([]string, error) {
	f := koanf.New(".")
	if err := f.Load(file.Provider(path), yaml.Parser()); err != nil {
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) { // already names the file
			return nil, fmt.Errorf("%s: %w", from, pathErr)
		}
		if strings.Contains(err.Error(), "cannot unmarshal") {
			return nil, fmt.Errorf("config: %s: must be a YAML mapping of settings (lines of \"setting: value\")", path)
		}
		// The parser quotes what it could not read, which may be the
		// password: keep its words and line numbers only.
		return nil, fmt.Errorf("config: %s: %s", path, quoted.ReplaceAllString(err.Error(), "…"))
	}
	var keys []string
	for _, key := range f.Keys() {
		if secret, _, nested := strings.Cut(key, "."); nested && secret == "upstream-password" {
			return nil, fmt.Errorf("%s: upstream-password: must be a string (quote it in YAML), got a mapping", path)
		}
		if !isSetting(key) {
			hint := ""
			if near := strings.ReplaceAll(strings.ToLower(key), "_", "-"); isSetting(near) {
				hint = fmt.Sprintf(" (did you mean %q?)", near)
			}
			return nil, fmt.Errorf("%s: unknown setting %q%s", path, key, hint)
		}
		if f.Get(key) == nil {
			f.Delete(key)
			continue
		}
		keys = append(keys, key)
	}
	return keys, k.Merge(f)
}

// envKey maps CICADA_HOT_THRESHOLD to hot-threshold. Unknown names (such as
// Kubernetes' CICADA_SERVICE_HOST) and empty values are ignored.
func envKey(name, value string) (string, any) {
	key := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, envPrefix)), "_", "-")
	if !isSetting(key) || value == "" {
		return "", nil
	}
	return key, value
}

// lookupEnv returns the last value of name in environ, like os.Getenv.
func lookupEnv(environ []string, name string) string {
	v := ""
	for _, kv := range environ {
		if n, val, ok := strings.Cut(kv, "="); ok && n == name {
			v = val
		}
	}
	return v
}

// oneLine folds a multi-line error (some YAML errors are) onto one line.
func oneLine(err error) error {
	s := err.Error()
	if !strings.Contains(s, "\n") {
		return err
	}
	return errors.New(strings.Join(strings.Fields(s), " "))
}

// textFlag is a pflag.Value holding a number, size or duration flag's text
// as given; decode parses it, so that a bad value gets the same one-line
// message from every layer (not pflag's strconv wording).
type textFlag struct{ s, typ string }

// String implements pflag.Value: the text as given.
func (f *textFlag) String() string { return f.s }

// Set implements pflag.Value; it never fails (decode checks the value).
func (f *textFlag) Set(s string) error { f.s = s; return nil }

// Type implements pflag.Value: the value's kind in --help.
func (f *textFlag) Type() string { return f.typ }

// Validate checks every setting and returns the first problem as
// "<label>: <what is wrong>", the label naming where the value came from
// (see label). It accepts Loops == 0 (GOMAXPROCS) for Configs built by
// hand. Numbers are checked against their settings' bounds, as the
// decoder checks them, with the same words.
func (c *Config) Validate() error {
	switch {
	case !isHostPort(c.Listen, 0):
		return c.invalid("listen", "must be host:port, got %q", c.Listen)
	case !isHostPort(c.Upstream, 1):
		return c.invalid("upstream", "must be host:port with a port from 1 to 65535, got %q", c.Upstream)
	case !isHostPort(c.Admin, 0):
		return c.invalid("admin", "must be host:port, got %q", c.Admin)
	case c.LocalAdmin != "" && !isHostPort(c.LocalAdmin, 0):
		return c.invalid("local-admin", `must be host:port, or "" for none, got %q`, c.LocalAdmin)
	}
	cacheOff := c.CacheMaxValue == 0
	for _, n := range []struct {
		key string
		v   int64
	}{
		{"hot-threshold", int64(c.HotThreshold)},
		{"loops", int64(c.Loops)},
		{"cache-max-value", int64(c.CacheMaxValue)},
		{"cache-capacity", int64(c.CacheCapacity)},
		{"cache-max-bytes", c.CacheMaxBytes},
		{"dial-timeout", int64(c.DialTimeout)},
		{"shutdown-timeout", int64(c.ShutdownTimeout)},
		{"commandstats-interval", int64(c.CommandstatsInterval)},
		{"client-query-buffer-limit", c.ClientQueryBufferLimit},
		{"maxclients", int64(c.MaxClients)},
		{"max-client-memory", c.MaxClientMemory},
	} {
		if msg := lookup(n.key).outside(n.v, cacheOff); msg != "" {
			return c.invalid(n.key, "%s", msg)
		}
	}
	switch {
	case c.UpstreamPassword != "" && c.UpstreamPasswordFile != "" && !c.passwordFromFile:
		other := "upstream-password"
		if l := c.label(other); l != other {
			other += " (" + l + ")"
		}
		return c.invalid("upstream-password-file", "cannot be used together with %s; set only one", other)
	case !oneOf(c.LogLevel, "debug", "info", "warn", "error"):
		return c.invalid("log-level", "must be debug, info, warn or error, got %q", c.LogLevel)
	case !oneOf(c.LogFormat, "json", "console"):
		return c.invalid("log-format", "must be json or console, got %q", c.LogFormat)
	}
	return nil
}

// invalid is a Validate error about key, labelled.
func (c *Config) invalid(key, format string, args ...any) error {
	return fmt.Errorf("%s: "+format, append([]any{c.label(key)}, args...)...)
}

// label names where key's value came from, for an error about it: the
// flag ("--hot-threshold"), the environment variable
// ("CICADA_HOT_THRESHOLD"), the file and the key ("/etc/cicada.yaml:
// hot-threshold"), or else the key itself (a default, a key of a POST
// /config body, a Config built by hand). It never shows a value.
func (c *Config) label(key string) string { return labelOf(c.origin, key) }

func labelOf(origin map[string]string, key string) string {
	if l := origin[key]; l != "" {
		return l
	}
	return key
}

// isHostPort reports whether s is host:port with a decimal port in
// [minPort, 65535]. The host may be empty (all interfaces, or localhost for
// dialing).
func isHostPort(s string, minPort int) bool {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	p, err := strconv.Atoi(port)
	return err == nil && p >= minPort && p <= 65535
}

func oneOf(s string, allowed ...string) bool {
	for _, a := range allowed {
		if s == a {
			return true
		}
	}
	return false
}

// Redacted returns the settings keyed like the flags, for logging: a
// secret is "***" when set, durations are strings ("2s"), lists copies.
func (c *Config) Redacted() map[string]any {
	m := make(map[string]any, len(settings))
	for _, st := range settings {
		var v any
		switch f := st.field(c).(type) {
		case *string:
			v = *f
			if st.noFlag && *f != "" {
				v = "***"
			}
		case *bool:
			v = *f
		case *int:
			v = *f
		case *uint32:
			v = *f
		case *int64:
			v = *f
		case *time.Duration:
			v = f.String()
		case *[]string:
			v = slices.Clone(*f)
		default:
			panic(fmt.Sprintf("setting %s: field of type %T", st.key, f))
		}
		m[st.key] = v
	}
	return m
}

// String formats the settings on one line as key=value in Config order, the
// password redacted, so that %v and %+v never print it.
func (c *Config) String() string {
	r := c.Redacted()
	var b strings.Builder
	for i, s := range settings {
		if i > 0 {
			b.WriteByte(' ')
		}
		if list, ok := r[s.key].([]string); ok {
			j, _ := json.Marshal(list) // no spaces: fields stay split by them
			fmt.Fprintf(&b, "%s=%s", s.key, j)
			continue
		}
		fmt.Fprintf(&b, "%s=%v", s.key, r[s.key])
	}
	return b.String()
}

// GoString keeps %#v from printing the password too.
func (c *Config) GoString() string { return "main.Config{" + c.String() + "}" }
