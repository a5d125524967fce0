// Package service is the prober stage's runner: it feeds the probe workers
// from the bus (pod specs from podupdates, runtime status from podstatus),
// sends their changed results to probes.<p>, runs exec probes through
// runtime.probeexec.<p>, and records Events through the API server.
package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/stagekit"
	"github.com/splitlet/splitlet/libs/tracing"
	"github.com/splitlet/splitlet/services/prober/internal/probe"
	"github.com/splitlet/splitlet/services/prober/internal/workers"
)

// Durable consumer names of the prober (docs/bus.md agreements).
const (
	DurablePodUpdates = bus.DurableProberPodUpdates
	DurablePodStatus  = bus.DurableProberPodStatus
)

// Runner is the running stage.
type Runner struct {
	cfg        *Config
	partitions int
	log        *zap.Logger
	traces     *tracing.Pods
	subjects   bus.Subjects
	pub        *bus.Publisher
	mgr        *workers.Manager
	out        *outbox
	// kit consumes the pod updates and statuses; as a shadow of the live
	// prober, with durables of its own (results under the shadow prefix,
	// no Events).
	kit *stagekit.Kit

	stopRecorder func()

	cancel context.CancelFunc
	wg     sync.WaitGroup

	// consumerHook, set by tests only, adjusts each consumer's options and
	// wraps its handler.
	consumerHook stagekit.ConsumerHook
}

// Deps are what the runner needs from the process.
type Deps struct {
	Config     *Config
	Common     *config.Common
	Log        *zap.Logger
	NC         *nats.Conn
	JS         jetstream.JetStream
	Recorder   record.EventRecorder
	Registerer prometheus.Registerer
	// Metrics is the process's bus metrics, which count the consumers.
	Metrics *bus.Metrics
	// Tracing, if it records, makes each published result a span of its
	// pod's trace (libs/tracing).
	Tracing *tracing.Provider
}

// tracerName names the stage's spans' instrumentation scope.
const tracerName = "github.com/splitlet/splitlet/services/prober"

// New builds the stage for fx: Events go to the API server.
func New(cfg *Config, common *config.Common, log *zap.Logger, nc *nats.Conn, js jetstream.JetStream,
	cs kubernetes.Interface, reg prometheus.Registerer, bm *bus.Metrics, tp *tracing.Provider) (*Runner, error) {
	var rec record.EventRecorder = shadowRecorder{log.Named("prober")}
	stop := func() {}
	if !common.Shadow {
		rec, stop = kube.NewRecorder(cs, common.NodeName)
	}
	r, err := NewWithDeps(Deps{Config: cfg, Common: common, Log: log, NC: nc, JS: js, Recorder: rec, Registerer: reg, Metrics: bm, Tracing: tp})
	if err != nil {
		stop()
		return nil, err
	}
	r.stopRecorder = stop
	return r, nil
}

// NewWithDeps builds the stage from explicit parts.
func NewWithDeps(d Deps) (*Runner, error) {
	if d.Config.ExecGrace < 0 {
		return nil, fmt.Errorf("invalid value %v for prober.exec-grace: negative", d.Config.ExecGrace)
	}
	if d.Config.Instance == "" {
		return nil, errors.New("invalid value for prober.instance: empty")
	}
	log := d.Log.Named("prober")
	r := &Runner{
		cfg:        d.Config,
		partitions: d.Common.Partitions,
		log:        log,
		subjects:   bus.For(d.Common.NodeName),
		pub:        bus.NewPublisher(d.NC, d.JS, d.Common.NodeName, d.Config.Instance, d.Common.BusEncodingOption()),
	}
	results := r.subjects
	if d.Common.Shadow {
		results = r.subjects.Shadow(bus.StageProber)
	}
	r.out = newOutbox(r.pub, results, r.partitions, log)
	if d.Tracing.Enabled() {
		r.traces = tracing.NewPods()
		r.out.tracer, r.out.traces = d.Tracing.Tracer(tracerName), r.traces
	}
	mgr, err := workers.New(
		workers.WithLogger(log),
		workers.WithRecorder(d.Recorder),
		workers.WithRegisterer(d.Registerer),
		workers.WithExecer(r),
		workers.WithSink(r.out.put),
	)
	if err != nil {
		return nil, err
	}
	r.mgr = mgr
	r.kit = stagekit.New(d.JS, d.Common.NodeName, pods{mgr}, stagekit.WithStatus(statuses{r}),
		stagekit.WithLogger(log), stagekit.WithMetrics(d.Metrics), stagekit.WithShadow(d.Common.Shadow), stagekit.WithReplicas(d.Common.NATSReplicas),
		stagekit.WithDurables(DurablePodUpdates, DurablePodStatus), stagekit.WithConsumerHook(r.hook),
		stagekit.WithPodDecoder(workers.DecodePod))
	return r, nil
}

// hook is the kit's consumer hook: the one a test set, if any.
func (r *Runner) hook(opts *bus.ConsumerOptions, h bus.Handler) bus.Handler {
	if r.consumerHook != nil {
		return r.consumerHook(opts, h)
	}
	return h
}

// Manager is the runner's probe manager (for tests and benchmarks).
func (r *Runner) Manager() *workers.Manager { return r.mgr }

// Start returns at once; the consumers are set up in the background,
// retried until the bus is there.
func (r *Runner) Start(context.Context) error {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.out.run(ctx, 5*time.Second)
	}()
	r.kit.Start()
	return nil
}

// Ready reports whether the stage consumes the bus.
func (r *Runner) Ready(context.Context) error { return r.kit.Ready() }

// Stop ends the consumers and the workers, then sends the results that are
// still queued.
func (r *Runner) Stop(ctx context.Context) error {
	if r.cancel == nil {
		return nil
	}
	r.kit.Stop()
	err := r.mgr.Stop(ctx)
	r.cancel()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		err = errors.Join(err, ctx.Err())
	}
	if r.stopRecorder != nil {
		r.stopRecorder()
	}
	return err
}

// pods hands the kit's pod changes to the probe manager, which tells a new
// pod from a known one itself.
type pods struct{ mgr *workers.Manager }

func (p pods) PodAdded(_ string, pod *corev1.Pod)   { p.mgr.UpsertPod(pod) }
func (p pods) PodUpdated(_ string, pod *corev1.Pod) { p.mgr.UpsertPod(pod) }
func (p pods) PodRemoved(uid types.UID)             { p.mgr.RemovePod(uid) }

// statuses hands the kit's runtime statuses to the probe manager, which
// orders them per pod.
type statuses struct{ r *Runner }

func (s statuses) PodStatus(ctx context.Context, source string, seq uint64, st *bus.PodRuntimeStatus) {
	// the results that follow this status join the trace it carries.
	s.r.traces.Remember(ctx, string(st.UID))
	if !s.r.mgr.UpdateStatusFrom(source, seq, st) {
		s.r.log.Debug("dropping a pod status already seen or overtaken", zap.String("source", source),
			zap.Uint64("seq", seq), zap.String(logging.FieldUID, string(st.UID)))
	}
}

// Exec runs an exec probe's command through the pod worker replica that
// owns the pod's partition (runtime.probeexec.<p>, which runs a pod's own
// probe commands only).
func (r *Runner) Exec(ctx context.Context, req bus.ExecRequest, timeout time.Duration) (*probe.ExecOutcome, error) {
	p := bus.Partition(string(req.PodUID), r.partitions)
	rctx, cancel := context.WithTimeout(ctx, timeout+r.cfg.ExecGrace)
	defer cancel()
	env, err := r.pub.Request(rctx, r.subjects.ProbeExec(p), bus.KindExecRequest, req)
	switch {
	case err == nil:
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("no pod worker answers for partition %d", p)
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return nil, probe.ErrTimedOut
	default:
		return nil, err
	}
	res, err := bus.DecodeExecResult(env)
	if err != nil {
		return nil, fmt.Errorf("bad exec answer: %w", err)
	}
	out := append(append([]byte{}, res.Stdout...), res.Stderr...)
	return &probe.ExecOutcome{Output: out, ExitCode: res.ExitCode, Error: res.Error}, nil
}
