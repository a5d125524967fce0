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
	"github.com/splitlet/splitlet/libs/stagekit"
)

// The durable consumer names of a prober stage (docs/bus.md, agreement 4).
const (
	DurablePodUpdates = bus.DurableProberPodUpdates
	DurablePodStatus  = bus.DurableProberPodStatus
)

// Runner is the running stage: a table of pods fed from the bus, and one
// probe worker per (pod, container, probe type).
type Runner struct {
	partitions int
	log        *zap.Logger
	// kit consumes the pod updates and statuses (libs/stagekit); as a
	// shadow (the shadow key), with durables of its own.
	kit *stagekit.Kit
	// results are the subjects of its results: the node's, or its shadow
	// prefix's when it runs as a shadow.
	results bus.Subjects
	pub     *bus.Publisher
	httpGet string

	mu     sync.Mutex
	pods   map[types.UID]*podEntry
	status map[types.UID]*bus.PodRuntimeStatus
	// statusOrder is where each pod's statuses stand: they are ordered
	// per pod, not by their subject (docs/bus.md).
	statusOrder map[types.UID]bus.PodOrder

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // every worker
}

// podEntry is what the prober knows of one pod.
type podEntry struct {
	pod     *corev1.Pod
	workers map[workerKey]*worker
	// started holds the containers whose startup probe has succeeded.
	started map[string]string // container name → container ID
}

type workerKey struct {
	container string
	probe     bus.ProbeType
}

// New builds the stage for fx.
func New(cfg *Config, common *config.Common, log *zap.Logger, nc *nats.Conn, js jetstream.JetStream, bm *bus.Metrics) (*Runner, error) {
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
	r := &Runner{
		results:     results,
		partitions:  common.Partitions,
		log:         log.Named(Name),
		pub:         bus.NewPublisher(nc, js, common.NodeName, cfg.Instance),
		httpGet:     cfg.HTTPGet,
		pods:        map[types.UID]*podEntry{},
		status:      map[types.UID]*bus.PodRuntimeStatus{},
		statusOrder: map[types.UID]bus.PodOrder{},
	}
	r.kit = stagekit.New(js, common.NodeName, podTable{r}, stagekit.WithStatus(podTable{r}), stagekit.WithLogger(r.log),
		stagekit.WithMetrics(bm), stagekit.WithShadow(common.Shadow), stagekit.WithDurables(DurablePodUpdates, DurablePodStatus),
		stagekit.WithRetryInterval(time.Second))
	return r, nil
}

// Role is the stage whose place it takes on the bus (app.Replacement: the
// NATS service API lists it as splitlet-prober).
func (r *Runner) Role() string { return "prober" }

// Start returns at once; the consumers are set up in the background.
func (r *Runner) Start(context.Context) error {
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.kit.Start()
	return nil
}

// Ready reports whether the consumers run.
func (r *Runner) Ready(context.Context) error { return r.kit.Ready() }

// Stop stops the consumers (each after the message in hand, so no worker
// starts after that), then every worker, and waits for them.
func (r *Runner) Stop(context.Context) error {
	if r.cancel == nil {
		return nil // never started
	}
	r.kit.Stop()
	r.cancel()
	r.wg.Wait()
	return nil
}

// podTable takes the kit's pod changes and statuses into the runner's table.
type podTable struct{ r *Runner }

func (t podTable) PodAdded(source string, pod *corev1.Pod) { t.PodUpdated(source, pod) }

func (t podTable) PodUpdated(_ string, pod *corev1.Pod) {
	r := t.r
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pods[pod.UID]
	if p == nil {
		p = &podEntry{workers: map[workerKey]*worker{}, started: map[string]string{}}
		r.pods[pod.UID] = p
	}
	p.pod = pod
	r.reconcile(pod.UID)
}

func (t podTable) PodRemoved(uid types.UID) {
	t.r.mu.Lock()
	defer t.r.mu.Unlock()
	t.r.forget(uid)
}

// PodStatus takes a pod's runtime status. A status not above the pod's last
// from the same source is stale; one that another pod's newer status
// overtook on the subject is not.
func (t podTable) PodStatus(_ context.Context, source string, seq uint64, st *bus.PodRuntimeStatus) {
	r := t.r
	r.mu.Lock()
	defer r.mu.Unlock()
	order := r.statusOrder[st.UID]
	if !order.Take(source, seq) {
		return
	}
	r.status[st.UID] = st
	r.statusOrder[st.UID] = order
	r.reconcile(st.UID)
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
