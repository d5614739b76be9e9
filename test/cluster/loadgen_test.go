package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// clientIP is the source address of every load client connection
// (Linux accepts any 127/8 address as a source on loopback). No Redis
// client list may show it: load clients talk to sidecars only.
var clientIP = net.IPv4(127, 0, 0, 2)

// Each reader's and writer's pause between operations: 4 readers and 2
// writers make about 15 reads per write, and thousands of operations a
// second in all (a history porcupine checks in seconds).
const (
	loadReaders = 4
	loadWriters = 2
	readPause   = time.Millisecond
	writePause  = 10 * time.Millisecond
	// writeErrorPause follows a failed write: while a master is down its
	// keys' writes fail, and each is one more write of unknown outcome.
	writeErrorPause = 50 * time.Millisecond
	// opTimeout bounds one GET or SET, redirects and retries included.
	opTimeout = 3 * time.Second
)

// loadGen is the load of TestClusterLoad: writers SET the keys to values
// unique per write ("w<client>-<n>"), readers GET them round robin, all
// through one go-redis ClusterClient that was given the sidecars'
// addresses and dials from clientIP. Every operation is recorded.
//
// The test goroutine calls start, setPhase, pauseWrites and stop; the
// histories belong to their goroutines until stop returns.
type loadGen struct {
	cc    *redis.ClusterClient
	keys  []string
	begin time.Time
	// phase is the index of the current phase, stamped on each operation.
	phase atomic.Int32
	// writes is held for reading by each write; pauseWrites takes it to
	// stop them.
	writes sync.RWMutex

	cancel  context.CancelFunc // ends the load; nil before start
	wg      sync.WaitGroup
	stopped bool
	// histories[i] and errs[i] belong to load client i until stop; client
	// 0 is start's first writes.
	histories [][]op
	errs      []int

	dialedMu sync.Mutex     // guards dialed
	dialed   map[string]int // address -> dials, every dial the client made
}

// newLoadGen makes the client; start runs the load.
func newLoadGen(sidecars, keys []string) *loadGen {
	g := &loadGen{keys: keys, dialed: map[string]int{}, histories: make([][]op, 1+loadWriters+loadReaders),
		errs: make([]int, 1+loadWriters+loadReaders)}
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: clientIP}, Timeout: 500 * time.Millisecond}
	g.cc = redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: sidecars,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			g.dialedMu.Lock()
			g.dialed[addr]++
			g.dialedMu.Unlock()
			return dialer.DialContext(ctx, network, addr)
		},
		// MOVED and ASK are followed at once. A connection lost with a
		// killed master is retried by the cluster client (up to
		// MaxRedirects times, after a short backoff, on the slot map as
		// last reloaded), not by the node's client: its own retries
		// (MaxRetries) kept reads on the dead node's sidecar for a second
		// after the replica's promotion.
		MaxRedirects:    8,
		MaxRetries:      -1,
		MinRetryBackoff: 10 * time.Millisecond,
		MaxRetryBackoff: 100 * time.Millisecond,
		DialTimeout:     500 * time.Millisecond,
		DialerRetries:   1,
		ReadTimeout:     time.Second,
		WriteTimeout:    time.Second,
		PoolTimeout:     2 * time.Second,
		// The slot map is read again this often, so that a killed master
		// (whose sidecar closes every connection) stalls its keys only
		// until the cluster has promoted its replica (the default is 60 s).
		ClusterStateReloadInterval: 250 * time.Millisecond,
		DisableIdentity:            true,
		DisableRoutingPolicies:     true,
	})
	return g
}

// now is the time since the load began, in ns.
func (g *loadGen) now() int64 { return int64(time.Since(g.begin)) }

// start writes every key once (client 0, "init-<i>"), then starts the
// writers and readers. It returns the first SET's error.
func (g *loadGen) start() error {
	g.begin = time.Now()
	var initial []op
	for i, k := range g.keys {
		o := op{Key: k, Write: true, Value: fmt.Sprintf("init-%d", i), Call: g.now()}
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		err := g.cc.Set(ctx, k, o.Value, 0).Err()
		cancel()
		if err != nil {
			return fmt.Errorf("SET %s: %w", k, err)
		}
		o.Return = g.now()
		initial = append(initial, o)
	}
	g.histories[0] = initial
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	for w := range loadWriters {
		g.wg.Add(1)
		go g.writer(ctx, w+1)
	}
	for r := range loadReaders {
		g.wg.Add(1)
		go g.reader(ctx, loadWriters+1+r)
	}
	return nil
}

// writer is load client id (1-based) writing until ctx ends.
func (g *loadGen) writer(ctx context.Context, id int) {
	defer g.wg.Done()
	rng := rand.New(rand.NewPCG(uint64(id), 1))
	for n := 0; ctx.Err() == nil; n++ {
		k := g.keys[rng.IntN(len(g.keys))]
		v := fmt.Sprintf("w%d-%d", id, n)
		g.writes.RLock()
		o := op{Client: id, Key: k, Write: true, Value: v, Phase: int(g.phase.Load()), Call: g.now()}
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		err := g.cc.Process(octx, setOnce{redis.NewStatusCmd(octx, "set", k, v)})
		cancel()
		o.Return = g.now()
		g.writes.RUnlock()
		pause := writePause
		if err != nil {
			o.Unknown, o.Return = true, math.MaxInt64
			g.errs[id]++
			pause = writeErrorPause
		}
		g.histories[id] = append(g.histories[id], o)
		sleep(ctx, pause)
	}
}

// reader is load client id reading until ctx ends. A failed read tells
// nothing of the keys: it is counted, not recorded.
func (g *loadGen) reader(ctx context.Context, id int) {
	defer g.wg.Done()
	for n := 0; ctx.Err() == nil; n++ {
		k := g.keys[(n+id)%len(g.keys)]
		o := op{Client: id, Key: k, Phase: int(g.phase.Load()), Call: g.now()}
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		v, err := g.cc.Get(octx, k).Result()
		cancel()
		o.Return = g.now()
		switch {
		case err == nil:
			o.Value = v
		case errors.Is(err, redis.Nil):
		default:
			g.errs[id]++
			sleep(ctx, readPause)
			continue
		}
		g.histories[id] = append(g.histories[id], o)
		sleep(ctx, readPause)
	}
}

// setPhase stamps the operations called from now on with phase i.
func (g *loadGen) setPhase(i int) { g.phase.Store(int32(i)) }

// pauseWrites waits for the writes in flight and holds back new ones
// until the returned function is called (once; later calls do nothing).
func (g *loadGen) pauseWrites() (resume func()) {
	g.writes.Lock()
	return sync.OnceFunc(g.writes.Unlock)
}

// stop ends the load, waits for its goroutines and closes the client. It
// returns the whole history and the failed writes and reads. Safe to call
// again (a deferred call after the test's own).
func (g *loadGen) stop() (history []op, failedWrites, failedReads int) {
	if !g.stopped {
		g.stopped = true
		if g.cancel != nil {
			g.cancel()
			g.wg.Wait()
		}
		_ = g.cc.Close()
	}
	for id, n := range g.errs {
		if id <= loadWriters {
			failedWrites += n
		} else {
			failedReads += n
		}
	}
	return slices.Concat(g.histories...), failedWrites, failedReads
}

// dials returns a copy of the addresses the client dialed, with counts.
func (g *loadGen) dials() map[string]int {
	g.dialedMu.Lock()
	defer g.dialedMu.Unlock()
	out := map[string]int{}
	for a, n := range g.dialed {
		out[a] = n
	}
	return out
}

// setOnce is a SET go-redis never sends twice: a write retried after a
// lost reply could take effect twice, around another client's write,
// which no single-write history explains. MOVED and ASK are still
// followed (the write was refused, not applied).
type setOnce struct{ *redis.StatusCmd }

// NoRetry tells go-redis not to retry the command after a network error.
func (setOnce) NoRetry() bool { return true }

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
