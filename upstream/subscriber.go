// Package upstream is Cicada's control plane toward Redis: the connections
// Cicada opens of its own, next to the clients' upstream connections. It
// keeps the hot cache consistent with writes Cicada does not see (it
// subscribes to Redis keyspace notifications and evicts every key Redis
// reports), fences writes whose keys Cicada cannot name, reads the server's
// commands and settings, polls INFO for changes Redis sends no notification
// of, checks ACL users for HOTKEYS and, in Redis Cluster, watches the node's
// role and slots.
//
// # Flow
//
//	start ── cache suspended (no hits, no fills)
//	  │
//	  ├─ control connection: CONFIG GET notify-keyspace-events; merge the
//	  │  classes Cicada needs (K + A) when allowed; verify
//	  ├─ notification connection: PSUBSCRIBE __keyspace@*__:*, then
//	  │  SUBSCRIBE __redis__:invalidate; a third connection turns on
//	  │  CLIENT TRACKING redirected there, to hear of flushes (flushwatch.go)
//	  │     confirmed ─► cache.Flush(), the hold released: ready
//	  │     message   ─► cache.Invalidate(db, key)  } in the read that takes
//	  │     flush     ─► cache.Flush()              } it off the socket (watch.go)
//	  │     pong n    ─► every fence requested before PING n is released
//	  │     error, silence past the check interval, or the classes removed
//	  │               ─► cache.Hold(): not ready; reconnect with backoff
//	  ├─ every CheckInterval (control.go): PING (liveness), CONFIG GET
//	  │  (classes intact, Redis's idle timeout)
//	  ├─ every CountersInterval (control.go): INFO commandstats (a SWAPDB,
//	  │  flush, DEBUG or ACL change nobody reported flushes the cache), and
//	  │  in Redis Cluster CLUSTER INFO and NODES (cluster.go)
//	  └─ in Redis Cluster, on a master: a blocked WAIT that a demotion to
//	     replica unblocks (cluster.go)
//
// A fence relies on Redis queueing a write's notifications on this
// connection while it executes the write: once the write's reply has reached
// Cicada, a PING sent here comes back after all of that write's
// notifications. One PING releases every fence requested before it.
//
// # Goroutines
//
// Run owns the connections and the state not marked otherwise. Fence and
// Ready, Unapplied and
// the counters are safe from any goroutine (event loops call Fence and
// Unapplied).
package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/command"
	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/hotkeys"
	"github.com/cicada-proxy/cicada/resp"
)

// Pattern is the channel pattern Cicada subscribes to.
const Pattern = "__keyspace@*__:*"

// needed are the notify-keyspace-events classes Cicada relies on: K
// (keyspace channel) and every event class of A (g$lshzxetd in 7.0).
const needed = "Kg$lshzxetd"

// newKeyClass is the "new key" class, set too when the server's modules
// write keys (command.Learned.ModuleWrites): Redis 8.0's vector sets send
// no other notification when VADD creates a key (checkConfig).
const newKeyClass = "n"

// Errors reported through the logger and ReadyErr.
var (
	ErrNotConfigured = errors.New("upstream: notify-keyspace-events lacks classes Cicada needs and configure-notifications is off")
	ErrSilent        = errors.New("upstream: notification connection silent past the check interval")
)

// Config configures a Subscriber.
type Config struct {
	// Addr is Redis's host:port.
	Addr string
	// Username and Password authenticate both control connections; empty
	// means the default user without a password.
	Username, Password string
	// Configure allows CONFIG SET notify-keyspace-events to add missing
	// classes (never removing any).
	Configure bool
	// DialTimeout bounds each connection attempt.
	DialTimeout time.Duration
	// CheckInterval is how often liveness and the notification classes are
	// checked; 0 means 1 s. A connection silent for two intervals is
	// considered lost.
	CheckInterval time.Duration
	// CountersInterval is how often INFO commandstats is read for the
	// changes Redis sends no notification of (an ACL or requirepass change,
	// SWAPDB, DEBUG, REPLICAOF made on Redis directly): the longest such a
	// change can go unseen. 0 means CheckInterval. Cicada's default is
	// 100 ms: one INFO round trip, about 50 µs of Redis time (measured with
	// redis-benchmark on redis-server 7.0.15), ten times a second.
	CountersInterval time.Duration
	// Logger receives one line per state change.
	Logger *zap.Logger
	// AuthChanged, if set, is called (on the subscriber's goroutine, before
	// the cache is flushed) when CONFIG SET or an ACL change ran on Redis
	// from any client: who may read what may have changed.
	AuthChanged func()
	// Invalidated, if set, is called with the hash (hotcache.Hash) of the
	// key each keyspace notification names, after the cache has evicted
	// it: one call per write, expiry or eviction Redis reports
	// (detector.Admission.ObserveWrite counts them). Called on the
	// goroutine reading the subscription or on an event loop that took
	// the notification off the socket (Unapplied), one call at a time
	// (under the connection's read lock); it must not block.
	Invalidated func(keyHash uint64)
}

// Subscriber is the notification consumer. Create with New, start with Run.
type Subscriber struct {
	clusterWatch // Redis Cluster's view and the role watch (cluster.go)

	cfg   Config
	cache *hotcache.Cache
	log   *zap.Logger

	ready      atomic.Bool  // subscription confirmed, classes verified
	idle       atomic.Int64 // Redis's timeout (client idle limit) in ns, 0 = none
	outLimits  atomic.Pointer[outputLimits]
	ctlErr     atomic.Pointer[error] // why the control goroutine ended the session
	events     atomic.Uint64
	reconnects atomic.Uint64
	flushes    atomic.Uint64                   // flushes of Redis seen through tracking
	watch      atomic.Pointer[watchedConn]     // the notification connection, for Quiet
	commands   atomic.Pointer[command.Learned] // the server's commands beyond the built-in table (learnCommands)

	fmu       sync.Mutex       // guards the following
	requested uint64           // fences requested so far
	released  uint64           // fences released so far
	held      []*hotcache.Hold // the holds of fences released+1 ... requested, in order
	verify    bool             // the next PING waits for a check of the classes
	kick      chan struct{}

	onPong   func()           // tests: called by Run before it handles a pong
	down     *hotcache.Hold   // Run: the cache's suspension while not ready; nil when up
	counters map[string]int64 // Run (session, control): last INFO commandstats calls of watched commands
	// noACLList is set (Run: control) once ACL LIST was refused: the
	// counters alone are read from then on.
	noACLList bool
	// newSet (Run: session, then control) is set once the session has set
	// the n class (or warned that it cannot): checkConfig.
	newSet bool
}

// New returns a Subscriber for cache. The cache is suspended until the
// subscription is confirmed; Run must be started for it to ever resume.
func New(cfg Config, cache *hotcache.Cache) *Subscriber {
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = time.Second
	}
	if cfg.CountersInterval <= 0 {
		cfg.CountersInterval = cfg.CheckInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	s := &Subscriber{cfg: cfg, cache: cache, log: cfg.Logger, kick: make(chan struct{}, 1), down: cache.Hold()}
	s.clusterWatch = clusterWatch{cfg: &s.cfg, cache: cache, log: cfg.Logger, topo: cluster.NewTopology()}
	return s
}

// Ready reports whether notifications are flowing and the cache may answer.
func (s *Subscriber) Ready() bool { return s.ready.Load() }

// IdleTimeout returns Redis's timeout setting (how long a client may stay
// idle before Redis closes it), 0 for none or not read yet.
func (s *Subscriber) IdleTimeout() time.Duration { return time.Duration(s.idle.Load()) }

// OutputLimit returns Redis's client-output-buffer-limit for a normal
// client (pubsub=false) or a subscribed one: hard and soft limits in bytes
// and how long the soft one may be exceeded; zeros mean no limit (and are
// returned until Redis's setting has been read). Redis closes a client
// whose unsent replies reach the hard limit, or stay at or over the soft
// one for longer than softFor.
func (s *Subscriber) OutputLimit(pubsub bool) (hard, soft int64, softFor time.Duration) {
	l := s.outLimits.Load()
	if l == nil {
		return 0, 0, 0
	}
	c := l[0]
	if pubsub {
		c = l[1]
	}
	return c[0], c[1], time.Duration(c[2]) * time.Second
}

// Commands is what the server's COMMAND reply adds to the built-in command
// table, read at the start of every subscription session, before the cache
// may answer (nil, the built-in table alone, when COMMAND was refused or
// before the first session). Safe from any goroutine.
func (s *Subscriber) Commands() *command.Learned { return s.commands.Load() }

// Events returns the keyspace notifications received since start.
func (s *Subscriber) Events() uint64 { return s.events.Load() }

// Flushes returns how many FLUSHALL/FLUSHDB Redis reported (any client).
func (s *Subscriber) Flushes() uint64 { return s.flushes.Load() }

// Reconnects returns how many times the subscription was re-established.
func (s *Subscriber) Reconnects() uint64 { return s.reconnects.Load() }

// Unapplied appends to dst the hotcache.Hash of each key whose keyspace
// notification has reached Cicada's socket but is not applied to the cache
// yet. all=true means it cannot say which keys (a flush is queued, a read
// is applying notifications, more is queued than fits in scratch, the
// subscription is down): then no cached reply may be trusted to be newer
// than every acknowledged write. Otherwise a cached reply of any other key
// is no older than any write Redis acknowledged before the call, whoever
// sent it (within Redis's own ordering: it writes the writer's reply
// before the notification, µs apart when idle, up to ms under load). scratch is the caller's buffer for the peek;
// 16 KiB holds about 250 notifications.
//
// It costs one recv(MSG_PEEK) system call (about 0.35 µs here) and, only
// when something is queued, a scan of it. Keyspace notifications at the
// head of the queue are applied then and there (one read(2), and the
// Invalidated calls), unless the goroutine reading the subscription holds
// the connection at that moment. Safe from any goroutine; never blocks.
func (s *Subscriber) Unapplied(dst []uint64, scratch []byte) (hashes []uint64, all bool) {
	w := s.watch.Load()
	if w == nil {
		return dst, true
	}
	hashes, all = w.unapplied(dst, scratch)
	if !all && !s.roleSettled(scratch) {
		all = true // a master's role may have changed (cluster.go)
	}
	return hashes, all
}

// Fence takes over h (the caller's hold, taken before it sent a write
// whose keys it cannot name) and releases it once every notification of
// writes whose replies have already arrived has been processed. Never
// blocks.
func (s *Subscriber) Fence(h *hotcache.Hold) {
	s.fmu.Lock()
	s.requested++
	s.held = append(s.held, h)
	s.fmu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// VerifyFence is Fence, but the notification classes are checked again
// (CONFIG GET) before the fence can pass: for CONFIG SET, which may have
// removed them.
func (s *Subscriber) VerifyFence(h *hotcache.Hold) {
	s.fmu.Lock()
	s.verify = true
	s.fmu.Unlock()
	s.Fence(h)
}

// releaseUpTo releases the hold of every fence numbered <= n not yet
// released.
func (s *Subscriber) releaseUpTo(n uint64) {
	s.fmu.Lock()
	if n > s.requested {
		n = s.requested
	}
	var done []*hotcache.Hold
	if n > s.released {
		k := n - s.released
		s.released = n
		done = slices.Clone(s.held[:k])
		s.held = slices.Delete(s.held, 0, int(k))
	}
	s.fmu.Unlock()
	for _, h := range done {
		h.Release()
	}
}

func (s *Subscriber) requestedNow() uint64 {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	return s.requested
}

// Run maintains the subscription until ctx is done. It returns ctx.Err().
func (s *Subscriber) Run(ctx context.Context) error {
	backoff := 50 * time.Millisecond
	var lastErr string
	for {
		err := s.session(ctx)
		if ctx.Err() != nil {
			s.ready.Store(false)
			return ctx.Err()
		}
		if s.setDown(err) {
			lastErr = "" // logged as lost: a failure of the next attempt is news
		} else if err != nil && err.Error() != lastErr && ctx.Err() == nil {
			// Once per distinct failure, so a Redis that stays down or
			// refuses Cicada's credentials is visible without flooding.
			lastErr = err.Error()
			s.log.Warn("keyspace subscription failed; retrying", zap.Error(err))
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Full jitter, so sidecars restarting together do not reconnect together.
		d := time.Duration(rand.Int64N(int64(backoff))) + backoff/2
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
		}
		if backoff < 2*time.Second {
			backoff *= 2
		}
		if err == nil {
			backoff = 50 * time.Millisecond
		}
	}
}

// ACLUser reads ACL GETUSER name from Redis with Cicada's credentials, on
// a connection of its own (CLIENT SETNAME cicada-acl) opened for this one
// request and closed after it: the proxy asks only when it answers a
// HOTKEYS command whose user it has not checked since the last ACL change.
// Cicada's upstream user needs ACL GETUSER for it. Safe from any
// goroutine; it blocks for one connection and round trip (bounded by ctx).
func (s *Subscriber) ACLUser(ctx context.Context, name string) (hotkeys.UserACL, error) {
	opts := s.options("cicada-acl")
	opts.ReadTimeout, opts.WriteTimeout = s.cfg.DialTimeout, s.cfg.DialTimeout
	c := redis.NewClient(opts)
	defer c.Close()
	v, err := c.Do(ctx, "ACL", "GETUSER", name).Result()
	if err == redis.Nil {
		return hotkeys.UserACL{}, nil
	}
	if err != nil {
		return hotkeys.UserACL{}, fmt.Errorf("upstream: ACL GETUSER: %w", err)
	}
	return parseGetUser(v)
}

// setDown suspends the cache (once) and marks the subscriber not ready.
// It reports whether the subscription was up (and the loss was logged).
func (s *Subscriber) setDown(err error) bool {
	wasUp := s.ready.Swap(false)
	if wasUp {
		s.log.Warn("keyspace notifications lost; cache suspended", zap.Error(err))
	}
	if s.down == nil {
		s.down = s.cache.Hold()
	}
	return wasUp
}

func (s *Subscriber) options(name string) *redis.Options {
	return &redis.Options{
		Addr:            s.cfg.Addr,
		Username:        s.cfg.Username,
		Password:        s.cfg.Password,
		ClientName:      name,
		Protocol:        2,
		DialTimeout:     s.cfg.DialTimeout,
		ReadTimeout:     2 * s.cfg.CheckInterval,
		WriteTimeout:    2 * s.cfg.CheckInterval,
		MaxRetries:      -1,
		PoolSize:        1,
		DisableIdentity: true,
	}
}

// session runs one subscription from connect to failure.
func (s *Subscriber) session(ctx context.Context) error {
	ctl := redis.NewClient(s.options("cicada-control"))
	defer ctl.Close()
	s.ctlErr.Store(nil)
	s.counters = nil // the flush at up() covers anything before the baseline
	s.newSet = false
	// The commands first: whether a module writes decides the classes.
	if err := s.learnCommands(ctx, ctl); err != nil {
		return err
	}
	if err := s.checkRedis(ctx, ctl); err != nil {
		return err
	}
	var subID atomic.Int64
	opts := s.options("cicada-keyspace")
	s.watch.Store(nil)
	opts.Dialer = dialWatched(&net.Dialer{Timeout: s.cfg.DialTimeout, KeepAlive: 5 * time.Minute}, s)
	opts.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		id, err := cn.ClientID(ctx).Result()
		subID.Store(id)
		return err
	}
	sub := redis.NewClient(opts)
	defer sub.Close()
	ps := sub.PSubscribe(ctx, Pattern)
	defer ps.Close()

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var pinger sync.WaitGroup
	defer pinger.Wait()
	defer cancel()
	// A blocked receive does not watch its context: closing the
	// subscription ends it at once when Run is stopped.
	stopped := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stopped()

	var tracking *redis.Client // flush detection, nil when unavailable
	defer func() {
		if tracking != nil {
			_ = tracking.Close()
		}
	}()
	lastHeard := time.Now()
	confirmed := 0 // subscriptions confirmed: the pattern, then the tracking channel
	for {
		msg, err := ps.ReceiveTimeout(sctx, s.cfg.CheckInterval)
		if err != nil {
			var ne interface{ Timeout() bool }
			switch {
			case errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil:
				// The control goroutine pings every interval: silence
				// means the connection is dead.
				if time.Since(lastHeard) > 3*s.cfg.CheckInterval {
					return ErrSilent
				}
				continue
			}
			if e := s.controlErr(); e != nil {
				return e
			}
			return fmt.Errorf("upstream: receive: %w", err)
		}
		lastHeard = time.Now()
		switch m := msg.(type) {
		case *redis.Message:
			// Keyspace notifications and flushes were applied as they
			// were read and are not handed on (watch.go): this is a
			// tracking message for a key under trackingPrefix, none of
			// which is cached.
		case *redis.Pong:
			if s.onPong != nil {
				s.onPong()
			}
			if n, err := strconv.ParseUint(m.Payload, 10, 64); err == nil {
				s.releaseUpTo(n)
			}
		case *redis.Subscription:
			switch {
			case confirmed == 0 && m.Kind == "psubscribe":
				confirmed = 1
				if err := ps.Subscribe(ctx, TrackingChannel); err != nil {
					return fmt.Errorf("upstream: subscribe %s: %w", TrackingChannel, err)
				}
			case confirmed == 1 && m.Kind == "subscribe":
				confirmed = 2
				if tracking, err = watchFlushes(ctx, s.options("cicada-flush-watch"), subID.Load()); err != nil {
					s.log.Warn("FLUSHALL/FLUSHDB sent to Redis directly will not be detected", zap.Error(err))
				}
				s.up()
				pinger.Add(2)
				go func() {
					defer pinger.Done()
					s.control(sctx, ps, ctl, tracking)
				}()
				go func() {
					defer pinger.Done()
					s.watchRole(sctx)
				}()
			default:
				// go-redis re-subscribed on a new connection: events may
				// have been lost in between.
				return errors.New("upstream: subscription re-established underneath")
			}
		}
	}
}

// learnCommands reads INFO server and COMMAND and publishes what they add
// to the built-in table (Commands). A refusal (an ACL without +command or
// +info) leaves the built-in table alone, logged once per session; a
// connection failure ends the session.
func (s *Subscriber) learnCommands(ctx context.Context, ctl *redis.Client) error {
	info, err := ctl.Info(ctx, "server").Result()
	if err != nil && !isRedisError(err) {
		return fmt.Errorf("upstream: INFO server: %w", err)
	}
	reply, err := ctl.Do(ctx, "command").Result()
	if err != nil && !isRedisError(err) {
		return fmt.Errorf("upstream: COMMAND: %w", err)
	}
	if err != nil {
		reply = []any{} // refused: the version alone
	}
	l, lerr := command.Learn(reply, info)
	if lerr != nil {
		l, _ = command.Learn([]any{}, info)
	}
	if err == nil {
		err = lerr
	}
	old := s.commands.Swap(l)
	if err != nil {
		s.log.Warn("COMMAND not usable: commands newer than Redis "+command.TableVersion+" are treated as unknown (evicting through a fence)",
			zap.Error(err))
		return nil
	}
	if old == nil || len(old.Added()) != len(l.Added()) {
		name, version := l.Server()
		s.log.Info("commands learned from the server", zap.String("server", name), zap.String("version", version),
			zap.Int("beyond built-in", len(l.Added())), zap.Strings("built-in changed", l.Overridden()),
			zap.Bool("hash-field TTLs", l.FieldTTL()))
	}
	return nil
}

// isRedisError reports whether err is a reply of Redis (NOPERM, ERR), not a
// connection failure.
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// up flushes the cache (notifications may have been missed while down),
// releases every fence requested so far, and resumes the cache.
func (s *Subscriber) up() {
	s.cache.Flush()
	s.releaseUpTo(s.requestedNow())
	if s.down != nil {
		s.down.Release()
		s.down = nil
	}
	if s.reconnects.Add(1) > 1 {
		s.log.Info("keyspace notifications re-established; cache flushed")
	} else {
		s.log.Info("keyspace notifications established")
	}
	s.ready.Store(true)
}

// parseChannel splits "__keyspace@<db>__:<key>"; key aliases ch.
func parseChannel(ch []byte) (db int, key []byte, ok bool) {
	rest, found := bytes.CutPrefix(ch, []byte("__keyspace@"))
	if !found {
		return 0, nil, false
	}
	end := bytes.Index(rest, []byte("__:"))
	if end <= 0 || end > 9 {
		return 0, nil, false
	}
	n, ok := resp.ParseInt(rest[:end])
	if !ok || n < 0 {
		return 0, nil, false
	}
	return int(n), rest[end+3:], true
}
