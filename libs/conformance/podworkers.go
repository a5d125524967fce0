package conformance

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
)

// PodWorkers checks a pod workers stage (one or more replicas). What it must
// do (docs/bus.md, agreement 3): consume podupdates.<p>,
// podupdates.reconcile.<p> and probes.<p> of the partitions it owns, run
// the pods, publish PodRuntimeStatus on podstatus.<p> on every change,
// AgentReadiness on state.agent, and answer
// runtime.exec/probeexec/logs/stats.<p>. The pods the kit sends have one container,
// image busybox, command `sleep 3600`, so any runtime can run them.
//
// Cases:
//   - agent-readiness: the last AgentReadiness on state.agent is ready,
//     with the target's partition count.
//   - add-runs-pod: ADD → a status with the container running, a
//     container ID (`<runtime>://<id>`), a start time, on the pod's partition.
//   - remove-terminates: REMOVE → terminated: true, no container running.
//   - delete-terminates: DELETE (deletionTimestamp, grace 1 s) → terminated.
//   - shortened-grace-on-owner-subject: a pod whose container ignores
//     SIGTERM (a shell that ignores it, then sleeps; the sim runtime's
//     sim.splitlet.io/ignore-sigterm annotation); a DELETE with a grace
//     period of 300 s on podupdates.<p>, then one that shortens it to 0 on
//     podupdates.reconcile.<p> (where podconfig sends a DELETE that only
//     shortens the grace period) → terminated within the kit's timeout.
//   - rejected-at-admission: a pod asking for more CPU than any node has →
//     phase Failed, reason OutOfcpu, terminated: true.
//   - liveness-failure-restarts: a liveness Failure on probes.<p> for the
//     running container → the container runs again with a new ID or a
//     higher restart count.
//   - exec-answered, stats-answered, logs-answered: the request/reply
//     subjects of the pod's partition answer.
//   - request-naming-another-pod-refused: an ExecRequest and a LogsRequest
//     with a running pod's UID and another pod's namespace and name (docs/bus.md,
//     "Runtime requests and the pod they name") → an error, and no output.
//   - probe-exec-only-probe-commands: on runtime.probeexec.<p> the pod's
//     exec probe command (of a readiness probe) is run and answered
//     without error; another command is answered with an error.
//   - set-without-pod-terminates: a SET of the pod's source and partition
//     that does not list it → terminated: true (once sources are ready).
//   - evict-fails-pod-once: an EvictRequest on runtime.evict.<p> for a
//     running pod → answered evicted: true after a status with phase
//     Failed, the request's reason and message; then terminated: true; a
//     second request → already: true, and the status keeps the first
//     message.
//   - pressure-refuses-best-effort: NodePressure [MemoryPressure] on
//     state.pressure, then an ADD of a BestEffort pod → phase Failed,
//     reason Evicted, message "Pod was rejected: The node had condition:
//     [MemoryPressure]. ", terminated: true (the kit then publishes an
//     empty NodePressure).
func PodWorkers(t *testing.T, tg Target, opts ...Option) {
	h := newHarness(t, tg, opts)
	status := h.watch(t, h.subjects.PodStatusAll(), SourcePodWorkers)
	// The kit is podconfig: its one source, api, is seen in full.
	h.publish(t, h.config, h.subjects.SourcesReady(), bus.KindSourcesReady, "",
		&bus.SourcesReady{Sources: []string{SourceAPI}, Ready: []string{SourceAPI}, AllReady: true})
	h.run(t, "agent-readiness", false, h.workersReadiness)
	t.Run("concurrent", func(t *testing.T) {
		h.run(t, "add-runs-pod", true, func(t *testing.T) { h.runPod(t, status, "add") })
		h.run(t, "remove-terminates", true, func(t *testing.T) { h.workersRemoveTerminates(t, status) })
		h.run(t, "delete-terminates", true, func(t *testing.T) { h.workersDeleteTerminates(t, status) })
		h.run(t, "shortened-grace-on-owner-subject", true, func(t *testing.T) { h.workersShortenedGraceOnOwnerSubject(t, status) })
		h.run(t, "rejected-at-admission", true, func(t *testing.T) { h.workersRejectedAtAdmission(t, status) })
		h.run(t, "liveness-failure-restarts", true, func(t *testing.T) { h.workersLivenessFailureRestarts(t, status) })
		h.run(t, "exec-answered", true, func(t *testing.T) { h.workersExecAnswered(t, status) })
		h.run(t, "probe-exec-only-probe-commands", true, func(t *testing.T) { h.probeExecOnlyProbes(t, status) })
		h.run(t, "stats-answered", true, func(t *testing.T) { h.workersStatsAnswered(t, status) })
		h.run(t, "request-naming-another-pod-refused", true, func(t *testing.T) { h.workersRequestNamingAnotherPodRefused(t, status) })
		h.run(t, "evict-fails-pod-once", true, func(t *testing.T) { h.evictOnce(t, status) })
		h.run(t, "logs-answered", true, func(t *testing.T) { h.workersLogsAnswered(t, status) })
	})
	// A SET replaces every api pod of its partition, so it runs alone.
	h.run(t, "set-without-pod-terminates", false, func(t *testing.T) { h.workersSetWithoutPodTerminates(t, status) })
	// The node's pressure refuses every new BestEffort pod, so it runs alone.
	h.run(t, "pressure-refuses-best-effort", false, func(t *testing.T) { h.pressureRefuses(t, status) })
}

// workersRemoveTerminates is the remove-terminates case of PodWorkers.
func (h *harness) workersRemoveTerminates(t *testing.T, status *watcher) {
	pod, _ := h.runPod(t, status, "remove")
	from := status.count()
	h.sendPods(t, bus.OpRemove, pod)
	h.waitTerminated(t, status, pod, from)
}

// workersDeleteTerminates is the delete-terminates case of PodWorkers.
func (h *harness) workersDeleteTerminates(t *testing.T, status *watcher) {
	pod, _ := h.runPod(t, status, "delete")
	from := status.count()
	pod = pod.DeepCopy()
	pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &metav1.Time{Time: time.Now()}, ptr(int64(1))
	h.sendPods(t, bus.OpDelete, pod)
	h.waitTerminated(t, status, pod, from)
}

// workersShortenedGraceOnOwnerSubject is the shortened-grace-on-owner-subject case of PodWorkers.
func (h *harness) workersShortenedGraceOnOwnerSubject(t *testing.T, status *watcher) {
	// A container that outlives SIGTERM: only the shortened grace
	// period ends it within the kit's timeout.
	pod, _ := h.runPod(t, status, "shortened", ignoresSIGTERM)
	from := status.count()
	pod = pod.DeepCopy()
	pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &metav1.Time{Time: time.Now()}, ptr(int64(300))
	h.sendPods(t, bus.OpDelete, pod)
	pod = pod.DeepCopy()
	pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds = &metav1.Time{Time: time.Now().Add(-300 * time.Second)}, ptr(int64(0))
	h.publish(t, h.api, h.subjects.PodReconciles(h.partition(string(pod.UID))), bus.KindPodUpdate, bus.OpDelete, &bus.PodUpdate{Pods: []corev1.Pod{*pod}})
	h.waitTerminated(t, status, pod, from)
}

// workersRejectedAtAdmission is the rejected-at-admission case of PodWorkers.
func (h *harness) workersRejectedAtAdmission(t *testing.T, status *watcher) {
	pod := h.newPod("too-big", sleeper())
	pod.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100000")}
	from := status.count()
	h.sendPods(t, bus.OpAdd, pod)
	_, r := status.waitFor(t, from, "phase Failed, reason OutOfcpu, terminated", podStatus(pod, func(st *bus.PodRuntimeStatus) bool {
		return st.Phase == corev1.PodFailed && st.Terminated
	}))
	st, _ := bus.DecodePodRuntimeStatus(r.env)
	if st.Reason != "OutOfcpu" {
		t.Errorf("rejection reason %q, want OutOfcpu (kubelet: Out<resource>)", st.Reason)
	}
	if st.Message == "" {
		t.Errorf("a rejection without a message")
	}
}

// workersLivenessFailureRestarts is the liveness-failure-restarts case of PodWorkers.
func (h *harness) workersLivenessFailureRestarts(t *testing.T, status *watcher) {
	pod, first := h.runPod(t, status, "liveness")
	c := first.ContainerStatuses[0]
	from := status.count()
	h.publish(t, h.prober, h.subjects.ProbeResults(h.partition(string(pod.UID))), bus.KindProbeResult, "", &bus.ProbeResult{
		PodUID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, Container: c.Name, ContainerID: c.ContainerID,
		Probe: bus.ProbeLiveness, Result: bus.ProbeFailure, Message: "conformance: liveness failed",
	})
	status.waitFor(t, from, "the container running again after a liveness Failure", podStatus(pod, func(st *bus.PodRuntimeStatus) bool {
		for _, cs := range st.ContainerStatuses {
			if cs.Name == c.Name && cs.State.Running != nil && (cs.ContainerID != c.ContainerID || cs.RestartCount > c.RestartCount) {
				return true
			}
		}
		return false
	}))
}

// workersExecAnswered is the exec-answered case of PodWorkers.
func (h *harness) workersExecAnswered(t *testing.T, status *watcher) {
	pod, _ := h.runPod(t, status, "exec")
	ctx, cancel := context.WithTimeout(context.Background(), h.tg.Timeout)
	defer cancel()
	e, err := h.prober.Request(ctx, h.subjects.Exec(h.partition(string(pod.UID))), bus.KindExecRequest, &bus.ExecRequest{
		ContainerRef: bus.ContainerRef{PodUID: pod.UID, Namespace: pod.Namespace, Pod: pod.Name, Container: "app"},
		Command:      []string{"echo", "conformance"}, TimeoutSeconds: 5,
	})
	if err != nil {
		t.Fatalf("no answer on runtime.exec: %v", err)
	}
	if _, err := bus.DecodeExecResult(e); err != nil {
		t.Fatalf("the answer is not an ExecResult: %v", err)
	}
}

// workersStatsAnswered is the stats-answered case of PodWorkers.
func (h *harness) workersStatsAnswered(t *testing.T, status *watcher) {
	pod, _ := h.runPod(t, status, "stats")
	ctx, cancel := context.WithTimeout(context.Background(), h.tg.Timeout)
	defer cancel()
	e, err := h.prober.Request(ctx, h.subjects.Stats(h.partition(string(pod.UID))), bus.KindStatsRequest, &bus.StatsRequest{})
	if err != nil {
		t.Fatalf("no answer on runtime.stats: %v", err)
	}
	res, err := bus.DecodeStatsResult(e)
	if err != nil {
		t.Fatalf("the answer is not a StatsResult: %v", err)
	}
	for _, p := range res.Pods {
		if p.UID == pod.UID {
			return
		}
	}
	t.Errorf("StatsResult of partition %d does not list the running pod %s (error %q)", h.partition(string(pod.UID)), pod.UID, res.Error)
}

// workersRequestNamingAnotherPodRefused is the request-naming-another-pod-refused case of PodWorkers.
func (h *harness) workersRequestNamingAnotherPodRefused(t *testing.T, status *watcher) {
	pod, _ := h.runPod(t, status, "named")
	ctx, cancel := context.WithTimeout(context.Background(), h.tg.Timeout)
	defer cancel()
	ref := bus.ContainerRef{PodUID: pod.UID, Namespace: pod.Namespace, Pod: pod.Name + "-another", Container: "app"}
	e, err := h.prober.Request(ctx, h.subjects.Exec(h.partition(string(pod.UID))), bus.KindExecRequest, &bus.ExecRequest{
		ContainerRef: ref, Command: []string{"echo", "conformance"}, TimeoutSeconds: 5,
	})
	if err != nil {
		t.Fatalf("no answer on runtime.exec: %v", err)
	}
	res, err := bus.DecodeExecResult(e)
	if err != nil {
		t.Fatalf("the answer is not an ExecResult: %v", err)
	}
	if res.Error == "" || len(res.Stdout) > 0 {
		t.Errorf("exec under the UID of %s naming %s/%s: %+v, want an error and nothing run", pod.Name, ref.Namespace, ref.Pod, res)
	}
	var out strings.Builder
	if err := h.prober.RequestLogs(ctx, h.subjects.Logs(h.partition(string(pod.UID))), &bus.LogsRequest{ContainerRef: ref}, &out); err == nil || out.Len() > 0 {
		t.Errorf("logs under the UID of %s naming %s/%s: %q, %v; want an error and no log", pod.Name, ref.Namespace, ref.Pod, out.String(), err)
	}
}

// workersLogsAnswered is the logs-answered case of PodWorkers.
func (h *harness) workersLogsAnswered(t *testing.T, status *watcher) {
	pod, _ := h.runPod(t, status, "logs")
	ctx, cancel := context.WithTimeout(context.Background(), h.tg.Timeout)
	defer cancel()
	err := h.prober.RequestLogs(ctx, h.subjects.Logs(h.partition(string(pod.UID))), &bus.LogsRequest{
		ContainerRef: bus.ContainerRef{PodUID: pod.UID, Namespace: pod.Namespace, Pod: pod.Name, Container: "app"},
	}, io.Discard)
	if err != nil {
		t.Fatalf("logs request: %v", err)
	}
}

// workersSetWithoutPodTerminates is the set-without-pod-terminates case of PodWorkers.
func (h *harness) workersSetWithoutPodTerminates(t *testing.T, status *watcher) {
	pod, _ := h.runPod(t, status, "set")
	from := status.count()
	h.publish(t, h.api, h.subjects.PodUpdates(h.partition(string(pod.UID))), bus.KindPodUpdate, bus.OpSet, &bus.PodUpdate{Pods: []corev1.Pod{}})
	h.waitTerminated(t, status, pod, from)
}

// evict asks the owner of pod's partition to evict it.
func (h *harness) evict(t *testing.T, pod *corev1.Pod, message string) *bus.EvictResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.tg.Timeout)
	defer cancel()
	e, err := h.prober.Request(ctx, h.subjects.Evict(h.partition(string(pod.UID))), bus.KindEvictRequest, &bus.EvictRequest{
		PodUID: pod.UID, Namespace: pod.Namespace, Pod: pod.Name, Reason: "Evicted", Message: message, GracePeriodSeconds: 1,
		DisruptionTarget: true})
	if err != nil {
		t.Fatalf("no answer on runtime.evict: %v", err)
	}
	res, err := bus.DecodeEvictResult(e)
	if err != nil {
		t.Fatalf("the answer is not an EvictResult: %v", err)
	}
	return res
}

func (h *harness) evictOnce(t *testing.T, status *watcher) {
	pod, _ := h.runPod(t, status, "evict")
	from := status.count()
	const first = "The node was low on resource: memory. (conformance) "
	if res := h.evict(t, pod, first); !res.Evicted || res.Error != "" {
		t.Fatalf("first EvictRequest: %+v, want evicted", res)
	}
	evicted := func(st *bus.PodRuntimeStatus) bool {
		return st.Phase == corev1.PodFailed && st.Reason == "Evicted" && st.Message == first && slices.ContainsFunc(st.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonTerminationByKubelet && c.Message == first
		})
	}
	status.waitFor(t, from, "phase Failed, reason Evicted, the request's message, DisruptionTarget", podStatus(pod, evicted))
	if res := h.evict(t, pod, "a second eviction (conformance) "); !res.Already || res.Evicted {
		t.Errorf("second EvictRequest: %+v, want already", res)
	}
	status.waitFor(t, from, "terminated, still evicted with the first message", podStatus(pod, func(st *bus.PodRuntimeStatus) bool {
		return st.Terminated && evicted(st)
	}))
}

func (h *harness) pressureRefuses(t *testing.T, status *watcher) {
	h.publish(t, h.workers, h.subjects.NodePressure(), bus.KindNodePressure, "",
		&bus.NodePressure{Conditions: []corev1.NodeConditionType{corev1.NodeMemoryPressure}})
	t.Cleanup(func() {
		h.publish(t, h.workers, h.subjects.NodePressure(), bus.KindNodePressure, "", &bus.NodePressure{Conditions: []corev1.NodeConditionType{}})
	})
	const want = "Pod was rejected: The node had condition: [MemoryPressure]. "
	// the pod workers follow state.pressure: a pod sent before they read
	// it may be admitted, so each attempt is a new pod.
	deadline := time.Now().Add(h.tg.Timeout)
	for {
		pod := h.newPod("pressure", sleeper())
		from := status.count()
		h.sendPods(t, bus.OpAdd, pod)
		_, r := status.waitFor(t, from, "admitted or refused", podStatus(pod, func(st *bus.PodRuntimeStatus) bool {
			return st.Phase == corev1.PodFailed || len(st.ContainerStatuses) > 0
		}))
		st, _ := bus.DecodePodRuntimeStatus(r.env)
		h.sendPods(t, bus.OpRemove, pod)
		if st.Phase == corev1.PodFailed {
			if st.Reason != "Evicted" || st.Message != want || !st.Terminated {
				t.Errorf("refused with %s %q (terminated %v), want Evicted %q", st.Reason, st.Message, st.Terminated, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a BestEffort pod admitted under MemoryPressure")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ignoresSIGTERM makes the pod's container outlive SIGTERM until its grace
// period is over: a shell that ignores the signal (its sleep inherits that),
// and the sim runtime's annotation for the same.
func ignoresSIGTERM(p *corev1.Pod) {
	p.Spec.Containers[0].Command = []string{"sh", "-c", "trap '' TERM; sleep 3600"}
	p.Annotations = map[string]string{"sim.splitlet.io/ignore-sigterm": "true"}
}

func sleeper() corev1.Container {
	return corev1.Container{Name: "app", Image: "busybox", Command: []string{"sleep", "3600"}}
}

// podStatus matches a PodRuntimeStatus of the pod for which ok holds.
func podStatus(pod *corev1.Pod, ok func(*bus.PodRuntimeStatus) bool) func(received) bool {
	return func(r received) bool {
		if r.env.Kind != bus.KindPodRuntimeStatus {
			return false
		}
		st, err := bus.DecodePodRuntimeStatus(r.env)
		return err == nil && st.UID == pod.UID && ok(st)
	}
}

func (h *harness) workersReadiness(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), h.tg.Timeout)
	defer cancel()
	stream, err := h.js.Stream(ctx, bus.StreamName(h.tg.Node, bus.StreamState))
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for {
		msg, err := stream.GetLastMsgForSubject(ctx, h.subjects.AgentReady())
		if err == nil {
			e, err := bus.DecodeMsg(msg.Header, msg.Data)
			if err != nil {
				t.Fatalf("AgentReadiness does not decode: %v", err)
			}
			a, err := bus.DecodeAgentReadiness(e)
			if err != nil {
				t.Fatalf("AgentReadiness does not decode: %v", err)
			}
			if a.Ready && a.Partitions == h.tg.Partitions {
				if len(a.Replicas) == 0 || e.Node != h.tg.Node {
					t.Errorf("AgentReadiness lists no replicas or names node %q: %s", e.Node, e.Payload)
				}
				return
			}
			last = string(e.Payload)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no ready AgentReadiness with %d partitions on %s within %v (last: %s)", h.tg.Partitions, h.subjects.AgentReady(), h.tg.Timeout, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// runPod sends a pod (ADD) and waits for its running status, which it checks.
func (h *harness) runPod(t *testing.T, status *watcher, name string, mutate ...func(*corev1.Pod)) (*corev1.Pod, *bus.PodRuntimeStatus) {
	t.Helper()
	pod := h.newPod(name, sleeper())
	for _, m := range mutate {
		m(pod)
	}
	from := status.count()
	h.sendPods(t, bus.OpAdd, pod)
	_, r := status.waitFor(t, from, "the pod's container running", podStatus(pod, func(st *bus.PodRuntimeStatus) bool {
		return len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Running != nil
	}))
	st, _ := bus.DecodePodRuntimeStatus(r.env)
	if want := h.subjects.PodStatus(h.partition(string(pod.UID))); r.subject != want {
		t.Errorf("PodRuntimeStatus on %s, want %s", r.subject, want)
	}
	if r.env.Node != h.tg.Node || !strings.HasPrefix(r.env.Source, "podworkers-") {
		t.Errorf("envelope node %q source %q, want node %q and a source podworkers-<replica>", r.env.Node, r.env.Source, h.tg.Node)
	}
	c := st.ContainerStatuses[0]
	if st.Namespace != pod.Namespace || st.Name != pod.Name {
		t.Errorf("status names %s/%s, want %s/%s", st.Namespace, st.Name, pod.Namespace, pod.Name)
	}
	if c.Name != "app" || !strings.Contains(c.ContainerID, "://") {
		t.Errorf("container %q with ID %q, want app with an ID <runtime>://<id>", c.Name, c.ContainerID)
	}
	if st.StartTime == nil || st.Terminated {
		t.Errorf("a running pod with start time %v, terminated %v", st.StartTime, st.Terminated)
	}
	return pod, st
}

// waitTerminated waits for terminated: true with no container running.
func (h *harness) waitTerminated(t *testing.T, status *watcher, pod *corev1.Pod, from int) {
	t.Helper()
	_, r := status.waitFor(t, from, "terminated: true", podStatus(pod, func(st *bus.PodRuntimeStatus) bool { return st.Terminated }))
	st, _ := bus.DecodePodRuntimeStatus(r.env)
	for _, c := range st.ContainerStatuses {
		if c.State.Running != nil {
			t.Errorf("terminated: true while container %s runs", c.Name)
		}
	}
}

// probeExecOnlyProbes asks, as the prober, for the pod's readiness probe
// command on runtime.probeexec.<p> (answered without error) and for
// another command (answered with an error: the pod workers run only a
// pod's own probe commands for the prober).
func (h *harness) probeExecOnlyProbes(t *testing.T, status *watcher) {
	probeCmd := []string{"echo", "conformance"}
	pod, _ := h.runPod(t, status, "probeexec", func(p *corev1.Pod) {
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: probeCmd}}}
	})
	ctx, cancel := context.WithTimeout(t.Context(), h.tg.Timeout)
	defer cancel()
	ref := bus.ContainerRef{PodUID: pod.UID, Namespace: pod.Namespace, Pod: pod.Name, Container: "app"}
	subject := h.subjects.ProbeExec(h.partition(string(pod.UID)))
	for _, c := range []struct {
		cmd     []string
		refused bool
	}{{probeCmd, false}, {[]string{"echo", "not-a-probe"}, true}} {
		e, err := h.prober.Request(ctx, subject, bus.KindExecRequest, &bus.ExecRequest{ContainerRef: ref, Command: c.cmd, TimeoutSeconds: 5})
		if err != nil {
			t.Fatalf("no answer on runtime.probeexec for %q: %v", c.cmd, err)
		}
		res, err := bus.DecodeExecResult(e)
		if err != nil {
			t.Fatalf("the answer is not an ExecResult: %v", err)
		}
		if c.refused && res.Error == "" {
			t.Errorf("%q, not a probe command of the pod, was run on runtime.probeexec: %+v", c.cmd, res)
		}
		if !c.refused && res.Error != "" {
			t.Errorf("the pod's probe command %q was refused on runtime.probeexec: %s", c.cmd, res.Error)
		}
	}
}
