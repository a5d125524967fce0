// Package statusmanager is statussync's status manager: it keeps one
// versioned API status per pod and writes it to the API server, as the
// kubelet's status manager does.
//
// The machine, per pod UID (the bus identity; a static pod's status goes to
// its mirror pod):
//
//	inputs ──► entry{spec, runtime, probes} ──► generate ──► updateStatus ──► versioned status (v1, v2, ...)
//	                                                                              │ queue.AddAfter(uid, coalesce-delay)
//	                                                                              ▼
//	                     API server ◄── patch (strategic merge, UID precondition) ◄── worker: sync(uid)
//	                                ◄── delete (grace 0, UID precondition) once finished and deleted
//
// Inputs are PodUpdate (the spec), PodRuntimeStatus (the runtime) and
// ProbeResult (ready/started). Each input regenerates the pod's status;
// updateStatus refuses illegal container transitions, keeps transition times
// and the first start time, and bumps the version only when the status
// differs from the cached one. The work queue holds UIDs, so every change
// made before a worker picks the pod up is written by one patch (the latest
// version); the coalescing delay gives the start of a pod (Pending, Running,
// Ready within milliseconds) time to fold into one write.
//
// Invariants:
//   - versions of a UID only grow; apiVersions[uid] is the last version
//     written (or found already equal) and is never above the cached one;
//   - one worker at a time handles a UID (the work queue guarantees it);
//   - a status is written only to the API object of the same UID (patch and
//     delete carry it as a precondition); a recreated pod is never touched;
//   - a terminal phase never goes back (generation keeps it), and it is
//     written only once the worker reports every container stopped;
//   - every syncBatch period, each pod whose API copy differs from the cache
//     on what statussync owns is queued again (someone else's change is put
//     right), and so is each pod that may be deleted.
package statusmanager

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/health"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/periodic"
	"github.com/splitlet/splitlet/libs/tracing"
	"github.com/splitlet/splitlet/services/statussync/internal/apistatus"
)

// Annotations that tie static pods to their mirror pods.
const (
	AnnotationMirror = "kubernetes.io/config.mirror"
	AnnotationSource = kube.AnnotationConfigSource
	indexUID         = "uid"
	indexMirror      = "mirror"
)

// Options tune the manager.
type Options struct {
	// Workers write statuses in parallel (a bounded pool).
	Workers int
	// BatchPeriod is how often every cached status is compared with the API.
	BatchPeriod time.Duration
	// CoalesceDelay is how long a changed pod waits before its write, so
	// that the changes of that time go out as one patch. The delay runs from
	// the first unwritten change (the work queue keeps the earliest due
	// time, later changes do not push it back), so a write is never later
	// than this. Why a delay at all: a pod's start is a burst (admitted and
	// ContainerCreating, then Running, then Ready without a readiness probe)
	// within milliseconds on the sim runtime; the kubelet writes each step,
	// and 100 ms folds them into one patch, which halves the API writes of a
	// pod start while staying far below any probe period or user-visible
	// delay. 0 restores the kubelet's write-at-once. Two changes skip the
	// wait: the pod becoming Ready and the pod finishing. Each is the last
	// step of its burst (nothing is left to fold into it) and what a user
	// waits on, so the wait would only add to create->Ready and to the
	// deletion.
	CoalesceDelay time.Duration
	// PendingTTL is how long a status of a pod with no known spec is kept
	// waiting for the spec before it is dropped.
	PendingTTL time.Duration
	// Partitions is the bus partition count (for SET snapshots).
	Partitions int
	// Recorder records Events on pods; nil records none.
	Recorder record.EventRecorder
	// Registerer gets the manager's metrics; nil registers none.
	Registerer prometheus.Registerer
	// BusMetrics gets each new pod's time in statussync; nil: none.
	BusMetrics *bus.Metrics
	// DropPendingOnStop stops without writing what is still waiting: a
	// crash, for tests of what a restarted stage recovers.
	DropPendingOnStop bool
	// Tracer and Traces: each sync of a pod whose trace came on the bus
	// is a span of that trace, parent of its API requests; nil: none.
	Tracer trace.Tracer
	Traces *tracing.Pods
	// DryRun, when set, takes each write instead of the API server (a
	// shadow statussync): a status patch, or (del) the deletion of a
	// finished pod. An error is retried as a failed write is.
	DryRun func(ctx context.Context, pod *corev1.Pod, patch []byte, del bool) error
}

func (o *Options) defaults() {
	if o.Workers < 1 {
		o.Workers = 1
	}
	if o.BatchPeriod <= 0 {
		o.BatchPeriod = 10 * time.Second
	}
	if o.CoalesceDelay < 0 {
		o.CoalesceDelay = 0
	}
	if o.PendingTTL <= 0 {
		o.PendingTTL = time.Minute
	}
	if o.Partitions < 1 {
		o.Partitions = 16
	}
}

type versioned struct {
	status    corev1.PodStatus
	version   uint64
	namespace string
	name      string
	// finished: the worker reported every container stopped and the
	// resources reclaimed (kubelet: podIsFinished).
	finished bool
	// stopped: the runtime shows no container that runs or may start.
	stopped bool
}

type probeKey struct {
	containerID string
	probe       bus.ProbeType
}

type probeResults map[probeKey]bus.ProbeOutcome

func (p probeResults) Result(id string, t bus.ProbeType) (bus.ProbeOutcome, bool) {
	r, ok := p[probeKey{id, t}]
	return r, ok
}

// withAPI answers a probe the manager has no result for from what the API
// object says of the same container instance (ready, started): what this
// stage wrote before it restarted, or what it would have had to hear again.
// A new instance is not in the API object and waits for its probes.
type withAPI struct {
	own probeResults
	api *corev1.PodStatus
}

func (w withAPI) Result(id string, t bus.ProbeType) (bus.ProbeOutcome, bool) {
	if r, ok := w.own.Result(id, t); ok {
		return r, true
	}
	for _, list := range [][]corev1.ContainerStatus{w.api.InitContainerStatuses, w.api.ContainerStatuses} {
		for i := range list {
			c := &list[i]
			if c.ContainerID != id || id == "" || c.State.Running == nil {
				continue
			}
			switch t {
			case bus.ProbeReadiness:
				return outcome(c.Ready), true
			case bus.ProbeStartup:
				return outcome(c.Started != nil && *c.Started), true
			}
		}
	}
	return "", false
}

func outcome(ok bool) bus.ProbeOutcome {
	if ok {
		return bus.ProbeSuccess
	}
	return bus.ProbeFailure
}

// runtimeFromAPI rebuilds a pod's runtime status from its API object, for
// a stage that restarted after the pod workers last spoke of the pod
// (their status is older than the replay window): the container instances
// and states the API object shows are what the runtime last reported.
// A terminal pod is not rebuilt.
func runtimeFromAPI(api *corev1.Pod, uid types.UID) *bus.PodRuntimeStatus {
	if api.Status.Phase == corev1.PodSucceeded || api.Status.Phase == corev1.PodFailed {
		return nil
	}
	return &bus.PodRuntimeStatus{
		UID: uid, Namespace: api.Namespace, Name: api.Name,
		PodIP: api.Status.PodIP, HostIP: api.Status.HostIP, StartTime: api.Status.StartTime.DeepCopy(),
		InitContainerStatuses:      append([]corev1.ContainerStatus(nil), api.Status.InitContainerStatuses...),
		ContainerStatuses:          append([]corev1.ContainerStatus(nil), api.Status.ContainerStatuses...),
		EphemeralContainerStatuses: append([]corev1.ContainerStatus(nil), api.Status.EphemeralContainerStatuses...),
	}
}

type entry struct {
	uid     types.UID
	spec    *corev1.Pod
	source  string
	runtime *bus.PodRuntimeStatus
	probes  probeResults
	// liveIDs are the container instances of the latest runtime status.
	liveIDs   map[string]bool
	status    *versioned
	firstSeen time.Time
	lastInput time.Time
	// deletedAt is set once the API object was deleted by the manager.
	deletedAt  time.Time
	heldLogged bool
	// runningAt is when the first runtime status with every container
	// running arrived; stageDone once the patch that wrote it was timed
	// (splitlet_pod_stage_duration_seconds{stage="statussync"}).
	runningAt time.Time
	stageDone bool
	// runtimeOrder is where the pod's runtime statuses stand: an older one
	// from the same source (a redelivery that newer ones overtook) is not
	// taken after it.
	runtimeOrder bus.PodOrder
}

// Manager is the status manager.
type Manager struct {
	opts    Options
	log     *zap.Logger
	client  kubernetes.Interface
	indexer cache.Indexer
	queue   workqueue.TypedRateLimitingInterface[types.UID]

	mu          sync.Mutex
	entries     map[types.UID]*entry
	apiVersions map[types.UID]uint64
	written     map[types.UID]*corev1.Pod
	// matched: the pairs syncBatch last found equal, so that a pod whose
	// API object and status are unchanged since is not compared again.
	matched map[types.UID]batchMatch
	// view is what is kept of a patch's answer in written: apiView (tests
	// compare with keeping the whole pod).
	view func(*corev1.Pod) *corev1.Pod
	// busView is what is kept of a pod from the bus in entry.spec: busView
	// (tests compare with keeping the whole pod).
	busView func(*corev1.Pod) *corev1.Pod
	// agrees is syncBatch's comparison, run without mu: agreesByAgent
	// (tests hold it up to see that mu is free meanwhile).
	agrees func(api *corev1.Pod, st *versioned) bool

	patches, deletes, failures prometheus.Counter
	starts                     *startLatency

	handler cache.ResourceEventHandlerRegistration
}

// HasSynced: the manager's informer handlers have seen the initial list.
func (m *Manager) HasSynced() bool { return m.handler.HasSynced() }

// New builds a manager that reads API pods from podInformer (kube.NodePods':
// it may already run for another stage and cache more of each pod than
// APIView; New adds its indexers and handlers, and HasSynced says when
// those handlers have seen the informer's initial list).
func New(client kubernetes.Interface, podInformer cache.SharedIndexInformer, log *zap.Logger, opts Options) (*Manager, error) {
	opts.defaults()
	m := &Manager{
		opts:        opts,
		log:         log,
		client:      client,
		indexer:     podInformer.GetIndexer(),
		entries:     map[types.UID]*entry{},
		apiVersions: map[types.UID]uint64{},
		written:     map[types.UID]*corev1.Pod{},
		matched:     map[types.UID]batchMatch{},
		view:        apiView,
		busView:     busView,
		agrees:      agreesByAgent,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.UID](100*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "statussync"}),
		patches:  prometheus.NewCounter(prometheus.CounterOpts{Name: "splitlet_statussync_patches_total", Help: "Pod status patches sent to the API server."}),
		deletes:  prometheus.NewCounter(prometheus.CounterOpts{Name: "splitlet_statussync_deletes_total", Help: "Finished pods deleted from the API server."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "splitlet_statussync_sync_failures_total", Help: "Failed status writes or deletes (retried with back-off)."}),
	}
	if opts.Registerer != nil {
		for _, c := range []*prometheus.Counter{&m.patches, &m.deletes, &m.failures} {
			var err error
			if *c, err = health.Register(opts.Registerer, *c); err != nil {
				return nil, err
			}
		}
	}
	starts, err := newStartLatency(opts.Registerer)
	if err != nil {
		return nil, err
	}
	m.starts = starts
	// A shared informer taken again after a restart has them already.
	err = kube.AddMissingIndexers(podInformer, cache.Indexers{
		indexUID: func(obj any) ([]string, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				return []string{string(p.UID)}, nil
			}
			return nil, nil
		},
		indexMirror: func(obj any) ([]string, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				if h, ok := p.Annotations[AnnotationMirror]; ok && h != "" {
					return []string{h}, nil
				}
			}
			return nil, nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("statussync: pod indexers: %w", err)
	}
	m.handler, err = podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.onAPIPod(obj, true) },
		UpdateFunc: func(_, obj any) { m.onAPIPod(obj, false) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				m.mu.Lock()
				if uid, ok := m.busUID(p); ok {
					delete(m.written, uid)
					m.starts.forget(uid)
				}
				m.mu.Unlock()
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("statussync: pod handler: %w", err)
	}
	return m, nil
}

// busUID maps an API pod to the pod on the bus it stands for, as the
// kubelet's pod manager pairs a mirror pod with its static pod, by full
// name: a pod stands for itself; a mirror pod (the annotation set, whatever
// its value) for the static pod the bus carries under its own namespace and
// name, when the annotation is that pod's UID, and for none otherwise (ok
// false). An annotation a pod's author set never makes the pod another's.
// Call with m.mu held.
func (m *Manager) busUID(p *corev1.Pod) (types.UID, bool) {
	h, mirror := p.Annotations[AnnotationMirror]
	if !mirror {
		return p.UID, true
	}
	e := m.entries[types.UID(h)]
	if e == nil || e.spec == nil || !isStatic(e.spec, e.source) || e.spec.Namespace != p.Namespace || e.spec.Name != p.Name {
		return "", false
	}
	return types.UID(h), true
}

func isStatic(p *corev1.Pod, source string) bool {
	if source != "" {
		return source != "api"
	}
	s, ok := p.Annotations[AnnotationSource]
	return ok && s != "api"
}

func podLog(ns, name string, uid types.UID) []zap.Field {
	return logging.Pod(ns, name, string(uid))
}

// onAPIPod: a pod of the node changed in the API server. A status waiting
// for its API object (a mirror pod not created yet, a spec not yet on the
// bus) can now go; a deleted pod may now be removable.
//
// A pod added (a mirror pod recreated, or every pod when the informer lists
// at start) whose status differs from the cache is re-sent at once rather
// than at the next batch.
func (m *Manager) onAPIPod(obj any, added bool) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	uid, ok := m.busUID(p)
	if !ok {
		// a mirror pod of no static pod here (yet): its static pod's
		// arrival on the bus finds it through apiCopy.
		return
	}
	e := m.entries[uid]
	m.starts.observe(p, uid, e.seen(), time.Now())
	m.latest(uid, p)
	if e == nil {
		return
	}
	if e.status == nil || len(p.Spec.ReadinessGates) > 0 {
		// A readiness gate's condition may have changed (kubelet:
		// NeedToReconcilePodReadiness).
		m.regenerate(e)
	}
	if e.status == nil {
		return
	}
	if added && m.apiVersions[uid] >= e.status.version {
		current := p.Status.DeepCopy()
		apistatus.Normalize(p, current)
		if !apistatus.EqualByAgent(current, &e.status.status) {
			delete(m.apiVersions, uid)
		}
	}
	if m.apiVersions[uid] < e.status.version || p.DeletionTimestamp != nil {
		m.queue.AddAfter(uid, m.opts.CoalesceDelay)
	}
}

func (m *Manager) entry(uid types.UID) *entry {
	e := m.entries[uid]
	if e == nil {
		e = &entry{uid: uid, probes: probeResults{}, firstSeen: time.Now()}
		m.entries[uid] = e
	}
	e.lastInput = time.Now()
	return e
}

// seen is when the node agent first saw the pod (podconfig's
// kubernetes.io/config.seen on the bus copy), zero when unknown.
func (e *entry) seen() time.Time {
	if e == nil {
		return time.Time{}
	}
	return bus.FirstSeen(e.spec)
}

// forget drops everything known of a pod (kubelet: RemoveOrphanedStatuses).
func (m *Manager) forget(uid types.UID) {
	m.starts.forget(uid)
	delete(m.entries, uid)
	delete(m.apiVersions, uid)
	delete(m.written, uid)
	delete(m.matched, uid)
}

// PodUpdate takes a PodUpdate from the bus.
func (m *Manager) PodUpdate(op bus.Op, source string, partition int, pods []corev1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if op == bus.OpRemove {
		for i := range pods {
			m.forget(pods[i].UID)
		}
		return
	}
	present := map[types.UID]bool{}
	for i := range pods {
		p := &pods[i]
		present[p.UID] = true
		e := m.entry(p.UID)
		// Only the view of the pod is kept: a new pod, so that one entry
		// does not hold the whole message's array either.
		e.spec = m.busView(p)
		e.source = source
		if e.runtime != nil {
			m.regenerate(e)
		}
		if p.DeletionTimestamp != nil && e.status != nil {
			m.queue.AddAfter(p.UID, m.opts.CoalesceDelay)
		}
	}
	if op == bus.OpSet {
		// A snapshot: pods of this source and partition not in it are gone.
		for uid, e := range m.entries {
			if e.spec != nil && e.source == source && !present[uid] && bus.Partition(string(uid), m.opts.Partitions) == partition {
				m.forget(uid)
			}
		}
	}
}

// RuntimeStatus takes a PodRuntimeStatus from the bus.
func (m *Manager) RuntimeStatus(rs *bus.PodRuntimeStatus) {
	m.RuntimeStatusFrom("", 0, rs)
}

// RuntimeStatusFrom takes a PodRuntimeStatus with its envelope's source and
// sequence, in any order: one older than the pod's last from the same
// source is dropped (false), and a pod's status is never held back by
// another pod's newer one. seq 0 takes it unconditionally.
func (m *Manager) RuntimeStatusFrom(source string, seq uint64, rs *bus.PodRuntimeStatus) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(rs.UID)
	if !e.runtimeOrder.Take(source, seq) {
		return false
	}
	e.runtime = rs
	if e.runningAt.IsZero() && bus.AllRunning(rs.ContainerStatuses) {
		e.runningAt = time.Now()
	}
	// Results of container instances the runtime showed before and no longer
	// shows are stale. A result for an instance not shown yet stays: the
	// probe results and the runtime status come on different streams, so a
	// result may overtake the status that introduces its container.
	ids := map[string]bool{}
	for _, list := range [][]corev1.ContainerStatus{rs.InitContainerStatuses, rs.ContainerStatuses} {
		for _, c := range list {
			if c.ContainerID != "" {
				ids[c.ContainerID] = true
			}
		}
	}
	for k := range e.probes {
		if e.liveIDs[k.containerID] && !ids[k.containerID] {
			delete(e.probes, k)
		}
	}
	e.liveIDs = ids
	m.regenerate(e)
	return true
}

// ProbeResult takes a ProbeResult from the bus. Liveness results are the pod
// workers' business and are ignored.
func (m *Manager) ProbeResult(pr *bus.ProbeResult) {
	if pr.Probe == bus.ProbeLiveness || pr.ContainerID == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entry(pr.PodUID)
	k := probeKey{pr.ContainerID, pr.Probe}
	if old, ok := e.probes[k]; ok && old == pr.Result {
		return
	}
	e.probes[k] = pr.Result
	if e.runtime == nil {
		m.seedFromAPI(e, pr.ContainerID)
	}
	if e.runtime != nil {
		m.regenerate(e)
	}
}

// seedFromAPI gives an entry without a runtime status the one its API
// object shows, when that object names the probed container instance
// (a restart of this stage after the pod workers last spoke of the pod).
// Call with m.mu held.
func (m *Manager) seedFromAPI(e *entry, containerID string) {
	objs, _ := m.indexer.ByIndex(indexUID, string(e.uid))
	if len(objs) == 0 {
		objs, _ = m.indexer.ByIndex(indexMirror, string(e.uid))
	}
	for _, o := range objs {
		api, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		if uid, ok := m.busUID(api); !ok || uid != e.uid {
			continue // a pod whose annotation names this UID and that is not its mirror
		}
		for _, list := range [][]corev1.ContainerStatus{api.Status.InitContainerStatuses, api.Status.ContainerStatuses} {
			for _, c := range list {
				if c.ContainerID != containerID {
					continue
				}
				if rs := runtimeFromAPI(api, e.uid); rs != nil {
					m.log.Info("runtime status rebuilt from the API object for a probe result",
						podLog(api.Namespace, api.Name, e.uid)...)
					e.runtime = rs
					e.liveIDs = map[string]bool{}
					for _, l := range [][]corev1.ContainerStatus{rs.InitContainerStatuses, rs.ContainerStatuses} {
						for _, c := range l {
							if c.ContainerID != "" {
								e.liveIDs[c.ContainerID] = true
							}
						}
					}
				}
				return
			}
		}
	}
}

// specOf returns the pod spec to generate from: the bus's, or the API
// object of the same UID.
func (m *Manager) specOf(e *entry) *corev1.Pod {
	if e.spec != nil {
		return e.spec
	}
	objs, _ := m.indexer.ByIndex(indexUID, string(e.uid))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			return p
		}
	}
	return nil
}

// apiCopy finds the API object a pod's status is written to: the pod of
// that UID, or for a static pod its mirror pod.
func (m *Manager) apiCopy(uid types.UID, namespace, name string, static bool) *corev1.Pod {
	if static {
		objs, _ := m.indexer.ByIndex(indexMirror, string(uid))
		for _, o := range objs {
			if p, ok := o.(*corev1.Pod); ok && p.Namespace == namespace && p.Name == name {
				return p
			}
		}
		return nil
	}
	o, ok, _ := m.indexer.GetByKey(namespace + "/" + name)
	if !ok {
		return nil
	}
	p, ok := o.(*corev1.Pod)
	if !ok || p.UID != uid {
		return nil
	}
	return p
}

// regenerate builds the pod's status from its inputs and caches it as a new
// version when it changed. Call with m.mu held.
func (m *Manager) regenerate(e *entry) {
	if e.runtime == nil || !e.deletedAt.IsZero() {
		return
	}
	rs := e.runtime
	pod := m.specOf(e)
	if pod == nil {
		if !e.heldLogged {
			e.heldLogged = true
			m.log.Info("runtime status for a pod not known yet; held until its spec arrives",
				podLog(rs.Namespace, rs.Name, rs.UID)...)
		}
		return
	}
	static := isStatic(pod, e.source)
	for _, ip := range []string{rs.PodIP, rs.HostIP} {
		if ip != "" && !apistatus.ValidIP(ip) {
			m.log.Warn("runtime status carries a malformed IP; keeping the previous one",
				append(podLog(pod.Namespace, pod.Name, e.uid), zap.String("ip", ip))...)
		}
	}
	var apiStatus corev1.PodStatus
	if api := m.apiCopy(e.uid, pod.Namespace, pod.Name, static); api != nil {
		apiStatus = api.Status
	}
	old := apiStatus
	if e.status != nil {
		old = e.status.status
	}
	next := apistatus.Generate(apistatus.Input{
		Pod: pod, Runtime: rs, Probes: withAPI{own: e.probes, api: &apiStatus}, Old: old, API: apiStatus, Static: static,
	})
	finished := rs.Terminated || (e.status != nil && e.status.finished && !static)
	// The rejection Event (kubelet: rejectPod) is the pod workers': they
	// decide admission and record it; recording it here too would double it.
	m.updateStatus(e, pod, old, next, finished)
}

// updateStatus caches next as a new version if it is legal and differs from
// the cached status (kubelet: updateStatusInternal). Call with m.mu held.
func (m *Manager) updateStatus(e *entry, pod *corev1.Pod, old, next corev1.PodStatus, finished bool) bool {
	if err := apistatus.CheckTransition(&old, &next, &pod.Spec); err != nil {
		m.log.Warn("status update refused", append(podLog(pod.Namespace, pod.Name, e.uid), zap.Error(err))...)
		return false
	}
	apistatus.Prepare(pod, &old, &next, metav1.Now())
	var version uint64
	wasFinished := false
	if e.status != nil {
		if e.status.finished == finished && apistatus.EqualByAgent(&e.status.status, &next) {
			return false
		}
		version, wasFinished = e.status.version, e.status.finished
	}
	e.status = &versioned{status: next, version: version + 1, namespace: pod.Namespace, name: pod.Name, finished: finished,
		stopped: finished || apistatus.AllStopped(e.runtime)}
	if (!isReady(&old) && isReady(&next)) || (finished && !wasFinished) {
		// Ready, or finished: written without the coalescing wait (Options.CoalesceDelay).
		m.queue.Add(e.uid)
	} else {
		m.queue.AddAfter(e.uid, m.opts.CoalesceDelay)
	}
	return true
}

// isReady says whether a status's Ready condition is True.
func isReady(st *corev1.PodStatus) bool {
	for i := range st.Conditions {
		if st.Conditions[i].Type == corev1.PodReady {
			return st.Conditions[i].Status == corev1.ConditionTrue
		}
	}
	return false
}

// Status returns the cached status of a pod and its version.
func (m *Manager) Status(uid types.UID) (corev1.PodStatus, uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[uid]
	if e == nil || e.status == nil {
		return corev1.PodStatus{}, 0, false
	}
	return *e.status.status.DeepCopy(), e.status.version, true
}

// Run runs the workers and the batch loop until ctx ends, then lets the
// writes in hand finish and returns.
func (m *Manager) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := 0; i < m.opts.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m.processNext(ctx) {
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		periodic.Run(ctx, m.opts.BatchPeriod, func(context.Context) { m.syncBatch() })
	}()
	<-ctx.Done()
	if m.opts.DropPendingOnStop {
		m.queue.ShutDown()
	} else {
		// Drain: what is still waiting for its coalescing delay goes out now.
		m.mu.Lock()
		for uid, e := range m.entries {
			if e.status != nil && e.deletedAt.IsZero() && m.apiVersions[uid] < e.status.version {
				m.queue.Add(uid)
			}
		}
		m.mu.Unlock()
		m.queue.ShutDownWithDrain()
	}
	wg.Wait()
}

func (m *Manager) processNext(ctx context.Context) bool {
	uid, quit := m.queue.Get()
	if quit {
		return false
	}
	defer m.queue.Done(uid)
	// A write in hand finishes even when the stage is stopping.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := m.sync(cctx, uid); err != nil {
		m.failures.Inc()
		if ctx.Err() == nil {
			m.queue.AddRateLimited(uid)
		}
		return true
	}
	m.queue.Forget(uid)
	return true
}

// freshest picks between the informer's copy and the answer of the last
// write the newer one. The kubelet GETs the pod before every write; we use
// the informer's copy instead, which may lag our own last patch.
func freshest(informer, written *corev1.Pod) *corev1.Pod {
	if written == nil || written.UID != informer.UID {
		return informer
	}
	a, errA := strconv.ParseUint(informer.ResourceVersion, 10, 64)
	b, errB := strconv.ParseUint(written.ResourceVersion, 10, 64)
	if errA == nil && errB == nil && b > a {
		return written
	}
	return informer
}

// latest is freshest for the pod's informer copy api and the answer of its
// last status write, and forgets that answer once the informer has caught
// up with it: from then on the informer holds the same or newer, and keeping
// the answer too would hold a second copy of every pod.
func (m *Manager) latest(uid types.UID, api *corev1.Pod) *corev1.Pod {
	w := m.written[uid]
	if w == nil {
		return api
	}
	if freshest(api, w) == w {
		return w
	}
	delete(m.written, uid)
	return api
}

// HeldWriteAnswers is how many answers of status writes the manager holds
// because its informer has not caught up with them yet.
func (m *Manager) HeldWriteAnswers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.written)
}

// canBeDeleted: a pod being deleted whose API phase is terminal and whose
// containers are all stopped with resources reclaimed may go (kubelet:
// canBeDeleted; mirror pods are never deleted here).
func canBeDeleted(pod *corev1.Pod, st *versioned) bool {
	if pod.DeletionTimestamp == nil || pod.Annotations[AnnotationMirror] != "" {
		return false
	}
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		return false
	}
	return st.finished
}

// syncState is what sync reads of a pod under the lock before it talks to
// the API server.
type syncState struct {
	st         versioned
	static     bool
	apiVersion uint64
	target     *corev1.Pod
	written    *corev1.Pod
}

// sync writes a pod's latest version if the API server has not got it, and
// deletes the pod when it may go (kubelet: syncPod). It holds the lock only
// between its calls to the API server: to read the pod's state, to record
// a write's answer, to mark the pod deleted.
func (m *Manager) sync(ctx context.Context, uid types.UID) (err error) {
	s, ok := m.syncState(uid)
	if !ok {
		return nil
	}
	if span := m.startSyncSpan(&ctx, uid, &s.st); span != nil {
		defer func() { tracing.End(span, err) }()
	}
	log := m.log.WithLazy(podLog(s.st.namespace, s.st.name, uid)...)
	target, err := m.syncTarget(ctx, uid, &s, log)
	if err != nil || target == nil {
		return err
	}
	base := freshest(target, s.written)
	if s.apiVersion < s.st.version {
		var done bool
		if base, done, err = m.writeStatus(ctx, uid, &s, base, log); done {
			return err
		}
	}
	if !canBeDeleted(base, &s.st) {
		return nil
	}
	return m.deleteFinished(ctx, uid, base, log)
}

// syncState reads the pod's state under the lock; false when there is
// nothing to sync (no status yet, or the pod deleted already).
func (m *Manager) syncState(uid types.UID) (syncState, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[uid]
	if e == nil || e.status == nil || !e.deletedAt.IsZero() {
		return syncState{}, false
	}
	s := syncState{st: *e.status, static: isStatic(m.specOrEmpty(e), e.source), apiVersion: m.apiVersions[uid], written: m.written[uid]}
	s.target = m.apiCopy(uid, s.st.namespace, s.st.name, s.static)
	return s, true
}

// startSyncSpan starts the sync's span in the pod's trace, if it has one,
// and points *ctx at it.
func (m *Manager) startSyncSpan(ctx *context.Context, uid types.UID, st *versioned) trace.Span {
	if m.opts.Tracer == nil {
		return nil
	}
	pctx := m.opts.Traces.Context(*ctx, string(uid))
	if !tracing.Traced(pctx) {
		return nil
	}
	var span trace.Span
	*ctx, span = m.opts.Tracer.Start(pctx, "statussync sync", tracing.PodAttributes(st.namespace, st.name, string(uid)),
		trace.WithAttributes(tracing.AttrStage.String("statussync"), attribute.Int64("splitlet.status.version", int64(st.version))))
	return span
}

// syncTarget is the API object the status goes to; nil when the API has
// none (yet): a mirror pod still to be created, or a pod already gone. The
// informer's event brings the pod back here.
func (m *Manager) syncTarget(ctx context.Context, uid types.UID, s *syncState, log *zap.Logger) (*corev1.Pod, error) {
	target := s.target
	if target == nil && !s.static {
		// The informer may lag the bus (a pod created a moment ago), and its
		// event comes too late when the stage is stopping: ask the API
		// server, as the kubelet does before every write.
		p, err := m.client.CoreV1().Pods(s.st.namespace).Get(ctx, s.st.name, metav1.GetOptions{})
		switch {
		case err == nil && p.UID == uid:
			target = p
		case err != nil && !apierrors.IsNotFound(err):
			log.Warn("reading the pod failed, will retry", zap.Error(err))
			return nil, err
		}
	}
	if target == nil {
		log.Debug("no API object for the status yet", zap.Bool("static", s.static))
	}
	return target, nil
}

// writeStatus patches the pod's status to the manager's version and
// records the answer; it returns the pod as the API server now holds it,
// or done (with the error to retry on, if any) when sync stops here.
func (m *Manager) writeStatus(ctx context.Context, uid types.UID, s *syncState, base *corev1.Pod, log *zap.Logger) (*corev1.Pod, bool, error) {
	// kubelet: PodCouldHaveRunningContainers, from the runtime's report.
	merged := apistatus.Merge(base, base.Status, s.st.status, !s.st.stopped)
	patch, unchanged, err := apistatus.StatusPatch(base.UID, base.Status, merged)
	if err != nil {
		log.Error("cannot build the status patch", zap.Error(err))
		return nil, true, nil
	}
	var updated *corev1.Pod
	if !unchanged {
		updated, err = m.patchStatus(ctx, base, merged, patch)
		if done, err := m.patchFailed(base, patch, err, log); done {
			return nil, true, err
		}
		m.patches.Inc()
		log.Debug("status patched", zap.Uint64("version", s.st.version), zap.ByteString("patch", patch))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if updated != nil {
		m.observeRunning(uid, base, updated)
		// Only the view of the answer is kept, as the informer keeps only
		// the view of its pods.
		updated = m.view(updated)
		base = updated
		m.written[uid] = updated
		if cur := m.apiCopy(uid, s.st.namespace, s.st.name, s.static); cur != nil {
			// the informer may have seen the write already.
			m.latest(uid, cur)
		}
	}
	if m.apiVersions[uid] < s.st.version {
		m.apiVersions[uid] = s.st.version
	}
	return base, false, nil
}

// patchFailed sorts a failed status patch: done when sync stops, with the
// error when a retry may help.
func (m *Manager) patchFailed(base *corev1.Pod, patch []byte, err error, log *zap.Logger) (bool, error) {
	switch {
	case err == nil:
		return false, nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Gone, or recreated under the same name (UID precondition).
		log.Info("pod gone or recreated; status not written", zap.Error(err))
		return true, nil
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		// Retrying the same status cannot help; the next change or the
		// next batch tries again.
		log.Error("API server refused the status", zap.Error(err), zap.ByteString("patch", patch))
		if m.opts.Recorder != nil {
			m.opts.Recorder.Eventf(base, corev1.EventTypeWarning, "FailedToUpdatePodStatus", "Pod status refused by the API server: %v", err)
		}
		m.failures.Inc()
		return true, nil
	default:
		log.Warn("status update failed, will retry", zap.Error(err))
		if m.opts.Recorder != nil {
			m.opts.Recorder.Eventf(base, corev1.EventTypeWarning, "FailedToUpdatePodStatus", "Failed to update pod status: %v", err)
		}
		return true, err
	}
}

// observeRunning times the stage on the patch that shows the new pod
// running. Called with the lock held.
func (m *Manager) observeRunning(uid types.UID, base, updated *corev1.Pod) {
	if e := m.entries[uid]; e != nil && !e.stageDone && !e.runningAt.IsZero() &&
		bus.AllRunning(updated.Status.ContainerStatuses) && !bus.AllRunning(base.Status.ContainerStatuses) {
		e.stageDone = true
		m.opts.BusMetrics.ObserveStage(bus.StageStatussync, time.Since(e.runningAt))
	}
}

// deleteFinished deletes a finished pod from the API server and marks it
// deleted.
func (m *Manager) deleteFinished(ctx context.Context, uid types.UID, base *corev1.Pod, log *zap.Logger) error {
	err := m.deletePod(ctx, base)
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
	default:
		log.Warn("deleting the finished pod failed, will retry", zap.Error(err))
		return err
	}
	m.deletes.Inc()
	log.Info("pod finished and deleted from the API server")
	m.mu.Lock()
	if e := m.entries[uid]; e != nil {
		e.deletedAt = time.Now()
	}
	m.mu.Unlock()
	return nil
}

// patchStatus sends a pod's status patch; in a dry run it hands the patch
// to DryRun and answers with the pod as the patch would leave it.
func (m *Manager) patchStatus(ctx context.Context, base *corev1.Pod, merged corev1.PodStatus, patch []byte) (*corev1.Pod, error) {
	if m.opts.DryRun == nil {
		return m.client.CoreV1().Pods(base.Namespace).Patch(ctx, base.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	}
	if err := m.opts.DryRun(ctx, base, patch, false); err != nil {
		return nil, err
	}
	p := base.DeepCopy()
	p.Status = merged
	return p, nil
}

// deletePod deletes a finished pod (grace 0, UID precondition); in a dry
// run it hands the deletion to DryRun.
func (m *Manager) deletePod(ctx context.Context, base *corev1.Pod) error {
	if m.opts.DryRun != nil {
		return m.opts.DryRun(ctx, base, nil, true)
	}
	grace := int64(0)
	return m.client.CoreV1().Pods(base.Namespace).Delete(ctx, base.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace,
		Preconditions:      metav1.NewUIDPreconditions(string(base.UID)),
	})
}

func (m *Manager) specOrEmpty(e *entry) *corev1.Pod {
	if p := m.specOf(e); p != nil {
		return p
	}
	return &corev1.Pod{}
}

// syncBatch queues every pod whose status the API server lacks, whose API
// copy differs from the cache on what statussync owns (someone else changed
// it), or that may now be deleted; and drops statuses of unknown pods that
// waited too long (kubelet: syncBatch with reconcile).
//
// The comparisons run without the manager's lock. They are its costly part
// (tens of microseconds a pod, and while a burst of pods starts, every new
// pod is compared once): under the lock, a batch at 5000 pods held up every
// status arriving meanwhile for 130 to 280 ms. A pair taken under the lock
// can be compared after it, since neither a cached status nor an API object
// is changed in place (a new one replaces it); a pair whose status was
// replaced meanwhile is left to the next batch.
func (m *Manager) syncBatch() {
	pairs := m.batchScan()
	if len(pairs) == 0 {
		return
	}
	differs := make([]bool, len(pairs))
	for i, c := range pairs {
		differs[i] = !m.agrees(c.api, c.status)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, c := range pairs {
		e := m.entries[c.uid]
		if e == nil || e.status != c.status || !e.deletedAt.IsZero() {
			continue
		}
		if !differs[i] {
			m.matched[c.uid] = batchMatch{api: c.api, status: c.status}
			continue
		}
		m.log.Debug("API status differs from the cache; re-sending", podLog(c.status.namespace, c.status.name, c.uid)...)
		delete(m.apiVersions, c.uid)
		delete(m.matched, c.uid)
		m.queue.Add(c.uid)
	}
}

// batchScan is syncBatch's pass under the lock: it forgets, queues what
// needs no comparison, and returns the pairs to compare.
func (m *Manager) batchScan() []batchPair {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	var pairs []batchPair
	for uid, e := range m.entries {
		if !e.deletedAt.IsZero() {
			if now.Sub(e.deletedAt) > m.opts.PendingTTL {
				m.forget(uid)
			}
			continue
		}
		if m.specOf(e) == nil && now.Sub(e.lastInput) > m.opts.PendingTTL {
			// Neither the bus nor the API server knows the pod any more, or
			// never did: an orphaned status (kubelet: RemoveOrphanedStatuses).
			if e.status == nil {
				var ns, name string
				if e.runtime != nil {
					ns, name = e.runtime.Namespace, e.runtime.Name
				}
				m.log.Warn("dropping status of an unknown pod", podLog(ns, name, uid)...)
			}
			m.forget(uid)
			continue
		}
		if e.status == nil {
			continue
		}
		if m.apiVersions[uid] < e.status.version {
			m.queue.Add(uid)
			continue
		}
		api := m.apiCopy(uid, e.status.namespace, e.status.name, isStatic(m.specOrEmpty(e), e.source))
		if api == nil {
			continue
		}
		api = m.latest(uid, api)
		if canBeDeleted(api, e.status) {
			m.queue.Add(uid)
			continue
		}
		if c, ok := m.matched[uid]; ok && c.api == api && c.status == e.status {
			// Both sides are the objects found equal last time, so the
			// comparison would find them equal again.
			continue
		}
		pairs = append(pairs, batchPair{uid: uid, api: api, status: e.status})
	}
	return pairs
}

// batchPair is an API object and a cached status that syncBatch compares.
type batchPair struct {
	uid    types.UID
	api    *corev1.Pod
	status *versioned
}

// agreesByAgent says whether the API object shows the cached status, on
// what statussync owns (kubelet: needsReconcile). It reads both and changes
// neither.
func agreesByAgent(api *corev1.Pod, st *versioned) bool {
	current := api.Status.DeepCopy()
	apistatus.Normalize(api, current)
	return apistatus.EqualByAgent(current, &st.status)
}

// batchMatch is a pair of API object and cached status that syncBatch
// found equal.
type batchMatch struct {
	api    *corev1.Pod
	status *versioned
}
