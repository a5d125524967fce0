// Package service is the statussync stage's runner: it feeds the status
// manager from the bus (pod updates, runtime status, probe results) and from
// an informer on the node's API pods, and runs its writers.
package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/tracing"
	"github.com/splitlet/splitlet/services/statussync/internal/statusmanager"
)

// Durable consumer names (docs/bus.md, cross-stage agreement 5).
const (
	DurablePodUpdates = bus.DurableStatussyncPodUpdates
	DurablePodStatus  = bus.DurableStatussyncPodStatus
	DurableProbes     = bus.DurableStatussyncProbes
)

// Config holds the statussync keys.
type Config struct {
	Workers       int
	BatchPeriod   time.Duration
	CoalesceDelay time.Duration
	PendingTTL    time.Duration
	ReplayWindow  time.Duration
}

// RegisterFlags adds the statussync keys ("statussync.<key>") to fs.
func (c *Config) RegisterFlags(fs *pflag.FlagSet) {
	fs.IntVar(&c.Workers, "statussync.workers", 32, "pod status writers working in parallel (the client QPS and burst bound them too); a write waits on the API server: at a few hundred pods a second 16 fall behind, and 64 crowd a busy API server more than 32 (make bench)")
	fs.DurationVar(&c.BatchPeriod, "statussync.batch-period", 10*time.Second, "how often every pod's status is compared with the API server and re-sent where it differs (kubelet: syncBatch)")
	fs.DurationVar(&c.CoalesceDelay, "statussync.coalesce-delay", 100*time.Millisecond, "how long a changed pod status waits before it is written, so that the changes of that time go out as one patch; 0 writes at once")
	fs.DurationVar(&c.PendingTTL, "statussync.pending-ttl", time.Minute, "how long a runtime status of a pod whose spec is unknown is held before it is dropped")
	fs.DurationVar(&c.ReplayWindow, "statussync.replay-window", 2*time.Minute, "at start, re-read this much of the bus history before resuming, so that statuses taken but not yet written when the stage stopped are written; 0 disables")
}

// Validate checks the keys.
func (c *Config) Validate() error {
	switch {
	case c.Workers < 1 || c.Workers > 256:
		return fmt.Errorf("invalid value %d for statussync.workers: must be 1 to 256", c.Workers)
	case c.BatchPeriod <= 0:
		return fmt.Errorf("invalid value %v for statussync.batch-period: must be positive", c.BatchPeriod)
	case c.CoalesceDelay < 0 || c.CoalesceDelay > 10*time.Second:
		return fmt.Errorf("invalid value %v for statussync.coalesce-delay: must be 0 to 10s", c.CoalesceDelay)
	case c.PendingTTL <= 0:
		return fmt.Errorf("invalid value %v for statussync.pending-ttl: must be positive", c.PendingTTL)
	case c.ReplayWindow < 0 || c.ReplayWindow > time.Hour:
		return fmt.Errorf("invalid value %v for statussync.replay-window: must be 0 to 1h (the streams keep an hour)", c.ReplayWindow)
	}
	return nil
}

// Runner is the running stage.
type Runner struct {
	cfg    *Config
	common *config.Common
	log    *zap.Logger
	kube   kubernetes.Interface
	pods   *kube.NodePods
	js     jetstream.JetStream
	reg    prometheus.Registerer
	bm     *bus.Metrics

	// crash: stop without writing pending statuses (tests).
	crash   bool
	ready   atomic.Bool
	loop    app.Background
	mu      sync.Mutex
	manager *statusmanager.Manager
	// pub publishes a shadow's writes (made once, by shadowWrite).
	pubOnce sync.Once
	pub     *bus.Publisher
	// tracer and traces: spans of the pods whose trace came on the bus
	// (nil with tracing off).
	tracer trace.Tracer
	traces *tracing.Pods
}

// New builds the stage.
func New(cfg *Config, common *config.Common, log *zap.Logger, kube kubernetes.Interface, pods *kube.NodePods, js jetstream.JetStream, reg prometheus.Registerer, bm *bus.Metrics, tp *tracing.Provider) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pods.Want(podView)
	r := &Runner{cfg: cfg, common: common, log: log.Named("statussync"), kube: kube, pods: pods, js: js, reg: reg, bm: bm}
	if tp.Enabled() {
		r.tracer, r.traces = tp.Tracer(tracerName), tracing.NewPods()
	}
	return r, nil
}

// shadowWrite publishes a write a shadow statussync computed under its
// shadow prefix (StatusPatch on shadow.statussync.statuspatches.<p>),
// instead of sending it to the API server.
func (r *Runner) shadowWrite(ctx context.Context, pod *corev1.Pod, patch []byte, del bool) error {
	node := r.common.NodeName
	subject := bus.For(node).Shadow(bus.StageStatussync).StatusPatches(bus.Partition(string(pod.UID), r.common.Partitions))
	r.pubOnce.Do(func() { r.pub = bus.NewPublisher(nil, r.js, node, bus.ShadowIdentity(bus.StageStatussync)) })
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return r.pub.Publish(pctx, subject, bus.KindStatusPatch, "", &bus.StatusPatch{
		PodUID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, Patch: patch, Delete: del})
}

// discardRecorder is a shadow's Event recorder: it records nothing.
type discardRecorder struct{}

func (discardRecorder) Event(runtime.Object, string, string, string)          {}
func (discardRecorder) Eventf(runtime.Object, string, string, string, ...any) {}
func (discardRecorder) AnnotatedEventf(runtime.Object, map[string]string, string, string, string, ...any) {
}

// podView is what statussync reads of the node's pods.
var podView = kube.PodView{Name: "statussync", Transform: statusmanager.APIView}

// tracerName names the stage's spans' instrumentation scope.
const tracerName = "github.com/splitlet/splitlet/services/statussync"

// Start returns at once; the stage's loops run in the background.
func (r *Runner) Start(context.Context) error {
	r.loop.Start(r.log, r.run)
	return nil
}

// Stop stops consuming, lets the writes in hand finish, and returns.
func (r *Runner) Stop(ctx context.Context) error {
	return r.loop.Stop(ctx)
}

// Ready is true once the informer is synced and the consumers run.
func (r *Runner) Ready(context.Context) error {
	if !r.ready.Load() {
		return errors.New("statussync: starting")
	}
	return nil
}

// Manager is the status manager once running (for tests).
func (r *Runner) Manager() *statusmanager.Manager {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.manager
}

func (r *Runner) run(ctx context.Context) error {
	node := r.common.NodeName
	log := r.log.With(zap.String(logging.FieldNode, node))
	// Alone, the informer caches only what the status manager reads of each
	// pod (statusmanager.APIView); beside podconfig in one process, the two
	// share podconfig's.
	podInformer, release := r.pods.Acquire(podView)
	defer release()
	var recorder record.EventRecorder = discardRecorder{}
	var dryRun func(context.Context, *corev1.Pod, []byte, bool) error
	if r.common.Shadow {
		// a shadow writes nothing to the API server: its writes go under
		// its shadow prefix, its Events nowhere.
		dryRun = r.shadowWrite
	} else {
		var stopRecorder func()
		recorder, stopRecorder = kube.NewRecorder(r.kube, node)
		defer stopRecorder()
	}
	m, err := statusmanager.New(r.kube, podInformer, log, statusmanager.Options{
		DryRun:        dryRun,
		Workers:       r.cfg.Workers,
		BatchPeriod:   r.cfg.BatchPeriod,
		CoalesceDelay: r.cfg.CoalesceDelay,
		PendingTTL:    r.cfg.PendingTTL,
		Partitions:    r.common.Partitions,
		Recorder:      recorder,
		Registerer:    r.reg,
		BusMetrics:    r.bm,

		DropPendingOnStop: r.crash,
		Tracer:            r.tracer,
		Traces:            r.traces,
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.manager = m
	r.mu.Unlock()
	if !cache.WaitForCacheSync(ctx.Done(), m.HasSynced) {
		return ctx.Err()
	}
	if err := r.ensureStreams(ctx, node); err != nil {
		return err
	}
	if r.common.Shadow {
		if err := bus.EnsureShadowStream(ctx, r.js, node, r.common.NATSReplicas); err != nil {
			return err
		}
	}

	managerDone := make(chan struct{})
	mctx, stopManager := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(managerDone)
		m.Run(mctx)
	}()
	defer func() {
		stopManager()
		<-managerDone
	}()

	stops, err := r.consume(ctx, node, m, log)
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	if err != nil {
		return err
	}
	r.ready.Store(true)
	log.Info("statussync running", zap.Int("workers", r.cfg.Workers), zap.Duration("batchPeriod", r.cfg.BatchPeriod),
		zap.Duration("coalesceDelay", r.cfg.CoalesceDelay))
	<-ctx.Done()
	r.ready.Store(false)
	return nil
}

// ensureStreams creates the node's streams (idempotent), retrying until the
// bus answers or the stage stops.
func (r *Runner) ensureStreams(ctx context.Context, node string) error {
	delay := 100 * time.Millisecond
	for {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := bus.EnsureStreamsReplicas(sctx, r.js, node, r.common.NATSReplicas)
		cancel()
		if err == nil {
			return nil
		}
		r.log.Warn("bus streams not ready, retrying", zap.Error(err))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// consumeSpec is one stream the stage consumes: replayed first, then
// followed by a durable consumer.
type consumeSpec struct {
	stream, durable string
	// filter, when set, is the one subject of the stream consumed.
	filter string
	handle bus.Handler
	// perPod: the handler orders the messages per pod itself (one pod a
	// message), not by the subject's high-water mark.
	perPod bool
}

// consume replays the recent history of the pod updates, runtime statuses
// and probe results into m, then follows each with a durable consumer.
func (r *Runner) consume(ctx context.Context, node string, m *statusmanager.Manager, log *zap.Logger) ([]func(), error) {
	specs := r.consumeSpecs(node, m, log)
	r.replayRecent(ctx, node, specs, log)
	return r.startConsumers(ctx, node, specs, log)
}

// consumeSpecs lists the streams and their handlers. One high-water mark
// per stream, shared by the replay and the durable consumer, keeps a
// message replayed from being applied again after a newer one (the runtime
// statuses, one pod a message, are ordered per pod by the manager instead).
func (r *Runner) consumeSpecs(node string, m *statusmanager.Manager, log *zap.Logger) []consumeSpec {
	subjects := bus.For(node)
	specs := []consumeSpec{
		// podupdates.* only: the server keeps the reconciles
		// (podupdates.reconcile.<p>) from this consumer; their API status
		// (readiness gates: NeedToReconcilePodReadiness) reaches the
		// manager through its own pod informer.
		{bus.StreamPodUpdates, DurablePodUpdates, subjects.PodUpdatesAll(), r.handlePodUpdate(m, bus.NewSnapshots(), log), false},
		{bus.StreamPodStatus, DurablePodStatus, "", r.handleRuntimeStatus(m, log), true},
		{bus.StreamProbes, DurableProbes, "", r.handleProbeResult(m, log), false},
	}
	for i := range specs {
		if !specs[i].perPod {
			specs[i].handle = dedupOnce(specs[i].handle, log)
		}
	}
	return specs
}

// dedupOnce drops a message h has seen or a newer one overtook.
func dedupOnce(h bus.Handler, log *zap.Logger) bus.Handler {
	d := bus.NewDedup()
	return func(ctx context.Context, subject string, e *bus.Envelope) error {
		// a terminated message recovered from the stream is older than
		// some taken since, though none of them supersedes it.
		if !bus.Recovering(ctx) && !d.Accept(subject, e) {
			log.Debug("dropping a message already seen or overtaken", zap.String(logging.FieldSubject, subject),
				zap.String("source", e.Source), zap.Uint64("seq", e.Seq))
			return nil
		}
		return h(ctx, subject, e)
	}
}

// handlePodUpdate hands the pods of a pod update to m, resolved against
// the partition's last snapshot.
func (r *Runner) handlePodUpdate(m *statusmanager.Manager, snapshots *bus.Snapshots, log *zap.Logger) bus.Handler {
	return func(mctx context.Context, subject string, e *bus.Envelope) error {
		u, err := bus.DecodePodUpdateWith(e, statusmanager.DecodeBusPod)
		if err != nil {
			log.Warn("dropping malformed pod update", zap.String(logging.FieldSubject, subject), zap.Error(err))
			return nil
		}
		p, ok := bus.PartitionOf(subject)
		if !ok {
			log.Warn("dropping pod update on a subject without a partition", zap.String(logging.FieldSubject, subject))
			return nil
		}
		if r.traces != nil {
			for i := range u.Pods {
				r.traces.Remember(mctx, string(u.Pods[i].UID))
			}
		}
		op, pods, apply := snapshots.Resolve(subject, e, u)
		if !apply {
			return nil
		}
		m.PodUpdate(op, e.Source, p, pods)
		return nil
	}
}

// handleRuntimeStatus hands a pod's runtime status to m, which orders them
// per pod.
func (r *Runner) handleRuntimeStatus(m *statusmanager.Manager, log *zap.Logger) bus.Handler {
	return func(mctx context.Context, subject string, e *bus.Envelope) error {
		rs, err := bus.DecodePodRuntimeStatus(e)
		if err != nil {
			log.Warn("dropping malformed runtime status", zap.String(logging.FieldSubject, subject), zap.Error(err))
			return nil
		}
		r.traces.Remember(mctx, string(rs.UID))
		// ordered per pod: a status another pod's newer one overtook
		// (redelivered after a NATS server was lost) is still taken.
		if !m.RuntimeStatusFrom(e.Source, e.Seq, rs) {
			log.Debug("dropping a runtime status already seen or overtaken", zap.String(logging.FieldSubject, subject),
				zap.String("source", e.Source), zap.Uint64("seq", e.Seq), zap.String(logging.FieldUID, string(rs.UID)))
		}
		return nil
	}
}

// handleProbeResult hands a probe result to m.
func (r *Runner) handleProbeResult(m *statusmanager.Manager, log *zap.Logger) bus.Handler {
	return func(mctx context.Context, subject string, e *bus.Envelope) error {
		pr, err := bus.DecodeProbeResult(e)
		if err != nil {
			log.Warn("dropping malformed probe result", zap.String(logging.FieldSubject, subject), zap.Error(err))
			return nil
		}
		r.traces.Remember(mctx, string(pr.PodUID))
		m.ProbeResult(pr)
		return nil
	}
}

// replayRecent replays each stream's last ReplayWindow; an incomplete
// replay is logged, the durable consumers then carry on.
func (r *Runner) replayRecent(ctx context.Context, node string, specs []consumeSpec, log *zap.Logger) {
	for _, s := range specs {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n, err := replay(rctx, r.js, bus.StreamName(node, s.stream), s.filter, r.cfg.ReplayWindow, s.handle, log)
		cancel()
		if err != nil {
			log.Warn("replay of recent bus history incomplete", zap.String("stream", s.stream), zap.Error(err))
		} else if n > 0 {
			log.Info("replayed recent bus history", zap.String("stream", s.stream), zap.Int("messages", n))
		}
	}
}

// startConsumers starts one durable consumer a stream (a shadow's own,
// gone an hour after it is) and returns their stops.
func (r *Runner) startConsumers(ctx context.Context, node string, specs []consumeSpec, log *zap.Logger) ([]func(), error) {
	var stops []func()
	for _, s := range specs {
		var filters []string
		if s.filter != "" {
			filters = []string{s.filter}
		}
		durable, inactive := s.durable, time.Duration(0)
		if r.common.Shadow {
			durable, inactive = bus.ShadowDurable(s.durable), time.Hour
		}
		stop, err := bus.Consume(ctx, r.js, bus.ConsumerOptions{
			Stream:            bus.StreamName(node, s.stream),
			Durable:           durable,
			InactiveThreshold: inactive,
			Filters:           filters,
			Logger:            log,
			Metrics:           r.bm,
			OrderedByHandler:  s.perPod,
		}, s.handle)
		if err != nil {
			return stops, err
		}
		stops = append(stops, stop)
	}
	return stops, nil
}
