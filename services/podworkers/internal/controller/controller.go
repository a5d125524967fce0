// Package controller is the pod workers' sync handler front (kubelet:
// HandlePodAdditions, Updates, Removes, Reconcile, Syncs and Cleanups): it
// turns PodUpdate operations into pod worker updates, admits new pods, wakes
// workers on runtime events and liveness failures, and runs housekeeping.
// It holds the pods of the partitions this replica owns.
//
// Pods outlive their worker: handing a partition over (ReleasePartition)
// detaches the workers of its pods and leaves their containers running for
// the next owner to adopt, unless the runtime is runtime.ProcessLocal (its
// containers cannot outlive this process; they are stopped). Housekeeping
// removes what the runtime holds for pods no source wants any more (deleted
// while no replica owned them), on owned partitions only, once the sources
// are ready and the partition's updates are caught up (kubelet: the runtime
// pods HandlePodCleanups kills).
package controller

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/periodic"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/tracing"
	"github.com/splitlet/splitlet/services/podworkers/internal/admission"
	"github.com/splitlet/splitlet/services/podworkers/internal/podsync"
	"github.com/splitlet/splitlet/services/podworkers/internal/podworker"
)

// DefaultHousekeeping is the kubelet's housekeeping period.
const DefaultHousekeeping = 2 * time.Second

// Sink receives pod statuses (the coalescing publisher).
type Sink interface {
	Set(st *bus.PodRuntimeStatus)
	Forget(uid types.UID)
}

// Config of a Controller.
type Config struct {
	Runtime    runtime.Runtime
	Sink       Sink
	Admit      admission.Chain
	Recorder   record.EventRecorder
	Partitions int
	Log        *zap.Logger
	// OtherPods returns pods admitted on the node that this replica may not
	// hold (other replicas'), for admission; may be nil.
	OtherPods    func(except types.UID) []*corev1.Pod
	Housekeeping time.Duration
	WorkerOpts   []podworker.Option
	SyncOpts     []podsync.Option
	// ObserveSync, if set, is told how long each sync step took.
	ObserveSync func(work string, d time.Duration, err error)
	// Active says whether this replica owns partition p and acts on it now
	// (orphans are looked for only there); nil: every partition.
	Active func(p int) bool
	// CaughtUp says whether every pod update of partition p published so
	// far has reached this replica, so that a pod the runtime holds and no
	// update names is really unwanted; nil: always.
	CaughtUp func(ctx context.Context, p int) bool
	// Tracer and Traces: each sync of a pod whose trace came on the bus
	// is a span of that trace (libs/tracing); nil: no spans.
	Tracer trace.Tracer
	Traces *tracing.Pods
}

type entry struct {
	pod       *corev1.Pod
	source    string
	partition int
	rejected  bool
	// evicted: an eviction of the pod was stored (its Failed status).
	evicted bool
	// counted: the pod's requests are in Controller.used.
	counted bool
	req     corev1.ResourceList
}

// Controller drives the pod workers of one replica.
type Controller struct {
	cfg     Config
	log     *zap.Logger
	workers *podworker.Workers
	syncer  *podsync.Syncer

	// handover serialises housekeeping with the release of a partition:
	// a pod being handed over is neither desired here any more nor known
	// to a worker, yet it is no orphan, and nothing may kill or remove it.
	handover sync.Mutex
	// housekeeping serialises the rounds of HandlePodCleanups, which reuse
	// states from one round to the next.
	housekeeping sync.Mutex
	states       map[types.UID]podworker.WorkType

	mu           sync.Mutex
	pods         map[types.UID]*entry
	sourcesReady bool
	tracked      map[types.UID]struct{}
	// used sums the requests of the admitted pods not yet terminated.
	used corev1.ResourceList
	// orphans are runtime pods no source wants, being removed: their
	// statuses are not reported (no API object waits for them).
	orphans map[types.UID]bool
}

// New builds a controller.
func New(cfg Config) *Controller {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Housekeeping <= 0 {
		cfg.Housekeeping = DefaultHousekeeping
	}
	if cfg.Recorder == nil {
		cfg.Recorder = &record.FakeRecorder{}
	}
	c := &Controller{cfg: cfg, log: cfg.Log, pods: map[types.UID]*entry{}, tracked: map[types.UID]struct{}{}, used: corev1.ResourceList{}, orphans: map[types.UID]bool{},
		states: map[types.UID]podworker.WorkType{}}
	c.syncer = podsync.New(cfg.Runtime, orphanFilter{c}, append([]podsync.Option{podsync.WithLogger(cfg.Log)}, cfg.SyncOpts...)...)
	c.workers = podworker.New(safeHandler{h: c.syncer, log: cfg.Log, observe: cfg.ObserveSync, tracer: cfg.Tracer, traces: cfg.Traces}, append([]podworker.Option{podworker.WithLogger(cfg.Log)}, cfg.WorkerOpts...)...)
	return c
}

// Workers is the query side of the pod workers.
func (c *Controller) Workers() *podworker.Workers { return c.workers }

// Run runs the workers, the runtime event pump and housekeeping until ctx
// ends; then it stops the workers.
func (c *Controller) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); c.workers.Run() }()
	go func() { defer wg.Done(); c.pumpEvents(ctx) }()
	go func() {
		defer wg.Done()
		periodic.Run(ctx, c.cfg.Housekeeping, func(context.Context) { c.HandlePodCleanups() })
	}()
	<-ctx.Done()
	c.workers.Stop()
	wg.Wait()
}

func (c *Controller) pumpEvents(ctx context.Context) {
	events := c.cfg.Runtime.Events()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			c.HandlePodSyncByUID(ev.PodUID)
		}
	}
}

// orphanFilter passes statuses to the sink except those of orphans.
type orphanFilter struct{ c *Controller }

func (f orphanFilter) Set(st *bus.PodRuntimeStatus) {
	f.c.mu.Lock()
	orphan := f.c.orphans[st.UID]
	f.c.mu.Unlock()
	if !orphan {
		f.c.cfg.Sink.Set(st)
	}
}

// SetSourcesReady records whether every pod source has been seen in full.
func (c *Controller) SetSourcesReady(ready bool) {
	c.mu.Lock()
	c.sourcesReady = ready
	c.mu.Unlock()
}

func podLog(p *corev1.Pod) []zap.Field { return logging.Pod(p.Namespace, p.Name, string(p.UID)) }

// HandleUpdate applies one PodUpdate message of a partition.
func (c *Controller) HandleUpdate(source string, op bus.Op, partition int, pods []corev1.Pod) {
	// Each pod kept gets its own copy, not a pointer into the message's
	// array: that array would stay alive while any pod of it is held,
	// its other pods too after newer messages replaced them.
	ptrs := make([]*corev1.Pod, len(pods))
	for i := range pods {
		p := pods[i]
		ptrs[i] = &p
	}
	switch op {
	case bus.OpAdd:
		c.HandlePodAdditions(source, partition, ptrs)
	case bus.OpUpdate, bus.OpDelete:
		// kubelet: a graceful DELETE is an update carrying deletionTimestamp.
		c.HandlePodUpdates(source, partition, ptrs)
	case bus.OpRemove:
		c.HandlePodRemoves(ptrs)
	case bus.OpReconcile:
		c.HandlePodReconcile(source, partition, ptrs)
	case bus.OpSet:
		c.handleSet(source, partition, ptrs)
	default:
		c.log.Warn("unknown pod update operation ignored", zap.String("op", string(op)))
	}
}

// handleSet turns a snapshot of a source's pods in a partition into adds,
// updates and removes (kubelet: podStorage.Merge in snapshot mode).
func (c *Controller) handleSet(source string, partition int, pods []*corev1.Pod) {
	want := map[types.UID]*corev1.Pod{}
	for _, p := range pods {
		want[p.UID] = p
	}
	var adds, updates, removes, same []*corev1.Pod
	c.mu.Lock()
	for uid, e := range c.pods {
		if e.source == source && e.partition == partition {
			if _, ok := want[uid]; !ok {
				removes = append(removes, e.pod)
			}
		}
	}
	for _, p := range pods {
		e, ok := c.pods[p.UID]
		switch {
		case !ok:
			adds = append(adds, p)
		case changed(e.pod, p):
			updates = append(updates, p)
		default:
			e.pod = p
			if !e.rejected {
				same = append(same, p)
			}
		}
	}
	c.mu.Unlock()
	for _, p := range same {
		c.workers.Refresh(p)
	}
	c.HandlePodRemoves(removes)
	c.HandlePodAdditions(source, partition, adds)
	c.HandlePodUpdates(source, partition, updates)
}

// changed says whether a pod of a SET differs from the one held in what
// the pod workers act on. The same resource version of the same API object
// is the same object: most pods of a periodic SET are, and are not compared
// field by field. A static pod's resource version is its manifest's, which
// its author writes, so it is always compared. The cheap fields go first.
func changed(old, p *corev1.Pod) bool {
	if old.ResourceVersion != "" && old.ResourceVersion == p.ResourceVersion && old.UID == p.UID &&
		p.Annotations[kube.AnnotationConfigSource] == kube.SourceAPI && apiequality.Semantic.DeepEqual(old.Annotations, p.Annotations) {
		return false
	}
	return !apiequality.Semantic.DeepEqual(old.DeletionTimestamp, p.DeletionTimestamp) ||
		!apiequality.Semantic.DeepEqual(old.DeletionGracePeriodSeconds, p.DeletionGracePeriodSeconds) ||
		!apiequality.Semantic.DeepEqual(old.Labels, p.Labels) ||
		!apiequality.Semantic.DeepEqual(old.Annotations, p.Annotations) ||
		!apiequality.Semantic.DeepEqual(old.Spec, p.Spec)
}

// HandlePodAdditions admits new pods, oldest first, and starts their workers.
func (c *Controller) HandlePodAdditions(source string, partition int, pods []*corev1.Pod) {
	sort.SliceStable(pods, func(i, j int) bool { return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp) })
	for _, p := range pods {
		arrived := time.Now()
		c.mu.Lock()
		e, known := c.pods[p.UID]
		if known {
			e.pod, e.source, e.partition = p, source, partition
		} else {
			c.pods[p.UID] = &entry{pod: p, source: source, partition: partition}
		}
		if known && e.rejected {
			c.mu.Unlock()
			continue
		}
		c.mu.Unlock()
		// a pod already terminating or finished by UID, or being deleted,
		// is not admitted again (kubelet: only active pods are admitted).
		if !known && p.DeletionTimestamp == nil && !c.workers.IsPodTerminationRequested(p.UID) && !isTerminal(p) {
			if r := c.admit(p); !r.Admit {
				c.reject(p, r.Reason, r.Message)
				continue
			}
		}
		if !known && p.Status.StartTime == nil && p.DeletionTimestamp == nil {
			// a new pod, admitted (not one adopted from another replica):
			// its time in the pod workers runs from its arrival.
			c.syncer.Received(p.UID, arrived)
		}
		// an ADD of a pod still desired here is its source starting over
		// (podconfig restarted and sent every pod again), not the pod
		// created anew: an update, which neither restarts a finished pod
		// nor marks a terminating one for a restart. A pod removed first
		// and then added is not known here any more, and is created.
		typ := podworker.UpdateCreate
		if known {
			typ = podworker.UpdateUpdate
		}
		c.workers.UpdatePod(podworker.UpdateOptions{Type: typ, Pod: p, StartTime: arrived})
	}
}

func isTerminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// admit runs the admission chain against the pods admitted here (a running
// sum) and those of other replicas the API server shows; an admitted pod's
// requests join the sum.
func (c *Controller) admit(p *corev1.Pod) admission.Result {
	c.mu.Lock()
	used := c.used.DeepCopy()
	c.mu.Unlock()
	// listed only for a pod that asks for host ports: a walk of every
	// admitted pod per admission would make a burst quadratic.
	local := func() []*corev1.Pod {
		c.mu.Lock()
		defer c.mu.Unlock()
		var out []*corev1.Pod
		for uid, e := range c.pods {
			if e.counted && uid != p.UID {
				out = append(out, e.pod)
			}
		}
		return out
	}
	var others []*corev1.Pod
	if c.cfg.OtherPods != nil {
		for _, o := range c.cfg.OtherPods(p.UID) {
			if !o.CreationTimestamp.Before(&p.CreationTimestamp) {
				continue
			}
			c.mu.Lock()
			_, mine := c.pods[o.UID]
			c.mu.Unlock()
			if !mine {
				others = append(others, o)
			}
		}
	}
	started := p.Status.StartTime != nil || len(c.cfg.Runtime.PodContainers(p.UID)) > 0
	r := c.cfg.Admit.Admit(&admission.Attributes{Pod: p, OtherPods: others, Used: used, Local: local, Started: started})
	if r.Admit {
		c.mu.Lock()
		if e, ok := c.pods[p.UID]; ok && !e.counted {
			e.req = admission.Requests(p)
			e.counted = true
			admission.Add(c.used, e.req)
		}
		c.mu.Unlock()
	}
	return r
}

// uncount takes a pod's requests out of the running sum. Called with c.mu held.
func (c *Controller) uncount(e *entry) {
	if e != nil && e.counted {
		admission.Sub(c.used, e.req)
		e.counted = false
	}
}

func (c *Controller) workerKnows(uid types.UID) bool {
	_, ok := c.workers.Pod(uid)
	return ok
}

// reject fails a pod at admission: phase Failed with the reason, an Event,
// and a terminated runtime status (kubelet: rejectPod).
func (c *Controller) reject(p *corev1.Pod, reason, message string) {
	c.mu.Lock()
	if e, ok := c.pods[p.UID]; ok {
		e.rejected = true
	}
	c.mu.Unlock()
	c.log.Warn("pod rejected at admission", append(podLog(p), zap.String("reason", reason), zap.String("message", message))...)
	c.cfg.Recorder.Eventf(p, corev1.EventTypeWarning, reason, "%s", message)
	c.cfg.Sink.Set(&bus.PodRuntimeStatus{
		UID: p.UID, Namespace: p.Namespace, Name: p.Name,
		Phase: corev1.PodFailed, Reason: reason, Message: "Pod was rejected: " + message,
		Terminated: true,
	})
}

// HandlePodUpdates passes changed pods to their workers.
func (c *Controller) HandlePodUpdates(source string, partition int, pods []*corev1.Pod) {
	for _, p := range pods {
		c.mu.Lock()
		e, ok := c.pods[p.UID]
		if !ok {
			c.mu.Unlock()
			// an update for a pod never added (a missed ADD): treat as an add.
			c.HandlePodAdditions(source, partition, []*corev1.Pod{p})
			continue
		}
		e.pod = p
		rejected := e.rejected
		c.mu.Unlock()
		if rejected {
			continue
		}
		c.workers.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateUpdate, Pod: p, StartTime: time.Now()})
	}
}

// HandlePodRemoves kills pods gone from their source.
func (c *Controller) HandlePodRemoves(pods []*corev1.Pod) {
	for _, p := range pods {
		c.mu.Lock()
		e, ok := c.pods[p.UID]
		c.uncount(e)
		delete(c.pods, p.UID)
		c.mu.Unlock()
		if ok && e.rejected {
			continue
		}
		c.workers.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateKill, Pod: p, StartTime: time.Now()})
	}
}

// HandlePodReconcile records status-only changes: the pod's worker holds
// the new copy too, and a pod the API says has finished is torn down.
func (c *Controller) HandlePodReconcile(source string, partition int, pods []*corev1.Pod) {
	for _, p := range pods {
		c.mu.Lock()
		e, ok := c.pods[p.UID]
		if ok {
			e.pod = p
		}
		c.mu.Unlock()
		switch {
		case !ok || e.rejected:
		case isTerminal(p):
			c.workers.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateSync, Pod: p, StartTime: time.Now()})
		default:
			c.workers.Refresh(p)
		}
	}
}

// HandlePodSyncByUID wakes a pod's worker (runtime event).
func (c *Controller) HandlePodSyncByUID(uid types.UID) {
	if p, ok := c.workers.Pod(uid); ok {
		c.workers.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateSync, Pod: p, StartTime: time.Now()})
	}
}

// HandleProbe acts on a prober result: a liveness failure of the current
// container kills and restarts it.
func (c *Controller) HandleProbe(r *bus.ProbeResult) {
	// kubelet: a container that failed its liveness or (past its threshold)
	// startup probe is killed, and restarted as its pod's policy says.
	var probe string
	switch r.Probe {
	case bus.ProbeLiveness:
		probe = "liveness"
	case bus.ProbeStartup:
		probe = "startup"
	}
	if r.Probe == bus.ProbeStartup && r.Result == bus.ProbeSuccess && r.ContainerID != "" {
		// kubelet: a started sidecar lets the pod's next containers start.
		c.syncer.StartupSucceeded(r.PodUID, r.ContainerID)
		c.HandlePodSyncByUID(r.PodUID)
		return
	}
	if probe == "" || r.Result != bus.ProbeFailure || r.ContainerID == "" {
		return
	}
	for _, cs := range c.cfg.Runtime.PodContainers(r.PodUID) {
		if cs.ID == r.ContainerID && cs.State == runtime.StateRunning {
			c.log.Info(probe+" probe failed", append(logging.Pod(r.Namespace, r.Name, string(r.PodUID)), zap.String("container", r.Container), zap.String("message", r.Message))...)
			var grace *int64
			if p, ok := c.workers.Pod(r.PodUID); ok {
				msg := fmt.Sprintf("Container %s failed %s probe", r.Container, probe)
				if p.Spec.RestartPolicy != corev1.RestartPolicyNever {
					msg += ", will be restarted"
				}
				c.cfg.Recorder.Eventf(kube.ContainerRef(p, r.Container), corev1.EventTypeNormal, "Killing", "%s", msg)
				grace = probeGrace(p, r.Container, r.Probe)
			}
			c.syncer.ProbeFailed(cs.ID, grace)
			c.HandlePodSyncByUID(r.PodUID)
			return
		}
	}
}

// HandlePodCleanups is housekeeping: once every source is ready it forgets
// finished workers of pods no longer desired, kills workers whose pod is
// gone, reclaims forgotten pods from the runtime and restarts pods that were
// created again under a UID that was terminating, and drops stale crash-loop
// back-offs.
func (c *Controller) HandlePodCleanups() {
	c.housekeeping.Lock()
	defer c.housekeeping.Unlock()
	if c.cleanupWorkers() {
		// runtime orphans are looked for on active partitions only, which
		// a release makes inactive first: no need to hold the release up.
		c.killRuntimeOrphans(c.states)
	}
	// crash-loop back-offs of deleted pods and replaced definitions.
	c.syncer.GC()
}

// cleanupWorkers is the part of housekeeping that acts on the workers; it
// leaves their states in c.states, or returns false before the sources are
// ready. Call with c.housekeeping held.
func (c *Controller) cleanupWorkers() bool {
	c.handover.Lock()
	defer c.handover.Unlock()
	plan, ok := c.syncKnownPods()
	if !ok {
		return false
	}
	workqueue.ParallelizeUntil(context.Background(), removeParallelism, len(plan.forgotten), func(i int) {
		uid := plan.forgotten[i]
		c.forgetWorker(uid, plan.recreated[uid])
	})
	for _, p := range plan.orphans {
		c.log.Info("killing orphaned pod worker", podLog(p)...)
		c.workers.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateKill, Pod: p, StartTime: time.Now()})
	}
	for _, p := range plan.restart {
		c.log.Info("restarting pod created again after termination", podLog(p)...)
		if r := c.admit(p); !r.Admit {
			c.reject(p, r.Reason, r.Message)
			continue
		}
		c.workers.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: p, StartTime: time.Now()})
	}
	return true
}

// syncKnownPods has the workers forget what the sources no longer want
// (the admitted pods are the desired ones) and plans the rest of the
// round, or returns false before the sources are ready. Every worker held
// now is marked as tracked, so that it is reclaimed once the workers forget
// it. The controller's lock is held throughout, so that the desired pods
// and the workers' states are of one moment; it is taken before the
// workers' own, as everywhere.
func (c *Controller) syncKnownPods() (cleanupPlan, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.sourcesReady {
		return cleanupPlan{}, false
	}
	desired := func(uid types.UID) bool {
		e, ok := c.pods[uid]
		return ok && !e.rejected
	}
	track := func(uid types.UID) { c.tracked[uid] = struct{}{} }
	c.workers.SyncKnownPodsInto(desired, track, c.states)
	return c.planCleanup(c.states), true
}

// cleanupPlan is what a housekeeping round does after SyncKnownPods:
// forget the workers gone (recreated: those whose pod was created again,
// which keep their containers and files), kill the orphaned workers and
// restart the pods created again.
type cleanupPlan struct {
	forgotten        []types.UID
	recreated        map[types.UID]bool
	orphans, restart []*corev1.Pod
}

// planCleanup sorts the workers' states into a cleanupPlan, untracks the
// forgotten workers (rejected pods no longer desired among them) and
// releases the resources of terminated pods. Every worker in states was
// tracked by the same SyncKnownPodsInto. Call with c.mu held.
func (c *Controller) planCleanup(states map[types.UID]podworker.WorkType) cleanupPlan {
	plan := cleanupPlan{recreated: map[types.UID]bool{}}
	for uid := range c.tracked {
		if st, ok := states[uid]; !ok || st == podworker.TerminatedAndRecreated {
			plan.forgotten = append(plan.forgotten, uid)
			delete(c.tracked, uid)
			plan.recreated[uid] = ok
		}
	}
	for uid, st := range states {
		e, want := c.pods[uid]
		if want && (st == podworker.TerminatedAndRecreated || st == podworker.TerminatedPodWork) {
			// a terminated pod no longer holds resources.
			c.uncount(e)
		}
		switch {
		case st == podworker.TerminatedAndRecreated:
			if want && !e.rejected {
				plan.restart = append(plan.restart, e.pod)
			}
		case st == podworker.SyncPodWork && !want:
			if p, ok := c.workers.Pod(uid); ok {
				plan.orphans = append(plan.orphans, p)
			}
		}
	}
	return plan
}

// forgetWorker drops a forgotten worker's pod: its sync state, and unless
// the pod was created again its containers, volumes and user; the sink
// forgets it when no source wants it any more.
func (c *Controller) forgetWorker(uid types.UID, recreated bool) {
	c.syncer.Forget(uid)
	if !recreated {
		c.removePodFiles(uid)
	}
	c.mu.Lock()
	_, still := c.pods[uid]
	delete(c.orphans, uid)
	c.mu.Unlock()
	if !still {
		c.cfg.Sink.Forget(uid)
	}
}

// removePodFiles removes the pod from the runtime, then its volumes, then
// gives its user back; a step that fails stops the next.
func (c *Controller) removePodFiles(uid types.UID) {
	if err := c.cfg.Runtime.RemovePod(context.Background(), uid); err != nil {
		c.log.Warn("cannot remove pod from the runtime", zap.String(logging.FieldUID, string(uid)), zap.Error(err))
	} else if err := c.syncer.RemoveVolumesAfterRemove(uid); err != nil {
		c.log.Warn("cannot remove the pod's volumes", zap.String(logging.FieldUID, string(uid)), zap.Error(err))
	} else if users, ok := c.cfg.Runtime.(runtime.PodUsers); ok {
		// the pod's files are gone: its uid may go to another pod.
		if err := users.ReleasePodUser(uid); err != nil {
			c.log.Warn("cannot release the pod's user", zap.String(logging.FieldUID, string(uid)), zap.Error(err))
		}
	}
}

// removeParallelism is how many forgotten pods housekeeping removes from
// the runtime at once: a removal mostly waits on the runtime (a sandbox's
// stop tears its network down), and the kubelet stops every deleted pod's
// sandbox at once, each in its own pod worker.
const removeParallelism = 8

// orphanGrace is the grace of a runtime pod no source wants (kubelet: such
// pods are killed with a one-second grace period override).
const orphanGrace int64 = 1

// killRuntimeOrphans kills, through a worker of their own, the pods the
// runtime holds on active partitions that no source wants and no worker
// knows (deleted while no replica owned their partition). states are the
// workers after this round's SyncKnownPods.
func (c *Controller) killRuntimeOrphans(states map[types.UID]podworker.WorkType) {
	lister, ok := c.cfg.Runtime.(runtime.PodLister)
	if !ok {
		return
	}
	var candidates []runtime.PodRef
	c.mu.Lock()
	for _, ref := range lister.Pods() {
		if _, want := c.pods[ref.UID]; want || c.orphans[ref.UID] {
			continue
		}
		if _, known := states[ref.UID]; known {
			continue
		}
		if c.cfg.Active != nil && !c.cfg.Active(bus.Partition(string(ref.UID), c.cfg.Partitions)) {
			continue
		}
		candidates = append(candidates, ref)
	}
	c.mu.Unlock()
	caughtUp := map[int]bool{}
	for _, ref := range candidates {
		p := bus.Partition(string(ref.UID), c.cfg.Partitions)
		ok, asked := caughtUp[p]
		if !asked {
			ok = c.cfg.CaughtUp == nil || c.cfg.CaughtUp(context.Background(), p)
			caughtUp[p] = ok
		}
		if !ok {
			continue
		}
		c.mu.Lock()
		_, want := c.pods[ref.UID]
		if !want {
			c.orphans[ref.UID] = true
		}
		c.mu.Unlock()
		if want || c.workerKnows(ref.UID) {
			continue
		}
		pod := &corev1.Pod{}
		pod.UID, pod.Namespace, pod.Name = ref.UID, ref.Namespace, ref.Name
		c.log.Info("killing pod no source wants (found in the runtime)", podLog(pod)...)
		c.workers.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateKill, Pod: pod, StartTime: time.Now(),
			Kill: &podworker.KillOptions{GracePeriodOverride: ptr.To(orphanGrace)}})
	}
}

// PodsOf lists the pods the controller holds in a partition.
func (c *Controller) PodsOf(partition int) []*corev1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*corev1.Pod
	for _, e := range c.pods {
		if e.partition == partition {
			out = append(out, e.pod)
		}
	}
	return out
}

// Pod returns a held pod.
func (c *Controller) Pod(uid types.UID) (*corev1.Pod, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.pods[uid]; ok {
		return e.pod, true
	}
	return nil, false
}

// Admitted lists the pods this replica has admitted and not yet finished.
func (c *Controller) Admitted() []*corev1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*corev1.Pod
	for _, e := range c.pods {
		if !e.rejected {
			out = append(out, e.pod)
		}
	}
	return out
}

// handoverGracePeriod bounds the grace of the pods of a process-local
// runtime stopped because their partition moves to another replica (they
// start again there at once).
const handoverGracePeriod int64 = 2

// ReleasePartition hands a partition over. The workers of its pods (and of
// pods of it still terminating) stop where they are, without terminating
// anything: the containers go on running, the next owner adopts them and
// finishes any termination under way. A running pod's status as the
// runtime holds it now goes to the sink, to be its last word from this
// replica. Only with a process-local runtime are the pods stopped (with a
// grace of at most handoverGracePeriod), without being reported. It returns
// once the workers have returned, or ctx ends.
func (c *Controller) ReleasePartition(ctx context.Context, partition int) error {
	c.handover.Lock()
	defer c.handover.Unlock()
	if _, local := c.cfg.Runtime.(runtime.ProcessLocal); local {
		return c.stopPartition(ctx, partition)
	}
	c.mu.Lock()
	pods := map[types.UID]*corev1.Pod{}
	for uid, e := range c.pods {
		if e.partition == partition {
			c.uncount(e)
			delete(c.pods, uid)
			if !e.rejected {
				pods[uid] = e.pod
			}
		}
	}
	c.mu.Unlock()
	var uids []types.UID
	for _, uid := range c.workers.Known() {
		if bus.Partition(string(uid), c.cfg.Partitions) == partition {
			uids = append(uids, uid)
		}
	}
	syncing := map[types.UID]*corev1.Pod{}
	var dones []<-chan struct{}
	for _, uid := range uids {
		if p, ok := c.workers.Pod(uid); ok && !c.workers.IsPodTerminationRequested(uid) {
			syncing[uid] = p
		}
		dones = append(dones, c.workers.Detach(uid))
	}
	for _, done := range dones {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("partition %d: pod workers still stopping: %w", partition, ctx.Err())
		}
	}
	c.mu.Lock()
	for _, uid := range uids {
		delete(c.tracked, uid)
		delete(c.orphans, uid)
	}
	c.mu.Unlock()
	for uid, p := range syncing {
		if _, wanted := pods[uid]; wanted {
			c.cfg.Sink.Set(c.syncer.CurrentStatus(p))
		}
	}
	for _, uid := range uids {
		c.syncer.Forget(uid)
	}
	return nil
}

// stopPartition is the hand-over of a process-local runtime: the
// partition's pods are stopped here, then forgotten.
func (c *Controller) stopPartition(ctx context.Context, partition int) error {
	c.mu.Lock()
	var pods []*corev1.Pod
	for uid, e := range c.pods {
		if e.partition == partition {
			c.uncount(e)
			delete(c.pods, uid)
			if !e.rejected {
				pods = append(pods, e.pod)
			}
		}
	}
	c.mu.Unlock()
	var chans []chan struct{}
	for _, p := range pods {
		ch := make(chan struct{})
		chans = append(chans, ch)
		c.workers.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateKill, Pod: p, StartTime: time.Now(),
			Kill: &podworker.KillOptions{CompletedCh: ch, GracePeriodOverride: ptr.To(handoverGracePeriod)}})
	}
	for _, ch := range chans {
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("partition %d: pods still stopping: %w", partition, ctx.Err())
		}
	}
	return nil
}

// safeHandler keeps a panic in one pod's sync from crashing the process:
// the panic becomes that sync's error, and the pod is retried.
type safeHandler struct {
	h       podworker.SyncHandler
	log     *zap.Logger
	observe func(work string, d time.Duration, err error)
	tracer  trace.Tracer
	traces  *tracing.Pods
}

// span opens the span of one sync step of a traced pod; its end makes it
// the parent of what follows (the status it publishes, the next step).
func (s safeHandler) span(ctx context.Context, work string, pod *corev1.Pod) (context.Context, func(*error)) {
	if s.tracer == nil {
		return ctx, func(*error) {}
	}
	uid := string(pod.UID)
	pctx := s.traces.Context(ctx, uid)
	if !tracing.Traced(pctx) {
		return ctx, func(*error) {}
	}
	ctx, span := s.tracer.Start(pctx, "podworkers "+work, tracing.PodAttributes(pod.Namespace, pod.Name, uid),
		trace.WithAttributes(tracing.AttrStage.String("podworkers")))
	return ctx, func(err *error) {
		tracing.End(span, *err)
		s.traces.Continue(uid, span.SpanContext())
	}
}

func (s safeHandler) timed(work string, start time.Time, err *error) {
	if s.observe != nil {
		s.observe(work, time.Since(start), *err)
	}
}

func (s safeHandler) recover(pod *corev1.Pod, err *error) {
	if r := recover(); r != nil {
		s.log.Error("pod sync panicked", append(podLog(pod), zap.Any("panic", r))...)
		*err = fmt.Errorf("sync panicked: %v", r)
	}
}

func (s safeHandler) SyncPod(ctx context.Context, t podworker.UpdateType, pod *corev1.Pod) (res podworker.SyncResult, err error) {
	defer s.timed("sync", time.Now(), &err)
	ctx, end := s.span(ctx, "sync", pod)
	defer end(&err)
	defer s.recover(pod, &err)
	return s.h.SyncPod(ctx, t, pod)
}

func (s safeHandler) SyncTerminatingPod(ctx context.Context, pod *corev1.Pod, grace int64, kill *podworker.KillOptions) (err error) {
	defer s.timed("terminating", time.Now(), &err)
	ctx, end := s.span(ctx, "terminating", pod)
	defer end(&err)
	defer s.recover(pod, &err)
	return s.h.SyncTerminatingPod(ctx, pod, grace, kill)
}

func (s safeHandler) SyncTerminatedPod(ctx context.Context, pod *corev1.Pod) (err error) {
	defer s.timed("terminated", time.Now(), &err)
	ctx, end := s.span(ctx, "terminated", pod)
	defer end(&err)
	defer s.recover(pod, &err)
	return s.h.SyncTerminatedPod(ctx, pod)
}

// probeGrace is the terminationGracePeriodSeconds of the container's probe
// of that type, if it sets one.
func probeGrace(p *corev1.Pod, container string, probe bus.ProbeType) *int64 {
	for _, c := range append(p.Spec.InitContainers[:len(p.Spec.InitContainers):len(p.Spec.InitContainers)], p.Spec.Containers...) {
		if c.Name != container {
			continue
		}
		pr := c.LivenessProbe
		if probe == bus.ProbeStartup {
			pr = c.StartupProbe
		}
		if pr != nil {
			return pr.TerminationGracePeriodSeconds
		}
	}
	return nil
}
