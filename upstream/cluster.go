package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/resp"
)

// Redis Cluster. A node can stop answering for a slot without a keyspace
// notification: a slot given to another node while this one still holds
// keys of it has them deleted silently (Redis 7.0), and a failover turns a
// master into a replica that answers -MOVED. So in cluster mode the
// control goroutine reads CLUSTER INFO and CLUSTER NODES with every
// reading of the counters (and at once when an event loop saw a redirect
// contradicting the view, cluster.Topology.Contradicted), publishes the
// view the event loops answer from, and evicts the keys of slots the node
// no longer serves.
//
// A master turned replica is also seen the moment it happens: a fourth
// connection (cicada-role-watch) blocks in WAIT for more replicas than
// exist, and Redis unblocks every blocked client with -UNBLOCKED when it
// becomes a replica (disconnectAllBlockedClients in replicationSetMaster).
// Unapplied treats a reply waiting on that socket like an unapplied
// notification: no hit is answered from a master's view while the WAIT is
// not known to be blocked.

// kickGap is the shortest time between two re-reads of the view that
// redirects asked for (control.go).
const kickGap = 10 * time.Millisecond

// waitReplicas is the replica count the role watch's WAIT asks for: more
// than any Redis has (WAIT's count is a long; this one fits in 31 bits).
const waitReplicas = "2147483647"

// roleWatch is the blocked WAIT connection. Its fields are set before it
// is published in clusterWatch.role and never change; the watch goroutine
// unpublishes it before it reads from or closes the socket.
type roleWatch struct {
	fd int
}

// clusterWatch is the subscriber's part in Redis Cluster: the view the
// event loops answer from, read by the control goroutine (noteClusterEnabled,
// applyCluster, checkCluster), and the role watch of a master (watchRole,
// on its own goroutine; roleSettled from any). Embedded in Subscriber,
// which sets cfg, cache and log to its own.
type clusterWatch struct {
	cfg   *Config
	cache *hotcache.Cache
	log   *zap.Logger
	topo  *cluster.Topology         // Redis Cluster view
	role  atomic.Pointer[roleWatch] // the blocked WAIT of a master, or nil
}

// Cluster returns the view of the node's slots the event loops answer
// from; its Enabled is false unless Redis runs in cluster mode.
func (w *clusterWatch) Cluster() *cluster.Topology { return w.topo }

// noteClusterEnabled records INFO cluster's cluster_enabled from info.
// Turning on or off flushes the cache: what it holds was read under the
// other mode.
func (w *clusterWatch) noteClusterEnabled(info string) {
	on := strings.Contains(info, "cluster_enabled:1")
	if on == w.topo.Enabled() {
		return
	}
	w.topo.SetEnabled(on)
	w.cache.Flush()
	w.log.Info("Redis Cluster mode", zap.Bool("enabled", on))
}

// queueClusterRead adds CLUSTER INFO and CLUSTER NODES to pipe.
func queueClusterRead(ctx context.Context, pipe redis.Pipeliner) (info, nodes *redis.StringCmd) {
	return pipe.ClusterInfo(ctx), pipe.ClusterNodes(ctx)
}

// applyCluster publishes the view read from info and nodes (sent after
// Topology.Begin returned begin), and when it differs from the last one
// evicts the keys of slots no longer served; either way fills begun
// before are refused (EvictKeys), so none can store a key of a slot lost
// meanwhile.
func (w *clusterWatch) applyCluster(info, nodes *redis.StringCmd, begin uint64) error {
	if err := info.Err(); err != nil {
		return fmt.Errorf("upstream: CLUSTER INFO: %w", err)
	}
	if err := nodes.Err(); err != nil {
		return fmt.Errorf("upstream: CLUSTER NODES: %w", err)
	}
	v, err := cluster.ParseNodes(nodes.Val(), strings.Contains(info.Val(), "cluster_state:ok"))
	if err != nil {
		return err
	}
	old := w.topo.Publish(v, begin)
	if old != nil && old.Same(v) {
		return nil
	}
	if old == nil {
		old = &cluster.View{}
	}
	w.cache.EvictKeys(func(key []byte) bool { return old.Lost(v, cluster.Slot(key)) }, hotcache.ReasonCluster)
	w.log.Info("cluster view changed", zap.Stringer("role", v.Role), zap.Bool("ok", v.OK),
		zap.Int("slots", v.ServedCount()), zap.Stringer("was", old.Role), zap.Int("had", old.ServedCount()))
	return nil
}

// checkCluster reads and applies the view now (after a contradiction).
func (w *clusterWatch) checkCluster(ctx context.Context, ctl *redis.Client) error {
	begin := w.topo.Begin()
	pipe := ctl.Pipeline()
	info, nodes := queueClusterRead(ctx, pipe)
	_, _ = pipe.Exec(ctx)
	return w.applyCluster(info, nodes, begin)
}

// roleSettled reports whether a master's view may be answered from: the
// role watch's WAIT is blocked and nothing waits on its socket. A
// replica's view, or no cluster, needs no watch. Safe from any goroutine;
// one recv(MSG_PEEK) system call for a master.
func (w *clusterWatch) roleSettled(scratch []byte) bool {
	if !w.topo.Enabled() {
		return true
	}
	if v := w.topo.View(); v == nil || v.Role != cluster.RoleMaster {
		return true
	}
	rw := w.role.Load()
	if rw == nil {
		return false
	}
	_, errno := peek(rw.fd, scratch[:1])
	// Unpublished before its socket is read or closed: still published,
	// the descriptor was this socket when peeked.
	return (errno == unix.EAGAIN || errno == unix.EWOULDBLOCK) && w.role.Load() == rw
}

// watchRole keeps the role watch blocked whenever the view says master,
// until ctx is done. Runs on its own goroutine for one subscription
// session.
func (w *clusterWatch) watchRole(ctx context.Context) {
	lastRefusal := ""
	for ctx.Err() == nil {
		if v := w.topo.View(); !w.topo.Enabled() || v == nil || v.Role != cluster.RoleMaster {
			select {
			case <-ctx.Done():
			case <-time.After(w.cfg.CountersInterval):
			}
			continue
		}
		err := w.blockRole(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := w.cfg.CountersInterval
		var refused *roleRefused
		if errors.As(err, &refused) {
			// Not a role change: no cache answer on this master until
			// it is resolved (upstream-user without +wait, say).
			wait = time.Second
			if msg := refused.Error(); msg != lastRefusal {
				lastRefusal = msg
				w.log.Warn("role watch refused: nothing is answered from cache while this node is a master", zap.Error(err))
			}
		} else {
			w.log.Debug("role watch ended", zap.Error(err))
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// roleQuiet is how long the role watch's WAIT must go unanswered before
// the watch is trusted (blockRole): 100 ms, against a refusal's round trip
// (well under 1 ms to a sidecar's Redis).
const roleQuiet = 100 * time.Millisecond

// errUnblocked is blockRole's error when the WAIT was answered as on a
// role change: -UNBLOCKED, or the replica's refusal of WAIT.
var errUnblocked = errors.New("upstream: role watch answered")

// roleRefused is blockRole's error when Redis refused the watch for
// another reason than a role change (an ACL refusal of WAIT, a failed
// AUTH): Reply is Redis's error line.
type roleRefused struct{ Reply string }

// Error returns Redis's refusal, prefixed.
func (e *roleRefused) Error() string { return "upstream: role watch: " + e.Reply }

// blockRole opens the role watch connection, sends WAIT, publishes it
// once it has gone unanswered for roleQuiet, and returns when anything arrives on it (the node changed role, or
// the connection failed) or ctx is done.
func (w *clusterWatch) blockRole(ctx context.Context) error {
	d := net.Dialer{Timeout: w.cfg.DialTimeout, KeepAlive: time.Minute}
	c, err := d.DialContext(ctx, "tcp", w.cfg.Addr)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	var req []byte
	replies := 1
	if w.cfg.Password != "" || w.cfg.Username != "" {
		replies++
		user := w.cfg.Username
		if user == "" {
			user = "default"
		}
		req = resp.AppendCommand(req, []byte("AUTH"), []byte(user), []byte(w.cfg.Password))
	}
	req = resp.AppendCommand(req, []byte("CLIENT"), []byte("SETNAME"), []byte("cicada-role-watch"))
	_ = c.SetDeadline(time.Now().Add(w.cfg.DialTimeout + 2*w.cfg.CheckInterval))
	if _, err := c.Write(req); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	for range replies {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.HasPrefix(line, "+") {
			return &roleRefused{Reply: strings.TrimSpace(line)}
		}
	}
	_ = c.SetDeadline(time.Time{})
	if _, err := c.Write(resp.AppendCommand(nil, []byte("WAIT"), []byte(waitReplicas), []byte("0"))); err != nil {
		return err
	}
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return err
	}
	var rw *roleWatch
	if err := raw.Control(func(fd uintptr) { rw = &roleWatch{fd: int(fd)} }); err != nil {
		return err
	}
	one := make([]byte, 1)
	// Wait for readability without reading: the watch must be
	// unpublished before its bytes leave the socket.
	readable := func(fd uintptr) bool {
		_, errno := peek(int(fd), one)
		return errno != unix.EAGAIN && errno != unix.EWOULDBLOCK
	}
	// Published once WAIT has gone unanswered for roleQuiet: a refusal
	// (-NOPERM) comes back within a round trip, and until it does the
	// watch would be trusted without blocking anything.
	_ = c.SetReadDeadline(time.Now().Add(roleQuiet))
	err = raw.Read(readable)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		_ = c.SetReadDeadline(time.Time{})
		w.role.Store(rw)
		defer w.role.Store(nil)
		err = raw.Read(readable)
		w.role.Store(nil)
	}
	if err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	line, err := br.ReadString('\n')
	switch {
	case err != nil && line == "":
		return err
	case strings.HasPrefix(line, "-UNBLOCKED"), strings.Contains(line, "replica"):
		return errUnblocked
	}
	return &roleRefused{Reply: strings.TrimSpace(line)}
}
