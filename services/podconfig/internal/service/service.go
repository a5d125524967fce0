// Package service is the podconfig stage's runner: it reads the podconfig
// keys and wires the sources, the merge loop and the mirror pod manager.
package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/messaging"
	"github.com/splitlet/splitlet/libs/tracing"
	"github.com/splitlet/splitlet/services/podconfig/internal/controller"
	"github.com/splitlet/splitlet/services/podconfig/internal/merge"
	"github.com/splitlet/splitlet/services/podconfig/internal/mirror"
	"github.com/splitlet/splitlet/services/podconfig/internal/source"
)

// Config holds the podconfig keys.
type Config struct {
	APISource          bool
	StaticPodPath      string
	FileCheckFrequency time.Duration
	ManifestURL        string
	ManifestURLHeader  []string
	HTTPCheckFrequency time.Duration
	SnapshotPeriod     time.Duration
	NotificationMode   string
	MirrorPods         bool
	MirrorResync       time.Duration

	// parsed by Validate
	mode   merge.Mode
	header http.Header
}

// RegisterFlags adds the podconfig keys ("podconfig.<key>") to fs.
func (c *Config) RegisterFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&c.APISource, "podconfig.api-source", true, "read the node's pods from the API server (source api)")
	fs.StringVar(&c.StaticPodPath, "podconfig.static-pod-path", "", "directory (or file) of static pod manifests, YAML or JSON, one pod per file (source file); empty: off")
	fs.DurationVar(&c.FileCheckFrequency, "podconfig.file-check-frequency", 20*time.Second, "how often the static pod path is read in full (file system notifications also trigger a read)")
	fs.StringVar(&c.ManifestURL, "podconfig.manifest-url", "", "URL serving a Pod or a PodList (source http); empty: off")
	fs.StringSliceVar(&c.ManifestURLHeader, "podconfig.manifest-url-header", nil, "HTTP headers of the manifest URL request, as Name:value, comma separated (kubelet --manifest-url-header)")
	fs.DurationVar(&c.HTTPCheckFrequency, "podconfig.http-check-frequency", 20*time.Second, "how often the manifest URL is fetched")
	fs.DurationVar(&c.SnapshotPeriod, "podconfig.snapshot-period", 30*time.Second, "how often every seen source's pods are re-sent as SET snapshots per partition; on a node with more pods, the snapshots are spaced so that they re-send at most 100 pods a second on average (20000 pods: every 200 s)")
	fs.StringVar(&c.NotificationMode, "podconfig.notification-mode", "incremental", "incremental (ADD/UPDATE/DELETE/REMOVE/RECONCILE), snapshot (SET of each changed partition) or snapshot-and-updates (SET for additions and removals, UPDATE/DELETE for changes)")
	fs.BoolVar(&c.MirrorPods, "podconfig.mirror-pods", true, "keep a mirror pod in the API server for every static pod and delete orphaned ones")
	fs.DurationVar(&c.MirrorResync, "podconfig.mirror-resync", 10*time.Second, "how often every mirror pod is checked against its static pod")
}

// Validate checks the values and names the key at fault.
func (c *Config) Validate() error {
	mode, ok := merge.ParseMode(c.NotificationMode)
	if !ok {
		return fmt.Errorf("invalid value %q for podconfig.notification-mode: want incremental, snapshot or snapshot-and-updates", c.NotificationMode)
	}
	for key, d := range map[string]time.Duration{"podconfig.file-check-frequency": c.FileCheckFrequency,
		"podconfig.http-check-frequency": c.HTTPCheckFrequency, "podconfig.snapshot-period": c.SnapshotPeriod,
		"podconfig.mirror-resync": c.MirrorResync} {
		if d <= 0 {
			return fmt.Errorf("invalid value %v for %s: must be positive", d, key)
		}
	}
	if c.ManifestURL != "" {
		u, err := url.Parse(c.ManifestURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("invalid value %q for podconfig.manifest-url: want an http or https URL", logging.RedactURL(c.ManifestURL))
		}
	}
	header, err := c.headers()
	if err != nil {
		return err
	}
	if !c.APISource && c.StaticPodPath == "" && c.ManifestURL == "" {
		return errors.New("podconfig: no pod source (podconfig.api-source is off, podconfig.static-pod-path and podconfig.manifest-url are empty)")
	}
	c.mode, c.header = mode, header
	return nil
}

func (c *Config) headers() (http.Header, error) {
	h := http.Header{}
	for i, kv := range c.ManifestURLHeader {
		k, v, ok := strings.Cut(kv, ":")
		if !ok || strings.TrimSpace(k) == "" {
			// The value is not shown: a header may carry a credential.
			return nil, fmt.Errorf("invalid value for podconfig.manifest-url-header (entry %d): want Name:value", i+1)
		}
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return h, nil
}

// Defaults returns a Config with every key at its default.
func Defaults() *Config {
	c := &Config{}
	fs := pflag.NewFlagSet("defaults", pflag.ContinueOnError)
	c.RegisterFlags(fs)
	return c
}

// Runner is the running stage.
type Runner struct {
	cfg        *Config
	log        *zap.Logger
	ctrl       *controller.Controller
	api        *source.API
	file       *source.File
	http       *source.HTTP
	mirrors    *mirror.Manager
	stopEvents func()
	// statuses hands the mirror manager the pod workers' statuses (nil
	// without mirror pods or a bus).
	statuses *statusFollower

	cancel   context.CancelFunc
	wg       sync.WaitGroup
	stopOnce sync.Once
	stopped  chan struct{}
}

// New builds the stage from the process's common parts.
func New(cfg *Config, common *config.Common, log *zap.Logger, cs kubernetes.Interface, pods *kube.NodePods, conn *messaging.Conn, js jetstream.JetStream, reg prometheus.Registerer, bm *bus.Metrics, tp *tracing.Provider) (*Runner, error) {
	var opts []controller.Option
	if tp.Enabled() {
		opts = append(opts, controller.WithTracer(tp.Tracer(tracerName)))
	}
	opts = append(opts, controller.WithPublisherOptions(common.BusEncodingOption()))
	return Build(cfg, common.NodeName, common.Partitions, log, cs, pods, conn.NC, js, conn.StreamsReady, reg, bm, opts...)
}

// tracerName names the stage's spans' instrumentation scope.
const tracerName = "github.com/splitlet/splitlet/services/podconfig"

// Build wires the stage; pods (nil: an informer of the stage's own) is the
// process's informer on the node's pods, js (nil: none) the JetStream the
// mirror pods follow the pod workers' statuses on, and waitStreams (may be
// nil) is waited for before the first publish; bm (nil: none) counts the
// stage's bus metrics.
func Build(cfg *Config, node string, partitions int, log *zap.Logger, cs kubernetes.Interface, pods *kube.NodePods, nc *nats.Conn,
	js jetstream.JetStream, waitStreams func(context.Context) error, reg prometheus.Registerer, bm *bus.Metrics, extra ...controller.Option) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log = log.Named("podconfig")
	var recorder record.EventRecorder
	r := &Runner{cfg: cfg, log: log}
	recorder, r.stopEvents = kube.NewRecorder(cs, node)
	storage := merge.New(partitions, merge.WithMode(cfg.mode), merge.WithRecorder(recorder))
	opts := []controller.Option{controller.WithLogger(log), controller.WithSnapshotPeriod(cfg.SnapshotPeriod),
		controller.WithStorage(storage), controller.WithWaitReady(waitStreams), controller.WithStaticPodPath(cfg.StaticPodPath),
		controller.WithBusMetrics(bm)}
	opts = append(opts, extra...)
	if reg != nil {
		opts = append(opts, controller.WithRegisterer(reg))
	}
	ctrl, err := controller.New(nc, node, partitions, opts...)
	if err != nil {
		return nil, err
	}
	r.ctrl = ctrl
	// The informer runs even without the api source when mirror pods are
	// kept: it is how mirror pods are seen.
	if cfg.APISource || cfg.MirrorPods {
		var sink source.Sink = ctrl
		if !cfg.APISource {
			sink = discard{}
		}
		if pods == nil {
			pods = kube.NewNodePods(cs, node)
		}
		r.api = source.NewAPI(pods, node, sink, log.Named("api"))
	}
	if cfg.APISource {
		ctrl.AddSource(merge.SourceAPI)
	}
	if cfg.StaticPodPath != "" {
		ctrl.AddSource(merge.SourceFile)
		r.file = source.NewFile(cfg.StaticPodPath, node, cfg.FileCheckFrequency, ctrl, recorder, log.Named("file"))
	}
	if cfg.ManifestURL != "" {
		ctrl.AddSource(merge.SourceHTTP)
		r.http = source.NewHTTP(cfg.ManifestURL, cfg.header, node, cfg.HTTPCheckFrequency, ctrl, recorder, log.Named("http"))
	}
	if cfg.MirrorPods {
		r.mirrors = mirror.New(cs, node, r.api.Lister(), r.api.HasSynced, recorder, log.Named("mirror"), cfg.MirrorResync)
		r.api.SetMirrorObserver(r.mirrors)
		ctrl.SetStaticSink(r.mirrors)
		if js != nil {
			r.statuses = &statusFollower{js: js, node: node, waitStreams: waitStreams, m: r.mirrors, bm: bm, log: log.Named("mirror")}
		}
	}
	return r, nil
}

type discard struct{}

func (discard) Submit(merge.Update) {}

// Controller is the merge loop (tests read its storage).
func (r *Runner) Controller() *controller.Controller { return r.ctrl }

// Start returns at once; the stage's loops run in the background.
func (r *Runner) Start(context.Context) error {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.ctrl.Run(ctx) }()
	if r.api != nil {
		r.api.Start(ctx)
	}
	if r.file != nil {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.file.Run(ctx) }()
	}
	if r.http != nil {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.http.Run(ctx) }()
	}
	if r.mirrors != nil {
		r.mirrors.Start(ctx)
	}
	if r.statuses != nil {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.statuses.run(ctx) }()
	}
	return nil
}

// Ready: the API source (when on) has handed over its initial list.
func (r *Runner) Ready(context.Context) error {
	if r.cfg.APISource && !r.ctrl.Storage().Seen(merge.SourceAPI) {
		return errors.New("api source not synced yet")
	}
	return nil
}

// Stop cancels the loops and waits for them: the merge loop publishes what
// was queued before it returns.
func (r *Runner) Stop(ctx context.Context) error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	r.stopOnce.Do(func() {
		r.stopped = make(chan struct{})
		go func() {
			r.wg.Wait()
			if r.mirrors != nil {
				r.mirrors.Wait()
			}
			if r.api != nil {
				r.api.Stop()
			}
			r.stopEvents()
			close(r.stopped)
		}()
	})
	select {
	case <-r.stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("podconfig: stop: %w", ctx.Err())
	}
}
