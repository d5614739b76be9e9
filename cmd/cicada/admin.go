package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/netutil"

	"github.com/cicada-proxy/cicada/proxy"
)

// Connections the admin listeners serve at once (netutil.LimitListener:
// more wait in the listener's backlog, holding no descriptor), so that
// they cannot take the descriptors clients need: the local one
// localAdminConns, the public one what fitMaxClients leaves once
// maxclients is served, at least minAdminConns. A keep-alive connection
// idle for adminIdle is closed.
const (
	minAdminConns   = 32
	localAdminConns = 8
	adminIdle       = time.Minute
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
	a := &adminServers{public: &http.Server{Handler: srv.AdminHandler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: adminIdle}}
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
	a.local = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: adminIdle}
	go serveHTTP(a.local, netutil.LimitListener(localLn, localAdminConns), "local admin", log)
	addr := localLn.Addr().(*net.TCPAddr)
	log.Info("local admin listening", zap.String("addr", addr.String()))
	if !addr.IP.IsLoopback() {
		log.Warn("local-admin is not on loopback: whoever reaches it can list hot key names, take CPU profiles and traces, and read the settings",
			zap.String("addr", addr.String()))
	}
	return a, nil
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
