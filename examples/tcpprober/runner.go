package tcpprober

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/logging"
)

// The durable consumer names of a prober stage (docs/bus.md, agreement 4).
const (
	DurablePodUpdates = bus.DurableProberPodUpdates
	DurablePodStatus  = bus.DurableProberPodStatus
)

// Runner is the running stage: a table of pods fed from the bus, and one
// probe worker per (pod, container, probe type).
type Runner struct {
	node       string
	partitions int
	log        *zap.Logger
	js         jetstream.JetStream
	subjects   bus.Subjects
	// results are the subjects of its results: the node's, or its shadow
	// prefix's when it runs as a shadow (the shadow key), with durables
	// of its own.
	results   bus.Subjects
	shadow    bool
	pub       *bus.Publisher
	httpGet   string
	snapshots *bus.Snapshots

	mu     sync.Mutex
	pods   map[types.UID]*podEntry
	status map[types.UID]*bus.PodRuntimeStatus
	// statusOrder is where each pod's statuses stand: they are ordered
	// per pod, not by their subject (docs/bus.md).
	statusOrder map[types.UID]bus.PodOrder
	ready       error

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the subscriber and every worker
	stops  []func()
}

// podEntry is what the prober knows of one pod.
type podEntry struct {
	pod       *corev1.Pod
	source    string
	partition int
	workers   map[workerKey]*worker
	// started holds the containers whose startup probe has succeeded.
	started map[string]string // container name → container ID
}

type workerKey struct {
	container string
	probe     bus.ProbeType
}

// New builds the stage for fx.
func New(cfg *Config, common *config.Common, log *zap.Logger, nc *nats.Conn, js jetstream.JetStream) (*Runner, error) {
	if cfg.Instance == "" {
		return nil, errors.New("invalid value for tcpprober.instance: empty")
	}
	if cfg.HTTPGet != "tcp" && cfg.HTTPGet != "get" {
		return nil, fmt.Errorf("invalid value %q for tcpprober.http-get: must be tcp or get", cfg.HTTPGet)
	}
	results := bus.For(common.NodeName)
	if common.Shadow {
		results = results.Shadow(bus.StageProber)
	}
	return &Runner{
		results:     results,
		shadow:      common.Shadow,
		node:        common.NodeName,
		partitions:  common.Partitions,
		log:         log.Named(Name),
		js:          js,
		subjects:    bus.For(common.NodeName),
		snapshots:   bus.NewSnapshots(),
		pub:         bus.NewPublisher(nc, js, common.NodeName, cfg.Instance),
		httpGet:     cfg.HTTPGet,
		pods:        map[types.UID]*podEntry{},
		status:      map[types.UID]*bus.PodRuntimeStatus{},
		statusOrder: map[types.UID]bus.PodOrder{},
		ready:       errors.New("not consuming the bus yet"),
	}, nil
}

// Role is the stage whose place it takes on the bus (app.Replacement: the
// NATS service API lists it as splitlet-prober).
func (r *Runner) Role() string { return "prober" }

// Start returns at once; the consumers are set up in the background.
func (r *Runner) Start(context.Context) error {
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for r.ctx.Err() == nil {
			err := r.subscribe(r.ctx)
			r.mu.Lock()
			r.ready = err
			r.mu.Unlock()
			if err == nil {
				r.log.Info("consuming pod updates and pod status")
				return
			}
			r.log.Warn("cannot consume the bus yet, retrying", zap.Error(err))
			select {
			case <-r.ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return nil
}

// Ready reports whether the consumers run.
func (r *Runner) Ready(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready
}

// Stop stops the consumers, then every worker, and waits for them.
func (r *Runner) Stop(context.Context) error {
	if r.cancel == nil {
		return nil // never started
	}
	r.cancel()
	r.mu.Lock()
	stops := r.stops
	r.stops = nil
	r.mu.Unlock()
	// The consumers first (they wait for the message in hand), so no
	// worker starts after this point; the workers end with r.ctx.
	for _, stop := range stops {
		stop()
	}
	r.wg.Wait()
	// Consumers the subscriber set up while Stop began.
	r.mu.Lock()
	stops = r.stops
	r.stops = nil
	r.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	return nil
}

func (r *Runner) subscribe(ctx context.Context) error {
	if err := bus.EnsureStreams(ctx, r.js, r.node); err != nil {
		return err
	}
	if r.shadow {
		if err := bus.EnsureShadowStream(ctx, r.js, r.node, 0); err != nil {
			return err
		}
	}
	// The pod table lives in memory: every start reads the streams' whole
	// history again rather than resuming the durables where they stopped.
	consumers := []struct {
		stream, durable, filter string
		handler                 bus.Handler
		// perPod: the handler orders the messages per pod.
		perPod bool
	}{
		{bus.StreamName(r.node, bus.StreamPodStatus), DurablePodStatus, r.subjects.PodStatusAll(), r.onStatus, true},
		{bus.StreamName(r.node, bus.StreamPodUpdates), DurablePodUpdates, r.subjects.PodUpdatesAll(), r.onPodUpdate, false},
	}
	r.mu.Lock()
	have := len(r.stops)
	r.mu.Unlock()
	for _, c := range consumers[have:] {
		var inactive time.Duration
		if r.shadow {
			// its own consumers, gone an hour after the shadow is.
			c.durable, inactive = bus.ShadowDurable(c.durable), time.Hour
		}
		if err := r.js.DeleteConsumer(ctx, c.stream, c.durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("reset consumer %s: %w", c.durable, err)
		}
		stop, err := bus.Consume(ctx, r.js, bus.ConsumerOptions{
			Stream: c.stream, Durable: c.durable, Filters: []string{c.filter}, Logger: r.log, OrderedByHandler: c.perPod,
			InactiveThreshold: inactive,
		}, c.handler)
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.stops = append(r.stops, stop)
		r.mu.Unlock()
	}
	return nil
}

func (r *Runner) onPodUpdate(_ context.Context, subject string, e *bus.Envelope) error {
	u, err := bus.DecodePodUpdate(e)
	if err != nil {
		// A payload that does not decode is dropped: retrying cannot fix it.
		r.log.Error("dropping a PodUpdate that does not decode", zap.String(logging.FieldSubject, subject), zap.Error(err))
		return nil
	}
	// a SET too large for one message comes as SETPARTs: applied whole.
	op, pods, apply := r.snapshots.Resolve(subject, e, u)
	if !apply {
		return nil
	}
	u.Pods = pods
	part, _ := bus.PartitionOf(subject)
	r.mu.Lock()
	defer r.mu.Unlock()
	if op == bus.OpSet {
		// A SET lists every pod of its source in this partition; the others
		// of that source and partition are gone.
		listed := map[types.UID]bool{}
		for i := range u.Pods {
			listed[u.Pods[i].UID] = true
		}
		for uid, p := range r.pods {
			if p.source == e.Source && p.partition == part && !listed[uid] {
				r.forget(uid)
			}
		}
	}
	for i := range u.Pods {
		pod := &u.Pods[i]
		if op == bus.OpRemove {
			r.forget(pod.UID)
			continue
		}
		p := r.pods[pod.UID]
		if p == nil {
			p = &podEntry{workers: map[workerKey]*worker{}, started: map[string]string{}}
			r.pods[pod.UID] = p
		}
		p.pod, p.source, p.partition = pod, e.Source, part
		r.reconcile(pod.UID)
	}
	return nil
}

func (r *Runner) onStatus(_ context.Context, subject string, e *bus.Envelope) error {
	st, err := bus.DecodePodRuntimeStatus(e)
	if err != nil {
		r.log.Error("dropping a PodRuntimeStatus that does not decode", zap.String(logging.FieldSubject, subject), zap.Error(err))
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// a status not above the pod's last from the same source is stale; one
	// that another pod's newer status overtook on the subject is not.
	order := r.statusOrder[st.UID]
	if !order.Take(e.Source, e.Seq) {
		return nil
	}
	r.status[st.UID] = st
	r.statusOrder[st.UID] = order
	r.reconcile(st.UID)
	return nil
}

// forget stops a pod's workers and drops what is known of it. r.mu is held.
func (r *Runner) forget(uid types.UID) {
	if p := r.pods[uid]; p != nil {
		for _, w := range p.workers {
			w.stop()
		}
	}
	delete(r.pods, uid)
	delete(r.status, uid)
	delete(r.statusOrder, uid)
}

// reconcile starts the workers a pod's probes need and stops the others.
// A terminal pod has none (kubelet: workers stop once the pod is terminal).
// r.mu is held.
func (r *Runner) reconcile(uid types.UID) {
	p := r.pods[uid]
	if p == nil {
		return
	}
	st := r.status[uid]
	terminal := p.pod.Status.Phase == corev1.PodSucceeded || p.pod.Status.Phase == corev1.PodFailed ||
		(st != nil && (st.Terminated || st.Phase == corev1.PodSucceeded || st.Phase == corev1.PodFailed))
	want := map[workerKey]*corev1.Probe{}
	if !terminal {
		for _, c := range p.pod.Spec.Containers {
			for typ, probe := range map[bus.ProbeType]*corev1.Probe{
				bus.ProbeReadiness: c.ReadinessProbe, bus.ProbeLiveness: c.LivenessProbe, bus.ProbeStartup: c.StartupProbe,
			} {
				if probe != nil {
					want[workerKey{c.Name, typ}] = probe
				}
			}
		}
	}
	for k, w := range p.workers {
		if want[k] == nil {
			w.stop()
			delete(p.workers, k)
		}
	}
	for k, probe := range want {
		if p.workers[k] == nil {
			p.workers[k] = r.startWorker(uid, k, probe)
		}
	}
}

// view is what a worker needs to know of its container at one run.
type view struct {
	pod         *corev1.Pod
	container   *corev1.Container
	podIP       string
	containerID string
	running     *corev1.ContainerStateRunning
	started     bool // the startup probe, if any, has succeeded
	deleting    bool
}

// look returns the worker's view of its container, or false once the pod
// is gone.
func (r *Runner) look(uid types.UID, k workerKey) (view, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pods[uid]
	if p == nil {
		return view{}, false
	}
	v := view{pod: p.pod, deleting: p.pod.DeletionTimestamp != nil}
	for i := range p.pod.Spec.Containers {
		if p.pod.Spec.Containers[i].Name == k.container {
			v.container = &p.pod.Spec.Containers[i]
		}
	}
	if v.container == nil {
		return view{}, false
	}
	if st := r.status[uid]; st != nil {
		v.podIP = st.PodIP
		for _, cs := range st.ContainerStatuses {
			if cs.Name == k.container {
				v.containerID, v.running = cs.ContainerID, cs.State.Running
			}
		}
	}
	v.started = v.container.StartupProbe == nil || (v.containerID != "" && p.started[k.container] == v.containerID)
	return v, true
}

// markStarted records that a container's startup probe succeeded.
func (r *Runner) markStarted(uid types.UID, container, containerID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pods[uid]; p != nil {
		p.started[container] = containerID
	}
}

// publish sends a result on the pod's partition.
func (r *Runner) publish(ctx context.Context, v view, k workerKey, outcome bus.ProbeOutcome, msg string) error {
	uid := v.pod.UID
	subject := r.results.ProbeResults(bus.Partition(string(uid), r.partitions))
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := r.pub.Publish(pctx, subject, bus.KindProbeResult, "", &bus.ProbeResult{
		PodUID: uid, Namespace: v.pod.Namespace, Name: v.pod.Name, Container: k.container,
		ContainerID: v.containerID, Probe: k.probe, Result: outcome, Message: msg,
	})
	if err != nil && ctx.Err() == nil {
		r.log.Warn("cannot publish a probe result, will retry", append(logging.Pod(v.pod.Namespace, v.pod.Name, string(uid)),
			zap.String(logging.FieldSubject, subject), zap.Error(err))...)
	}
	return err
}
