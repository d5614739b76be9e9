package proxy

import (
	"cmp"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cicada-proxy/cicada/hotcache"
	"github.com/cicada-proxy/cicada/hotkeys"
)

// AdminHandler serves the admin HTTP endpoints that may face the network
// (Prometheus and the kubelet read them), and nothing else:
//
//	/metrics  Prometheus metrics (Collector plus Go runtime and process)
//	/healthz  200 while the process serves requests (liveness)
//	/readyz   200 when the keyspace-notification subscription is up, so
//	          hot keys are cached and Redis answered it; 503 otherwise
//
// Every other path is 404. Neither key names nor values appear here.
func (srv *Server) AdminHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(srv.Collector(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !srv.fences.Ready() {
			http.Error(w, "not ready: keyspace notifications not established\n", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}

// LocalAdminHandler serves the admin HTTP endpoints that reveal key names
// or cost CPU on request, for a listener on loopback only (it has no
// authentication):
//
//	/debug/pprof/  Go profiles (CPU, heap, goroutines, traces)
//	/debug/hotkeys the cached hot keys and hash fields as JSON (HotKeys):
//	          db, key, field, ops/s, cached, bytes, nil; ?limit=N
//	          (1-10000, default 100), highest ops/s first
//
// Every other path is 404 (cmd/cicada adds /config beside it). Key values
// never appear here.
func (srv *Server) LocalAdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/hotkeys", srv.hotKeysHandler)
	return mux
}

// hotKeysHandler serves /debug/hotkeys: the cached hot keys and hash
// fields with their current rate. Runs on the local admin HTTP
// goroutines; it reads the cache (lock-free) and the detector (atomic
// loads).
func (srv *Server) hotKeysHandler(w http.ResponseWriter, r *http.Request) {
	limit := defaultHotKeysLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxHotKeysLimit {
			http.Error(w, "limit must be an integer from 1 to "+strconv.Itoa(maxHotKeysLimit)+"\n", http.StatusBadRequest)
			return
		}
		limit = n
	}
	body := srv.hotKeys(limit)
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(body)
}

// hotKeys lists the cache's replies, highest rate first, at most limit.
func (srv *Server) hotKeys(limit int) HotKeys {
	suspended := srv.cache.Suspended()
	var keys []HotKey
	srv.cache.Items(func(it hotcache.Item) {
		k := HotKey{DB: it.DB, OpsPerSec: srv.det.Estimate(it.Hash), Cached: !it.Expired && !suspended, Bytes: it.Bytes, Nil: it.Nil}
		k.Key, k.KeyBase64 = jsonText(it.Key)
		if it.IsField {
			f, b := jsonText(it.Field)
			k.Field, k.FieldBase64 = &f, b
		}
		keys = append(keys, k)
	})
	slices.SortFunc(keys, func(a, b HotKey) int {
		if c := cmp.Compare(b.OpsPerSec, a.OpsPerSec); c != 0 {
			return c
		}
		if c := cmp.Compare(a.DB, b.DB); c != 0 {
			return c
		}
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		var fa, fb string
		if a.Field != nil {
			fa = *a.Field
		}
		if b.Field != nil {
			fb = *b.Field
		}
		return strings.Compare(fa, fb)
	})
	out := HotKeys{Total: len(keys), Limit: limit, Suspended: suspended, Keys: keys[:min(limit, len(keys))]}
	if out.Keys == nil {
		out.Keys = []HotKey{}
	}
	return out
}

// Hotkeys returns the process's HOTKEYS state (for the admin endpoint and
// tests). Safe from any goroutine.
func (srv *Server) Hotkeys() *hotkeys.Tracker { return srv.hk }

// Collector exports the server's metrics to Prometheus. It reads the
// per-loop counters at scrape time, so counting costs the hot path one
// uncontended atomic add.
func (srv *Server) Collector() prometheus.Collector { return collector{srv} }

// Hits returns the GET/HGET requests answered locally since start, summed
// over the loops. Safe from any goroutine.
func (srv *Server) Hits() uint64 {
	var n uint64
	for _, l := range srv.loopList() {
		n += l.stats.hits.Load()
	}
	return n
}

// UpstreamErrors returns cicada_upstream_errors_total: upstream
// connections that could not be made and invalid replies from Redis,
// since start. Safe from any goroutine.
func (srv *Server) UpstreamErrors() uint64 { return srv.upstreamErrors.Load() }
