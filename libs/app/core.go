package app

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/health"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/messaging"
	"github.com/splitlet/splitlet/libs/nodecert"
	"github.com/splitlet/splitlet/libs/tracing"
)

// Core provides what every service may ask for: the NATS connection and
// JetStream, the Kubernetes client and the informer on the node's pods
// (built only if some service asks), the health checks, the metrics
// registry with the bus's metrics on it, and the health server.
var Core = fx.Module("core",
	fx.Provide(
		newMessaging,
		func(c *messaging.Conn) *nats.Conn { return c.NC },
		func(c *messaging.Conn) jetstream.JetStream { return c.JS },
		newTracing,
		newRESTConfig,
		newClientset,
		newNodePods,
		func() *health.Checks { return health.NewChecks() },
		health.NewServer,
	),
	processMetrics,
	fx.Invoke(runHealth),
)

// processMetrics is the process's metrics registry and the bus's metrics on
// it, one set whatever stages the process runs (each stage's module is
// handed the same); built even when no stage asks, so that it is served.
var processMetrics = fx.Options(
	fx.Provide(
		health.NewRegistry,
		func(r *prometheus.Registry) prometheus.Registerer { return r },
		bus.NewMetrics,
	),
	fx.Invoke(func(*bus.Metrics) {}),
)

func newMessaging(lc fx.Lifecycle, c *config.Common, log *zap.Logger, bin Binary, id BusIdentity, checks *health.Checks) (*messaging.Conn, error) {
	conn, err := messaging.Connect(messaging.Options{
		URL:      c.NATSURL,
		Listen:   c.NATSListen,
		StoreDir: filepath.Join(c.DataDir, "nats"),
		Node:     c.NodeName,
		Replicas: c.NATSReplicas,
		NkeyFile: c.NATSNkey, CredsFile: c.NATSCreds,
		TLSCA: c.NATSTLSCA, TLSCert: c.NATSTLSCert, TLSKey: c.NATSTLSKey,
		Name:     fmt.Sprintf("%s@%s", bin, c.NodeName),
		Identity: string(id),
		Log:      log.Named("nats"),
	})
	if err != nil {
		return nil, err
	}
	checks.AddReadiness("nats", conn.Check)
	lc.Append(fx.StopHook(func(ctx context.Context) error { return conn.Close(ctx) }))
	return conn, nil
}

// newTracing builds the process's tracer provider (a no-op one unless
// tracing-endpoint is set); stopping the process flushes its spans.
func newTracing(lc fx.Lifecycle, c *config.Common, bin Binary, log *zap.Logger) (*tracing.Provider, error) {
	host, _ := os.Hostname()
	tp, err := tracing.New(context.Background(), tracing.Config{Endpoint: c.Tracing.Endpoint, SampleRate: c.Tracing.SampleRate},
		tracing.Identity{Service: string(bin), Node: c.NodeName, Instance: fmt.Sprintf("%s/%d", host, os.Getpid())})
	if err != nil {
		return nil, err
	}
	if tp.Enabled() {
		log.Info("tracing on", zap.String("endpoint", c.Tracing.Endpoint), zap.Float64("sampleRate", c.Tracing.SampleRate))
	}
	lc.Append(fx.StopHook(func(ctx context.Context) error {
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("traces not all sent", zap.Error(err))
		}
		return nil
	}))
	return tp, nil
}

// newRESTConfig: the API client; with tracing on its requests carry the
// trace context, so an API server that traces joins each pod's trace.
// A kubeconfig that names its client certificate by file (the node's after
// TLS bootstrap) gets a transport that follows the file as it is renewed.
func newRESTConfig(lc fx.Lifecycle, c *config.Common, bin Binary, tp *tracing.Provider, log *zap.Logger) (*rest.Config, error) {
	cfg, err := kube.RESTConfig(c.Kubeconfig, c.KubeAPIQPS, c.KubeAPIBurst, userAgent(bin), c.KubeAPIContent)
	if err != nil {
		return nil, err
	}
	cfg, follower, err := nodecert.FollowCertFiles(cfg, log.Named("kube-client"), nodecert.DefaultReloadPeriod)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: client certificate: %w", err)
	}
	if follower != nil {
		lc.Append(fx.StartStopHook(follower.Start, follower.Stop))
	}
	if tp.Enabled() {
		cfg.Wrap(tp.Transport)
	}
	if c.Shadow {
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return readOnly{rt} })
	}
	return cfg, nil
}

func userAgent(bin Binary) string { return fmt.Sprintf("splitlet-%s/%s", bin, Version) }

// ensureClientCert runs TLS bootstrap (before anything that needs the API
// server starts, as the kubelet does): the node's client certificate in
// cert-dir and the kubeconfig that names it.
func ensureClientCert(ctx context.Context, c *config.Common, bin string, log *zap.Logger) error {
	return nodecert.EnsureClientCert(ctx, log.Named("nodecert"), nodecert.Options{
		Node: c.NodeName, BootstrapKubeconfig: c.BootstrapKubeconfig, Kubeconfig: c.Kubeconfig,
		CertDir: c.CertDir, UserAgent: userAgent(Binary(bin)),
	})
}

// runClientRotation renews the node's client certificate (invoked in the
// process that keeps the node's credentials, when rotate-certificates is
// on).
func runClientRotation(lc fx.Lifecycle, c *config.Common, bin Binary, log *zap.Logger, cfg *rest.Config) error {
	// A client of its own: renewal never waits behind the stages' calls.
	cs, err := kube.Clientset(kube.OwnLimiterConfig(cfg))
	if err != nil {
		return err
	}
	m, err := nodecert.NewClientRotator(log.Named("nodecert"), nodecert.Options{
		Node: c.NodeName, BootstrapKubeconfig: c.BootstrapKubeconfig, Kubeconfig: c.Kubeconfig,
		CertDir: c.CertDir, UserAgent: userAgent(bin),
	}, cs)
	if err != nil {
		return err
	}
	lc.Append(fx.StartStopHook(m.Start, m.Stop))
	return nil
}

// readOnly passes reads (GET, HEAD: gets, lists, watches) and refuses
// every other request: a shadow writes nothing to the API server.
type readOnly struct{ next http.RoundTripper }

func (r readOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet || req.Method == http.MethodHead {
		return r.next.RoundTrip(req)
	}
	return nil, fmt.Errorf("shadow: %s %s refused (a shadow stage writes nothing to the API server)", req.Method, req.URL.Path)
}

// newClientset builds the client and has /readyz ask the API server's own /readyz.
func newClientset(cfg *rest.Config, checks *health.Checks) (kubernetes.Interface, error) {
	cs, err := kube.Clientset(cfg)
	if err != nil {
		return nil, err
	}
	checks.AddReadiness("kube-apiserver", func(ctx context.Context) error {
		return cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	})
	return cs, nil
}

// newNodePods: the informer on the node's pods, shared by the process's
// stages that watch them (podconfig and statussync in all-in-one).
func newNodePods(cs kubernetes.Interface, c *config.Common) *kube.NodePods {
	return kube.NewNodePods(cs, c.NodeName)
}

func runHealth(lc fx.Lifecycle, s *health.Server, c *config.Common, checks *health.Checks, bin Binary) {
	checks.AddLiveness("ping", func(context.Context) error { return nil })
	if c.DebugPprof {
		s.EnablePprof()
	}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error { return s.Start(c.HTTPAddr, HTTPAddrFile(c, string(bin))) },
		OnStop:  s.Stop,
	})
}
