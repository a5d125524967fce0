// Package workers is the prober's manager and its probe workers (kubelet:
// pkg/kubelet/prober's manager and worker), fed by pod specs and runtime
// status instead of in-process managers, and reporting changed results to a
// Sink.
package workers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/services/prober/internal/probe"
)

// Execer runs an exec probe's command in a container through the runtime.
type Execer interface {
	Exec(ctx context.Context, req bus.ExecRequest, timeout time.Duration) (*probe.ExecOutcome, error)
}

// Option configures a Manager.
type Option func(*Manager)

// WithLogger sets the logger.
func WithLogger(l *zap.Logger) Option { return func(m *Manager) { m.log = l } }

// WithRecorder sets where Unhealthy and ProbeWarning Events go.
func WithRecorder(r record.EventRecorder) Option { return func(m *Manager) { m.recorder = r } }

// WithExecer sets how exec probes reach the runtime.
func WithExecer(e Execer) Option { return func(m *Manager) { m.execer = e } }

// WithSink sets where changed results go.
func WithSink(s Sink) Option { return func(m *Manager) { m.sink = s } }

// WithRegisterer registers the prober metrics on r.
func WithRegisterer(r prometheus.Registerer) Option { return func(m *Manager) { m.reg = r } }

// WithRestartGrace sets how long before the manager's start a running
// container must have started to count as started before the prober ran
// (kubelet: 10 s); such a container gets no initial result.
func WithRestartGrace(d time.Duration) Option { return func(m *Manager) { m.restartGrace = d } }

// Manager keeps one worker per (pod, container, probe type) of the pods it
// is told about, and the runtime status those workers read.
type Manager struct {
	log          *zap.Logger
	recorder     record.EventRecorder
	execer       Execer
	sink         Sink
	reg          prometheus.Registerer
	restartGrace time.Duration
	// view is what is kept of a pod: probeView (tests compare with keeping
	// the whole pod).
	view func(*corev1.Pod) *corev1.Pod

	http    *probe.HTTP
	metrics *metrics
	results *results

	start  time.Time
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	pods    map[types.UID]*podEntry
	workers map[workerKey]*worker

	statusMu sync.RWMutex
	status   map[types.UID]podStatus
}

// podStatus is a pod's runtime status and where its statuses stand.
type podStatus struct {
	st    *bus.PodRuntimeStatus
	order bus.PodOrder
}

type workerKey struct {
	uid       types.UID
	container string
	probe     bus.ProbeType
}

// podEntry is a pod the manager knows: the latest spec seen (its view; nil
// for a pod without probes).
type podEntry struct {
	mu  sync.RWMutex
	pod *corev1.Pod
	// probed: some container of the pod has a probe (a container's probes
	// never change), so its runtime status is kept for the workers.
	probed bool
}

func (e *podEntry) get() *corev1.Pod {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.pod
}

// New builds a manager. Its workers start probing once Start has run.
func New(opts ...Option) (*Manager, error) {
	m := &Manager{
		log:          zap.NewNop(),
		recorder:     &record.FakeRecorder{},
		restartGrace: 10 * time.Second,
		view:         probeView,
		http:         probe.NewHTTP(),
		pods:         map[types.UID]*podEntry{},
		workers:      map[workerKey]*worker{},
		status:       map[types.UID]podStatus{},
	}
	for _, o := range opts {
		o(m)
	}
	met, err := newMetrics(m.reg)
	if err != nil {
		return nil, fmt.Errorf("prober metrics: %w", err)
	}
	m.metrics = met
	m.results = newResults(m.sink)
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.start = time.Now()
	return m, nil
}

// UpsertPod takes in a pod from an ADD, UPDATE or DELETE (or a SET). A pod seen for the first time gets its workers (kubelet: AddPod on
// pod addition); for a known pod only the stored spec is refreshed, which
// carries deletionTimestamp to the workers. Probes are immutable in a pod,
// so workers are never rebuilt for an update. Only the pod's view is kept
// (probeView), and only for a pod with a probe: nothing reads the spec of
// a pod without one (it has no workers), so most of a node's pods cost an
// entry of a few words.
func (m *Manager) UpsertPod(pod *corev1.Pod) {
	probed := hasProbes(pod)
	var view *corev1.Pod
	if probed {
		view = m.view(pod)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	if e, ok := m.pods[pod.UID]; ok {
		if e.probed {
			if view == nil {
				view = m.view(pod) // a pod's probes do not change; keep its workers fed regardless
			}
			e.mu.Lock()
			e.pod = view
			e.mu.Unlock()
		}
		return
	}
	e := &podEntry{pod: view, probed: probed}
	m.pods[pod.UID] = e
	if !e.probed {
		// a status that came before the spec is of no use now: nothing of
		// the pod is probed (lock order: mu, then statusMu).
		m.statusMu.Lock()
		if ps, ok := m.status[pod.UID]; ok {
			m.status[pod.UID] = podStatus{order: ps.order}
		}
		m.statusMu.Unlock()
	}
	// A pod without a probe has no view and no workers.
	if view != nil {
		for _, c := range probedContainers(view) {
			for _, t := range []bus.ProbeType{bus.ProbeStartup, bus.ProbeReadiness, bus.ProbeLiveness} {
				spec := probeOf(c.container, t)
				if spec == nil {
					continue
				}
				k := workerKey{pod.UID, c.container.Name, t}
				if _, ok := m.workers[k]; ok {
					continue
				}
				w := m.newWorker(e, view, c.container, c.init, t, spec)
				m.workers[k] = w
				w.begin(m.initialDelay(w.period))
			}
		}
	}
	m.log.Debug("pod added", append(logging.Pod(pod.Namespace, pod.Name, string(pod.UID)), zap.Int("workers", len(m.workers)))...)
}

// RemovePod stops the pod's workers and forgets the pod and its status,
// with the status's source and seq (kubelet: RemovePod / CleanupPods).
func (m *Manager) RemovePod(uid types.UID) {
	m.mu.Lock()
	_, known := m.pods[uid]
	delete(m.pods, uid)
	var stop []*worker
	for k, w := range m.workers {
		if k.uid == uid {
			stop = append(stop, w)
		}
	}
	m.mu.Unlock()
	for _, w := range stop {
		w.stop()
	}
	m.statusMu.Lock()
	delete(m.status, uid)
	m.statusMu.Unlock()
	if known {
		m.log.Debug("pod removed", zap.String(logging.FieldUID, string(uid)))
	}
}

// UpdateStatus stores a pod's runtime status for its workers, and has the
// readiness worker of a started container that is not yet ready probe at
// once (kubelet: UpdatePodStatus' manual trigger).
func (m *Manager) UpdateStatus(st *bus.PodRuntimeStatus) {
	m.UpdateStatusFrom("", 0, st)
}

// UpdateStatusFrom is UpdateStatus with the envelope's source and seq,
// ordered per pod: a status whose seq is not above the pod's last one from
// the same source is dropped (false); another pod's newer status never
// holds it back. seq 0 is taken unconditionally.
func (m *Manager) UpdateStatusFrom(source string, seq uint64, st *bus.PodRuntimeStatus) bool {
	m.mu.Lock()
	e, known := m.pods[st.UID]
	probed := known && e.probed
	m.mu.Unlock()
	m.statusMu.Lock()
	order := m.status[st.UID].order
	if !order.Take(source, seq) {
		m.statusMu.Unlock()
		return false
	}
	if !known && st.Terminated {
		// A finished pod the prober never saw needs nothing.
		delete(m.status, st.UID)
		m.statusMu.Unlock()
		return true
	}
	if known && !probed {
		// Nothing of the pod is probed: only where its statuses stand is
		// kept (most pods of a node have no probe; their statuses were a
		// copy each).
		m.status[st.UID] = podStatus{order: order}
		m.statusMu.Unlock()
		return true
	}
	m.status[st.UID] = podStatus{st: st, order: order}
	m.statusMu.Unlock()
	if !known {
		return true
	}
	for _, list := range [][]corev1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses} {
		for i := range list {
			cs := &list[i]
			if cs.State.Running == nil || cs.ContainerID == "" || !m.isStarted(st.UID, cs) {
				continue
			}
			if r, ok := m.results.get(bus.ProbeReadiness, cs.ContainerID); ok && r == bus.ProbeSuccess {
				continue
			}
			if w := m.worker(st.UID, cs.Name, bus.ProbeReadiness); w != nil {
				w.trigger()
			}
		}
	}
	return true
}

func (m *Manager) statusOf(uid types.UID) (*bus.PodRuntimeStatus, bool) {
	m.statusMu.RLock()
	defer m.statusMu.RUnlock()
	ps, ok := m.status[uid]
	return ps.st, ok
}

func (m *Manager) worker(uid types.UID, container string, t bus.ProbeType) *worker {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.workers[workerKey{uid, container, t}]
}

// isStarted says whether a container has started as the prober sees it
// (kubelet: isContainerStarted): running, and its startup probe (if it has
// one) has succeeded.
func (m *Manager) isStarted(uid types.UID, cs *corev1.ContainerStatus) bool {
	if cs.State.Running == nil {
		return false
	}
	if r, ok := m.results.get(bus.ProbeStartup, cs.ContainerID); ok {
		return r == bus.ProbeSuccess
	}
	if m.startedBeforeUs(cs) {
		// The kubelet keeps a started container started across its own
		// restart; with no result of ours, so do we.
		return true
	}
	return m.worker(uid, cs.Name, bus.ProbeStartup) == nil
}

// startedBeforeUs says whether a running container started well before
// this prober did (kubelet: kubeletRestartGracePeriod, 10 s).
func (m *Manager) startedBeforeUs(cs *corev1.ContainerStatus) bool {
	return cs.State.Running != nil && !cs.State.Running.StartedAt.IsZero() &&
		cs.State.Running.StartedAt.Time.Before(m.start.Add(-m.restartGrace))
}

// removeWorker forgets w if it is still the registered worker of its key.
func (m *Manager) removeWorker(w *worker) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.workers[w.key] == w {
		delete(m.workers, w.key)
	}
}

// initialDelay spreads the first probes of a freshly started prober over
// one period (kubelet rule); later workers probe at once.
func (m *Manager) initialDelay(period time.Duration) time.Duration {
	if period > time.Since(m.start) {
		return randDuration(period)
	}
	return 0
}

// Workers returns how many workers run.
func (m *Manager) Workers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.workers)
}

// Result returns the cached result of a probe type for a container ID.
func (m *Manager) Result(t bus.ProbeType, containerID string) (bus.ProbeOutcome, bool) {
	return m.results.get(t, containerID)
}

// Stop ends every worker, cancelling probes in flight, and waits for them
// until ctx ends.
func (m *Manager) Stop(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	all := make([]*worker, 0, len(m.workers))
	for _, w := range m.workers {
		all = append(all, w)
	}
	m.mu.Unlock()
	m.cancel()
	for _, w := range all {
		w.stop()
	}
	for _, w := range all {
		select {
		case <-w.done:
		case <-ctx.Done():
			return fmt.Errorf("prober: %d workers still running at shutdown: %w", m.Workers(), ctx.Err())
		}
	}
	return nil
}

type probedContainer struct {
	container *corev1.Container
	init      bool
}

// probedContainers are the regular containers and the restartable init
// containers (sidecars), the ones the kubelet probes.
func probedContainers(pod *corev1.Pod) []probedContainer {
	var out []probedContainer
	for i := range pod.Spec.Containers {
		out = append(out, probedContainer{&pod.Spec.Containers[i], false})
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out = append(out, probedContainer{c, true})
		}
	}
	return out
}

// hasProbes says whether any container the kubelet probes has a probe.
func hasProbes(pod *corev1.Pod) bool {
	for _, c := range probedContainers(pod) {
		if probed(c.container) {
			return true
		}
	}
	return false
}

func probeOf(c *corev1.Container, t bus.ProbeType) *corev1.Probe {
	switch t {
	case bus.ProbeStartup:
		return c.StartupProbe
	case bus.ProbeReadiness:
		return c.ReadinessProbe
	default:
		return c.LivenessProbe
	}
}

// withDefaults fills the API server's defaults into unset fields: timeout
// 1 s, period 10 s, success threshold 1, failure threshold 3.
func withDefaults(p *corev1.Probe) *corev1.Probe {
	d := p.DeepCopy()
	if d.TimeoutSeconds <= 0 {
		d.TimeoutSeconds = 1
	}
	if d.PeriodSeconds <= 0 {
		d.PeriodSeconds = 10
	}
	if d.SuccessThreshold <= 0 {
		d.SuccessThreshold = 1
	}
	if d.FailureThreshold <= 0 {
		d.FailureThreshold = 3
	}
	return d
}
