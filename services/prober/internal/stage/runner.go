// Package stage is the prober stage's runner: it feeds the probe workers
// from the bus (pod specs from podupdates, runtime status from podstatus),
// sends their changed results to probes.<p>, runs exec probes through
// runtime.probeexec.<p>, and records Events through the API server.
package stage

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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
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
	node       string
	replicas   int // nats-replicas of the node's streams
	partitions int
	log        *zap.Logger
	traces     *tracing.Pods
	snapshots  *bus.Snapshots
	nc         *nats.Conn
	js         jetstream.JetStream
	subjects   bus.Subjects
	// shadow: the stage runs as a shadow of the live prober (durables of
	// its own, results under the shadow prefix, no Events).
	shadow   bool
	durables [2]string // pod updates, pod status
	pub      *bus.Publisher
	mgr      *workers.Manager
	out      *outbox

	stopRecorder func()

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	stops  []func()
	// replaying: the consumers were reset to replay the streams.
	replaying bool
	ready     bool
	lastErr   error

	// consumerHook, set by tests only, adjusts each consumer's options and
	// wraps its handler.
	consumerHook func(*bus.ConsumerOptions, bus.Handler) bus.Handler
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
	// Tracing, if it records, makes each published result a span of its
	// pod's trace (libs/tracing).
	Tracing *tracing.Provider
}

// shadowInactive is how long a shadow's durables outlive the shadow: an
// experiment that ended leaves nothing on the server for long.
const shadowInactive = time.Hour

// tracerName names the stage's spans' instrumentation scope.
const tracerName = "github.com/splitlet/splitlet/services/prober"

// New builds the stage for fx: Events go to the API server.
func New(cfg *Config, common *config.Common, log *zap.Logger, nc *nats.Conn, js jetstream.JetStream,
	cs kubernetes.Interface, reg prometheus.Registerer, tp *tracing.Provider) (*Runner, error) {
	var rec record.EventRecorder = shadowRecorder{log.Named("prober")}
	stop := func() {}
	if !common.Shadow {
		rec, stop = kube.NewRecorder(cs, common.NodeName)
	}
	r, err := NewWithDeps(Deps{Config: cfg, Common: common, Log: log, NC: nc, JS: js, Recorder: rec, Registerer: reg, Tracing: tp})
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
		node:       d.Common.NodeName,
		replicas:   d.Common.NATSReplicas,
		partitions: d.Common.Partitions,
		log:        log,
		nc:         d.NC,
		js:         d.JS,
		subjects:   bus.For(d.Common.NodeName),
		shadow:     d.Common.Shadow,
		durables:   [2]string{DurablePodUpdates, DurablePodStatus},
		pub:        bus.NewPublisher(d.NC, d.JS, d.Common.NodeName, d.Config.Instance, d.Common.BusEncodingOption()),
		snapshots:  bus.NewSnapshots(),
	}
	results := r.subjects
	if r.shadow {
		r.durables = [2]string{bus.ShadowDurable(DurablePodUpdates), bus.ShadowDurable(DurablePodStatus)}
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
	return r, nil
}

// Manager is the runner's probe manager (for tests and benchmarks).
func (r *Runner) Manager() *workers.Manager { return r.mgr }

// Start returns at once; the consumers are set up in the background,
// retried until the bus is there.
func (r *Runner) Start(context.Context) error {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		r.out.run(ctx, 5*time.Second)
	}()
	go func() {
		defer r.wg.Done()
		r.subscribe(ctx)
	}()
	return nil
}

func (r *Runner) subscribe(ctx context.Context) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := r.trySubscribe(ctx)
		if err == nil {
			r.mu.Lock()
			r.ready, r.lastErr = true, nil
			r.mu.Unlock()
			r.log.Info("consuming pod updates and pod status",
				zap.String("durable", r.durables[0]), zap.String("statusDurable", r.durables[1]), zap.Bool("shadow", r.shadow))
			return
		}
		r.mu.Lock()
		r.lastErr = err
		r.mu.Unlock()
		if attempt%10 == 0 {
			r.log.Warn("cannot consume the bus yet, retrying", zap.Error(err))
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (r *Runner) trySubscribe(ctx context.Context) error {
	if err := bus.EnsureStreamsReplicas(ctx, r.js, r.node, r.replicas); err != nil {
		return err
	}
	if r.shadow {
		if err := bus.EnsureShadowStream(ctx, r.js, r.node, r.replicas); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.replaying {
		// The prober keeps its pods and statuses in memory only, so each
		// start reads the streams' whole history again instead of resuming
		// the durable consumers where the last run stopped: a resumed
		// consumer would not bring back pods and statuses that did not
		// change since.
		for _, c := range []struct{ stream, durable string }{
			{bus.StreamName(r.node, bus.StreamPodStatus), r.durables[1]},
			{bus.StreamName(r.node, bus.StreamPodUpdates), r.durables[0]},
		} {
			if err := r.js.DeleteConsumer(ctx, c.stream, c.durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return fmt.Errorf("reset consumer %s: %w", c.durable, err)
			}
		}
		r.replaying = true
	}
	consume := func(opts bus.ConsumerOptions, h bus.Handler) (func(), error) {
		if r.shadow {
			opts.InactiveThreshold = shadowInactive
		}
		if r.consumerHook != nil {
			h = r.consumerHook(&opts, h)
		}
		return bus.Consume(ctx, r.js, opts, h)
	}
	if len(r.stops) < 1 {
		stop, err := consume(bus.ConsumerOptions{
			Stream:  bus.StreamName(r.node, bus.StreamPodStatus),
			Durable: r.durables[1],
			Filters: []string{r.subjects.PodStatusAll()},
			Logger:  r.log,
			// one pod a message: the manager orders statuses per pod, so
			// one redelivered behind another pod's newer status is taken.
			OrderedByHandler: true,
		}, r.onStatus)
		if err != nil {
			return err
		}
		r.stops = append(r.stops, stop)
	}
	if len(r.stops) < 2 {
		stop, err := consume(bus.ConsumerOptions{
			Stream:  bus.StreamName(r.node, bus.StreamPodUpdates),
			Durable: r.durables[0],
			// podupdates.* only: the server keeps the reconciles
			// (podupdates.reconcile.<p>, status-only changes, which the
			// kubelet's probe manager ignores) for the pod workers.
			Filters: []string{r.subjects.PodUpdatesAll()},
			Logger:  r.log,
		}, r.onPodUpdate)
		if err != nil {
			return err
		}
		r.stops = append(r.stops, stop)
	}
	return nil
}

// Ready reports whether the stage consumes the bus.
func (r *Runner) Ready(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready {
		return nil
	}
	if r.lastErr != nil {
		return fmt.Errorf("not consuming the bus: %w", r.lastErr)
	}
	return errors.New("not consuming the bus yet")
}

// Stop ends the consumers and the workers, then sends the results that are
// still queued.
func (r *Runner) Stop(ctx context.Context) error {
	if r.cancel == nil {
		return nil
	}
	r.mu.Lock()
	stops := r.stops
	r.stops = nil
	r.mu.Unlock()
	for _, s := range stops {
		s()
	}
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

func (r *Runner) onPodUpdate(_ context.Context, subject string, e *bus.Envelope) error {
	u, err := bus.DecodePodUpdate(e)
	if err != nil {
		// A payload that does not decode will not decode next time either.
		r.log.Error("dropping bad pod update", zap.String(logging.FieldSubject, subject), zap.Error(err))
		return nil
	}
	op, pods, apply := r.snapshots.Resolve(subject, e, u)
	if !apply {
		return nil
	}
	u.Pods = pods
	switch op {
	case bus.OpRemove:
		for i := range u.Pods {
			r.mgr.RemovePod(u.Pods[i].UID)
		}
	case bus.OpSet:
		p, ok := bus.PartitionOf(subject)
		if !ok {
			r.log.Error("SET on a subject without a partition", zap.String(logging.FieldSubject, subject))
			return nil
		}
		r.mgr.SyncSource(e.Source, func(uid types.UID) bool {
			return bus.Partition(string(uid), r.partitions) == p
		}, u.Pods)
	default:
		for i := range u.Pods {
			r.mgr.UpsertPod(e.Source, &u.Pods[i])
		}
	}
	return nil
}

func (r *Runner) onStatus(ctx context.Context, subject string, e *bus.Envelope) error {
	st, err := bus.DecodePodRuntimeStatus(e)
	if err != nil {
		r.log.Error("dropping bad pod status", zap.String(logging.FieldSubject, subject), zap.Error(err))
		return nil
	}
	// the results that follow this status join the trace it carries.
	r.traces.Remember(ctx, string(st.UID))
	if !r.mgr.UpdateStatusFrom(e.Source, e.Seq, st) {
		r.log.Debug("dropping a pod status already seen or overtaken", zap.String(logging.FieldSubject, subject),
			zap.String("source", e.Source), zap.Uint64("seq", e.Seq), zap.String(logging.FieldUID, string(st.UID)))
	}
	return nil
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
