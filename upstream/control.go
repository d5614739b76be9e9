package upstream

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// watched are commands that change data without a keyspace notification
// for each key, counted by INFO commandstats whoever runs them (a script
// included): SWAPDB (nothing reports it), FLUSHALL/FLUSHDB (also reported
// through client tracking, see flushwatch.go), DEBUG (RELOAD and friends),
// REPLICAOF/SLAVEOF (a full resynchronization loads a new dataset).
// CONFIG SET too: notify-keyspace-events removed and restored between two
// checks would otherwise go unseen. A CONFIG RESETSTAT could bring a
// counter back to a value already read, so total_commands_processed, which
// only a reset lowers, is watched as well.
var watched = []string{"swapdb", "flushall", "flushdb", "debug", "replicaof", "slaveof", "config|set", "config|resetstat",
	"acl|setuser", "acl|deluser", "acl|load"}

// authWatched are the watched commands that may change who may read what
// (requirepass, ACL users): besides the flush, AuthChanged is called,
// unless ACL LIST, which Cicada may read, shows the rules unchanged.
var authWatched = map[string]bool{"config|set": true, "config|resetstat": true,
	"acl|setuser": true, "acl|deluser": true, "acl|load": true, aclList: true}

// totalCommands is the INFO stats field a CONFIG RESETSTAT lowers.
const totalCommands = "total_commands_processed"

// aclList is the key under which readCounters records a hash of ACL LIST
// (every user's rules and password hashes, requirepass included): unlike
// the counters, which a CONFIG RESETSTAT can bring back to values already
// read, it changes exactly when the rules do.
const aclList = "acl list"

// control runs beside the receive loop of one subscription: every
// CountersInterval it reads the command counters (checkCounters); every
// interval it checks Redis (checkRedis), pings the flush-watch connection and the
// subscription (so a dead one is noticed, and Redis's timeout never closes
// them); on a fence request it checks the command counters (and the
// notification classes if asked) and then sends the PING whose PONG
// releases the fences. A failure closes the subscription, which ends the
// session and suspends the cache.
func (s *Subscriber) control(ctx context.Context, ps *redis.PubSub, ctl, tracking *redis.Client) {
	fail := func(err error) {
		s.ctlErr.Store(&err)
		_ = ps.Close()
	}
	tick := time.NewTicker(s.interval())
	defer tick.Stop()
	counters := time.NewTicker(s.cfg.CountersInterval)
	defer counters.Stop()
	var sent uint64
	var lastKick time.Time
	for {
		periodic := false
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-s.topo.Kicked():
			// At most one re-read per kickGap: a client can fake
			// redirects (a script's error reply), and must not make
			// Cicada flood Redis with CLUSTER NODES.
			if d := time.Until(lastKick.Add(kickGap)); d > 0 {
				time.Sleep(d)
			}
			lastKick = time.Now()
			if err := s.checkCluster(ctx, ctl); err != nil {
				fail(err)
				return
			}
		case <-counters.C:
			if err := s.checkCounters(ctx, ctl); err != nil {
				fail(err)
				return
			}
		case <-tick.C:
			periodic = true
		}
		if periodic {
			if err := s.checkRedis(ctx, ctl); err != nil {
				fail(err)
				return
			}
			if tracking != nil {
				if err := tracking.Ping(ctx).Err(); err != nil {
					fail(fmt.Errorf("upstream: flush-watch connection: %w", err))
					return
				}
			}
			if err := ps.Ping(ctx, "alive"); err != nil {
				return // the receive loop sees the broken connection
			}
			tick.Reset(s.interval())
		}
		s.fmu.Lock()
		n, verify := s.requested, s.verify
		s.verify = false
		s.fmu.Unlock()
		if n == sent {
			continue
		}
		// The writes being fenced have run: anything they did that sends
		// no notification shows in the counters now.
		check := s.checkCounters
		if verify {
			check = s.checkRedis
		}
		if err := check(ctx, ctl); err != nil {
			fail(err)
			return
		}
		if err := ps.Ping(ctx, strconv.FormatUint(n, 10)); err != nil {
			return
		}
		sent = n
	}
}

// controlErr returns the error that made the control goroutine close the
// subscription, if it did.
func (s *Subscriber) controlErr() error {
	if p := s.ctlErr.Load(); p != nil {
		return *p
	}
	return nil
}

// interval is the check period: CheckInterval, or less when Redis's idle
// timeout would otherwise close Cicada's quiet connections.
func (s *Subscriber) interval() time.Duration {
	d := s.cfg.CheckInterval
	if idle := s.IdleTimeout(); idle > 0 && idle/2 < d {
		d = idle / 2
	}
	return d
}

// checkRedis checks the configuration (checkConfig) and the command
// counters (checkCounters).
func (s *Subscriber) checkRedis(ctx context.Context, ctl *redis.Client) error {
	if _, err := s.checkConfig(ctx, ctl, false); err != nil {
		return err
	}
	return s.checkCounters(ctx, ctl)
}

// checkConfig checks notify-keyspace-events, adds the missing classes when
// allowed (flushing the cache: writes in the gap were not notified; set
// reports that it did), and reads timeout and client-output-buffer-limit.
// changed: a CONFIG SET or RESETSTAT ran since the last check.
func (s *Subscriber) checkConfig(ctx context.Context, ctl *redis.Client, changed bool) (set bool, err error) {
	get := redis.NewMapStringStringCmd(ctx, "config", "get", "notify-keyspace-events", "timeout",
		"client-output-buffer-limit")
	_ = ctl.Process(ctx, get)
	cfg, err := get.Result()
	if err != nil {
		return false, fmt.Errorf("upstream: CONFIG GET: %w", err)
	}
	cur, ok := cfg["notify-keyspace-events"]
	if !ok {
		return false, fmt.Errorf("upstream: CONFIG GET: no notify-keyspace-events")
	}
	missing := missingClasses(cur, needed)
	// A server whose modules write needs n (new key) too, which CONFIG GET
	// never shows (Redis 7.0 to 8.0 leave it out of the text): Cicada sets
	// it at the start of a session and after any CONFIG SET, and cannot
	// verify it. Without it, only a cached nil reply could be stale (a key
	// a module creates on a direct connection), so nil replies are not
	// cached then.
	modules := s.Commands().ModuleWrites()
	assertNew := modules && s.cfg.Configure && (changed || !s.newSet)
	nils := !modules || s.cfg.Configure
	if !nils && !s.newSet {
		s.newSet = true // logged once a session
		s.log.Warn("configure-notifications is off and the server's modules write keys without keyspace notifications: nil replies are not cached")
	}
	if missing != "" && !s.cfg.Configure {
		return false, fmt.Errorf("%w (missing %q)", ErrNotConfigured, missing)
	}
	if missing != "" || assertNew {
		merged := cur + missing
		if assertNew {
			merged += newKeyClass
		}
		if err := ctl.ConfigSet(ctx, "notify-keyspace-events", merged).Err(); err != nil {
			return false, fmt.Errorf("upstream: CONFIG SET notify-keyspace-events %q: %w", merged, err)
		}
		s.newSet = s.newSet || assertNew
		// Writes made while the classes were missing sent no notification.
		s.cache.Flush()
		if missing != "" {
			s.log.Info("notify-keyspace-events extended; cache flushed", zap.String("was", cur), zap.String("added", missing))
		}
		if assertNew && !changed {
			s.log.Info("notify-keyspace-events n (new key) set too: the server's modules write keys without keyspace notifications (CONFIG GET does not show n)")
		}
		after, err := ctl.ConfigGet(ctx, "notify-keyspace-events").Result()
		if err != nil {
			return true, fmt.Errorf("upstream: CONFIG GET notify-keyspace-events: %w", err)
		}
		if missing := missingClasses(after["notify-keyspace-events"], needed); missing != "" {
			return true, fmt.Errorf("upstream: notify-keyspace-events still lacks %q after CONFIG SET", missing)
		}
		set = true
	}
	s.cache.SetNilReplies(nils)
	if n, err := strconv.ParseInt(cfg["timeout"], 10, 64); err == nil && n >= 0 {
		s.idle.Store(int64(time.Duration(n) * time.Second))
	}
	if l, ok := parseOutputLimits(cfg["client-output-buffer-limit"]); ok {
		s.outLimits.Store(&l)
	}
	return set, nil
}

// outputLimits are Redis's client-output-buffer-limit for the normal and
// pubsub classes: [class][hard bytes, soft bytes, soft seconds], 0 = none.
type outputLimits [2][3]int64

// parseOutputLimits parses CONFIG GET client-output-buffer-limit's value,
// "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60".
func parseOutputLimits(v string) (l outputLimits, ok bool) {
	f := strings.Fields(v)
	if len(f)%4 != 0 {
		return l, false
	}
	seen := 0
	for i := 0; i < len(f); i += 4 {
		var class int
		switch f[i] {
		case "normal":
			class = 0
		case "pubsub":
			class = 1
		default:
			continue
		}
		for j := range 3 {
			n, err := strconv.ParseInt(f[i+1+j], 10, 64)
			if err != nil || n < 0 {
				return l, false
			}
			l[class][j] = n
		}
		seen++
	}
	return l, seen == 2
}

// checkCounters reads INFO commandstats and flushes the cache when a
// watched command ran since the last reading (or the counters were reset).
// After a CONFIG SET or CONFIG RESETSTAT it checks the configuration too
// (checkConfig) before it returns: a fence must not pass on a
// subscription that a removed notify-keyspace-events class has made deaf.
// The cache is flushed once for both: where checkConfig sets the classes
// again (it does after every CONFIG SET on a server whose modules write),
// its flush comes after the reading and covers what the reading showed. A
// second flush a few ms after the first emptied the cache of keys refilled
// in between, for nothing (TestConfigSetKeepsIdentities on Redis 8.0).
func (s *Subscriber) checkCounters(ctx context.Context, ctl *redis.Client) error {
	now, err := s.readCounters(ctx, ctl)
	if err != nil {
		return err
	}
	configChanged := s.counters != nil && (now["config|set"] != s.counters["config|set"] ||
		now["config|resetstat"] != s.counters["config|resetstat"] || now[totalCommands] < s.counters[totalCommands])
	flush := s.compareCounters(now)
	s.counters = now
	if !configChanged {
		if flush {
			s.cache.Flush()
		}
		return nil
	}
	set, err := s.checkConfig(ctx, ctl, true)
	if flush && !set {
		s.cache.Flush()
	}
	if err != nil || !set {
		return err
	}
	// Cicada's own CONFIG SET moved config|set by one; anything else that
	// ran meanwhile flushes again.
	after, err := s.readCounters(ctx, ctl)
	if err != nil {
		return err
	}
	s.counters["config|set"]++ // s.counters is now: the reading before Cicada's CONFIG SET
	if s.compareCounters(after) {
		s.cache.Flush()
	}
	s.counters = after
	return nil
}

func (s *Subscriber) readCounters(ctx context.Context, ctl *redis.Client) (map[string]int64, error) {
	pipe := ctl.Pipeline()
	info := pipe.Info(ctx, "commandstats", "stats", "cluster")
	var acl *redis.StringSliceCmd
	if !s.noACLList {
		acl = pipe.ACLList(ctx)
	}
	clustered := s.topo.Enabled()
	var begin uint64
	var cinfo, cnodes *redis.StringCmd
	if clustered {
		begin = s.topo.Begin()
		cinfo, cnodes = queueClusterRead(ctx, pipe)
	}
	_, _ = pipe.Exec(ctx)
	if err := info.Err(); err != nil {
		return nil, fmt.Errorf("upstream: INFO commandstats stats cluster: %w", err)
	}
	s.noteClusterEnabled(info.Val())
	switch {
	case clustered && s.topo.Enabled():
		if err := s.applyCluster(cinfo, cnodes, begin); err != nil {
			return nil, err
		}
	case s.topo.Enabled():
		if err := s.checkCluster(ctx, ctl); err != nil {
			return nil, err
		}
	}
	calls := parseCalls(info.Val(), watched)
	if acl != nil {
		switch err := acl.Err(); {
		case err == nil:
			h := fnv.New64a()
			for _, line := range acl.Val() {
				h.Write([]byte(line))
				h.Write([]byte{'\n'})
			}
			calls[aclList] = int64(h.Sum64())
		case strings.HasPrefix(err.Error(), "NOPERM"):
			s.noACLList = true
			s.log.Warn("upstream-user may not run ACL LIST: ACL changes made on Redis directly are seen only through INFO commandstats, which a CONFIG RESETSTAT can hide", zap.Error(err))
		default:
			return nil, fmt.Errorf("upstream: ACL LIST: %w", err)
		}
	}
	return calls, nil
}

// compareCounters reports whether now differs from the last reading, so
// that the cache must be flushed (the caller's to do), and reports access
// rules changed (Config.AuthChanged) if they may have.
func (s *Subscriber) compareCounters(now map[string]int64) (flush bool) {
	changed := ""
	if s.counters != nil {
		for _, name := range watched {
			if now[name] != s.counters[name] {
				changed = name
				break
			}
		}
		// A reset zeroes every counter: name it, not the first one it
		// moved.
		if now["config|resetstat"] != s.counters["config|resetstat"] || now[totalCommands] < s.counters[totalCommands] {
			changed = "config|resetstat"
		}
		aclChanged := now[aclList] != s.counters[aclList]
		if aclChanged {
			changed = aclList
		}
		if changed != "" {
			// Where Cicada may read ACL LIST, its hash says exactly
			// whether the rules changed; the counters stand in for it only
			// where it may not. A routine CONFIG SET (slowlog-max-len) then
			// keeps every connection's identity: a fresh one each, past
			// the 8 a cached reply records, forwarded most reads of the
			// connections open at the time for the rest of their life.
			if authWatched[changed] && s.cfg.AuthChanged != nil && (aclChanged || s.noACLList) {
				s.cfg.AuthChanged()
			}
			s.log.Info("INFO commandstats shows a command that changes data or access rules without keyspace notifications; cache flushed", zap.String("command", changed))
			return true
		}
	}
	return false
}

// parseCalls returns the calls= counts of the named commands in an INFO
// commandstats reply (0 for a command not listed), and under the key
// totalCommands the value of that INFO stats field.
func parseCalls(info string, names []string) map[string]int64 {
	calls := make(map[string]int64, len(names)+1)
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, totalCommands+":"); ok {
			calls[totalCommands], _ = strconv.ParseInt(v, 10, 64)
			continue
		}
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, stats, ok := strings.Cut(rest, ":calls=")
		if !ok {
			continue
		}
		for _, n := range names {
			if n == name {
				v, _, _ := strings.Cut(stats, ",")
				calls[n], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return calls
}

// missingClasses returns the classes of want absent from flags, as
// notify-keyspace-events letters; 'A' stands for all of g$lshzxetd.
func missingClasses(flags, want string) string {
	var missing strings.Builder
	for _, c := range want {
		if strings.ContainsRune(flags, c) {
			continue
		}
		if c != 'K' && strings.ContainsRune(flags, 'A') {
			continue
		}
		missing.WriteRune(c)
	}
	return missing.String()
}
