package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"go.uber.org/zap"

	"github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/detector"
	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/hotkeys"
)

// Errors returned by New and Run.
var (
	ErrLoops    = errors.New("proxy: loops must be between 1 and the detector's loop count")
	ErrListen   = errors.New("proxy: listen address is empty")
	ErrUpstream = errors.New("proxy: upstream address is empty")
	ErrStarted  = errors.New("proxy: server already started")
)

// Defaults of Config, which the binary's settings take as their defaults
// too (cmd/cicada), so each is written once.
const (
	DefaultDialTimeout      = 2 * time.Second
	DefaultMaxClients       = 10000   // Redis's maxclients default
	DefaultQueryBufferLimit = 1 << 30 // bytes: Redis's client-query-buffer-limit default (1gb)
)

// Config configures a Server.
type Config struct {
	// Listen is the client address, "host:port" (":6380").
	Listen string
	// Upstream is Redis's address, "host:port".
	Upstream string
	// Loops is the number of gnet event loops, >= 1 and at most the
	// detector's Loops().
	Loops int
	// DialTimeout bounds the upstream connection attempt made for each
	// client; 0 means DefaultDialTimeout.
	DialTimeout time.Duration
	// QueryBufferLimit is how many bytes a client's requests may hold in
	// Cicada until Redis answers them before the client is closed, like
	// Redis's client-query-buffer-limit: requests unparsed or waiting
	// behind a paused one, bytes queued on the upstream connection, and
	// the bookkeeping of requests in flight (see session.backlog); 0 means
	// DefaultQueryBufferLimit.
	QueryBufferLimit int64
	// MaxClients is how many client connections may be open at once, like
	// Redis's maxclients: one more is answered "-ERR max number of clients
	// reached" and closed. 0 means DefaultMaxClients. Each client
	// needs two descriptors (its own and its upstream connection), and the
	// proxy some besides: keep it at most MaxClientsFor(the open-file
	// limit, Loops, the process's other descriptors), or accept fails and
	// gnet stops serving.
	MaxClients int
	// MaxClientMemory bounds the bytes Cicada holds for clients: replies
	// they have not read and requests Redis has not answered, counted
	// over connections holding at least heavyBytes, as Redis 7's
	// maxmemory-clients bounds client memory. Over it, the event loop that
	// sees it closes its clients holding the most. 0 means no bound.
	MaxClientMemory int64
	// SweepInterval is how often cold and expired replies are dropped;
	// 0 means 250 ms.
	SweepInterval time.Duration
	// Logger receives state changes; nil means no logging.
	Logger *zap.Logger
	// ACLUser reads a user's ACL rules from Redis (ACL GETUSER; see
	// keyspace.Subscriber.ACLUser), so that HOTKEYS, which Cicada answers
	// itself, is refused to a connection Redis 8.6 would refuse it to. It
	// is called off the event loops, at most once per user between ACL
	// changes. nil: HOTKEYS is answered without an ACL check (tests,
	// embedders without ACL users).
	ACLUser func(ctx context.Context, name string) (hotkeys.UserACL, error)
	// Multiplex sends the requests of clients whose connection is in a
	// state an upstream connection can share (a fresh connection's, or
	// another db or protocol) on a few upstream connections per event
	// loop (lanes, lane.go), and gives a client a connection of its own
	// from its first request that needs one (command.Sharing). false: one
	// upstream connection per client, dialed when it connects.
	Multiplex bool
	// AddrMap rewrites the node addresses Redis Cluster announces in
	// CLUSTER SLOTS, SHARDS, NODES, REPLICAS and -MOVED/-ASK replies into
	// the sidecars' (cluster.AddrMap); nil or empty rewrites nothing.
	AddrMap *cluster.AddrMap
}

// Server is the proxy: a gnet engine plus the shared cache, detector and
// notification subscriber.
type Server struct {
	gnet.BuiltinEventEngine

	convEnv // what every conversation shares (conv_state.go)

	cfg      Config
	counters Counters
	hk       *hotkeys.Tracker // HOTKEYS session state (hotkeys.go)
	perms    permCache        // ACL users checked for HOTKEYS (hotkeys_acl.go)
	log      *zap.Logger
	dialer   net.Dialer

	started  atomic.Bool
	draining atomic.Bool
	booted   chan struct{}
	engine   gnet.Engine // set in OnBoot, before booted is closed

	loopsMu sync.Mutex // guards the following
	loops   map[gnet.EventLoop]*loopState
	order   []*loopState

	start time.Time

	closedFor      [closeReasons]atomic.Uint64 // clients closed by Cicada, by reason
	clientHeld     atomic.Int64                // bytes the loops' heavy clients hold, and evicted ones' not yet collected (limits.go)
	uncollected    atomic.Int64                // bytes released by evicted clients, awaiting collected's next collection
	collecting     atomic.Bool                 // collected's goroutine runs
	conns          atomic.Int64                // client connections open
	connsTotal     atomic.Uint64
	upstreamErrors atomic.Uint64 // failed dials and invalid replies
	dials          chan struct{} // one token per upstream dial in progress, DialsInFlight at most
	aclLookups     chan struct{} // one token per ACL GETUSER lookup in progress, ACLLookups at most
	dialFailures   burstLog      // failed dials, logged once per burst
}

// New returns a server over the shared cache, admission (whose read
// detector the loops count reads in) and control plane. It makes the
// cache evict by adm's saving (hotcache.Cache.SetRank).
func New(cfg Config, cache *hotcache.Cache, adm *detector.Admission, up Upstream) (*Server, error) {
	det := adm.Reads()
	switch {
	case cfg.Loops < 1 || cfg.Loops > det.Loops():
		return nil, ErrLoops
	case cfg.Listen == "":
		return nil, ErrListen
	case cfg.Upstream == "":
		return nil, ErrUpstream
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.MaxClients <= 0 {
		cfg.MaxClients = DefaultMaxClients
	}
	if cfg.QueryBufferLimit <= 0 {
		cfg.QueryBufferLimit = DefaultQueryBufferLimit
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 250 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cache.SetRank(adm.Saved)
	return &Server{
		convEnv: convEnv{cache: cache, det: det, adm: adm, fences: up, settings: up, topo: up.Cluster(), ids: newIdentities(),
			addrMap: cfg.AddrMap, multiplex: cfg.Multiplex},
		cfg:        cfg,
		counters:   up,
		hk:         hotkeys.NewTracker(det.Loops(), nil, nil),
		log:        cfg.Logger,
		dialer:     net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 15 * time.Second},
		booted:     make(chan struct{}),
		dials:      make(chan struct{}, DialsInFlight),
		aclLookups: make(chan struct{}, ACLLookups),
		start:      time.Now(),
		loops:      map[gnet.EventLoop]*loopState{},
	}, nil
}

// Run serves clients until Shutdown; it blocks. It also drives the
// detector's window and the cache's sweep.
func (srv *Server) Run() error {
	if srv.started.Swap(true) {
		return ErrStarted
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		srv.janitor(stop)
	}()
	defer func() { close(stop); wg.Wait() }()
	// gnet reports a busy port as "setsockopt: bad file descriptor"; a
	// plain listen first gives the real reason. It also keeps a second
	// Cicada from sharing the port through SO_REUSEPORT (below): a socket
	// without it cannot bind a port bound with it.
	probe, err := net.Listen("tcp", srv.cfg.Listen)
	if err != nil {
		close(srv.booted)
		return fmt.Errorf("proxy: %w", err)
	}
	_ = probe.Close()
	// Each loop accepts on a listener of its own (SO_REUSEPORT; the kernel
	// spreads connections over them) and runs OnOpen before it accepts
	// the next, so a client refused at maxclients is closed before another
	// is accepted. With one acceptor for all loops, a burst of refused
	// clients held a descriptor each until their loop got to them, until
	// accept(2) failed with EMFILE, which stops gnet's engine.
	err = gnet.Run(srv, "tcp://"+srv.cfg.Listen,
		gnet.WithNumEventLoop(srv.cfg.Loops),
		gnet.WithReuseAddr(true),
		gnet.WithReusePort(true),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithTCPKeepAlive(time.Minute),
		gnet.WithLogger(srv.log.Sugar()),
	)
	if err != nil {
		select {
		case <-srv.booted:
		default:
			close(srv.booted)
		}
		return fmt.Errorf("proxy: serve %s: %w", srv.cfg.Listen, err)
	}
	return nil
}

// Booted is closed once the listener is up (or Run failed).
func (srv *Server) Booted() <-chan struct{} { return srv.booted }

// janitor advances the detectors every sub-window, sweeps the cache and
// sets the admission bar from it (detector.Admission.Rebar), ends a
// HOTKEYS session whose DURATION has passed, and has the loops shrink
// their idle sessions. test/cachesim replays its cache and admission
// steps (Advance, Sweep with Cold, Rebar) on a virtual clock:
// change both together.
func (srv *Server) janitor(stop <-chan struct{}) {
	tick := time.NewTicker(detector.Window / detector.SubWindows)
	defer tick.Stop()
	lastSweep, lastShrink := time.Now(), time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			srv.clock.Store(int64(now.Sub(srv.start)))
			srv.idleRefresh.Store(int64(srv.settings.IdleTimeout() / 2))
			srv.adm.Advance(now)
			srv.hk.Tick() // DURATION's auto-stop, as Redis's cron does
			if now.Sub(lastSweep) >= srv.cfg.SweepInterval {
				lastSweep = now
				var cold func(keyHash, readHash uint64) bool
				if srv.adm.MayCold() { // else none is cold: only expiry to sweep
					cold = srv.adm.Cold
				}
				srv.cache.Sweep(cold)
				srv.adm.Rebar(srv.cache.Full(detector.FullAt), srv.cache.Replies())
			}
			if now.Sub(lastShrink) >= shrinkEvery {
				lastShrink = now
				srv.sweepLoops()
			}
		}
	}
}

// Shutdown stops accepting clients, waits (bounded by ctx) until no
// forwarded request awaits its reply and no upstream dial is in progress,
// then closes every connection.
func (srv *Server) Shutdown(ctx context.Context) error {
	srv.draining.Store(true)
	<-srv.booted
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
wait:
	// Nothing is dialed once draining; a dial in progress ends before the
	// engine stops (gnet's enrollment waits for the loop to run it).
	for srv.inflight() > 0 || len(srv.dials) > 0 {
		select {
		case <-ctx.Done():
			srv.log.Warn("shutdown timeout: closing connections with replies outstanding", zap.Int64("requests", srv.inflight()))
			break wait
		case <-poll.C:
		}
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.engine.Stop(stopCtx)
}

func (srv *Server) inflight() int64 {
	var n int64
	for _, l := range srv.loopList() {
		n += l.stats.inflight.Load()
	}
	return n
}

// AuthRulesChanged makes connections opened from now on prove again what
// they may read, for a change of requirepass or ACL users made outside
// Cicada. Safe from any goroutine.
func (srv *Server) AuthRulesChanged() { srv.ids.rulesChanged() }

// OnBoot records the engine. Runs before the loops start.
func (srv *Server) OnBoot(eng gnet.Engine) gnet.Action {
	srv.engine = eng
	close(srv.booted)
	srv.log.Info("listening", zap.String("addr", srv.cfg.Listen), zap.String("upstream", srv.cfg.Upstream), zap.Int("loops", srv.cfg.Loops))
	return gnet.None
}

// loopFor returns the state of event loop el, creating it on first use.
func (srv *Server) loopFor(el gnet.EventLoop) *loopState {
	srv.loopsMu.Lock()
	defer srv.loopsMu.Unlock()
	l, ok := srv.loops[el]
	if !ok {
		l = &loopState{loopEnv: loopEnv{idx: len(srv.order) % srv.det.Loops(), stats: &loopStats{}, peek: make([]byte, unappliedPeek)},
			evl: el, heavy: map[*session]struct{}{}}
		srv.loops[el] = l
		srv.order = append(srv.order, l)
	}
	return l
}

func (srv *Server) loopList() []*loopState {
	srv.loopsMu.Lock()
	defer srv.loopsMu.Unlock()
	return append([]*loopState(nil), srv.order...)
}

// OnOpen starts a session for a client (on a lane, or dialing Redis off
// the loop) or links an enrolled upstream connection to its session,
// lane or loop (a spare).
func (srv *Server) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	switch v := c.Context().(type) {
	case *upstreamLink:
		return nil, v.s.onUpstreamOpen(c)
	case *lane:
		return nil, v.onOpen(c)
	case *spare:
		return nil, v.onOpen(c, srv)
	}
	if srv.draining.Load() {
		return nil, gnet.Close
	}
	if srv.conns.Load() >= int64(srv.cfg.MaxClients) {
		srv.closedFor[closeMaxClients].Add(1)
		return maxClientsReply, gnet.Close // Redis's words and behaviour
	}
	s := newSession(srv, srv.loopFor(c.EventLoop()), c)
	s.parser.SetNulVisible(srv.settings.Commands().NulVisibleInHeaders())
	s.setFresh()
	s.upLink = &upstreamLink{s: s}
	s.el.register(s)
	c.SetContext(s)
	srv.conns.Add(1)
	srv.connsTotal.Add(1)
	s.lastRead = srv.clock.Load()
	if srv.cfg.Multiplex {
		// On the lane of a fresh connection's state (lane.go), waiting for
		// it if it is not open yet: a client that connects while Redis is
		// down is closed as the lane's dial fails, as its own dial would.
		s.shared, s.gen = true, s.freshGen
		s.parser.SetHold(laneHold)
		s.el.switchLane(s, s.shareKey())
		return nil, gnet.None
	}
	s.upLife = upDialing
	go s.dial()
	return nil, gnet.None
}

// OnTraffic dispatches to the client or upstream side of a session.
func (srv *Server) OnTraffic(c gnet.Conn) gnet.Action {
	switch v := c.Context().(type) {
	case *session:
		return v.onClientTraffic()
	case *upstreamLink:
		return v.s.onUpstreamTraffic()
	case *lane:
		return v.onTraffic()
	case *spare:
		return v.onTraffic()
	case *handover:
		return v.onTraffic()
	}
	return gnet.Close
}

// OnClose tears down the session of either side (or, for a client that
// ended its side with work left for Redis, hands it to a halfConn).
func (srv *Server) OnClose(c gnet.Conn, err error) gnet.Action {
	switch v := c.Context().(type) {
	case *session:
		v.onClientClose(c, err)
	case *upstreamLink:
		v.s.onUpstreamClose(c)
	case *lane:
		v.onClose(c)
	case *spare:
		v.onClose()
	case *handover:
		v.onClose()
	}
	return gnet.None
}

// sweepLoops has every event loop shrink its idle sessions. From the
// janitor.
func (srv *Server) sweepLoops() {
	srv.loopsMu.Lock()
	loops := make(map[gnet.EventLoop]*loopState, len(srv.loops))
	for el, l := range srv.loops {
		loops[el] = l
	}
	srv.loopsMu.Unlock()
	now, timeout := srv.clock.Load(), srv.settings.IdleTimeout()
	for el, l := range loops {
		// Fails only once the engine is stopping: nothing to shrink then.
		_ = el.Execute(context.Background(), gnet.RunnableFunc(func(context.Context) error {
			l.shrinkIdle(now, timeout)
			return nil
		}))
	}
}
