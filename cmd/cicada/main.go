// Command cicada is a transparent Redis sidecar proxy that answers hot GET
// and HGET requests from pre-serialized replies.
//
// It wires the packages together: configuration (config.go), the hot cache
// (hotcache), the hot-key detector (detector), the keyspace-notification
// subscriber (upstream), the RESP proxy (proxy) and the two admin
// HTTP listeners (admin.go). Exit codes: 0 after a clean shutdown, --help,
// --version or a passed --check-config; 1 for a runtime failure (a
// listener that cannot bind); 2 for a bad setting.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/detector"
	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/proxy"
	"github.com/cicada-proxy/cicada/upstream"
)

func main() {
	// Like Redis, a SIGHUP (a closed terminal, a reload by habit) does not
	// stop Cicada; its configuration file is watched instead.
	signal.Ignore(syscall.SIGHUP)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run starts Cicada and serves until ctx is done; it returns the exit code.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	cfg, err := Load(args, environ)
	switch {
	case errors.Is(err, ErrHelp):
		printUsage(stdout)
		return 0
	case errors.Is(err, ErrVersion):
		fmt.Fprintln(stdout, "cicada", version)
		return 0
	case errors.Is(err, ErrChecked):
		fmt.Fprintln(stdout, cfg)
		return 0
	case err != nil:
		fmt.Fprintln(stderr, "cicada:", err)
		return 2
	}
	level := zap.NewAtomicLevel()
	log, err := newLogger(cfg, stderr, level)
	if err != nil {
		fmt.Fprintln(stderr, "cicada:", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	redis.SetLogger(redisLogger{log.Sugar().Named("go-redis")})
	reserveP(cfg.Loops)
	if err := serve(ctx, cfg, log, newLiveFunc(args, environ, level)); err != nil {
		log.Error("cicada stopped", zap.Error(err))
		return 1
	}
	return 0
}

// reserveP makes GOMAXPROCS at least loops+1. Busy event loops never block
// in epoll_wait, so with one P each they hold every P, and the runtime
// looks at other sockets, the keyspace subscription's among them, only
// from sysmon every 10 ms: writes made behind Cicada's back then stayed
// readable for p50 3 ms, p99 10-13 ms under load (TestBypassStaleness,
// 2 loops on 2 cores). A spare P, idle most of the time, waits in the
// netpoller and runs the subscriber at once.
func reserveP(loops int) {
	if runtime.GOMAXPROCS(0) <= loops {
		runtime.GOMAXPROCS(loops + 1)
	}
}

// ownDescriptors are the descriptors the process holds besides the
// proxy's and the admin listeners' connections: standard streams, Go's
// netpoller, the admin listeners, cgroup and /proc files (a scrape of
// /metrics opens a few), and Cicada's own Redis connections (control,
// notifications, flush watch, proxy.ACLLookups lookups). 15 were open in
// a Cicada at rest.
const ownDescriptors = 24 + proxy.ACLLookups

// fitMaxClients divides the open-file limit. It lowers maxclients to what
// fits with loops event loops (proxy.MaxClientsFor) after the process's
// own descriptors and the admin listeners' (localAdminConns, and for the
// public one 1/adminShare of the limit, at least minAdminConns), as Redis
// does (it reserves 32): past the limit accept(2) would fail with EMFILE
// and gnet would stop serving altogether. It returns that maxclients and
// how many connections the admin listener may serve at once: its share
// and what maxclients leaves. Go raised the soft limit to the hard one at
// start.
func fitMaxClients(want, loops int, log *zap.Logger) (maxClients, adminConns int) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return want, minAdminConns
	}
	admin := max(minAdminConns, int(min(lim.Cur/adminShare, 1<<20)))
	// Each admin connection may hold a second descriptor while its
	// request reads /proc (/metrics' process collector, pprof).
	others := ownDescriptors + 2*(admin+localAdminConns)
	fit := proxy.MaxClientsFor(lim.Cur, loops, others)
	if want > fit {
		log.Warn("maxclients lowered to fit the open-file limit", zap.Int("maxclients", want),
			zap.Uint64("open_file_limit", lim.Cur), zap.Int("now", fit))
		return fit, admin
	}
	spare := uint64(0)
	if need := uint64(others) + proxy.Descriptors(want, loops); lim.Cur > need {
		spare = lim.Cur - need
	}
	return want, admin + int(min(spare/2, 1<<30))
}

// newLiveFunc returns what serve calls to make the holder of the live
// settings once the cache and admission exist.
func newLiveFunc(args, environ []string, level zap.AtomicLevel) func(*Config, *hotcache.Cache, *detector.Admission, *zap.Logger) *live {
	return func(cfg *Config, cache *hotcache.Cache, adm *detector.Admission, log *zap.Logger) *live {
		return newLive(cfg, args, environ, cache, adm, level, log)
	}
}

// serve builds the components, runs them, and shuts them down when ctx is
// done. mkLive makes the holder of the live settings (live.go).
func serve(ctx context.Context, cfg *Config, log *zap.Logger, mkLive func(*Config, *hotcache.Cache, *detector.Admission, *zap.Logger) *live) error {
	log.Info("starting cicada", zap.String("version", version), zap.Any("config", cfg.Redacted()))
	// With the cache off (cache-max-value 0) capacity and bytes may be 0;
	// the table still needs a size, and live settings may turn it on.
	cache, err := hotcache.New(hotcache.Config{
		Capacity: max(cfg.CacheCapacity, 1),
		MaxBytes: max(cfg.CacheMaxBytes, 1),
		MaxValue: cfg.CacheMaxValue,
	})
	if err != nil {
		return err
	}
	det, err := detector.New(detector.Config{Threshold: cfg.HotThreshold, Loops: cfg.Loops}, time.Now())
	if err != nil {
		return err
	}
	adm := detector.NewAdmission(det, max(cfg.CacheCapacity, 1), time.Now())
	settings := mkLive(cfg, cache, adm, log)
	if !cache.Enabled() {
		log.Info("cache disabled (cache-enabled false or cache-max-value 0): every request is forwarded")
	}
	addrMap, err := cluster.ParseAddrMap(cfg.ClusterAddressMap) // checked by decode already
	if err != nil {
		return err
	}
	var srv *proxy.Server
	sub := upstream.New(upstream.Config{
		AuthChanged:      func() { srv.AuthRulesChanged() },
		Invalidated:      adm.ObserveWrite,
		Addr:             cfg.Upstream,
		Username:         cfg.UpstreamUser,
		Password:         cfg.UpstreamPassword,
		Configure:        cfg.ConfigureNotifications,
		DialTimeout:      cfg.DialTimeout,
		CountersInterval: cfg.CommandstatsInterval,
		Logger:           log.Named("upstream"),
	}, cache)
	maxClients, adminConns := fitMaxClients(cfg.MaxClients, cfg.Loops, log)
	srv, err = proxy.New(proxy.Config{
		Listen:           cfg.Listen,
		Upstream:         cfg.Upstream,
		Loops:            cfg.Loops,
		DialTimeout:      cfg.DialTimeout,
		QueryBufferLimit: cfg.ClientQueryBufferLimit,
		MaxClients:       maxClients,
		Multiplex:        cfg.Multiplex,
		MaxClientMemory:  cfg.MaxClientMemory,
		Logger:           log.Named("proxy"),
		ACLUser:          sub.ACLUser,
		AddrMap:          addrMap,
	}, cache, adm, sub)
	if err != nil {
		return err
	}

	admin, err := startAdmin(cfg, srv, settings, adminConns, log) // admin.go
	if err != nil {
		return err
	}

	stopWatch := make(chan struct{})
	watchDone := make(chan struct{})
	if path, err := configPath(settings.args, settings.environ); err == nil {
		go func() {
			defer close(watchDone)
			settings.watch(path, stopWatch)
		}()
	} else {
		close(watchDone)
	}

	subCtx, stopSub := context.WithCancel(context.Background())
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		_ = sub.Run(subCtx)
	}()
	runErr := make(chan error, 1)
	go func() { runErr <- srv.Run() }()

	var err2 error
	select {
	case err2 = <-runErr:
	case <-ctx.Done():
		log.Info("shutting down", zap.Duration("timeout", cfg.ShutdownTimeout))
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("proxy shutdown", zap.Error(err))
		}
		cancel()
		err2 = <-runErr
	}
	admin.shutdown(time.Second)
	stopSub()
	<-subDone
	close(stopWatch)
	<-watchDone
	log.Info("stopped")
	return err2
}

// newLogger builds the zap logger the configuration asks for, its level
// set through level (which live configuration changes).
func newLogger(cfg *Config, w io.Writer, level zap.AtomicLevel) (*zap.Logger, error) {
	lvl, err := zapLevel(cfg.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("log-level: %w", err)
	}
	level.SetLevel(lvl)
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	encCfg.EncodeDuration = zapcore.StringDurationEncoder
	var enc zapcore.Encoder
	if cfg.LogFormat == "console" {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), level)), nil
}

// zapLevel parses a log-level setting.
func zapLevel(s string) (zapcore.Level, error) { return zapcore.ParseLevel(s) }

// redisLogger routes go-redis's internal messages to zap at debug level:
// it repeats every retry, while the keyspace subscriber logs each state
// change once.
type redisLogger struct{ l *zap.SugaredLogger }

// Printf implements go-redis's internal.Logging.
func (r redisLogger) Printf(_ context.Context, format string, v ...any) {
	r.l.Debugf(format, v...)
}
