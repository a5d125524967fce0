// Package podworker is the pod worker state machine: one serialized worker
// per pod UID that drives the pod through its life, as the kubelet's pod
// workers do.
//
// The machine, per pod UID:
//
//	        UpdatePod (first sight)
//	               │
//	               ▼
//	┌──────────► SyncPod ──────────┐   SyncPod runs again on every update and
//	│ resync /     │               │   on every requeue (resync or back-off).
//	│ back-off     │ deleted, kill,│
//	└──────────────┘ terminal phase│
//	               ▼               │
//	        TerminatingPod ◄───────┘   stops every container with the
//	               │                   effective grace period; retried on error.
//	               ▼
//	        TerminatedPod              reclaims what is left (files, logs);
//	               │                   retried on error.
//	               ▼
//	          finished ── SyncKnownPods (pod no longer desired) ──► forgotten
//	               └──── a Create for the same UID arrived while terminating ──►
//	                     forgotten, reported TerminatedAndRecreated, and the
//	                     caller starts the pod afresh.
//
// Invariants:
//   - At most one goroutine per UID runs the sync functions; two never
//     overlap for one pod. Different pods never wait for each other. The
//     goroutine lives only while the pod has work: it takes pending updates
//     until none is left and then returns (parked), and the next update or
//     requeue starts a new one. An idle pod (a Running pod between its
//     resyncs, most of a node) holds no goroutine and no stack.
//   - At most one update is pending per pod and the newest one replaces it;
//     once termination is requested every update becomes a kill carrying the
//     effective grace period, so a kill is never replaced by anything weaker.
//   - The transitions only go forward: a pod that began terminating never
//     syncs again; a finished pod ignores every update until SyncKnownPods
//     forgets it.
//   - A static pod (source file or http) starts only when no other static
//     pod of its full name has started and not finished, and after those of
//     the name that came before it: a changed manifest's pod waits for the
//     old one to terminate within its grace (retried after the back-off).
//   - Requesting termination (or shortening the grace period) cancels the
//     context of the sync in flight, so teardown does not wait for setup.
//   - The grace period only ever shrinks: the pod's spec, then its deletion
//     grace, then a kill's override, never below 1 s.
//   - After a successful SyncPod the pod is requeued with the jittered resync
//     interval; after any failure with the jittered back-off period; a sync
//     may ask to come back sooner (a container's crash-loop back-off ends).
//   - Before the first SyncKnownPods an unknown pod may still have running
//     containers (the worker set is not yet complete); after it, it cannot.
//   - A worker ends in one of two ways: the pod finished (TerminatedPod ran),
//     or the pod was handed over (Detach): the sync in flight is cancelled,
//     nothing is stopped, and the pod's containers go on running in the
//     runtime for the next owner to adopt. A detached pod ignores every
//     update until its goroutine (if one is running) has returned; then it
//     is forgotten, and a later update for its UID starts a new worker that
//     adopts what the runtime holds (kubelet: a restarted kubelet's workers
//     start from the containers CRI reports).
package podworker

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"

	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
)

// UpdateType says why a pod is being synced (kubelet: SyncPodType).
type UpdateType int

// The update types.
const (
	// UpdateSync is a periodic or requested resync.
	UpdateSync UpdateType = iota
	// UpdateCreate is a pod seen for the first time by its source.
	UpdateCreate
	// UpdateUpdate is a change of the pod from its source.
	UpdateUpdate
	// UpdateKill asks for the pod to be stopped.
	UpdateKill
)

func (t UpdateType) String() string {
	switch t {
	case UpdateCreate:
		return "create"
	case UpdateUpdate:
		return "update"
	case UpdateKill:
		return "kill"
	}
	return "sync"
}

// WorkType is the phase of a pod's life the worker is in (kubelet: PodWorkType).
type WorkType int

// The work types, and the state SyncKnownPods reports.
const (
	SyncPodWork WorkType = iota
	TerminatingPodWork
	TerminatedPodWork
	// TerminatedAndRecreated is reported by SyncKnownPods for a pod whose
	// worker was forgotten because the same UID was created again while it
	// terminated: the caller should start it afresh.
	TerminatedAndRecreated
)

func (w WorkType) String() string {
	switch w {
	case TerminatingPodWork:
		return "terminating"
	case TerminatedPodWork:
		return "terminated"
	case TerminatedAndRecreated:
		return "terminated-and-recreated"
	}
	return "sync"
}

// KillOptions go with an UpdateKill.
type KillOptions struct {
	// CompletedCh is closed once the pod's containers are stopped (or at
	// once if the pod is unknown or already terminated).
	CompletedCh chan<- struct{}
	// Evict marks a kill by the node (eviction, admission): the pod's
	// content may go as soon as it is stopped.
	Evict bool
	// GracePeriodOverride shortens the grace period (never lengthens it).
	GracePeriodOverride *int64
	// Phase, Reason and Message, if Phase is set, are the final status the
	// terminating pod reports (kubelet: PodStatusFunc).
	Phase   corev1.PodPhase
	Reason  string
	Message string
	// Conditions go with Phase on every status of the terminating pod
	// (DisruptionTarget of an eviction).
	Conditions []corev1.PodCondition
}

// UpdateOptions is one update for a pod worker.
type UpdateOptions struct {
	Type UpdateType
	Pod  *corev1.Pod
	// StartTime is when the update was received (for latency metrics).
	StartTime time.Time
	Kill      *KillOptions
}

// SyncResult is what SyncPod reports.
type SyncResult struct {
	// Terminal: the pod reached Succeeded or Failed; it is torn down next.
	Terminal bool
	// RequeueAfter, if positive and shorter than the resync interval, brings
	// the pod back sooner (a container's back-off ends then).
	RequeueAfter time.Duration
}

// SyncHandler does the work of each phase. Each method must return promptly
// with ctx.Err() once ctx is cancelled.
type SyncHandler interface {
	SyncPod(ctx context.Context, t UpdateType, pod *corev1.Pod) (SyncResult, error)
	// SyncTerminatingPod stops every container of the pod within grace
	// seconds; kill may be nil.
	SyncTerminatingPod(ctx context.Context, pod *corev1.Pod, grace int64, kill *KillOptions) error
	// SyncTerminatedPod reclaims what is left of a stopped pod.
	SyncTerminatedPod(ctx context.Context, pod *corev1.Pod) error
}

// Kubelet defaults (kubelet.go: resyncInterval, backOffPeriod; pod_workers.go jitter factors).
const (
	DefaultResyncInterval = time.Minute
	DefaultBackOffPeriod  = 10 * time.Second
	resyncJitter          = 0.5
	backOffJitter         = 0.5
	// DefaultGracePeriod applies when the spec names none (API default).
	DefaultGracePeriod int64 = 30
)

// Option configures the pod workers.
type Option func(*Workers)

// WithResyncInterval sets the interval between syncs of a healthy pod.
func WithResyncInterval(d time.Duration) Option { return func(w *Workers) { w.resync = d } }

// WithBackOffPeriod sets the delay before a failed sync is retried.
func WithBackOffPeriod(d time.Duration) Option { return func(w *Workers) { w.backOff = d } }

// WithLogger sets the logger.
func WithLogger(l *zap.Logger) Option { return func(w *Workers) { w.log = l } }

// WithClock sets the time source (tests).
func WithClock(now func() time.Time) Option { return func(w *Workers) { w.now = now } }

// podState is the worker's record of one pod (kubelet: podSyncStatus).
type podState struct {
	ctx    context.Context
	cancel context.CancelFunc

	fullname string
	pod      *corev1.Pod // newest pod seen

	// running: a goroutine is taking this pod's work (it returns once no
	// work is pending: an idle pod has none).
	running bool
	// done, made by a Detach that waits for the running goroutine, is
	// closed when that goroutine returns.
	done    chan struct{}
	working bool
	pending *work
	// active is the work in flight while working, nil otherwise.
	active *work

	syncedAt      time.Time
	startedAt     time.Time
	terminatingAt time.Time
	terminatedAt  time.Time
	gracePeriod   int64
	notify        []chan<- struct{}
	finalStatus   *KillOptions

	deleted, evicted, finished, restartRequested bool
	// detached: handed over; forgotten once the goroutine returns.
	detached bool
}

type work struct {
	kind WorkType
	opts UpdateOptions
}

func (s *podState) terminationRequested() bool { return !s.terminatingAt.IsZero() }
func (s *podState) terminated() bool           { return !s.terminatedAt.IsZero() }
func (s *podState) workType() WorkType {
	switch {
	case s.terminated():
		return TerminatedPodWork
	case s.terminationRequested():
		return TerminatingPodWork
	}
	return SyncPodWork
}

// Workers is the set of pod workers of one process.
type Workers struct {
	handler SyncHandler
	log     *zap.Logger
	now     func() time.Time
	resync  time.Duration
	backOff time.Duration

	mu         sync.Mutex
	pods       map[types.UID]*podState
	podsSynced bool
	closed     bool

	// startedStatic names, per full name, the static pod allowed to start
	// and not yet finished; waitingStatic the static pods of that name
	// waiting to start, in the order they arrived (kubelet:
	// startedStaticPodsByFullname, waitingToStartStaticPodsByFullname).
	startedStatic map[string]types.UID
	waitingStatic map[string][]types.UID

	queue   workqueue.TypedDelayingInterface[types.UID]
	running sync.WaitGroup
	ctx     context.Context
	stop    context.CancelFunc
}

// New returns pod workers that run handler. Call Run to start the requeue
// loop and Stop to end everything.
func New(handler SyncHandler, opts ...Option) *Workers {
	w := &Workers{
		handler: handler,
		log:     zap.NewNop(),
		now:     time.Now,
		resync:  DefaultResyncInterval,
		backOff: DefaultBackOffPeriod,
		pods:    map[types.UID]*podState{},

		startedStatic: map[string]types.UID{},
		waitingStatic: map[string][]types.UID{},
	}
	for _, o := range opts {
		o(w)
	}
	w.queue = workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[types.UID]{Name: ""})
	w.ctx, w.stop = context.WithCancel(context.Background())
	return w
}

// Run turns requeued pods into sync updates until Stop. It blocks.
func (w *Workers) Run() {
	for {
		uid, shutdown := w.queue.Get()
		if shutdown {
			return
		}
		w.queue.Done(uid)
		w.mu.Lock()
		s, ok := w.pods[uid]
		var pod *corev1.Pod
		if ok && !s.finished && s.pending == nil && s.pod != nil {
			pod = s.pod
		}
		w.mu.Unlock()
		if pod != nil {
			w.UpdatePod(UpdateOptions{Type: UpdateSync, Pod: pod, StartTime: w.now()})
		}
	}
}

// Stop cancels every sync in flight and waits for the workers to exit.
func (w *Workers) Stop() {
	w.mu.Lock()
	w.closed = true
	for _, s := range w.pods {
		if s.cancel != nil {
			s.cancel()
		}
	}
	w.mu.Unlock()
	w.stop()
	w.queue.ShutDown()
	w.running.Wait()
}

func fullName(p *corev1.Pod) string { return p.Name + "_" + p.Namespace }

func isTerminalPhase(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// effectiveGrace computes the grace period of a terminating pod: it only
// ever shrinks from what was decided before, starts from the spec, and is
// never below one second (kubelet: calculateEffectiveGracePeriod).
func effectiveGrace(current int64, pod *corev1.Pod, kill *KillOptions) (grace int64, shortened bool) {
	grace = current
	overridden := false
	if d := pod.DeletionGracePeriodSeconds; d != nil && (grace == 0 || *d < grace) {
		grace, overridden = *d, true
	}
	if kill != nil && kill.GracePeriodOverride != nil && (grace == 0 || *kill.GracePeriodOverride < grace) {
		grace, overridden = *kill.GracePeriodOverride, true
	}
	if !overridden && grace == 0 {
		grace = DefaultGracePeriod
		if s := pod.Spec.TerminationGracePeriodSeconds; s != nil {
			grace = *s
		}
	}
	if grace < 1 {
		grace = 1
	}
	return grace, current != 0 && current != grace
}

// UpdatePod hands an update to the pod's worker, starting one if needed.
func (w *Workers) UpdatePod(opts UpdateOptions) {
	pod := opts.Pod
	if pod == nil {
		return
	}
	uid := pod.UID
	log := w.log.WithLazy(logging.Pod(pod.Namespace, pod.Name, string(uid))...)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		closeKill(opts.Kill)
		return
	}
	now := w.now()
	s, ok := w.stateFor(pod, opts, now, log)
	if !ok {
		closeKill(opts.Kill)
		return
	}
	s.pod = pod
	becameTerminating := s.noteTermination(pod, opts, now)
	opts, shortened := s.killOptions(pod, opts)
	s.pending = &work{kind: s.workType(), opts: opts}
	if !s.running {
		s.running = true
		w.running.Add(1)
		go w.loop(uid, s)
	}
	// teardown must not wait for a setup in flight, nor a long grace for a
	// shorter one (kubelet: cancel the in-flight sync on termination).
	if (becameTerminating && s.active != nil && s.active.kind == SyncPodWork && s.working) || shortened {
		if s.cancel != nil {
			log.Debug("cancelling the sync in flight", zap.Bool("graceShortened", shortened))
			s.cancel()
		}
	}
}

// stateFor is the pod's state, made when the pod is new; ok is false when
// the update is not for the worker: the pod is finished or detached, or
// recreated while terminating (then it restarts once terminated). Called
// with w.mu held.
func (w *Workers) stateFor(pod *corev1.Pod, opts UpdateOptions, now time.Time, log *zap.Logger) (s *podState, ok bool) {
	s, ok = w.pods[pod.UID]
	if !ok {
		s = &podState{syncedAt: now, fullname: fullName(pod)}
		// a pod first seen already in a terminal phase is never started
		// (kubelet: a terminal pod is only torn down).
		if isTerminalPhase(pod) {
			s.terminatingAt = now
		}
		w.pods[pod.UID] = s
		if kube.IsStatic(pod) {
			// static pods of one full name start in the order they came.
			w.waitingStatic[s.fullname] = append(w.waitingStatic[s.fullname], pod.UID)
		}
	} else if s.terminationRequested() && opts.Type == UpdateCreate {
		// kubelet: the same UID created again while terminating restarts
		// once the old instance is finished and forgotten.
		s.restartRequested = true
		log.Info("pod recreated while terminating, will restart once terminated")
		return nil, false
	}
	if s.finished || s.detached {
		return nil, false
	}
	return s, true
}

// noteTermination records a deletion, a terminal phase or a kill (an
// eviction when it says so) of the update; it reports whether the pod
// became terminating with it.
func (s *podState) noteTermination(pod *corev1.Pod, opts UpdateOptions, now time.Time) (becameTerminating bool) {
	if pod.DeletionTimestamp != nil {
		s.deleted = true
	}
	if s.terminationRequested() {
		return false
	}
	switch {
	case pod.DeletionTimestamp != nil, isTerminalPhase(pod):
		becameTerminating = true
	case opts.Type == UpdateKill:
		if opts.Kill != nil && opts.Kill.Evict {
			s.evicted = true
		}
		becameTerminating = true
	}
	if becameTerminating {
		s.terminatingAt = now
	}
	return becameTerminating
}

// killOptions is the update as the worker runs it: for a terminating pod a
// kill with the effective grace period (its waiter and final status kept
// on s), otherwise no kill options, whose waiter is done at once.
// shortened says the grace period became shorter.
func (s *podState) killOptions(pod *corev1.Pod, opts UpdateOptions) (_ UpdateOptions, shortened bool) {
	switch {
	case s.terminated():
		// only the reclaim step remains; a kill's waiter is done already.
		closeKill(opts.Kill)
		opts.Kill = nil
	case s.terminationRequested():
		k := &KillOptions{}
		if opts.Kill != nil {
			*k = *opts.Kill
			if k.CompletedCh != nil {
				s.notify = append(s.notify, k.CompletedCh)
			}
			if k.Phase != "" {
				final := *k
				s.finalStatus = &final
			}
		}
		var grace int64
		grace, shortened = effectiveGrace(s.gracePeriod, pod, k)
		s.gracePeriod = grace
		k.GracePeriodOverride = &grace
		k.CompletedCh = nil
		opts.Kill = k
		opts.Type = UpdateKill
	default:
		closeKill(opts.Kill)
		opts.Kill = nil
	}
	return opts, shortened
}

func closeKill(k *KillOptions) {
	if k != nil && k.CompletedCh != nil {
		close(k.CompletedCh)
	}
}

// loop is the worker goroutine of one pod: it runs the pod's pending work
// until none is left, then returns (take parks it).
func (w *Workers) loop(uid types.UID, s *podState) {
	defer w.running.Done()
	for {
		ctx, wk, ok := w.take(uid, s)
		if !ok {
			return
		}
		pod := wk.opts.Pod
		log := w.log.WithLazy(logging.Pod(pod.Namespace, pod.Name, string(uid))...)
		var err error
		var res SyncResult
		switch wk.kind {
		case TerminatedPodWork:
			err = w.handler.SyncTerminatedPod(ctx, pod)
		case TerminatingPodWork:
			grace := DefaultGracePeriod
			if wk.opts.Kill != nil && wk.opts.Kill.GracePeriodOverride != nil {
				grace = *wk.opts.Kill.GracePeriodOverride
			}
			err = w.handler.SyncTerminatingPod(ctx, pod, grace, w.finalStatus(uid))
		default:
			res, err = w.handler.SyncPod(ctx, wk.opts.Type, pod)
		}
		switch {
		case ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)):
			// cancelled by a newer update (already pending) or by Stop.
			log.Debug("sync cancelled", zap.Stringer("work", wk.kind))
			w.complete(uid, 0)
		case err != nil:
			log.Warn("sync failed, will retry", zap.Stringer("work", wk.kind), zap.Error(err))
			w.complete(uid, wait.Jitter(w.backOff, backOffJitter))
		case wk.kind == TerminatedPodWork:
			// the next take finds the pod finished and parks for good.
			w.completeTerminated(uid)
		case wk.kind == TerminatingPodWork:
			w.completeTerminating(uid)
		case res.Terminal:
			w.completeTerminal(uid)
		default:
			d := wait.Jitter(w.resync, resyncJitter)
			if res.RequeueAfter > 0 && res.RequeueAfter < d {
				d = res.RequeueAfter
			}
			w.complete(uid, d)
		}
	}
}

func (w *Workers) finalStatus(uid types.UID) *KillOptions {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.pods[uid]; ok && s.finalStatus != nil {
		k := *s.finalStatus
		return &k
	}
	return nil
}

// take moves the pending update of s, the state the calling goroutine was
// started for, to active and returns the context to run it with. With
// nothing to run (no work pending, the pod finished or detached, the
// workers stopped) it parks the goroutine instead: the pod is marked as
// having none, a detached pod is forgotten, and the caller returns. A
// goroutine whose state was forgotten meanwhile (a finished pod no longer
// desired, its UID perhaps created again with a worker of its own) never
// touches the state that replaced it.
func (w *Workers) take(uid types.UID, s *podState) (context.Context, *work, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cur, ok := w.pods[uid]
	if !ok || cur != s || s.pending == nil || w.closed || s.finished || s.detached {
		s.running = false
		if s.done != nil {
			close(s.done)
			s.done = nil
		}
		if ok && cur == s && s.detached {
			delete(w.pods, uid)
			w.releaseStatic(s.fullname, uid)
		}
		return nil, nil, false
	}
	wk := s.pending
	s.pending = nil
	// the work type follows the state at the time it runs, not when queued.
	wk.kind = s.workType()
	if wk.kind == SyncPodWork && kube.IsStatic(wk.opts.Pod) && !w.allowStaticPodStart(s.fullname, uid) {
		// another static pod of the name runs, or is ahead in line: retry
		// after the back-off (kubelet: allowPodStart), parked meanwhile.
		s.pending, s.running = nil, false
		w.queue.AddAfter(uid, wait.Jitter(w.backOff, backOffJitter))
		return nil, nil, false
	}
	if wk.kind != SyncPodWork && (wk.opts.Kill == nil || wk.opts.Kill.GracePeriodOverride == nil) {
		g := s.gracePeriod
		if g == 0 {
			g, _ = effectiveGrace(0, wk.opts.Pod, nil)
		}
		wk.opts.Kill = &KillOptions{GracePeriodOverride: &g}
	}
	s.active = wk
	s.working = true
	if s.ctx == nil || s.ctx.Err() != nil {
		s.ctx, s.cancel = context.WithCancel(w.ctx)
	}
	if wk.kind == SyncPodWork && s.startedAt.IsZero() {
		s.startedAt = w.now()
	}
	return s.ctx, wk, true
}

// finish ends the pod's work item and, if the pod is still known, has
// then move it on, both under the lock.
func (w *Workers) finish(uid types.UID, then func(s *podState)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.pods[uid]
	if !ok {
		return
	}
	// the finished work's pod, an older copy than s.pod once an update
	// came in, is not kept.
	s.working, s.active = false, nil
	then(s)
}

// complete ends a work item and requeues the pod after d (0: not at all).
func (w *Workers) complete(uid types.UID, d time.Duration) {
	w.finish(uid, func(s *podState) {
		if s.pending == nil && d > 0 {
			// (with work pending, the pod's goroutine takes it next.)
			w.queue.AddAfter(uid, d)
		}
	})
}

// completeTerminal moves a pod whose sync found it finished to terminating.
func (w *Workers) completeTerminal(uid types.UID) {
	w.finish(uid, func(s *podState) {
		if !s.terminationRequested() {
			s.terminatingAt = w.now()
		}
		if s.pending == nil {
			g, _ := effectiveGrace(s.gracePeriod, s.pod, nil)
			s.gracePeriod = g
			s.pending = &work{kind: TerminatingPodWork, opts: UpdateOptions{Type: UpdateKill, Pod: s.pod, StartTime: w.now(), Kill: &KillOptions{GracePeriodOverride: &g}}}
		}
	})
}

// completeTerminating records that every container stopped and queues the
// reclaim step.
func (w *Workers) completeTerminating(uid types.UID) {
	w.finish(uid, func(s *podState) {
		s.terminatedAt = w.now()
		closeAll(s.notify)
		s.notify = nil
		s.pending = &work{kind: TerminatedPodWork, opts: UpdateOptions{Type: UpdateKill, Pod: s.pod, StartTime: w.now()}}
	})
}

// completeTerminated finishes the pod: its worker exits, and updates are
// ignored until SyncKnownPods forgets it.
func (w *Workers) completeTerminated(uid types.UID) {
	w.finish(uid, func(s *podState) {
		s.finished = true
		s.pending = nil
		if s.cancel != nil {
			s.cancel()
		}
		w.releaseStatic(s.fullname, uid)
	})
}

// Detach stops the worker of a pod without terminating the pod (its
// partition moves to another replica): the sync in flight is cancelled,
// pending work is dropped, waiters of a kill are released, and the pod is
// forgotten once its goroutine (if one runs) has returned, which the
// returned channel tells. The containers are not touched.
func (w *Workers) Detach(uid types.UID) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.pods[uid]
	if !ok || !s.running {
		// no goroutine runs (parked, finished, or never started): nothing
		// to wait for.
		if ok {
			closeAll(s.notify)
			delete(w.pods, uid)
			w.releaseStatic(s.fullname, uid)
		}
		done := make(chan struct{})
		close(done)
		return done
	}
	s.detached = true
	s.pending = nil
	closeAll(s.notify)
	s.notify = nil
	if s.cancel != nil {
		s.cancel()
	}
	if s.done == nil {
		s.done = make(chan struct{})
	}
	return s.done
}

func closeAll(chs []chan<- struct{}) {
	for _, ch := range chs {
		close(ch)
	}
}

// SyncKnownPodsInto forgets the finished workers of pods that are no
// longer desired, or that were created again (kubelet: SyncKnownPods);
// after the first call an unknown pod is taken as not running. The states
// of the workers left, plus TerminatedAndRecreated for the UIDs to start
// afresh, go into out, cleared first so that housekeeping reuses one map.
// desired is a predicate on the UID; seen, when set, is called with the
// UID of every worker held at the call, those forgotten by it included.
// desired and seen run under the workers' lock: they must not call the
// workers.
func (w *Workers) SyncKnownPodsInto(desired func(types.UID) bool, seen func(types.UID), out map[types.UID]WorkType) {
	clear(out)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.podsSynced = true
	for uid, s := range w.pods {
		if s.detached {
			continue
		}
		if seen != nil {
			seen(uid)
		}
		if s.finished && (s.restartRequested || !desired(uid)) {
			delete(w.pods, uid)
			w.releaseStatic(s.fullname, uid)
			if s.restartRequested {
				out[uid] = TerminatedAndRecreated
			}
			continue
		}
		out[uid] = s.workType()
	}
}

// Pod returns the newest pod the worker holds for uid.
func (w *Workers) Pod(uid types.UID) (*corev1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.pods[uid]
	if !ok {
		return nil, false
	}
	return s.pod, true
}

// Refresh replaces the pod a worker holds with a newer copy of it that
// needs no work of its own (a change of its API status alone): the next
// sync, a resync's too, takes it (kubelet: the pod manager's copy, which
// HandlePodSyncs hands the workers), and the older copy is not kept. A pod
// without a worker, or whose worker has finished or is handed over, is
// left alone.
func (w *Workers) Refresh(pod *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.pods[pod.UID]; ok && !s.finished && !s.detached && s.pod != nil {
		s.pod = pod
	}
}

// Len is how many workers are held (those being detached not counted).
func (w *Workers) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.pods {
		if !s.detached {
			n++
		}
	}
	return n
}

// Known lists the UIDs the workers hold.
func (w *Workers) Known() []types.UID {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]types.UID, 0, len(w.pods))
	for uid, s := range w.pods {
		if !s.detached {
			out = append(out, uid)
		}
	}
	return out
}

// IsPodKnownTerminated: the worker knows the pod and its containers stopped.
func (w *Workers) IsPodKnownTerminated(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.pods[uid]
	return ok && s.terminated()
}

// CouldHaveRunningContainers: true for a pod not yet terminated, and for an
// unknown pod until SyncKnownPods has run once.
func (w *Workers) CouldHaveRunningContainers(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.pods[uid]; ok {
		return !s.terminated()
	}
	return !w.podsSynced
}

// IsPodTerminationRequested: termination was asked for and the worker
// still holds the pod.
func (w *Workers) IsPodTerminationRequested(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.pods[uid]
	return ok && s.terminationRequested()
}

// knownOr answers pred for a pod the workers know; for one they do not, it
// answers whether SyncKnownPods has run (after it, an unknown pod is one to
// clean up).
func (w *Workers) knownOr(uid types.UID, pred func(*podState) bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.pods[uid]; ok {
		return pred(s)
	}
	return w.podsSynced
}

// ShouldPodContainersBeTerminating: termination was requested, or the pod is
// unknown after the first SyncKnownPods.
func (w *Workers) ShouldPodContainersBeTerminating(uid types.UID) bool {
	return w.knownOr(uid, func(s *podState) bool { return s.terminationRequested() })
}

// ShouldPodRuntimeBeRemoved: every container stopped, or the pod is unknown
// after the first SyncKnownPods.
func (w *Workers) ShouldPodRuntimeBeRemoved(uid types.UID) bool {
	return w.knownOr(uid, func(s *podState) bool { return s.terminated() })
}

// ShouldPodContentBeRemoved: the pod was evicted, or deleted and stopped, or
// is unknown after the first SyncKnownPods.
func (w *Workers) ShouldPodContentBeRemoved(uid types.UID) bool {
	return w.knownOr(uid, func(s *podState) bool { return s.evicted || (s.deleted && s.terminated()) })
}

// IsPodForMirrorPodTerminatingByFullName: a pod of that name_namespace is
// terminating and has not finished.
func (w *Workers) IsPodForMirrorPodTerminatingByFullName(fullname string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.pods {
		if s.fullname == fullname && s.terminationRequested() && !s.terminated() {
			return true
		}
	}
	return false
}
