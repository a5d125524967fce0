// Package health serves a process's /healthz, /readyz, Prometheus /metrics
// and, when asked, /debug/pprof on one configurable address.
package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Check reports nil when the thing it checks is fine.
type Check func(ctx context.Context) error

// Checks is the registry of a process's liveness and readiness checks.
type Checks struct {
	mu        sync.RWMutex
	liveness  map[string]Check
	readiness map[string]Check
}

// NewChecks returns an empty registry.
func NewChecks() *Checks {
	return &Checks{liveness: map[string]Check{}, readiness: map[string]Check{}}
}

// AddLiveness registers a check of /healthz (a failure means: restart me).
func (c *Checks) AddLiveness(name string, check Check) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.liveness[name] = check
}

// AddReadiness registers a check of /readyz (a failure means: not serving yet).
func (c *Checks) AddReadiness(name string, check Check) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readiness[name] = check
}

// Run runs the checks of a kind and returns one line per check.
func (c *Checks) Run(ctx context.Context, readiness bool) (report string, ok bool) {
	c.mu.RLock()
	set := c.liveness
	if readiness {
		set = c.readiness
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	checks := make([]Check, len(names))
	sort.Strings(names)
	for i, n := range names {
		checks[i] = set[n]
	}
	c.mu.RUnlock()
	var b strings.Builder
	ok = true
	for i, n := range names {
		if err := checks[i](ctx); err != nil {
			ok = false
			fmt.Fprintf(&b, "[-]%s failed: %v\n", n, err)
		} else {
			fmt.Fprintf(&b, "[+]%s ok\n", n)
		}
	}
	return b.String(), ok
}

// Server is the health, metrics and profiling HTTP server.
type Server struct {
	checks   *Checks
	registry *prometheus.Registry
	log      *zap.Logger
	mux      *http.ServeMux
	srv      *http.Server
	ln       net.Listener
	addrFile string
}

// NewRegistry returns a Prometheus registry with the Go and process collectors.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// NewServer builds the server; Start binds it. It serves no /debug/pprof:
// EnablePprof adds it.
func NewServer(checks *Checks, registry *prometheus.Registry, log *zap.Logger) *Server {
	s := &Server{checks: checks, registry: registry, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", s.handle(false))
	mux.HandleFunc("/livez", s.handle(false))
	mux.HandleFunc("/readyz", s.handle(true))
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry}))
	s.mux = mux
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return s
}

// EnablePprof serves the Go profiles under /debug/pprof (not cmdline: a
// process's command line is none of a profiler's business). They have no
// authentication, so they are off unless an operator asks (key
// debug-pprof). Call it before Start.
func (s *Server) EnablePprof() {
	s.mux.HandleFunc("/debug/pprof/", pprof.Index)
	s.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	s.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	s.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

func (s *Server) handle(readiness bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		report, ok := s.checks.Run(ctx, readiness)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprint(w, report)
			return
		}
		if r.URL.Query().Has("verbose") {
			_, _ = fmt.Fprint(w, report)
		}
		_, _ = fmt.Fprint(w, "ok\n")
	}
}

// Start binds addr (port 0 picks a free one) and serves in the background.
// When addrFile is set, the bound address is written there, so that a health
// check or a test can find a port chosen at random.
func (s *Server) Start(addr, addrFile string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("http-addr %s: %w", addr, err)
	}
	s.ln = ln
	if addrFile != "" {
		if err := os.MkdirAll(filepath.Dir(addrFile), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(addrFile, []byte(ln.Addr().String()+"\n"), 0o644); err != nil {
			return err
		}
		s.addrFile = addrFile
	}
	s.log.Info("serving health and metrics", zap.String("addr", ln.Addr().String()))
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("health server stopped", zap.Error(err))
		}
	}()
	return nil
}

// Addr is the bound address, once started.
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Stop shuts the server down.
func (s *Server) Stop(ctx context.Context) error {
	if s.addrFile != "" {
		_ = os.Remove(s.addrFile)
	}
	return s.srv.Shutdown(ctx)
}
