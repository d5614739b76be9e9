package proxy

import (
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
