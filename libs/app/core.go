package app

import (
	"context"
	"fmt"
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
)

// Core provides what every service may ask for: the NATS connection and
// JetStream, the Kubernetes client (built only if some service asks), the
// health checks, the metrics registry, and the health server.
var Core = fx.Module("core",
	fx.Provide(
		newMessaging,
		func(c *messaging.Conn) *nats.Conn { return c.NC },
		func(c *messaging.Conn) jetstream.JetStream { return c.JS },
		newRESTConfig,
		newClientset,
		func() *health.Checks { return health.NewChecks() },
		health.NewRegistry,
		func(r *prometheus.Registry) prometheus.Registerer { return r },
		health.NewServer,
	),
	fx.Invoke(func(r *prometheus.Registry) { r.MustRegister(bus.HandlerPanics, bus.PodStageDuration, bus.BusDelivery) }),
	fx.Invoke(runHealth),
)

func newMessaging(lc fx.Lifecycle, c *config.Common, log *zap.Logger, bin Binary, checks *health.Checks) (*messaging.Conn, error) {
	conn, err := messaging.Connect(messaging.Options{
		URL:      c.NATSURL,
		Listen:   c.NATSListen,
		StoreDir: filepath.Join(c.DataDir, "nats"),
		Node:     c.NodeName,
		Replicas: c.NATSReplicas,
		NkeyFile: c.NATSNkey, CredsFile: c.NATSCreds,
		TLSCA: c.NATSTLSCA, TLSCert: c.NATSTLSCert, TLSKey: c.NATSTLSKey,
		Name: fmt.Sprintf("%s@%s", bin, c.NodeName),
		Log:  log.Named("nats"),
	})
	if err != nil {
		return nil, err
	}
	checks.AddReadiness("nats", conn.Check)
	lc.Append(fx.StopHook(func(ctx context.Context) error { return conn.Close(ctx) }))
	return conn, nil
}

func newRESTConfig(c *config.Common, bin Binary) (*rest.Config, error) {
	return kube.RESTConfig(c.Kubeconfig, c.KubeAPIQPS, c.KubeAPIBurst, fmt.Sprintf("splitlet-%s/%s", bin, Version), c.KubeAPIContent)
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
