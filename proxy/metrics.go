package proxy

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cicada-proxy/cicada/cluster"
	"github.com/cicada-proxy/cicada/hotcache"
)

// Metric descriptions. Names follow Prometheus conventions: base units,
// _total for counters.
var (
	descHits = prometheus.NewDesc("cicada_cache_hits_total",
		"GET and HGET requests answered from the hot cache.", nil, nil)
	descMisses = prometheus.NewDesc("cicada_cache_misses_total",
		"GET and HGET requests forwarded to Redis.", nil, nil)
	descForwarded = prometheus.NewDesc("cicada_forwarded_requests_total",
		"Requests of any kind forwarded to Redis.", nil, nil)
	descFillsTried = prometheus.NewDesc("cicada_cache_fill_attempts_total",
		"Misses on hot keys sent with a PTTL to fill the cache.", nil, nil)
	descFills = prometheus.NewDesc("cicada_cache_fills_total",
		"Replies stored in the cache.", nil, nil)
	descWriteThroughs = prometheus.NewDesc("cicada_cache_write_throughs_total",
		"Values of SET key value stored in the cache at Redis's +OK, for keys that had a cached GET reply.", nil, nil)
	descUnsettled = prometheus.NewDesc("cicada_cache_hits_forwarded_total",
		"Cached GET and HGET requests forwarded to Redis instead (and counted as misses) because a keyspace notification had arrived and was not yet applied.", nil, nil)
	descEvictions = prometheus.NewDesc("cicada_cache_evictions_total",
		"Cached replies dropped, by reason.", []string{"reason"}, nil)
	descReplies = prometheus.NewDesc("cicada_cache_replies",
		"Replies cached now (one per hot GET key or HGET field).", nil, nil)
	descBytes = prometheus.NewDesc("cicada_cache_bytes",
		"Bytes the cache holds now (keys, fields, replies and overhead).", nil, nil)
	descBar = prometheus.NewDesc("cicada_cache_admission_bar",
		"Requests per second a key must save Redis to be filled (0 until the cache is 15/16 full).", nil, nil)
	descUnusedFills = prometheus.NewDesc("cicada_cache_unused_total",
		"Cached keys evicted for room or as cold without having served a hit.", nil, nil)
	descSuspended = prometheus.NewDesc("cicada_cache_suspended",
		"1 while the cache answers nothing (notifications down, or a write of unknown keys in flight).", nil, nil)
	descHolds = prometheus.NewDesc("cicada_cache_holds",
		"Cache suspensions held now: one while notifications are down or caching is off, one per write of unknown keys or flush in flight.", nil, nil)
	descDoubleReleases = prometheus.NewDesc("cicada_cache_hold_double_releases_total",
		"Cache suspensions released a second time (a bug; each is ignored).", nil, nil)
	descConns = prometheus.NewDesc("cicada_client_connections",
		"Client connections open now.", nil, nil)
	descMaxClients = prometheus.NewDesc("cicada_maxclients",
		"Client connections Cicada accepts at once (maxclients, as lowered to fit the open-file limit); more are refused as Redis refuses them.", nil, nil)
	descConnsTotal = prometheus.NewDesc("cicada_client_connections_total",
		"Client connections accepted since start.", nil, nil)
	descInflight = prometheus.NewDesc("cicada_inflight_requests",
		"Forwarded requests awaiting their reply.", nil, nil)
	descClosed = prometheus.NewDesc("cicada_clients_closed_total",
		"Client connections Cicada closed itself, by reason: query-buffer-limit, output-buffer-limit (Redis's client-output-buffer-limit), max-client-memory, maxclients.", []string{"reason"}, nil)
	descLanes = prometheus.NewDesc("cicada_upstream_lanes",
		"Upstream connections shared by clients in one state (lanes) open now.", nil, nil)
	descOwn = prometheus.NewDesc("cicada_upstream_own_connections",
		"Upstream connections of a single client open now (clients that needed one, or all with --multiplex=false).", nil, nil)
	descSpares = prometheus.NewDesc("cicada_upstream_spare_connections",
		"Upstream connections dialed ahead for the next client that needs a connection of its own (one per event loop at most).", nil, nil)
	descPins = prometheus.NewDesc("cicada_upstream_pins_total",
		"Clients moved from lanes to a connection of their own.", nil, nil)
	descReturns = prometheus.NewDesc("cicada_upstream_returns_total",
		"Clients moved from a connection of their own back to lanes.", nil, nil)
	descUpErrors = prometheus.NewDesc("cicada_upstream_errors_total",
		"Upstream connections that could not be made and invalid replies from Redis.", nil, nil)
	descSubUp = prometheus.NewDesc("cicada_keyspace_subscription_up",
		"1 while the keyspace-notification subscription is established.", nil, nil)
	descEvents = prometheus.NewDesc("cicada_keyspace_events_total",
		"Keyspace notifications received.", nil, nil)
	descSubConnects = prometheus.NewDesc("cicada_keyspace_subscriptions_total",
		"Times the keyspace-notification subscription was established.", nil, nil)
	descUpstreamLatency = prometheus.NewDesc("cicada_upstream_request_duration_seconds",
		"Time from Cicada forwarding a request to Redis's reply reaching it, for one request per round trip per connection (the first of a pipeline).", nil, nil)
	descClusterSlots = prometheus.NewDesc("cicada_cluster_slots",
		"Redis Cluster hash sent the node answers GET for, as Cicada last read them (a replica's: its master's, for READONLY connections); 0 outside cluster mode.", nil, nil)
	descClusterMaster = prometheus.NewDesc("cicada_cluster_master",
		"1 while the Redis Cluster node behind Cicada is a master, 0 for a replica or outside cluster mode.", nil, nil)
	descClusterChanges = prometheus.NewDesc("cicada_cluster_view_changes_total",
		"Times the node's role, served sent or cluster state changed, as Cicada read them.", nil, nil)
	descClusterContradictions = prometheus.NewDesc("cicada_cluster_redirects_total",
		"-MOVED and -CLUSTERDOWN replies that showed Cicada's view of the node stale (no cache answers until it is read again).", nil, nil)
	descFlushes = prometheus.NewDesc("cicada_redis_flushes_total",
		"FLUSHALL/FLUSHDB executed by Redis (from any client), each emptying the cache.", nil, nil)
)

type collector struct{ srv *Server }

// Describe implements prometheus.Collector.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHits, descMisses, descForwarded, descFillsTried, descFills, descWriteThroughs, descUnsettled,
		descEvictions, descReplies, descBytes, descBar, descUnusedFills, descSuspended, descHolds, descDoubleReleases, descConns, descMaxClients, descConnsTotal, descClosed, descInflight,
		descLanes, descOwn, descSpares, descPins, descReturns, descUpErrors, descUpstreamLatency, descSubUp, descEvents, descSubConnects, descFlushes,
		descClusterSlots, descClusterMaster, descClusterChanges, descClusterContradictions} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	srv := c.srv
	var hits, misses, fwd, tried, fills, unsettled uint64
	var inflight, lanes, own, spares int64
	var pins, returns uint64
	for _, l := range srv.loopList() {
		lanes += l.stats.lanes.Load()
		own += l.stats.own.Load()
		spares += l.stats.spares.Load()
		pins += l.stats.pins.Load()
		returns += l.stats.returns.Load()
		hits += l.stats.hits.Load()
		misses += l.stats.misses.Load()
		fwd += l.stats.forwarded.Load()
		tried += l.stats.fillsTried.Load()
		fills += l.stats.fills.Load()
		unsettled += l.stats.unsettled.Load()
		inflight += l.stats.inflight.Load()
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter(descHits, hits)
	counter(descMisses, misses)
	counter(descForwarded, fwd)
	counter(descFillsTried, tried)
	counter(descFills, fills)
	counter(descUnsettled, unsettled)
	st := srv.cache.Stats()
	for _, r := range hotcache.Reasons() {
		counter(descEvictions, st.Evicted[r], r.String())
	}
	gauge(descReplies, float64(st.Replies))
	gauge(descBar, srv.adm.Bar())
	counter(descUnusedFills, st.Unused)
	counter(descWriteThroughs, st.WriteThroughs)
	gauge(descBytes, float64(st.Bytes))
	gauge(descSuspended, b2f(srv.cache.Suspended()))
	gauge(descHolds, float64(srv.cache.Holds()))
	counter(descDoubleReleases, st.DoubleReleases)
	gauge(descConns, float64(srv.conns.Load()))
	gauge(descMaxClients, float64(srv.cfg.MaxClients))
	counter(descConnsTotal, srv.connsTotal.Load())
	for r := range closeReasons {
		counter(descClosed, srv.closedFor[r].Load(), r.String())
	}
	gauge(descInflight, float64(inflight))
	gauge(descLanes, float64(lanes))
	gauge(descOwn, float64(own))
	gauge(descSpares, float64(spares))
	counter(descPins, pins)
	counter(descReturns, returns)
	counter(descUpErrors, srv.UpstreamErrors())
	collectLatency(ch, srv.loopList())
	gauge(descSubUp, b2f(srv.fences.Ready()))
	counter(descEvents, srv.counters.Events())
	counter(descSubConnects, srv.counters.Reconnects())
	counter(descFlushes, srv.counters.Flushes())
	var sent, master float64
	if v := srv.topo.View(); v != nil && srv.topo.Enabled() {
		sent, master = float64(v.ServedCount()), b2f(v.Role == cluster.RoleMaster)
	}
	gauge(descClusterSlots, sent)
	gauge(descClusterMaster, master)
	counter(descClusterChanges, srv.topo.Changes())
	counter(descClusterContradictions, srv.topo.Contradictions())
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectLatency sends the upstream latency histogram summed over loops.
func collectLatency(ch chan<- prometheus.Metric, loops []*loopState) {
	var counts [len(upstreamBuckets) + 1]uint64
	var sumNs int64
	for _, l := range loops {
		h := &l.stats.upstream
		for i := range h.counts {
			counts[i] += h.counts[i].Load()
		}
		sumNs += h.sumNs.Load()
	}
	buckets := make(map[float64]uint64, len(upstreamBuckets))
	var cum uint64 // Prometheus buckets are cumulative
	for i, ub := range upstreamBuckets {
		cum += counts[i]
		buckets[ub] = cum
	}
	ch <- prometheus.MustNewConstHistogram(descUpstreamLatency, cum+counts[len(upstreamBuckets)], time.Duration(sumNs).Seconds(), buckets)
}
