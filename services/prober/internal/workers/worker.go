package workers

// A worker runs one probe (startup, readiness or liveness) of one container
// of one pod, every period, and keeps that probe's result for the
// container's current ID (kubelet: prober/worker.go).
//
// Scheduling. A worker owns one timer. The first run waits a random part of
// one period when the prober itself has run for less than a period, so that
// a prober starting with many pods spreads its probes; after that the runs
// fall on a fixed grid of periods from the first one, the way a ticker
// ticks: a run that finds itself late happens at once and the grid moves
// on. At most one run of a worker is in flight: the timer is re-armed only
// after a run returns. A manual trigger (a not-yet-ready container that has
// just started) moves the next run to now and restarts the grid from there.
//
// One run (doProbe), in order:
//  1. No runtime status for the pod yet: wait.
//  2. The pod is terminal (phase Succeeded or Failed, or the runtime says
//     it is torn down): the worker ends.
//  3. The container has no status or no ID yet: wait.
//  4. A container ID the worker has not seen: the result of the old ID is
//     forgotten, the new ID gets the initial result (readiness Failure,
//     liveness Success, startup Unknown) unless the container was already
//     running well before the prober started, and any hold is lifted.
//  5. On hold (after a liveness failure, or once the startup probe
//     decided): wait for a new container ID.
//  6. The container is not running: its result is Failure; the worker goes
//     on unless the container has terminated and will not be restarted.
//  7. The pod is being deleted: liveness and startup report Success and end.
//  8. Before initialDelaySeconds since the container started: wait.
//  9. Startup gating: before the container counts as started only the
//     startup probe runs; after, only liveness and readiness run.
//  10. Run the probe. The result only changes after successThreshold equal
//     successes or failureThreshold equal failures in a row.
//  11. A liveness Failure, or any startup result, puts the worker on hold.
//
// Invariants: a worker's result fields are touched only by its own run (or
// by its finish, which happens after the last run); the sink hears a result
// only when the cached result of that container ID changes; a worker that
// ends removes its cached result, its metric series and itself from the
// manager, once.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/services/prober/internal/probe"
)

type worker struct {
	m         *Manager
	key       workerKey
	entry     *podEntry
	namespace string
	name      string
	container *corev1.Container
	isInit    bool
	spec      *corev1.Probe
	period    time.Duration
	initial   bus.ProbeOutcome
	counters  *workerCounters
	done      chan struct{}
	finished  sync.Once

	// Scheduling, under mu.
	mu      sync.Mutex
	timer   *time.Timer
	next    time.Time
	running bool
	ran     bool
	stopped bool

	// Result state, touched only by the run in flight.
	containerID string
	lastResult  bus.ProbeOutcome
	resultRun   int
	onHold      bool
}

func (m *Manager) newWorker(e *podEntry, pod *corev1.Pod, c *corev1.Container, isInit bool, t bus.ProbeType, spec *corev1.Probe) *worker {
	spec = withDefaults(spec)
	w := &worker{
		m:         m,
		key:       workerKey{pod.UID, c.Name, t},
		entry:     e,
		namespace: pod.Namespace,
		name:      pod.Name,
		container: c,
		isInit:    isInit,
		spec:      spec,
		period:    time.Duration(spec.PeriodSeconds) * time.Second,
		done:      make(chan struct{}),
		counters:  m.metrics.forWorker(string(t), c.Name, pod.Name, pod.Namespace, string(pod.UID)),
	}
	switch t {
	case bus.ProbeReadiness:
		w.initial = bus.ProbeFailure
	case bus.ProbeLiveness:
		w.initial = bus.ProbeSuccess
	default:
		w.initial = bus.ProbeUnknown
	}
	return w
}

func randDuration(max time.Duration) time.Duration {
	return time.Duration(rand.Int64N(int64(max)))
}

// begin arms the first run after delay.
func (w *worker) begin(delay time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next = time.Now().Add(delay)
	w.timer = time.AfterFunc(delay, w.tick)
}

// tick is one run on the timer's goroutine; it re-arms the timer on the
// period grid unless the worker is done.
func (w *worker) tick() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		w.finish()
		return
	}
	w.running = true
	w.mu.Unlock()

	keep := w.doProbe(w.m.ctx)

	w.mu.Lock()
	w.running = false
	w.ran = true
	if !keep || w.stopped {
		w.stopped = true
		w.mu.Unlock()
		w.finish()
		return
	}
	now := time.Now()
	w.next = w.next.Add(w.period)
	if w.next.Before(now) {
		// Late (a slow probe or a busy machine): run at once, and keep the
		// grid from here, as a ticker's buffered tick does.
		w.next = now
	}
	w.timer.Reset(w.next.Sub(now))
	w.mu.Unlock()
}

// trigger runs the probe now, unless one is running or the first run has
// not happened yet; the period restarts from now.
func (w *worker) trigger() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped || w.running || !w.ran {
		return
	}
	if w.timer.Stop() {
		w.next = time.Now()
		w.timer.Reset(0)
	}
}

// stop ends the worker: at once if no run is due or running, else after
// the run in hand.
func (w *worker) stop() {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return
	}
	w.stopped = true
	idle := w.timer.Stop() // true: the timer had not fired, no run will come
	w.mu.Unlock()
	if idle {
		w.finish()
	}
}

func (w *worker) finish() {
	w.finished.Do(func() {
		if w.containerID != "" {
			w.m.results.remove(w.key.probe, w.containerID)
		}
		w.m.removeWorker(w)
		w.counters.drop()
		close(w.done)
	})
}

func (w *worker) logFields() []zap.Field {
	return append(logging.Pod(w.namespace, w.name, string(w.key.uid)),
		zap.String("container", w.container.Name), zap.String("probe", string(w.key.probe)))
}

func (w *worker) set(v bus.ProbeOutcome, message string) {
	w.m.results.set(w.key.probe, w.key.uid, w.namespace, w.name, w.container.Name, w.containerID, v, message)
}

// doProbe is one run; false ends the worker.
func (w *worker) doProbe(ctx context.Context) (keep bool) {
	defer func() {
		if r := recover(); r != nil {
			w.m.log.Error("probe run panicked", append(w.logFields(), zap.Any("panic", r))...)
			keep = true
		}
	}()
	pod := w.entry.get()
	if isTerminalPhase(pod.Status.Phase) {
		return false
	}
	st, cs, keep := w.observe()
	if cs == nil {
		return keep
	}
	if keep, due := w.due(pod, cs); !due {
		return keep
	}
	result, message, counted := w.runCounted(ctx, pod, st)
	if !counted || ctx.Err() != nil {
		return true
	}
	if w.thresholdReached(result) {
		w.report(result, message)
	}
	return true
}

// observe finds the container's current status; a nil status says there
// is nothing to probe, with keep false when the pod is terminal. A new
// container instance starts from the probe's initial result.
func (w *worker) observe() (*bus.PodRuntimeStatus, *corev1.ContainerStatus, bool) {
	st, ok := w.m.statusOf(w.key.uid)
	if !ok {
		return nil, nil, true
	}
	if isTerminalPhase(st.Phase) || st.Terminated {
		w.m.log.Debug("pod is terminal, probe worker ends", w.logFields()...)
		return nil, nil, false
	}
	cs := containerStatus(st, w.container.Name)
	if cs == nil || cs.ContainerID == "" {
		return nil, nil, true
	}
	if cs.ContainerID != w.containerID {
		w.newContainer(cs)
	}
	return st, cs, true
}

// newContainer resets the worker for a new container instance.
func (w *worker) newContainer(cs *corev1.ContainerStatus) {
	if w.containerID != "" {
		w.m.results.remove(w.key.probe, w.containerID)
	}
	w.containerID = cs.ContainerID
	// kubelet rule (restart grace): a container that was running well
	// before the prober started keeps whatever result it had, so that a
	// restarted prober does not flip ready containers to not ready.
	beforeUs := w.m.startedBeforeUs(cs)
	if w.isInit && w.key.probe == bus.ProbeStartup && cs.Started != nil && *cs.Started {
		w.set(bus.ProbeSuccess, "")
	}
	if !beforeUs {
		w.set(w.initial, "")
	}
	w.onHold = false
}

// due says whether the probe runs now; when not, keep says whether the
// worker goes on.
func (w *worker) due(pod *corev1.Pod, cs *corev1.ContainerStatus) (keep, due bool) {
	if w.onHold {
		return true, false
	}
	if cs.State.Running == nil {
		w.set(bus.ProbeFailure, "container is not running")
		if cs.State.Terminated == nil {
			return true, false
		}
		return w.isInit || willRestart(w.container, pod, cs.State.Terminated.ExitCode), false
	}
	if pod.DeletionTimestamp != nil && (w.key.probe == bus.ProbeLiveness || w.key.probe == bus.ProbeStartup) {
		// kubelet rule: a pod being deleted is not restarted by its probes.
		w.set(bus.ProbeSuccess, "")
		return false, false
	}
	if int32(time.Since(cs.State.Running.StartedAt.Time).Seconds()) < w.spec.InitialDelaySeconds {
		return true, false
	}
	// Startup runs only before the container started; the others only after.
	started := w.m.isStarted(w.key.uid, cs)
	return true, started != (w.key.probe == bus.ProbeStartup)
}

// runCounted runs the probe and counts its result and duration.
func (w *worker) runCounted(ctx context.Context, pod *corev1.Pod, st *bus.PodRuntimeStatus) (bus.ProbeOutcome, string, bool) {
	begun := time.Now()
	result, message, counted := w.run(ctx, pod, st)
	switch result {
	case bus.ProbeSuccess:
		w.counters.success.Inc()
		w.counters.duration.Observe(time.Since(begun).Seconds())
	case bus.ProbeFailure:
		w.counters.failure.Inc()
	default:
		w.counters.unknown.Inc()
		w.counters.duration.Observe(time.Since(begun).Seconds())
	}
	return result, message, counted
}

// thresholdReached counts the run of equal results and says whether it
// reached the probe's failure or success threshold.
func (w *worker) thresholdReached(result bus.ProbeOutcome) bool {
	if w.lastResult == result {
		w.resultRun++
	} else {
		w.lastResult = result
		w.resultRun = 1
	}
	return (result != bus.ProbeFailure || w.resultRun >= int(w.spec.FailureThreshold)) &&
		(result != bus.ProbeSuccess || w.resultRun >= int(w.spec.SuccessThreshold))
}

// report sets the result and acts on it: a started container's readiness
// probe runs at once; a failed liveness or any startup result holds the
// worker until a new container ID.
func (w *worker) report(result bus.ProbeOutcome, message string) {
	w.set(result, message)
	if w.key.probe == bus.ProbeStartup && result == bus.ProbeSuccess {
		// kubelet: the startup result syncs the pod, whose status update
		// runs a not-yet-ready container's readiness probe at once; here
		// the prober knows first, and runs it itself.
		if rw := w.m.worker(w.key.uid, w.container.Name, bus.ProbeReadiness); rw != nil {
			rw.trigger()
		}
	}
	if (w.key.probe == bus.ProbeLiveness && result == bus.ProbeFailure) || w.key.probe == bus.ProbeStartup {
		// The runtime restarts the container (liveness) or the container
		// is decided (startup): nothing to do until a new container ID.
		w.onHold = true
		w.resultRun = 0
	}
}

// run executes the probe action once and records its Event. counted is
// false when the runtime could not be asked at all: such a run leaves the
// result as it is (kubelet rule: an errored probe is not a result).
func (w *worker) run(ctx context.Context, pod *corev1.Pod, st *bus.PodRuntimeStatus) (bus.ProbeOutcome, string, bool) {
	timeout := time.Duration(w.spec.TimeoutSeconds) * time.Second
	var (
		res probe.Result
		out string
		err error
	)
	h := &w.spec.ProbeHandler
	switch {
	case h.Exec != nil:
		res, out, err = w.runExec(ctx, h.Exec.Command, timeout)
		if err != nil {
			if ctx.Err() == nil {
				w.event(corev1.EventTypeWarning, "Unhealthy", fmt.Sprintf("%s probe errored: %v", w.key.probe, err))
				w.m.log.Info("probe could not run", append(w.logFields(), zap.Error(err))...)
			}
			return bus.ProbeUnknown, err.Error(), false
		}
	case h.HTTPGet != nil:
		req, rerr := probe.Request(h.HTTPGet, w.container, st.PodIP)
		if rerr != nil {
			err = rerr
			break
		}
		res, out = w.m.http.Probe(ctx, req, timeout)
	case h.TCPSocket != nil:
		port, perr := kube.ResolvePort(h.TCPSocket.Port, w.container)
		if perr != nil {
			err = perr
			break
		}
		host := h.TCPSocket.Host
		if host == "" {
			host = st.PodIP
		}
		res, out = probe.TCP(ctx, host, port, timeout)
	case h.GRPC != nil:
		service := ""
		if h.GRPC.Service != nil {
			service = *h.GRPC.Service
		}
		res, out = probe.GRPC(ctx, st.PodIP, service, int(h.GRPC.Port), timeout)
	default:
		err = fmt.Errorf("missing probe handler for %s/%s:%s", w.namespace, w.name, w.container.Name)
	}
	if err != nil {
		// Deviation from the kubelet: a probe that cannot
		// be built (an unknown port name) is a counted Failure with the
		// cause as its message, not a skipped run.
		msg := err.Error()
		w.event(corev1.EventTypeWarning, "Unhealthy", fmt.Sprintf("%s probe errored and resulted in %s state: %s", w.key.probe, bus.ProbeFailure, msg))
		return bus.ProbeFailure, msg, true
	}
	switch res {
	case probe.Success:
		return bus.ProbeSuccess, out, true
	case probe.Warning:
		w.event(corev1.EventTypeWarning, "ProbeWarning", fmt.Sprintf("%s probe warning: %s", w.key.probe, out))
		return bus.ProbeSuccess, out, true
	default:
		if ctx.Err() == nil {
			w.event(corev1.EventTypeWarning, "Unhealthy", fmt.Sprintf("%s probe failed: %s", w.key.probe, out))
		}
		return bus.ProbeFailure, out, true
	}
}

func (w *worker) runExec(ctx context.Context, cmd []string, timeout time.Duration) (probe.Result, string, error) {
	if w.m.execer == nil {
		return probe.Unknown, "", fmt.Errorf("no runtime to exec in")
	}
	// kubelet rule: $(VAR) references to the container's static env are
	// expanded in the probe's command.
	cmd = kube.ExpandCommandStatic(cmd, w.container.Env)
	return probe.Exec(ctx, execRunner{w: w}, cmd, timeout)
}

type execRunner struct{ w *worker }

func (r execRunner) RunInContainer(ctx context.Context, cmd []string, timeout time.Duration) (*probe.ExecOutcome, error) {
	w := r.w
	return w.m.execer.Exec(ctx, bus.ExecRequest{
		ContainerRef: bus.ContainerRef{PodUID: w.key.uid, Namespace: w.namespace, Pod: w.name, Container: w.container.Name},
		Command:      cmd,
		// Whole seconds on the bus; the probe's timeout is whole seconds too.
		TimeoutSeconds: int(timeout / time.Second),
	}, timeout)
}

func (w *worker) event(eventType, reason, message string) {
	ref := kube.PodRef(w.namespace, w.name, w.key.uid)
	if w.isInit {
		ref.FieldPath = fmt.Sprintf("spec.initContainers{%s}", w.container.Name)
	} else {
		ref.FieldPath = fmt.Sprintf("spec.containers{%s}", w.container.Name)
	}
	w.m.recorder.Event(ref, eventType, reason, message)
}

func isTerminalPhase(p corev1.PodPhase) bool {
	return p == corev1.PodSucceeded || p == corev1.PodFailed
}

func containerStatus(st *bus.PodRuntimeStatus, name string) *corev1.ContainerStatus {
	for i := range st.ContainerStatuses {
		if st.ContainerStatuses[i].Name == name && st.ContainerStatuses[i].ContainerID != "" {
			return &st.ContainerStatuses[i]
		}
	}
	for i := range st.InitContainerStatuses {
		if st.InitContainerStatuses[i].Name == name {
			return &st.InitContainerStatuses[i]
		}
	}
	for i := range st.ContainerStatuses {
		if st.ContainerStatuses[i].Name == name {
			return &st.ContainerStatuses[i]
		}
	}
	return nil
}

// willRestart says whether a terminated container will run again (kubelet:
// ContainerShouldRestart without restart rules): the container's own
// restartPolicy if it has one, else the pod's.
func willRestart(c *corev1.Container, pod *corev1.Pod, exitCode int32) bool {
	if c.RestartPolicy != nil {
		switch *c.RestartPolicy {
		case corev1.ContainerRestartPolicyAlways:
			return true
		case corev1.ContainerRestartPolicyNever:
			return false
		case corev1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		}
	}
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}
