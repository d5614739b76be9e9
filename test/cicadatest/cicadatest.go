// Package cicadatest runs a Cicada in the test process, in front of a
// redis-server the test started (see redistest), on a free loopback port.
package cicadatest

import (
	"context"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"

	"github.com/cicada-proxy/cicada/detector"
	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/proxy"
	"github.com/cicada-proxy/cicada/test/redistest"
	"github.com/cicada-proxy/cicada/upstream"
)

// Options tune a test Cicada; zero values take the defaults noted.
type Options struct {
	HotThreshold uint32 // ops/s; default 1, so a key is hot from its first read
	Loops        int    // default 2
	Capacity     int    // cached replies; default 10000
	MaxValue     int    // bytes; default 65536
	Username     string // for Cicada's own connections
	Password     string
	// NoWait skips waiting for the notification subscription (for tests
	// of an upstream that is down).
	NoWait bool
	// CheckInterval is the period of the subscriber's checks of Redis;
	// default 200 ms.
	CheckInterval time.Duration
	// MaxClientMemory is proxy.Config's; default 0, no bound.
	MaxClientMemory int64
	// Dedicated gives every client an upstream connection of its own
	// (--multiplex=false). By default clients share lanes as Cicada does
	// unless told otherwise, or as the environment says: MULTIPLEX=false
	// runs every test Cicada dedicated (make conformance runs both).
	Dedicated bool
	// Observe, when not nil, receives every log entry at info level and
	// above besides the test's log (a zaptest/observer core, to assert
	// what was logged).
	Observe zapcore.Core
}

// Proxy is a running Cicada. Fields are read-only.
type Proxy struct {
	Addr   string // client address
	Server *proxy.Server
	Cache  *hotcache.Cache
	Det    *detector.Detector
	Sub    *upstream.Subscriber
}

// Start runs Cicada in front of the Redis at redisAddr until the test ends.
func Start(t testing.TB, redisAddr string, o Options) *Proxy {
	t.Helper()
	if o.HotThreshold == 0 {
		o.HotThreshold = 1
	}
	if o.Loops == 0 {
		o.Loops = 2
	}
	if o.Capacity == 0 {
		o.Capacity = 10000
	}
	if o.MaxValue == 0 {
		o.MaxValue = 65536
	}
	if o.CheckInterval == 0 {
		o.CheckInterval = 200 * time.Millisecond
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	if o.Observe != nil {
		log = log.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, o.Observe) }))
	}
	cache, err := hotcache.New(hotcache.Config{Capacity: o.Capacity, MaxBytes: 1 << 28, MaxValue: o.MaxValue, StrictHolds: true})
	if err != nil {
		t.Fatalf("hotcache.New: %v", err)
	}
	det, err := detector.New(detector.Config{Threshold: o.HotThreshold, Loops: o.Loops}, time.Now())
	if err != nil {
		t.Fatalf("detector.New: %v", err)
	}
	adm := detector.NewAdmission(det, o.Capacity, time.Now())
	var srv *proxy.Server
	sub := upstream.New(upstream.Config{AuthChanged: func() { srv.AuthRulesChanged() }, Invalidated: adm.ObserveWrite, Addr: redisAddr, Username: o.Username, Password: o.Password,
		Configure: true, DialTimeout: time.Second, CheckInterval: o.CheckInterval, Logger: log.Named("upstream")}, cache)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(redistest.FreePort(t)))
	srv, err = proxy.New(proxy.Config{Listen: addr, Upstream: redisAddr, Loops: o.Loops, DialTimeout: time.Second,
		MaxClientMemory: o.MaxClientMemory, Logger: log.Named("proxy"), ACLUser: sub.ACLUser,
		Multiplex: Multiplexed() && !o.Dedicated}, cache, adm, sub)
	if err != nil {
		t.Fatalf("proxy.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	subDone := make(chan struct{})
	go func() { defer close(subDone); _ = sub.Run(ctx) }()
	runErr := make(chan error, 1)
	go func() { runErr <- srv.Run() }()
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
		<-runErr
		checkHolds(t, cache, sub)
		cancel()
		<-subDone
	})
	<-srv.Booted()
	p := &Proxy{Addr: addr, Server: srv, Cache: cache, Det: det, Sub: sub}
	if !o.NoWait {
		p.WaitReady(t)
	}
	return p
}

// Multiplexed reports whether test Cicadas share upstream connections
// unless a test asks otherwise (Options.Dedicated): not when the
// environment sets MULTIPLEX=false.
func Multiplexed() bool { return os.Getenv("MULTIPLEX") != "false" }

// NeedLanes skips t, a test of lanes, when the environment sets
// MULTIPLEX=false; covered, if not empty, names the test of the same
// behaviour on dedicated connections.
func NeedLanes(t testing.TB, covered string) {
	t.Helper()
	if Multiplexed() {
		return
	}
	if covered != "" {
		t.Skipf("MULTIPLEX=false: no lanes (%s covers dedicated connections)", covered)
	}
	t.Skip("MULTIPLEX=false: no lanes")
}

// WaitReady waits up to 10 s for the notification subscription.
func (p *Proxy) WaitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !p.Sub.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("keyspace subscription not ready after 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkHolds fails the test if a cache hold outlives the sessions that
// took it: with every client closed and notifications flowing, the only
// holds left are caching turned off and suspensions timed to end within
// opaqueHold (1 s), or fences the subscriber is about to pass.
func checkHolds(t testing.TB, cache *hotcache.Cache, sub *upstream.Subscriber) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		if !sub.Ready() {
			return // the subscriber's own hold; fences wait for it
		}
		want := int64(0)
		if !cache.Enabled() {
			want = 1
		}
		got := cache.Holds()
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("cache holds 3 s after every client closed: got %d, want %d (a hold no release will end)", got, want)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
