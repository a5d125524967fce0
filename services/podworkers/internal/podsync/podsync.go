// Package podsync is the pod workers' sync handler over a container runtime:
// it starts init containers in order, then the app containers, restarts them
// by the pod's restart policy with the kubelet's crash-loop back-off, stops
// them on termination, and reports each pod's runtime status.
//
// Nothing here assumes this syncer started the containers it finds: the
// first sync of a pod adopts what the runtime holds (a replica that restarted
// or took the pod over from another). A running instance whose spec hash
// still matches is kept, an exited one is judged by the restart policy as
// any other, its attempt goes on from the runtime's count, and the crash-loop
// back-off is rebuilt from the restart count and the runtime's timestamps
// (kubelet: a restarted kubelet computes its pod actions from the containers
// CRI reports). Instances turns a reported status back into the instances
// it describes, for runtimes that must be told what ran (runtime.Restorer).
package podsync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/tracing"
	"github.com/splitlet/splitlet/services/podworkers/internal/dns"
	"github.com/splitlet/splitlet/services/podworkers/internal/podworker"
	"github.com/splitlet/splitlet/services/podworkers/internal/volumes"
)

// Waiting reasons of containers (kubelet's names).
const (
	ReasonContainerCreating = "ContainerCreating"
	ReasonPodInitializing   = "PodInitializing"
	ReasonCrashLoopBackOff  = "CrashLoopBackOff"
)

// Kubelet's container restart back-off (kuberuntime: backOffPeriod, MaxContainerBackOff).
const (
	DefaultBackOffBase = 10 * time.Second
	DefaultBackOffMax  = 5 * time.Minute
)

// StatusSink receives each pod's newest runtime status; it coalesces and
// publishes them.
type StatusSink interface {
	Set(st *bus.PodRuntimeStatus)
}

// Option configures a Syncer.
type Option func(*Syncer)

// WithBackOff sets the crash-loop back-off: base doubling up to max; the
// back-off resets after 2*max of no restarts (kubelet: 10 s, 5 min, 10 min).
func WithBackOff(base, max time.Duration) Option {
	return func(s *Syncer) { s.backOff, s.maxBackOff = flowcontrol.NewBackOff(base, max), max }
}

// WithHostIP sets the host IP reported for pods.
func WithHostIP(ip string) Option { return func(s *Syncer) { s.hostIP = ip } }

// WithStartObserver has f told of every container start attempt: the
// container's type (kubelet's container_type label: "container" or
// "init_container") and, when the start failed, the reason it gave (""
// when it started).
func WithStartObserver(f func(containerType, failure string)) Option {
	return func(s *Syncer) { s.onStart = f }
}

// WithBusMetrics has the syncer observe each new pod's time in podworkers
// in m (the process's bus metrics).
func WithBusMetrics(m *bus.Metrics) Option { return func(s *Syncer) { s.busMetrics = m } }

// WithRecorder has the syncer record the kubelet's container lifecycle
// Events (Created, Started, Failed, BackOff, Killing) on the pods.
func WithRecorder(r record.EventRecorder) Option { return func(s *Syncer) { s.recorder = r } }

// WithVolumes sets the volume manager that prepares a pod's volumes before
// its containers start; without one a pod with volumes starts with none
// mounted (the sim runtime runs nothing that could read them).
func WithVolumes(m *volumes.Manager) Option { return func(s *Syncer) { s.volumes = m } }

// WithServiceEnv sets where a container's service environment variables
// come from: the variables of the services a pod in the namespace sees
// (links: the pod's enableServiceLinks).
func WithServiceEnv(f func(namespace string, links bool) []string) Option {
	return func(s *Syncer) { s.serviceEnv = f }
}

// WithPullSecrets sets where the pods' imagePullSecrets are read (nil:
// not read, for a runtime that pulls no images).
func WithPullSecrets(src runtime.Sources) Option { return func(s *Syncer) { s.pullSecretSrc = src } }

// WithLogger sets the logger.
func WithLogger(l *zap.Logger) Option { return func(s *Syncer) { s.log = l } }

// Syncer implements podworker.SyncHandler over a runtime.
type Syncer struct {
	rt      runtime.Runtime
	sink    StatusSink
	log     *zap.Logger
	hostIP  string
	backOff *flowcontrol.Backoff
	// maxBackOff is the back-off's cap.
	maxBackOff time.Duration

	mu        sync.Mutex
	startTime map[types.UID]metav1.Time
	// received holds when each new pod arrived, until its containers all
	// run (splitlet_pod_stage_duration_seconds{stage="podworkers"}).
	received map[types.UID]time.Time
	// livenessFailed holds container IDs the prober found dead;
	// livenessKilled those killed for it (they restart unless Never).
	livenessFailed map[string]bool
	// startedOK holds the containers whose startup probe has succeeded;
	// created is when this Syncer began: a container running since before
	// then counts as started (its probe result went to the replica before).
	startedOK map[string]bool
	created   time.Time
	// probeGrace holds the kill's grace of a failed probe that sets one.
	probeGrace     map[string]time.Duration
	livenessKilled map[string]bool
	// ids holds, per pod, the container instances this syncer has seen
	// (to forget their liveness marks with the pod).
	ids map[types.UID]map[string]bool
	// final holds the status a kill asked a pod to end with.
	final map[types.UID]*podworker.KillOptions
	// startFailed holds, per pod and container name, why the last start
	// left no instance behind (a runtime's ErrImagePull, ImagePullBackOff,
	// CreateContainerConfigError...): the container shows it as its waiting
	// reason until a start succeeds (kubelet: the reason SyncPod's start
	// result gives the waiting container).
	startFailed map[types.UID]map[string]*corev1.ContainerStateWaiting
	// onStart is told of every start attempt (metrics).
	onStart func(containerType, failure string)
	// busMetrics gets each new pod's time in podworkers; nil: none.
	busMetrics *bus.Metrics
	// pullSecretSrc reads the imagePullSecrets; nil reads none.
	pullSecretSrc runtime.Sources
	// recorder records container Events; nil records none.
	recorder record.EventRecorder
	// volumes sets up pods' volumes (nil: none); vols holds, per pod, the
	// volumes of its last setup that got through; volBackOff spaces the
	// retries of a setup that failed.
	volumes    *volumes.Manager
	serviceEnv func(namespace string, links bool) []string
	// startCheck, if set, may refuse a container's start (WithStartCheck).
	startCheck func(*corev1.Pod, *corev1.Container) error
	vols       map[types.UID]map[string]volumes.Volume
	volBackOff *flowcontrol.Backoff
	// dns computes pods' resolver configurations (nil: none); dnsTold
	// holds the pods told what a HostDNS runtime does not apply.
	dns     *dns.Configurer
	dnsTold map[types.UID]bool
	// runtimeClasses resolves a RuntimeClass to its runtime handler (nil:
	// every pod gets the runtime's default).
	runtimeClasses func(name string) (string, error)
	devices        func(ctx context.Context, pod *corev1.Pod, container string) (*runtime.DeviceOptions, error)
}

// New returns a Syncer.
func New(rt runtime.Runtime, sink StatusSink, opts ...Option) *Syncer {
	s := &Syncer{
		rt:             rt,
		sink:           sink,
		log:            zap.NewNop(),
		hostIP:         "127.0.0.1",
		backOff:        flowcontrol.NewBackOff(DefaultBackOffBase, DefaultBackOffMax),
		maxBackOff:     DefaultBackOffMax,
		startTime:      map[types.UID]metav1.Time{},
		received:       map[types.UID]time.Time{},
		livenessFailed: map[string]bool{},
		startedOK:      map[string]bool{},
		created:        time.Now(),
		probeGrace:     map[string]time.Duration{},
		livenessKilled: map[string]bool{},
		ids:            map[types.UID]map[string]bool{},
		final:          map[types.UID]*podworker.KillOptions{},
		startFailed:    map[types.UID]map[string]*corev1.ContainerStateWaiting{},
		vols:           map[types.UID]map[string]volumes.Volume{},
		volBackOff:     flowcontrol.NewBackOff(volumeRetryBase, volumeRetryMax),
		dnsTold:        map[types.UID]bool{},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

var _ podworker.SyncHandler = (*Syncer)(nil)

// ProbeFailed records that the container failed its liveness or startup
// probe: the next sync kills it and restarts it as the pod's restart policy
// says (kubelet: the liveness and startup managers' results).
// A probe's own terminationGracePeriodSeconds, if set, is the kill's grace
// (kubelet: the probe-level grace period, which overrides the pod's).
func (s *Syncer) ProbeFailed(containerID string, probeGrace *int64) {
	s.mu.Lock()
	s.livenessFailed[containerID] = true
	if probeGrace != nil {
		s.probeGrace[containerID] = time.Duration(max(*probeGrace, 1)) * time.Second
	}
	s.mu.Unlock()
}

// kill stops a container of the pod, its preStop hook first within grace
// (kubelet: killContainer).
func (s *Syncer) kill(ctx context.Context, pod *corev1.Pod, name, id string, grace time.Duration) error {
	left, release := s.preStop(ctx, pod, name, grace)
	defer release()
	return s.rt.StopContainer(ctx, id, left)
}

// killGrace is the grace of a kill for a failed probe: the probe's own,
// else the pod's.
func (s *Syncer) killGrace(pod *corev1.Pod, id string) time.Duration {
	s.mu.Lock()
	g, ok := s.probeGrace[id]
	delete(s.probeGrace, id)
	s.mu.Unlock()
	if ok {
		return g
	}
	return graceOf(pod)
}

// StartupSucceeded records that the container's startup probe passed: a
// sidecar waiting for it lets the pod's next containers start.
func (s *Syncer) StartupSucceeded(uid types.UID, containerID string) {
	s.recordID(uid, containerID)
	s.mu.Lock()
	s.startedOK[containerID] = true
	s.mu.Unlock()
}

// sidecarStarted says whether a running sidecar counts as started (kubelet:
// isContainerStarted): it has no startup probe, its startup probe has
// passed, or it was running before this replica began.
func (s *Syncer) sidecarStarted(c *corev1.Container, inst *runtime.ContainerStatus) bool {
	if c.StartupProbe == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startedOK[inst.ID] || (!inst.StartedAt.IsZero() && inst.StartedAt.Before(s.created))
}

func (s *Syncer) takeLivenessFailure(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.livenessFailed[id] {
		delete(s.livenessFailed, id)
		delete(s.startedOK, id)
		s.livenessKilled[id] = true
		return true
	}
	return false
}

func (s *Syncer) wasLivenessKilled(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.livenessKilled[id]
}

// Received notes when a new pod arrived, for the time it spends in the pod
// workers until its containers all run.
func (s *Syncer) Received(uid types.UID, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.received[uid]; !ok {
		s.received[uid] = at
	}
}

// Forget drops what the syncer keeps of a pod.
func (s *Syncer) Forget(uid types.UID) {
	s.mu.Lock()
	delete(s.startTime, uid)
	delete(s.received, uid)
	for id := range s.ids[uid] {
		delete(s.livenessKilled, id)
		delete(s.livenessFailed, id)
		delete(s.probeGrace, id)
	}
	delete(s.ids, uid)
	delete(s.final, uid)
	delete(s.startFailed, uid)
	delete(s.vols, uid)
	delete(s.dnsTold, uid)
	s.mu.Unlock()
	s.volBackOff.Reset(string(uid))
}

// noteStart records why a start left no instance, or forgets it once a
// start made one.
func (s *Syncer) noteStart(uid types.UID, name string, st runtime.ContainerStatus, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err != nil && st.ID == "" && st.Reason != "":
		if s.startFailed[uid] == nil {
			s.startFailed[uid] = map[string]*corev1.ContainerStateWaiting{}
		}
		s.startFailed[uid][name] = &corev1.ContainerStateWaiting{Reason: st.Reason, Message: st.Message}
	case st.ID != "":
		delete(s.startFailed[uid], name)
	}
}

// observeStart tells the start observer of an attempt; one a cancelled
// sync cut short is not counted as a failure of the container.
func (s *Syncer) observeStart(ctx context.Context, pod *corev1.Pod, c *corev1.Container, st runtime.ContainerStatus, err error) {
	if s.onStart == nil {
		return
	}
	kind := "container"
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			kind = "init_container"
		}
	}
	failure := ""
	if err != nil && ctx.Err() == nil {
		failure = st.Reason
		if failure == "" {
			failure = "Unknown"
		}
	}
	s.onStart(kind, failure)
}

func (s *Syncer) startFailure(uid types.UID, name string) *corev1.ContainerStateWaiting {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.startFailed[uid][name]; w != nil {
		cp := *w
		return &cp
	}
	return nil
}

func (s *Syncer) recordID(uid types.UID, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.ids[uid]
	if m == nil {
		m = map[string]bool{}
		s.ids[uid] = m
	}
	m[id] = true
}

// specChanged: the instance was started from another definition of c. An
// instance with no hash (a runtime that could not say) is taken as matching.
func specChanged(inst *runtime.ContainerStatus, c *corev1.Container) bool {
	return !runtime.MatchesHash(inst.Hash, c)
}

// resizeOf says whether the running instance's CPU and memory differ from
// c's, what they should be, and whether the change needs a restart (a
// changed resource whose resizePolicy is RestartContainer; kubelet:
// in-place resize).
func resizeOf(inst *runtime.ContainerStatus, c *corev1.Container) (want corev1.ResourceRequirements, changed, restart bool) {
	want = runtime.Resizable(c.Resources)
	var have corev1.ResourceRequirements
	if inst.Resources != nil {
		have = *inst.Resources
	} else if runtime.StartResources(c) == nil {
		return want, false, false
	}
	if runtime.SameResources(want, have) {
		return want, false, false
	}
	for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		wl, hl, wr, hr := want.Limits[n], have.Limits[n], want.Requests[n], have.Requests[n]
		differs := wl.Cmp(hl) != 0 || wr.Cmp(hr) != 0
		if !differs {
			continue
		}
		for _, rp := range c.ResizePolicy {
			if rp.ResourceName == n && rp.RestartPolicy == corev1.RestartContainer {
				restart = true
			}
		}
	}
	return want, true, restart
}

// anyStarted says whether any of the containers has had an instance: the
// pod got past its initialization.
func anyStarted(byName map[string][]runtime.ContainerStatus, containers []corev1.Container) bool {
	for i := range containers {
		if len(byName[containers[i].Name]) > 0 {
			return true
		}
	}
	return false
}

// instances groups a pod's container instances by name, oldest first.
func instances(all []runtime.ContainerStatus) map[string][]runtime.ContainerStatus {
	out := map[string][]runtime.ContainerStatus{}
	for _, c := range all {
		out[c.Name] = append(out[c.Name], c)
	}
	return out
}

func latest(list []runtime.ContainerStatus) *runtime.ContainerStatus {
	if len(list) == 0 {
		return nil
	}
	return &list[len(list)-1]
}

// backOffKey names the crash-loop back-off of one definition of a
// container: the pod, the container's name and its hash (kubelet:
// GetBackoffKey), so a changed container (a fixed image) starts at once
// instead of waiting out the back-off of the one that crashed.
func backOffKey(pod *corev1.Pod, name string, hash uint64) string {
	return fmt.Sprintf("%s/%s/%s/%s/%x", pod.Namespace, pod.Name, pod.UID, name, hash)
}

// specBackOffKey is the back-off key of c as the pod's spec defines it now.
func specBackOffKey(pod *corev1.Pod, c *corev1.Container) string {
	return backOffKey(pod, c.Name, runtime.ContainerHash(c))
}

// GC drops the crash-loop back-offs not touched for twice their cap: those of
// deleted pods and of replaced definitions (kubelet: crashLoopBackOff.GC in
// HandlePodCleanups).
func (s *Syncer) GC() { s.backOff.GC() }

func isSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// policyOf is the restart policy that applies to c.
func policyOf(pod *corev1.Pod, c *corev1.Container) corev1.RestartPolicy {
	if isSidecar(c) {
		return corev1.RestartPolicyAlways
	}
	return pod.Spec.RestartPolicy
}

// shouldRestart applies the pod's restart policy to an exited container.
func shouldRestart(policy corev1.RestartPolicy, exitCode int) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	}
	return true
}

// inBackOff says whether a restart of c must wait, and how long (kubelet:
// doBackOff: the first restart is immediate, each further one waits the
// doubled period counted from the last exit).
func (s *Syncer) inBackOff(pod *corev1.Pod, c *corev1.Container, last *runtime.ContainerStatus) (bool, time.Duration) {
	key := specBackOffKey(pod, c)
	if s.backOff.IsInBackOffSince(key, last.FinishedAt) {
		return true, s.backOff.Get(key) - time.Since(last.FinishedAt)
	}
	return false, 0
}

func (s *Syncer) start(ctx context.Context, pod *corev1.Pod, c *corev1.Container, prev *runtime.ContainerStatus) error {
	attempt := 0
	if prev != nil {
		s.mu.Lock()
		delete(s.livenessKilled, prev.ID)
		s.mu.Unlock()
		attempt = prev.Attempt + 1
		// kubelet: only an exit counts towards the back-off (doBackOff
		// looks at exited containers); a start cut short does not.
		if prev.State == runtime.StateExited {
			s.backOff.Next(specBackOffKey(pod, c), prev.FinishedAt)
		}
	}
	sctx, span := tracing.Start(ctx, "runtime StartContainer", trace.WithAttributes(attribute.String("k8s.container.name", c.Name), attribute.Int("splitlet.attempt", attempt)))
	st, err := s.startContainer(sctx, pod, c, attempt)
	tracing.End(span, err)
	s.observeStart(ctx, pod, c, st, err)
	s.startEvents(ctx, pod, c, st, err)
	if err == nil && st.ID != "" {
		err = s.postStart(ctx, pod, c, st.ID)
	}
	s.noteStart(pod.UID, c.Name, st, err)
	if st.ID != "" {
		s.recordID(pod.UID, st.ID)
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("start container %s: %w", c.Name, err)
	}
	return err
}

// SyncPod brings the pod's containers towards its spec and reports status.
func (s *Syncer) SyncPod(ctx context.Context, _ podworker.UpdateType, pod *corev1.Pod) (podworker.SyncResult, error) {
	s.mu.Lock()
	_, seen := s.startTime[pod.UID]
	if !seen {
		// kubelet: a pod that already started keeps its start time.
		if pod.Status.StartTime != nil && !pod.Status.StartTime.IsZero() {
			s.startTime[pod.UID] = *pod.Status.StartTime
		} else {
			s.startTime[pod.UID] = metav1.Now()
		}
	}
	s.mu.Unlock()
	if !seen {
		s.adopt(pod)
	}
	if d, exceeded := s.activeDeadline(pod); exceeded {
		// kubelet: activeDeadlineHandler.ShouldEvict fails the pod, which
		// is then torn down as any pod in a terminal phase.
		s.mu.Lock()
		s.final[pod.UID] = &podworker.KillOptions{Phase: corev1.PodFailed, Reason: ReasonDeadlineExceeded,
			Message: "Pod was active on the node longer than the specified deadline"}
		s.mu.Unlock()
		st := s.status(pod, false, false)
		s.mu.Lock()
		applyKill(st, s.final[pod.UID])
		s.mu.Unlock()
		s.sink.Set(st)
		return podworker.SyncResult{Terminal: true}, nil
	} else if d > 0 {
		res, err := s.syncAndReport(ctx, pod)
		if res.RequeueAfter == 0 || d < res.RequeueAfter {
			res.RequeueAfter = d
		}
		return res, err
	}
	return s.syncAndReport(ctx, pod)
}

// adopt rebuilds the crash-loop back-off of the containers of a pod this
// syncer sees for the first time, from what the runtime holds: a container
// restarted n times has waited n back-offs (the first restart is
// immediate), unless its newest instance ran long enough to reset it.
func (s *Syncer) adopt(pod *corev1.Pod) {
	byName := instances(s.rt.PodContainers(pod.UID))
	if len(byName) == 0 {
		return
	}
	all := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for i := range all {
		c := &all[i]
		last := latest(byName[c.Name])
		if last == nil {
			continue
		}
		for _, inst := range byName[c.Name] {
			s.recordID(pod.UID, inst.ID)
		}
		// the back-off belongs to the definition that ran: if the spec
		// changed meanwhile, the new one starts without it.
		hash := last.Hash
		if hash == 0 {
			hash = runtime.ContainerHash(c)
		}
		key := backOffKey(pod, c.Name, hash)
		if last.Attempt == 0 || s.backOff.Get(key) != 0 {
			continue
		}
		if last.State == runtime.StateExited && !last.StartedAt.IsZero() && last.FinishedAt.Sub(last.StartedAt) > 2*s.maxBackOff {
			continue // kubelet: stable for twice the longest back-off resets it
		}
		for n := 0; n < last.Attempt && s.backOff.Get(key) < s.maxBackOff; n++ {
			s.backOff.Next(key, last.StartedAt)
		}
	}
}

// ReasonDeadlineExceeded fails a pod past spec.activeDeadlineSeconds.
const ReasonDeadlineExceeded = "DeadlineExceeded"

// ReasonEvicted is the reason of a pod the node evicted.
const ReasonEvicted = "Evicted"

// activeDeadline reports the time left before the pod's active deadline, or
// that it has passed.
func (s *Syncer) activeDeadline(pod *corev1.Pod) (time.Duration, bool) {
	if pod.Spec.ActiveDeadlineSeconds == nil {
		return 0, false
	}
	s.mu.Lock()
	start := s.startTime[pod.UID]
	s.mu.Unlock()
	left := time.Until(start.Add(time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second))
	if left <= 0 {
		return 0, true
	}
	return left, false
}

func (s *Syncer) syncAndReport(ctx context.Context, pod *corev1.Pod) (podworker.SyncResult, error) {
	if s.volumesPending(pod) {
		// kubelet: the pod's status (scheduled, pending) is set before
		// its volumes are waited for, so it goes out ahead of any
		// FailedMount Event.
		s.sink.Set(s.status(pod, false, false))
	}
	if wait, d := s.setupVolumes(ctx, pod); wait {
		// kubelet: containers do not start before the pod's volumes are
		// mounted; the pod waits in ContainerCreating.
		if ctx.Err() != nil {
			return podworker.SyncResult{}, ctx.Err()
		}
		s.sink.Set(s.status(pod, false, false))
		return podworker.SyncResult{RequeueAfter: d}, nil
	}
	res, err := s.syncContainers(ctx, pod)
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	st := s.status(pod, false, false)
	if bus.AllRunning(st.ContainerStatuses) {
		s.mu.Lock()
		if at, ok := s.received[pod.UID]; ok {
			delete(s.received, pod.UID)
			s.busMetrics.ObserveStage(bus.StagePodworkers, time.Since(at))
		}
		s.mu.Unlock()
	}
	s.sink.Set(st)
	return res, err
}

// syncContainers drives the pod's containers one step toward its spec: init
// containers first, then app containers, then ephemeral ones while the pod runs.
func (s *Syncer) syncContainers(ctx context.Context, pod *corev1.Pod) (podworker.SyncResult, error) {
	var res podworker.SyncResult
	byName := instances(s.rt.PodContainers(pod.UID))
	if stop, err := s.syncInitContainers(ctx, pod, byName, &res); stop {
		return res, err
	}
	var errs []error
	allDone := true
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		done, cerrs := s.syncAppContainer(ctx, pod, c, latest(byName[c.Name]), &res)
		errs = append(errs, cerrs...)
		allDone = allDone && done
	}
	if allDone && len(pod.Spec.Containers) > 0 {
		res.Terminal = true
	}
	if !res.Terminal {
		errs = append(errs, s.startEphemeral(ctx, pod, byName)...)
	}
	return res, errors.Join(errs...)
}

// requeue asks for the pod to be synced again after d, keeping the earliest
// of the delays asked for in one sync.
func requeue(res *podworker.SyncResult, d time.Duration) {
	if d <= 0 {
		d = 10 * time.Millisecond
	}
	if res.RequeueAfter == 0 || d < res.RequeueAfter {
		res.RequeueAfter = d
	}
}

// syncInitContainers runs the init containers in order, each to completion
// (kubelet: computeInitContainerActions); stop means the app containers wait.
func (s *Syncer) syncInitContainers(ctx context.Context, pod *corev1.Pod, byName map[string][]runtime.ContainerStatus, res *podworker.SyncResult) (stop bool, err error) {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		last := latest(byName[c.Name])
		if isSidecar(c) {
			// kubelet: while the pod initializes, a sidecar with a startup
			// probe holds the next containers back until the probe passes
			// (the prober's result wakes this worker).
			holds := c.StartupProbe != nil && !anyStarted(byName, pod.Spec.Containers)
			if stop, err := s.syncSidecar(ctx, pod, c, last, holds, res); stop {
				return true, err
			}
			continue
		}
		if stop, err := s.syncInitContainer(ctx, pod, c, last, res); stop {
			return true, err
		}
	}
	return false, nil
}

// syncSidecar keeps a sidecar (restartPolicy Always on an init container)
// running, restarted with back-off, for the pod's whole life (kubelet); once
// it runs the next init container may start, unless holds and it has not started.
func (s *Syncer) syncSidecar(ctx context.Context, pod *corev1.Pod, c *corev1.Container, last *runtime.ContainerStatus, holds bool, res *podworker.SyncResult) (stop bool, err error) {
	switch {
	case last == nil:
		if err := s.start(ctx, pod, c, nil); err != nil || holds {
			return true, err
		}
	case last.State == runtime.StateCreated:
		// kubelet: a container stuck in Created (its start was cut
		// short) is started again (computeInitContainerActions).
		if err := s.start(ctx, pod, c, last); err != nil || holds {
			return true, err
		}
	case last.State == runtime.StateExited:
		// Started again (after its back-off); once the pod has
		// initialized it holds nothing back, before that a sidecar
		// with a startup probe holds the next containers until the new
		// container's probe passes (kubelet: computeInitContainerActions).
		if wait, d := s.inBackOff(pod, c, last); wait {
			s.backOffEvent(pod, c)
			requeue(res, d)
			return holds, nil
		}
		if err := s.start(ctx, pod, c, last); err != nil || holds {
			return true, err
		}
	case s.takeLivenessFailure(last.ID):
		_ = s.kill(ctx, pod, c.Name, last.ID, s.killGrace(pod, last.ID))
		requeue(res, time.Millisecond)
		return true, nil
	case holds && last.State == runtime.StateRunning && !s.sidecarStarted(c, last):
		return true, nil
	case last.State == runtime.StateRunning && specChanged(last, c) && s.sidecarStarted(c, last):
		// kubelet: a running sidecar whose definition changed is
		// restarted at once, once its startup probe passed
		// (computeInitContainerActions); the new one holds as the first did.
		err := s.restartChanged(ctx, pod, c, last, fmt.Sprintf("Init container %s definition changed", c.Name))
		return err != nil || holds, err
	}
	return false, nil
}

// syncInitContainer runs one regular init container to completion; stop is
// false only once it exited 0, so the next one may start.
func (s *Syncer) syncInitContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, last *runtime.ContainerStatus, res *podworker.SyncResult) (stop bool, err error) {
	switch {
	case last == nil:
		return true, s.start(ctx, pod, c, nil)
	case last.State == runtime.StateCreated:
		// kubelet: an init container stuck in Created is started again
		// (computeInitContainerActions).
		return true, s.start(ctx, pod, c, last)
	case last.State == runtime.StateRunning:
		if s.takeLivenessFailure(last.ID) {
			_ = s.kill(ctx, pod, c.Name, last.ID, s.killGrace(pod, last.ID))
		}
		return true, nil
	case last.State == runtime.StateExited && last.ExitCode == 0:
		return false, nil
	default:
		// a failed init container fails the pod under Never, else restarts.
		if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
			res.Terminal = true
			return true, nil
		}
		if wait, d := s.inBackOff(pod, c, last); wait {
			s.backOffEvent(pod, c)
			requeue(res, d)
			return true, nil
		}
		return true, s.start(ctx, pod, c, last)
	}
}

// syncAppContainer moves one app container toward its spec and restart
// policy; done means it needs nothing more (the pod may be terminal).
func (s *Syncer) syncAppContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, last *runtime.ContainerStatus, res *podworker.SyncResult) (done bool, errs []error) {
	if last == nil {
		return false, []error{s.start(ctx, pod, c, nil)}
	}
	if last.State == runtime.StateCreated {
		// kubelet: a container stuck in Created (its start was cut
		// short) is always started again, whatever the restart policy
		// (ShouldContainerBeRestarted), with no back-off.
		return false, []error{s.start(ctx, pod, c, last)}
	}
	policy := pod.Spec.RestartPolicy
	if last.State == runtime.StateRunning {
		want, resized, resizeRestart := resizeOf(last, c)
		redefined := specChanged(last, c)
		if resized && !resizeRestart && !redefined {
			if err := s.resizeInPlace(ctx, pod, c, last, want); err != nil {
				errs = append(errs, err)
			}
		}
		if redefined || resizeRestart {
			why := fmt.Sprintf("Container %s definition changed", c.Name)
			if !redefined {
				why = fmt.Sprintf("Container %s resize requires restart", c.Name)
			}
			return false, append(errs, s.restartChanged(ctx, pod, c, last, why+", will be restarted"))
		}
		if !s.takeLivenessFailure(last.ID) {
			return false, errs
		}
		var err error
		if last, err = s.killForLiveness(ctx, pod, c, last); err != nil {
			return false, append(errs, err)
		}
		// kubelet: after a liveness kill the container restarts unless
		// the policy is Never, whatever its exit code.
		if policy == corev1.RestartPolicyNever {
			return true, errs
		}
	} else if !shouldRestart(policy, last.ExitCode) && (policy == corev1.RestartPolicyNever || !s.wasLivenessKilled(last.ID)) {
		return true, errs
	}
	if wait, d := s.inBackOff(pod, c, last); wait {
		s.backOffEvent(pod, c)
		requeue(res, d)
		return false, errs
	}
	return false, append(errs, s.start(ctx, pod, c, last))
}

// resizeInPlace changes a running container's CPU and memory without a
// restart (kubelet), when the runtime can.
func (s *Syncer) resizeInPlace(ctx context.Context, pod *corev1.Pod, c *corev1.Container, last *runtime.ContainerStatus, want corev1.ResourceRequirements) error {
	rz, ok := s.rt.(runtime.Resizer)
	if !ok {
		return nil
	}
	if err := rz.UpdateContainerResources(ctx, last.ID, want); err != nil {
		return err
	}
	s.log.Info("container resized", append(logging.Pod(pod.Namespace, pod.Name, string(pod.UID)), zap.String("container", c.Name))...)
	return nil
}

// restartChanged kills a running container whose definition changed (or
// whose resize needs a restart), with why as the Killing Event's message,
// and starts it again whatever the restart policy, with no back-off
// (kubelet).
func (s *Syncer) restartChanged(ctx context.Context, pod *corev1.Pod, c *corev1.Container, last *runtime.ContainerStatus, why string) error {
	s.log.Info("restarting container", append(logging.Pod(pod.Namespace, pod.Name, string(pod.UID)), zap.String("container", c.Name), zap.String("why", why))...)
	s.event(pod, c.Name, corev1.EventTypeNormal, EventKilling, "%s", why)
	if err := s.kill(ctx, pod, c.Name, last.ID, graceOf(pod)); err != nil {
		return err
	}
	s.backOff.Reset(specBackOffKey(pod, c))
	st, err := s.startContainer(ctx, pod, c, last.Attempt+1)
	s.observeStart(ctx, pod, c, st, err)
	s.startEvents(ctx, pod, c, st, err)
	s.noteStart(pod.UID, c.Name, st, err)
	if st.ID != "" {
		s.recordID(pod.UID, st.ID)
	}
	return err
}

// killForLiveness kills a container that failed liveness (kubelet) and
// returns its status as the runtime reports it after the kill.
func (s *Syncer) killForLiveness(ctx context.Context, pod *corev1.Pod, c *corev1.Container, last *runtime.ContainerStatus) (*runtime.ContainerStatus, error) {
	s.log.Info("probe failed, killing container", append(logging.Pod(pod.Namespace, pod.Name, string(pod.UID)), zap.String("container", c.Name))...)
	if err := s.kill(ctx, pod, c.Name, last.ID, s.killGrace(pod, last.ID)); err != nil {
		return last, err
	}
	for _, cs := range s.rt.PodContainers(pod.UID) {
		if cs.ID == last.ID {
			cp := cs
			last = &cp
		}
	}
	return last, nil
}

// startEphemeral starts each ephemeral container once, while the pod runs;
// it is never restarted (kubelet).
func (s *Syncer) startEphemeral(ctx context.Context, pod *corev1.Pod, byName map[string][]runtime.ContainerStatus) []error {
	var errs []error
	for i := range pod.Spec.EphemeralContainers {
		c := ephemeral(&pod.Spec.EphemeralContainers[i])
		if last := latest(byName[c.Name]); last == nil {
			errs = append(errs, s.start(ctx, pod, c, nil))
		} else if last.State == runtime.StateCreated {
			errs = append(errs, s.start(ctx, pod, c, last))
		}
	}
	return errs
}

func graceOf(pod *corev1.Pod) time.Duration {
	g := podworker.DefaultGracePeriod
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		g = *pod.Spec.TerminationGracePeriodSeconds
	}
	if g < 1 {
		g = 1
	}
	return time.Duration(g) * time.Second
}

// SyncTerminatingPod stops every container of the pod within grace seconds.
func (s *Syncer) SyncTerminatingPod(ctx context.Context, pod *corev1.Pod, grace int64, kill *podworker.KillOptions) error {
	if kill != nil && kill.Phase != "" {
		s.mu.Lock()
		s.final[pod.UID] = kill
		s.mu.Unlock()
	}
	s.mu.Lock()
	if kill == nil || kill.Phase == "" {
		kill = s.final[pod.UID]
	}
	if kill == nil && pod.Status.Phase == corev1.PodFailed && pod.Status.Reason == ReasonEvicted {
		// evicted by a replica before this one (its status reached the
		// API server): the eviction goes on with the same reason and message.
		kill = &podworker.KillOptions{Phase: corev1.PodFailed, Reason: ReasonEvicted, Message: pod.Status.Message}
		s.final[pod.UID] = kill
	}
	s.mu.Unlock()
	st := s.status(pod, true, false)
	applyKill(st, kill)
	s.sink.Set(st)
	errs := s.stopAll(ctx, pod, grace)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	st = s.status(pod, true, false)
	applyKill(st, kill)
	s.sink.Set(st)
	return errors.Join(errs...)
}

// stopAll stops every running container of the pod within grace (kubelet:
// killContainersWithSyncResult): all at once, each running its preStop
// hook at once; a sidecar then waits for the app containers and the
// sidecars declared after it to stop (terminationOrder), and is stopped
// with what is left of the grace, at least minPreStopGrace.
func (s *Syncer) stopAll(ctx context.Context, pod *corev1.Pod, grace int64) []error {
	var running []runtime.ContainerStatus
	names := map[string]bool{}
	for _, c := range s.rt.PodContainers(pod.UID) {
		if c.State != runtime.StateExited {
			running = append(running, c)
			names[c.Name] = true
		}
	}
	var order *terminationOrder
	if hasSidecar(pod) {
		order = newTerminationOrder(pod, names)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, c := range running {
		s.event(pod, c.Name, corev1.EventTypeNormal, EventKilling, "Stopping container %s", c.Name)
		wg.Add(1)
		go func(id, name string) {
			defer wg.Done()
			sctx, span := tracing.Start(ctx, "runtime StopContainer", trace.WithAttributes(attribute.String("k8s.container.name", name)))
			err := s.stopInOrder(sctx, pod, name, id, time.Duration(grace)*time.Second, order)
			tracing.End(span, err)
			if err != nil && !errors.Is(err, runtime.ErrNotFound) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}(c.ID, c.Name)
	}
	wg.Wait()
	return errs
}

// stopInOrder runs the container's preStop hook, waits for its turn and
// stops it with what is left of grace (at least minPreStopGrace).
func (s *Syncer) stopInOrder(ctx context.Context, pod *corev1.Pod, name, id string, grace time.Duration, order *terminationOrder) error {
	start := time.Now()
	_, release := s.preStop(ctx, pod, name, grace)
	defer release()
	left := grace - time.Since(start)
	left -= order.wait(name, left)
	err := s.rt.StopContainer(ctx, id, max(left, minPreStopGrace))
	order.done(name)
	return err
}

// hasSidecar: the pod has a restartable init container.
func hasSidecar(pod *corev1.Pod) bool {
	for i := range pod.Spec.InitContainers {
		if isSidecar(&pod.Spec.InitContainers[i]) {
			return true
		}
	}
	return false
}

func applyKill(st *bus.PodRuntimeStatus, kill *podworker.KillOptions) {
	if kill != nil && kill.Phase != "" {
		st.Phase, st.Reason, st.Message, st.Conditions = kill.Phase, kill.Reason, kill.Message, kill.Conditions
	}
}

// SyncTerminatedPod reports the pod as terminated: every container stopped
// and its volumes torn down (kubelet: a terminated pod's volumes are
// unmounted before it is reported terminated, even while the pod object
// stays; its tmpfs mounts would otherwise hold memory until deletion).
func (s *Syncer) SyncTerminatedPod(ctx context.Context, pod *corev1.Pod) error {
	for _, c := range s.rt.PodContainers(pod.UID) {
		if c.State != runtime.StateExited {
			return fmt.Errorf("container %s still %s", c.Name, c.State)
		}
	}
	if err := s.RemoveVolumes(pod); err != nil {
		return fmt.Errorf("tearing down the volumes: %w", err)
	}
	st := s.status(pod, true, true)
	s.mu.Lock()
	applyKill(st, s.final[pod.UID])
	s.mu.Unlock()
	s.sink.Set(st)
	return nil
}

// status builds the pod's runtime status from the runtime.
func (s *Syncer) status(pod *corev1.Pod, terminating, terminated bool) *bus.PodRuntimeStatus {
	byName := instances(s.rt.PodContainers(pod.UID))
	s.mu.Lock()
	start, started := s.startTime[pod.UID]
	s.mu.Unlock()
	st := &bus.PodRuntimeStatus{
		UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name,
		HostIP: s.hostIP, Terminating: terminating, Terminated: terminated,
	}
	if started {
		st.StartTime = &start
		st.PodIP = s.rt.PodIP(pod)
	}
	initDone := true
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cs := s.containerStatus(pod, c, byName[c.Name], ReasonPodInitializing)
		if isSidecar(c) {
			if cs.State.Running == nil {
				initDone = false
			}
		} else if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			initDone = false
		}
		st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
	}
	waiting := ReasonContainerCreating
	if !initDone {
		waiting = ReasonPodInitializing
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		st.ContainerStatuses = append(st.ContainerStatuses, s.containerStatus(pod, c, byName[c.Name], waiting))
	}
	for i := range pod.Spec.EphemeralContainers {
		c := ephemeral(&pod.Spec.EphemeralContainers[i])
		st.EphemeralContainerStatuses = append(st.EphemeralContainerStatuses, s.containerStatus(pod, c, byName[c.Name], ReasonContainerCreating))
	}
	st.ContainerHashes = hashesOf(byName, st)
	return st
}

// ephemeral is an ephemeral container as the container the runtime runs
// (kubelet: the common fields are a Container's).
func ephemeral(ec *corev1.EphemeralContainer) *corev1.Container {
	c := corev1.Container(ec.EphemeralContainerCommon)
	return &c
}

// hashesOf maps the instance IDs the statuses name to their spec hashes.
func hashesOf(byName map[string][]runtime.ContainerStatus, st *bus.PodRuntimeStatus) map[string]string {
	var out map[string]string
	add := func(id string) {
		if id == "" {
			return
		}
		for _, list := range byName {
			for _, inst := range list {
				if inst.ID == id && inst.Hash != 0 {
					if out == nil {
						out = map[string]string{}
					}
					out[id] = fmt.Sprintf("%016x", inst.Hash)
					return
				}
			}
		}
	}
	for _, list := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
		for _, cs := range list {
			add(cs.ContainerID)
			if t := cs.LastTerminationState.Terminated; t != nil {
				add(t.ContainerID)
			}
		}
	}
	return out
}

// Instances turns a reported pod status back into the container instances
// it describes, oldest first: the last terminated instance of each
// container, then its current one (which, while it waits out a crash-loop
// back-off, is that same exited instance). IDs, attempts, exit codes,
// reasons, times and spec hashes are kept; what the status does not say
// (the attempt of the instance before the current one) is inferred.
func Instances(st *bus.PodRuntimeStatus) []runtime.ContainerStatus {
	if st == nil {
		return nil
	}
	hash := func(id string) uint64 {
		h, err := strconv.ParseUint(st.ContainerHashes[id], 16, 64)
		if err != nil {
			return 0
		}
		return h
	}
	exited := func(cs *corev1.ContainerStatus, t *corev1.ContainerStateTerminated, attempt int) runtime.ContainerStatus {
		return runtime.ContainerStatus{
			ID: t.ContainerID, PodUID: st.UID, Name: cs.Name, Attempt: attempt, Hash: hash(t.ContainerID),
			State: runtime.StateExited, Image: cs.Image, ImageID: cs.ImageID,
			CreatedAt: t.StartedAt.Time, StartedAt: t.StartedAt.Time, FinishedAt: t.FinishedAt.Time,
			ExitCode: int(t.ExitCode), Reason: t.Reason, Message: t.Message,
		}
	}
	var out []runtime.ContainerStatus
	for _, list := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
		for i := range list {
			cs := &list[i]
			if cs.ContainerID == "" {
				continue // never started
			}
			attempt := int(cs.RestartCount)
			last := cs.LastTerminationState.Terminated
			if last != nil && last.ContainerID != "" && last.ContainerID != cs.ContainerID {
				out = append(out, exited(cs, last, max(attempt-1, 0)))
			}
			switch {
			case cs.State.Running != nil:
				out = append(out, runtime.ContainerStatus{
					ID: cs.ContainerID, PodUID: st.UID, Name: cs.Name, Attempt: attempt, Hash: hash(cs.ContainerID),
					State: runtime.StateRunning, Image: cs.Image, ImageID: cs.ImageID,
					CreatedAt: cs.State.Running.StartedAt.Time, StartedAt: cs.State.Running.StartedAt.Time,
					Resources: cs.Resources.DeepCopy(),
				})
			case cs.State.Terminated != nil:
				t := *cs.State.Terminated
				t.ContainerID = cs.ContainerID
				out = append(out, exited(cs, &t, attempt))
			case last != nil && last.ContainerID == cs.ContainerID:
				// waiting out a back-off after this very exit.
				out = append(out, exited(cs, last, attempt))
			default:
				// created, not yet running.
				out = append(out, runtime.ContainerStatus{
					ID: cs.ContainerID, PodUID: st.UID, Name: cs.Name, Attempt: attempt, Hash: hash(cs.ContainerID),
					State: runtime.StateCreated, Image: cs.Image, ImageID: cs.ImageID,
				})
			}
		}
	}
	return out
}

// CurrentStatus is the pod's runtime status as the runtime holds it now, as
// a running pod reports it (a replica handing the pod over says it last).
func (s *Syncer) CurrentStatus(pod *corev1.Pod) *bus.PodRuntimeStatus {
	return s.status(pod, false, false)
}

func terminatedState(c *runtime.ContainerStatus) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{
		ExitCode:    int32(c.ExitCode),
		Reason:      c.Reason,
		Message:     c.Message,
		StartedAt:   metav1.NewTime(c.StartedAt),
		FinishedAt:  metav1.NewTime(c.FinishedAt),
		ContainerID: c.ID,
	}
}

func (s *Syncer) containerStatus(pod *corev1.Pod, c *corev1.Container, list []runtime.ContainerStatus, waitingReason string) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
	last := latest(list)
	if w := s.startFailure(pod.UID, c.Name); w != nil {
		// kubelet: a container whose start failed before it existed waits
		// with the failure's reason; an earlier exit is its last state.
		cs.State.Waiting = w
		if last != nil && last.State == runtime.StateExited {
			cs.RestartCount = int32(last.Attempt)
			cs.LastTerminationState.Terminated = terminatedState(last)
		}
		f := false
		cs.Started = &f
		return cs
	}
	if last == nil {
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: waitingReason}
		return cs
	}
	cs.ContainerID = last.ID
	cs.ImageID = last.ImageID
	cs.RestartCount = int32(last.Attempt)
	if len(list) > 1 {
		prev := list[len(list)-2]
		cs.LastTerminationState.Terminated = terminatedState(&prev)
	}
	switch last.State {
	case runtime.StateRunning:
		started := true
		cs.Started = &started
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(last.StartedAt)}
		// kubelet: a running container shows the CPU and memory it runs
		// with, and its requests as allocated (in-place resize).
		if last.Resources != nil {
			cs.Resources = last.Resources.DeepCopy()
			if len(last.Resources.Requests) > 0 {
				cs.AllocatedResources = last.Resources.Requests.DeepCopy()
			}
		}
	case runtime.StateCreated:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: ReasonContainerCreating}
	default:
		if shouldRestart(policyOf(pod, c), last.ExitCode) && pod.DeletionTimestamp == nil {
			if wait, _ := s.inBackOff(pod, c, last); wait {
				// kubelet: the waiting container shows CrashLoopBackOff, the
				// exit it waits after is the last state.
				cs.LastTerminationState.Terminated = terminatedState(last)
				cs.State.Waiting = &corev1.ContainerStateWaiting{
					Reason:  ReasonCrashLoopBackOff,
					Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", s.backOff.Get(specBackOffKey(pod, c)), c.Name, pod.Name, pod.Namespace, pod.UID),
				}
				break
			}
		}
		cs.State.Terminated = terminatedState(last)
	}
	f := false
	cs.Ready = false
	if cs.Started == nil {
		cs.Started = &f
	}
	cs.VolumeMounts = s.volumeMountStatuses(pod, c)
	return cs
}
