package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/netutil"

	"github.com/cicada-proxy/cicada/proxy"
)

// Connections the admin listeners serve at once (netutil.LimitListener:
// more wait in the listener's backlog, holding no descriptor), so that
// they cannot take the descriptors clients need: the local one
// localAdminConns, the public one 1/adminShare of the open-file limit (at
// least minAdminConns) and what maxclients leaves (fitMaxClients). A
// request must arrive whole within adminRead (Prometheus and the kubelet
// send a bodiless GET at once) and its reply leave within adminWrite
// (the local listener's within localAdminWrite: a CPU profile or trace
// runs for the seconds asked), and a keep-alive connection idle for
// adminIdle is closed, so that a client cannot hold its place for long:
// a body promised and never sent held one for good. Clients that stall
// on purpose still delay the others by adminRead per minAdminConns of
// them.
const (
	minAdminConns   = 64
	adminShare      = 32
	localAdminConns = 8
	adminRead       = 2 * time.Second
	adminWrite      = 10 * time.Second
	localAdminWrite = 2 * time.Minute
	adminIdle       = 30 * time.Second
)

// adminServers are Cicada's two HTTP listeners. public (the admin
// setting) serves only what Prometheus and the kubelet read: /metrics,
// /healthz, /readyz. local (local-admin, loopback by default; nil when
// off) serves what reveals key names, costs CPU or changes settings:
// /debug/pprof/, /debug/hotkeys and /config. Neither has authentication.
type adminServers struct {
	public, local *http.Server
}

// startAdmin binds both listeners and serves each on a goroutine of its
// own, the public one adminConns connections at once. config serves
// /config (the holder of the live settings). A local-admin address that
// is not loopback is served, with a warning.
func startAdmin(cfg *Config, srv *proxy.Server, config http.Handler, adminConns int, log *zap.Logger) (*adminServers, error) {
	publicLn, err := net.Listen("tcp", cfg.Admin)
	if err != nil {
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	a := &adminServers{public: &http.Server{Handler: srv.AdminHandler(), ReadHeaderTimeout: adminRead,
		ReadTimeout: adminRead, WriteTimeout: adminWrite, IdleTimeout: adminIdle}}
	go serveHTTP(a.public, netutil.LimitListener(publicLn, adminConns), "admin", log)
	log.Info("admin listening", zap.String("addr", publicLn.Addr().String()))
	if cfg.LocalAdmin == "" {
		log.Info(`local admin off (local-admin ""): no /debug/pprof/, /debug/hotkeys or /config`)
		return a, nil
	}
	localLn, err := net.Listen("tcp", cfg.LocalAdmin)
	if err != nil {
		_ = a.public.Close()
		return nil, fmt.Errorf("local-admin listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/config", config)
	mux.Handle("/", srv.LocalAdminHandler())
	a.local = &http.Server{Handler: refuseNamedHosts(mux), ReadHeaderTimeout: adminRead,
		ReadTimeout: adminRead, WriteTimeout: localAdminWrite, IdleTimeout: adminIdle}
	go serveHTTP(a.local, netutil.LimitListener(localLn, localAdminConns), "local admin", log)
	addr := localLn.Addr().(*net.TCPAddr)
	log.Info("local admin listening", zap.String("addr", addr.String()))
	if !addr.IP.IsLoopback() {
		log.Warn("local-admin is not on loopback: whoever reaches it can list hot key names, take CPU profiles and traces, and read the settings",
			zap.String("addr", addr.String()))
	}
	return a, nil
}

// refuseNamedHosts answers 403 to a request whose Host is a name other
// than localhost: a web page whose name an attacker points at 127.0.0.1
// (DNS rebinding) would otherwise read key names, settings and profiles
// from the browser of someone on the same machine. An address (any IP)
// or localhost passes, as a curl, a port-forward or a published port
// sends.
func refuseNamedHosts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		if net.ParseIP(host) == nil && !strings.EqualFold(host, "localhost") {
			http.Error(w, "refused: the Host must be an address or localhost, not a name", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveHTTP serves s on ln until s is shut down.
func serveHTTP(s *http.Server, ln net.Listener, name string, log *zap.Logger) {
	if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error(name+" listener stopped", zap.Error(err))
	}
}

// shutdown stops both listeners, giving requests in flight up to timeout
// together.
func (a *adminServers) shutdown(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = a.public.Shutdown(ctx)
	if a.local != nil {
		_ = a.local.Shutdown(ctx)
	}
}
