// Package mirror keeps a mirror pod in the API server for every static pod
// (kubelet: pod manager + MirrorClient, syncPod's static pod branch and
// HandlePodCleanups' orphan removal).
//
// The rule, per namespace/name:
//
//	static pod, no mirror                    -> create the mirror
//	static pod, mirror with another hash,
//	  or mirror being deleted                -> delete it (UID precondition), create anew
//	no static pod, mirror (all static
//	  sources seen, informer synced)         -> delete the orphan
//
// except that a mirror pod whose static pod (the UID of its annotation)
// the pod workers still run is neither replaced by another static pod's
// nor deleted as an orphan until they report that pod terminated (kubelet:
// the mirror pod follows the static pod that runs, which a changed
// manifest's pod waits for; IsPodForMirrorPodTerminatingByFullName). The
// manager learns it from the pod workers' PodRuntimeStatus (RuntimeStatus):
// a UID with a status and none yet saying terminated runs.
//
// A mirror pod is a copy of the static pod's metadata and spec with the
// annotation kubernetes.io/config.mirror = the static pod's hash and a
// controller owner reference to the Node. Its creation waits until the Node
// exists (its UID goes into the owner reference).
package mirror

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/services/podconfig/internal/merge"
)

// Manager reconciles mirror pods. It owns a work queue keyed by
// namespace/name and its workers.
type Manager struct {
	cs       kubernetes.Interface
	node     string
	lister   corelisters.PodLister
	synced   cache.InformerSynced
	log      *zap.Logger
	recorder record.EventRecorder
	resync   time.Duration
	queue    workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	static  map[string]*corev1.Pod
	allSeen bool
	// running holds the static pods the pod workers run (a status seen,
	// none yet terminated), by UID, with their namespace/name.
	running map[types.UID]string
	wg      sync.WaitGroup
	// changed has a value when what WantsStatuses answers may have changed.
	changed chan struct{}
}

// New builds a manager. lister and synced come from the API source's
// informer, which sees mirror pods since they are bound to the node.
func New(cs kubernetes.Interface, node string, lister corelisters.PodLister, synced cache.InformerSynced,
	recorder record.EventRecorder, log *zap.Logger, resync time.Duration) *Manager {
	return &Manager{
		cs: cs, node: node, lister: lister, synced: synced, recorder: recorder, log: log, resync: resync,
		static: map[string]*corev1.Pod{}, running: map[types.UID]string{}, changed: make(chan struct{}, 1),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 10*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "podconfig-mirror-pods"}),
	}
}

func key(ns, name string) string { return ns + "/" + name }

// SetStatic replaces the set of static pods. allSeen says every static
// source has been read in full, so that a mirror pod without a static pod
// is an orphan rather than one not read yet.
func (m *Manager) SetStatic(pods []*corev1.Pod, allSeen bool) {
	next := make(map[string]*corev1.Pod, len(pods))
	for _, p := range pods {
		next[key(p.Namespace, p.Name)] = p
	}
	m.mu.Lock()
	prev := m.static
	becameSeen := allSeen && !m.allSeen
	m.static, m.allSeen = next, allSeen
	m.mu.Unlock()
	for k, p := range next {
		if old, ok := prev[k]; !ok || old.Annotations[merge.AnnotationHash] != p.Annotations[merge.AnnotationHash] {
			m.queue.Add(k)
		}
	}
	for k := range prev {
		if _, ok := next[k]; !ok {
			m.queue.Add(k)
		}
	}
	if becameSeen {
		m.enqueueMirrors()
	}
	m.notify()
}

// RuntimeStatus takes a pod workers' status: a static pod of this node, or
// the one a mirror pod names, runs until a status says it terminated, and
// its mirror pod is checked again then.
func (m *Manager) RuntimeStatus(rs *bus.PodRuntimeStatus) {
	k := key(rs.Namespace, rs.Name)
	m.mu.Lock()
	_, known := m.running[rs.UID]
	switch {
	case rs.Terminated:
		delete(m.running, rs.UID)
	case !known && m.isStaticUID(k, rs.UID):
		m.running[rs.UID] = k
	}
	m.mu.Unlock()
	if known && rs.Terminated {
		m.queue.Add(k)
		m.notify()
	}
}

// WantsStatuses says whether the pod workers' statuses can matter to the
// mirror pods: until every static source has been read and the informer
// has synced, then while a static pod is known, a static pod runs, or a
// mirror pod is in the API (the static pod its annotation names may run).
// A node with none of these (a worker without static pods) reads no
// status.
func (m *Manager) WantsStatuses() bool {
	m.mu.Lock()
	settled, busy := m.allSeen, len(m.static) > 0 || len(m.running) > 0
	m.mu.Unlock()
	if !settled || busy || !m.synced() {
		return true
	}
	mirrors, err := m.mirrorPods()
	return err != nil || len(mirrors) > 0
}

// Changes has a value whenever what WantsStatuses answers may have
// changed.
func (m *Manager) Changes() <-chan struct{} { return m.changed }

func (m *Manager) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// isStaticUID: uid is the static pod of that key, or the one its mirror
// pod names (a static pod whose manifest changed or went). Call with m.mu
// held.
func (m *Manager) isStaticUID(k string, uid types.UID) bool {
	if p := m.static[k]; p != nil && p.UID == uid {
		return true
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(k)
	mirror, err := m.lister.Pods(ns).Get(name)
	return err == nil && mirror.Annotations[merge.AnnotationMirror] == string(uid)
}

// runs: the pod workers run the static pod of that UID.
func (m *Manager) runs(uid string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.running[types.UID(uid)]
	return ok
}

// MirrorPodChanged queues a check of the named pod (informer events).
func (m *Manager) MirrorPodChanged(namespace, name string) {
	m.queue.Add(key(namespace, name))
	m.notify()
}

func (m *Manager) enqueueMirrors() {
	mirrors, _ := m.mirrorPods()
	for _, p := range mirrors {
		m.queue.Add(key(p.Namespace, p.Name))
	}
}

// mirrorPods are the pods of the informer's cache with the mirror
// annotation, whoever set it.
func (m *Manager) mirrorPods() ([]*corev1.Pod, error) {
	pods, err := m.lister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for _, p := range pods {
		if _, ok := p.Annotations[merge.AnnotationMirror]; ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// Start runs the workers and the periodic full check until ctx ends. It
// does not block; Wait waits for the workers.
func (m *Manager) Start(ctx context.Context) {
	m.wg.Add(2)
	go func() {
		defer m.wg.Done()
		<-ctx.Done()
		m.queue.ShutDownWithDrain()
	}()
	go func() {
		defer m.wg.Done()
		if !cache.WaitForCacheSync(ctx.Done(), m.synced) {
			return
		}
		m.notify()
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			for m.next(ctx) {
			}
		}()
		wait.NonSlidingUntilWithContext(ctx, func(context.Context) {
			m.mu.Lock()
			for k := range m.static {
				m.queue.Add(k)
			}
			m.mu.Unlock()
			m.enqueueMirrors()
		}, m.resync)
	}()
}

// Wait waits for the workers after ctx of Start ended.
func (m *Manager) Wait() { m.wg.Wait() }

func (m *Manager) next(ctx context.Context) bool {
	k, quit := m.queue.Get()
	if quit {
		return false
	}
	defer m.queue.Done(k)
	if ctx.Err() != nil {
		m.queue.Forget(k)
		return true
	}
	if err := m.sync(ctx, k); err != nil {
		if ctx.Err() == nil {
			m.log.Info("mirror pod not in sync yet, will retry", zap.String(logging.FieldPod, k), zap.Error(err))
			m.queue.AddRateLimited(k)
		}
		return true
	}
	m.queue.Forget(k)
	return true
}

func (m *Manager) sync(ctx context.Context, k string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(k)
	if err != nil {
		return nil
	}
	m.mu.Lock()
	static, allSeen := m.static[k], m.allSeen
	m.mu.Unlock()

	mirror, err := m.lister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		mirror = nil
	} else if err != nil {
		return err
	}
	if mirror != nil {
		if _, ok := mirror.Annotations[merge.AnnotationMirror]; !ok {
			if static != nil {
				m.log.Warn("an API pod has the name of a static pod; no mirror pod for it", logging.Pod(ns, name, string(static.UID))...)
			}
			return nil
		}
	}
	if static == nil {
		if mirror != nil && allSeen && m.runs(mirror.Annotations[merge.AnnotationMirror]) {
			// its static pod terminates within its grace: the mirror stays.
			return nil
		}
		if mirror != nil && allSeen {
			// kubelet: orphaned mirror pods are removed once all sources are ready.
			m.log.Info("deleting orphaned mirror pod", logging.Pod(ns, name, string(mirror.UID))...)
			return m.delete(ctx, mirror)
		}
		return nil
	}
	hash := static.Annotations[merge.AnnotationHash]
	if mirror != nil {
		if mirror.DeletionTimestamp == nil && mirror.Annotations[merge.AnnotationMirror] == hash {
			return nil
		}
		if mirror.DeletionTimestamp == nil && m.runs(mirror.Annotations[merge.AnnotationMirror]) {
			// the static pod before a change of the manifest terminates:
			// the mirror follows it until it has.
			return nil
		}
		// kubelet: a mirror pod being deleted or not matching is replaced.
		m.log.Info("replacing mirror pod", append(logging.Pod(ns, name, string(mirror.UID)),
			zap.String("hash", hash), zap.String("mirrorHash", mirror.Annotations[merge.AnnotationMirror]))...)
		if err := m.delete(ctx, mirror); err != nil {
			return err
		}
	}
	return m.create(ctx, static, hash)
}

func (m *Manager) delete(ctx context.Context, mirror *corev1.Pod) error {
	grace := int64(0)
	uid := mirror.UID
	err := m.cs.CoreV1().Pods(mirror.Namespace).Delete(ctx, mirror.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete mirror pod: %w", err)
	}
	return nil
}

func (m *Manager) create(ctx context.Context, static *corev1.Pod, hash string) error {
	node, err := m.cs.CoreV1().Nodes().Get(ctx, m.node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("node %s (for the mirror pod's owner): %w", m.node, err)
	}
	if node.DeletionTimestamp != nil {
		return fmt.Errorf("node %s is being deleted", m.node)
	}
	annotations := make(map[string]string, len(static.Annotations)+1)
	for k, v := range static.Annotations {
		annotations[k] = v
	}
	annotations[merge.AnnotationMirror] = hash
	labels := make(map[string]string, len(static.Labels))
	for k, v := range static.Labels {
		labels[k] = v
	}
	controller := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: static.Name, Namespace: static.Namespace, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: &controller}},
		},
		Spec: *static.Spec.DeepCopy(),
	}
	created, err := m.cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, gerr := m.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if gerr == nil && got.DeletionTimestamp == nil && got.Annotations[merge.AnnotationMirror] == hash {
			return nil
		}
		return fmt.Errorf("create mirror pod: %w", err)
	}
	if err != nil {
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			m.recorder.Eventf(static, corev1.EventTypeWarning, "FailedCreateMirrorPod", "Error creating mirror pod: %v", err)
		}
		return fmt.Errorf("create mirror pod: %w", err)
	}
	m.log.Info("mirror pod created", append(logging.Pod(created.Namespace, created.Name, string(created.UID)),
		zap.String("staticUID", string(static.UID)))...)
	return nil
}
