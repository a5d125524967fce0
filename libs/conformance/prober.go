package conformance

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/splitlet/splitlet/libs/bus"
)

// The durable consumer names of a prober (docs/bus.md, agreement 4).
const (
	DurableProberPodUpdates = bus.DurableProberPodUpdates
	DurableProberPodStatus  = bus.DurableProberPodStatus
)

// proberNonTCPCases are the prober cases of other handlers than tcpSocket.
var proberNonTCPCases = []string{"httpGet/status200", "httpGet/status500", "exec/exit0", "exec/exit1"}

// quiet is how long the kit watches for a message that must not come. Probe
// periods in the kit are 1 s, so it spans two runs.
const quiet = 2500 * time.Millisecond

// Prober checks a prober stage. What it must do (docs/bus.md, agreement 4):
// consume podupdates.* and podstatus.*, run the pods' probes against the
// pod IP of the runtime status, and publish a ProbeResult on probes.<p>
// whenever a probe worker's result changes, with the container ID of the
// runtime status; exec probes go as ExecRequest to runtime.probeexec.<p>.
//
// Cases:
//   - tcpSocket/readiness-follows-port: Success while the port listens,
//     Failure (with a message) when it closes, Success again when it reopens.
//   - tcpSocket/named-port: a port given by the container port's name.
//   - tcpSocket/liveness-fails-when-port-closes: no liveness Failure while
//     the port listens; Failure once it closes (failureThreshold 1).
//   - tcpSocket/startup-gates-readiness: no readiness Success before the
//     startup probe succeeded; then Startup Success and readiness Success.
//   - lifecycle/new-container-id: a restarted container (new ID) is probed
//     and its results carry the new ID.
//   - lifecycle/remove-stops-probing, lifecycle/terminated-stops-probing,
//     lifecycle/set-without-pod-stops-probing,
//     lifecycle/setpart-without-pod-stops-probing: no results for a pod
//     that is gone (REMOVE, terminated: true, absent from its source's SET,
//     whether sent whole or in SETPARTs).
//   - lifecycle/deleting-stops-liveness: no liveness Failure for a pod
//     being deleted (DELETE with deletionTimestamp).
//   - lifecycle/malformed-input: messages that do not decode are dropped
//     and later pods are still probed.
//   - lifecycle/set-recovers-missed-pod: a pod first seen in a SET of its
//     partition (its ADD lost, as when the stage terminated it after its
//     handler failed) is probed as one added.
//   - delivery/bounded-redelivery: both durable consumers bound their
//     deliveries (max_deliver above 1 and not unlimited), so that a message
//     whose handling keeps failing ends (docs/bus.md, "Failed messages").
//   - httpGet/status200, httpGet/status500: 200 is Success, 500 Failure.
//   - exec/exit0, exec/exit1: the command goes to runtime.probeexec.<p> (the kit
//     answers as the pod workers); exit code 0 is Success, 1 Failure.
func Prober(t *testing.T, tg Target, opts ...Option) {
	h := newHarness(t, tg, opts)
	probes := h.watch(t, h.subjects.ProbeResultsAll(), SourceProber)
	t.Run("concurrent", func(t *testing.T) {
		h.run(t, "tcpSocket/readiness-follows-port", true, func(t *testing.T) { h.proberReadinessFollowsPort(t, probes) })
		h.run(t, "tcpSocket/named-port", true, func(t *testing.T) { h.proberNamedPort(t, probes) })
		h.run(t, "tcpSocket/liveness-fails-when-port-closes", true, func(t *testing.T) { h.proberLiveness(t, probes) })
		h.run(t, "tcpSocket/startup-gates-readiness", true, func(t *testing.T) { h.proberStartup(t, probes) })
		h.run(t, "lifecycle/new-container-id", true, func(t *testing.T) { h.proberNewContainer(t, probes) })
		h.run(t, "lifecycle/remove-stops-probing", true, func(t *testing.T) {
			h.proberStops(t, probes, func(t *testing.T, pod *corev1.Pod, st *bus.PodRuntimeStatus) consumed {
				h.sendPods(t, bus.OpRemove, pod)
				return consumed{bus.StreamPodUpdates, DurableProberPodUpdates, h.subjects.PodUpdates(h.partition(string(pod.UID)))}
			})
		})
		h.run(t, "lifecycle/terminated-stops-probing", true, func(t *testing.T) {
			h.proberStops(t, probes, func(t *testing.T, pod *corev1.Pod, st *bus.PodRuntimeStatus) consumed {
				for i := range st.ContainerStatuses {
					c := &st.ContainerStatuses[i]
					c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
						ExitCode: 0, Reason: "Completed", ContainerID: c.ContainerID,
						StartedAt: c.State.Running.StartedAt, FinishedAt: c.State.Running.StartedAt}}
					c.Started, c.Ready = ptr(false), false
				}
				st.Terminating, st.Terminated = true, true
				h.sendStatus(t, st)
				return consumed{bus.StreamPodStatus, DurableProberPodStatus, h.subjects.PodStatus(h.partition(string(pod.UID)))}
			})
		})
		h.run(t, "lifecycle/deleting-stops-liveness", true, func(t *testing.T) { h.proberDeleting(t, probes) })
		h.run(t, "lifecycle/malformed-input", true, func(t *testing.T) { h.proberMalformed(t, probes) })
		h.run(t, "httpGet/status200", true, func(t *testing.T) { h.proberHTTP(t, probes, http.StatusOK, bus.ProbeSuccess) })
		h.run(t, "httpGet/status500", true, func(t *testing.T) {
			h.proberHTTP(t, probes, http.StatusInternalServerError, bus.ProbeFailure)
		})
		h.run(t, "exec/exit0", true, func(t *testing.T) { h.proberExec(t, probes, 0, bus.ProbeSuccess) })
		h.run(t, "exec/exit1", true, func(t *testing.T) { h.proberExec(t, probes, 1, bus.ProbeFailure) })
	})
	// A SET replaces every api pod of its partition, so it runs alone.
	h.run(t, "lifecycle/set-recovers-missed-pod", false, func(t *testing.T) { h.proberSetRecovers(t, probes) })
	h.run(t, "lifecycle/set-without-pod-stops-probing", false, func(t *testing.T) {
		h.proberStops(t, probes, func(t *testing.T, pod *corev1.Pod, st *bus.PodRuntimeStatus) consumed {
			subject := h.subjects.PodUpdates(h.partition(string(pod.UID)))
			h.publish(t, h.api, subject, bus.KindPodUpdate, bus.OpSet, &bus.PodUpdate{Pods: []corev1.Pod{}})
			return consumed{bus.StreamPodUpdates, DurableProberPodUpdates, subject}
		})
	})
	h.run(t, "delivery/bounded-redelivery", true, func(t *testing.T) {
		h.boundedRedelivery(t, consumed{stream: bus.StreamPodUpdates, durable: DurableProberPodUpdates},
			consumed{stream: bus.StreamPodStatus, durable: DurableProberPodStatus})
	})
	h.run(t, "lifecycle/setpart-without-pod-stops-probing", false, func(t *testing.T) {
		h.proberStops(t, probes, func(t *testing.T, pod *corev1.Pod, st *bus.PodRuntimeStatus) consumed {
			// a SET in two parts (SETPART) of two pods without probes: the
			// probed pod is in neither part, so it is gone.
			subject := h.subjects.PodUpdates(h.partition(string(pod.UID)))
			var others []corev1.Pod
			for i := range 2 {
				o := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: fmt.Sprintf("%s-other-%d", pod.Name, i),
					UID: types.UID(fmt.Sprintf("%s-other-%d", pod.UID, i))}, Spec: corev1.PodSpec{NodeName: h.tg.Node,
					Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
				others = append(others, o)
			}
			for _, part := range bus.SetParts(others, 2, string(pod.UID)) {
				h.publish(t, h.api, subject, bus.KindPodUpdate, bus.OpSetPart, &part)
			}
			return consumed{bus.StreamPodUpdates, DurableProberPodUpdates, subject}
		})
	})
}

func tcpProbe(port int, threshold int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:   corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}},
		PeriodSeconds:  1,
		TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: threshold,
	}
}

// startPod publishes the pod (ADD) and its running status with one
// container ID per container, and returns the status.
func (h *harness) startPod(t *testing.T, pod *corev1.Pod) *bus.PodRuntimeStatus {
	t.Helper()
	ids := map[string]string{}
	for _, c := range pod.Spec.Containers {
		ids[c.Name] = fmt.Sprintf("sim://%s-%s-1", pod.UID, c.Name)
	}
	h.sendPods(t, bus.OpAdd, pod)
	st := h.runningStatus(pod, ids, time.Now())
	h.sendStatus(t, st)
	return st
}

// result matches a ProbeResult of the pod's container.
func result(pod *corev1.Pod, containerID string, probe bus.ProbeType, outcome bus.ProbeOutcome) func(received) bool {
	return func(r received) bool {
		if r.env.Kind != bus.KindProbeResult {
			return false
		}
		p, err := bus.DecodeProbeResult(r.env)
		if err != nil || p.PodUID != pod.UID || p.Probe != probe {
			return false
		}
		return (containerID == "" || p.ContainerID == containerID) && (outcome == "" || p.Result == outcome)
	}
}

// checkFailure asserts what a Failure that a probe run decided must hold:
// the checks of checkResult, and a message (docs/bus.md: message carries
// the failure's text). The initial readiness Failure of a new container is
// not a run's, so it is not checked with this.
func (h *harness) checkFailure(t *testing.T, pod *corev1.Pod, r received) {
	t.Helper()
	if p := h.checkResult(t, pod, r); p.Message == "" {
		t.Errorf("a Failure result carries no message (docs/bus.md: message carries the failure's text)")
	}
}

// failedRuns checks a probe that fails on every run: once the target has
// been asked `runs` times, the pod's readiness is Failure and was never
// Success.
func (h *harness) failedRuns(t *testing.T, probes *watcher, pod *corev1.Pod, id string, from int, asked func() int) {
	t.Helper()
	const runs = 3
	deadline := time.Now().Add(h.tg.Timeout)
	for asked() < runs {
		if time.Now().After(deadline) {
			t.Fatalf("the probe ran %d times within %v, want %d (period 1 s)", asked(), h.tg.Timeout, runs)
		}
		<-time.After(50 * time.Millisecond) // polling the kit's own counter
	}
	_, r := probes.waitFor(t, from, "a readiness Failure", result(pod, id, bus.ProbeReadiness, bus.ProbeFailure))
	h.checkResult(t, pod, r)
	if i, _ := probes.find(from, result(pod, "", bus.ProbeReadiness, bus.ProbeSuccess)); i >= 0 {
		t.Fatalf("readiness Success for a probe that fails on every run")
	}
}

// checkResult asserts what every ProbeResult of the pod must hold.
func (h *harness) checkResult(t *testing.T, pod *corev1.Pod, r received) *bus.ProbeResult {
	t.Helper()
	p, err := bus.DecodeProbeResult(r.env)
	if err != nil {
		t.Fatalf("ProbeResult does not decode: %v", err)
	}
	if want := h.subjects.ProbeResults(h.partition(string(pod.UID))); r.subject != want {
		t.Errorf("ProbeResult on %s, want %s (the pod's partition)", r.subject, want)
	}
	if r.env.Node != h.tg.Node {
		t.Errorf("envelope node %q, want %q", r.env.Node, h.tg.Node)
	}
	if p.Namespace != pod.Namespace || p.Name != pod.Name {
		t.Errorf("ProbeResult names %s/%s, want %s/%s", p.Namespace, p.Name, pod.Namespace, pod.Name)
	}
	return p
}

func (h *harness) proberReadinessFollowsPort(t *testing.T, probes *watcher) {
	l := newListener(t, h.tg.ProbeHost)
	pod := h.newPod("tcp-ready", corev1.Container{Name: "app", Image: "busybox", ReadinessProbe: tcpProbe(l.port, 1)})
	from := probes.count()
	st := h.startPod(t, pod)
	id := st.ContainerStatuses[0].ContainerID
	i, r := probes.waitFor(t, from, "readiness Success while the port listens", result(pod, id, bus.ProbeReadiness, bus.ProbeSuccess))
	h.checkResult(t, pod, r)
	l.close(t)
	i, r = probes.waitFor(t, i+1, "readiness Failure after the port closed", result(pod, id, bus.ProbeReadiness, bus.ProbeFailure))
	h.checkFailure(t, pod, r)
	l.reopen(t)
	_, r = probes.waitFor(t, i+1, "readiness Success after the port reopened", result(pod, id, bus.ProbeReadiness, bus.ProbeSuccess))
	h.checkResult(t, pod, r)
}

func (h *harness) proberNamedPort(t *testing.T, probes *watcher) {
	l := newListener(t, h.tg.ProbeHost)
	probe := tcpProbe(0, 1)
	probe.TCPSocket.Port = intstr.FromString("svc")
	pod := h.newPod("tcp-named", corev1.Container{Name: "app", Image: "busybox", ReadinessProbe: probe,
		Ports: []corev1.ContainerPort{{Name: "svc", ContainerPort: int32(l.port), Protocol: corev1.ProtocolTCP}}})
	from := probes.count()
	st := h.startPod(t, pod)
	_, r := probes.waitFor(t, from, "readiness Success on the named port",
		result(pod, st.ContainerStatuses[0].ContainerID, bus.ProbeReadiness, bus.ProbeSuccess))
	h.checkResult(t, pod, r)
}

func (h *harness) proberLiveness(t *testing.T, probes *watcher) {
	l := newListener(t, h.tg.ProbeHost)
	pod := h.newPod("tcp-live", corev1.Container{Name: "app", Image: "busybox", LivenessProbe: tcpProbe(l.port, 1)})
	from := probes.count()
	st := h.startPod(t, pod)
	id := st.ContainerStatuses[0].ContainerID
	probes.never(t, from, quiet, "liveness Failure while the port listens", result(pod, id, bus.ProbeLiveness, bus.ProbeFailure))
	l.close(t)
	_, r := probes.waitFor(t, from, "liveness Failure after the port closed", result(pod, id, bus.ProbeLiveness, bus.ProbeFailure))
	h.checkFailure(t, pod, r)
}

func (h *harness) proberStartup(t *testing.T, probes *watcher) {
	ready := newListener(t, h.tg.ProbeHost)
	startup := closedPort(t, h.tg.ProbeHost)
	pod := h.newPod("tcp-startup", corev1.Container{Name: "app", Image: "busybox",
		ReadinessProbe: tcpProbe(ready.port, 1), StartupProbe: tcpProbe(startup.port, 60)})
	from := probes.count()
	st := h.startPod(t, pod)
	id := st.ContainerStatuses[0].ContainerID
	probes.never(t, from, quiet, "readiness Success before the startup probe succeeded (kubelet: only the startup probe runs until it succeeds)",
		result(pod, id, bus.ProbeReadiness, bus.ProbeSuccess))
	startup.reopen(t)
	i, r := probes.waitFor(t, from, "startup Success once its port listens", result(pod, id, bus.ProbeStartup, bus.ProbeSuccess))
	h.checkResult(t, pod, r)
	_, r = probes.waitFor(t, i, "readiness Success after startup", result(pod, id, bus.ProbeReadiness, bus.ProbeSuccess))
	h.checkResult(t, pod, r)
}

func (h *harness) proberNewContainer(t *testing.T, probes *watcher) {
	l := newListener(t, h.tg.ProbeHost)
	pod := h.newPod("tcp-restart", corev1.Container{Name: "app", Image: "busybox", ReadinessProbe: tcpProbe(l.port, 1)})
	from := probes.count()
	st := h.startPod(t, pod)
	first := st.ContainerStatuses[0].ContainerID
	probes.waitFor(t, from, "readiness Success of the first container", result(pod, first, bus.ProbeReadiness, bus.ProbeSuccess))
	second := fmt.Sprintf("sim://%s-app-2", pod.UID)
	st = h.runningStatus(pod, map[string]string{"app": second}, time.Now())
	st.ContainerStatuses[0].RestartCount = 1
	h.sendStatus(t, st)
	_, r := probes.waitFor(t, from, "readiness Success of the restarted container, with its new ID",
		result(pod, second, bus.ProbeReadiness, bus.ProbeSuccess))
	h.checkResult(t, pod, r)
}

// proberStops: once stop has told the prober the pod is gone, and the
// prober's durable consumer has acknowledged that message, the pod's port
// closing brings no result.
func (h *harness) proberStops(t *testing.T, probes *watcher, stop func(*testing.T, *corev1.Pod, *bus.PodRuntimeStatus) consumed) {
	l := newListener(t, h.tg.ProbeHost)
	pod := h.newPod("tcp-stop", corev1.Container{Name: "app", Image: "busybox", ReadinessProbe: tcpProbe(l.port, 1)})
	from := probes.count()
	st := h.startPod(t, pod)
	id := st.ContainerStatuses[0].ContainerID
	i, _ := probes.waitFor(t, from, "readiness Success", result(pod, id, bus.ProbeReadiness, bus.ProbeSuccess))
	h.waitConsumed(t, stop(t, pod, st))
	l.close(t)
	probes.never(t, i+1, quiet, "a readiness Failure for a pod the prober was told is gone",
		result(pod, "", bus.ProbeReadiness, bus.ProbeFailure))
}

// proberSetRecovers: a pod the prober first hears of in a SET of its
// partition, with no ADD before, is probed.
func (h *harness) proberSetRecovers(t *testing.T, probes *watcher) {
	l := newListener(t, h.tg.ProbeHost)
	pod := h.newPod("tcp-from-set", corev1.Container{Name: "app", Image: "busybox", ReadinessProbe: tcpProbe(l.port, 1)})
	from := probes.count()
	st := h.runningStatus(pod, map[string]string{"app": fmt.Sprintf("sim://%s-app-1", pod.UID)}, time.Now())
	h.sendStatus(t, st)
	h.publish(t, h.api, h.subjects.PodUpdates(h.partition(string(pod.UID))), bus.KindPodUpdate, bus.OpSet,
		&bus.PodUpdate{Pods: []corev1.Pod{*pod}})
	_, r := probes.waitFor(t, from, "readiness Success of a pod first seen in a SET",
		result(pod, st.ContainerStatuses[0].ContainerID, bus.ProbeReadiness, bus.ProbeSuccess))
	h.checkResult(t, pod, r)
}

// proberDeleting: while a pod is being deleted, a liveness probe does not
// fail (kubelet: liveness reports Success during termination, so the
// container is not restarted while it stops).
func (h *harness) proberDeleting(t *testing.T, probes *watcher) {
	l := newListener(t, h.tg.ProbeHost)
	pod := h.newPod("tcp-deleting", corev1.Container{Name: "app", Image: "busybox", LivenessProbe: tcpProbe(l.port, 1)})
	from := probes.count()
	st := h.startPod(t, pod)
	id := st.ContainerStatuses[0].ContainerID
	deleting := pod.DeepCopy()
	deleting.DeletionTimestamp, deleting.DeletionGracePeriodSeconds = &metav1.Time{Time: time.Now()}, ptr(int64(30))
	h.sendPods(t, bus.OpDelete, deleting)
	h.waitConsumed(t, consumed{bus.StreamPodUpdates, DurableProberPodUpdates, h.subjects.PodUpdates(h.partition(string(pod.UID)))})
	l.close(t)
	probes.never(t, from, quiet, "a liveness Failure for a pod being deleted", result(pod, id, bus.ProbeLiveness, bus.ProbeFailure))
}

func (h *harness) proberMalformed(t *testing.T, probes *watcher) {
	l := newListener(t, h.tg.ProbeHost)
	pod := h.newPod("tcp-after-garbage", corev1.Container{Name: "app", Image: "busybox", ReadinessProbe: tcpProbe(l.port, 1)})
	n := h.partition(string(pod.UID))
	for _, subject := range []string{h.subjects.PodUpdates(n), h.subjects.PodStatus(n)} {
		for _, data := range [][]byte{
			[]byte("not json"),
			[]byte(`{"schemaVersion":2,"kind":"PodUpdate","node":"x","source":"api","op":"ADD","seq":1,"sentAt":"2026-01-01T00:00:00Z","payload":{}}`),
			[]byte(fmt.Sprintf(`{"schemaVersion":1,"kind":"PodUpdate","node":%q,"source":"garbage","op":"ADD","seq":1,"sentAt":"2026-01-01T00:00:00Z","payload":{"pods":[{"metadata":{"name":"x"}}]}}`, h.tg.Node)),
			[]byte(fmt.Sprintf(`{"schemaVersion":1,"kind":"PodRuntimeStatus","node":%q,"source":"garbage","seq":1,"sentAt":"2026-01-01T00:00:00Z","payload":{"uid":7}}`, h.tg.Node)),
		} {
			if _, err := h.js.Publish(t.Context(), subject, data); err != nil {
				t.Fatal(err)
			}
		}
	}
	from := probes.count()
	st := h.startPod(t, pod)
	_, r := probes.waitFor(t, from, "readiness Success of a pod sent after malformed messages",
		result(pod, st.ContainerStatuses[0].ContainerID, bus.ProbeReadiness, bus.ProbeSuccess))
	h.checkResult(t, pod, r)
}

func (h *harness) proberHTTP(t *testing.T, probes *watcher, code int, want bus.ProbeOutcome) {
	var served atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(code)
	}))
	l, err := net.Listen("tcp", net.JoinHostPort(h.tg.ProbeHost, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	pod := h.newPod("http", corev1.Container{Name: "app", Image: "busybox", ReadinessProbe: &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(int32(port))}},
		PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
	}})
	from := probes.count()
	st := h.startPod(t, pod)
	id := st.ContainerStatuses[0].ContainerID
	if want == bus.ProbeFailure {
		h.failedRuns(t, probes, pod, id, from, func() int { return int(served.Load()) })
		return
	}
	_, r := probes.waitFor(t, from, fmt.Sprintf("readiness %s for HTTP %d", want, code), result(pod, id, bus.ProbeReadiness, want))
	h.checkResult(t, pod, r)
}

func (h *harness) proberExec(t *testing.T, probes *watcher, exit int, want bus.ProbeOutcome) {
	pod := h.newPod("exec", corev1.Container{Name: "app", Image: "busybox", ReadinessProbe: &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"check", "health"}}},
		PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
	}})
	asked := make(chan *bus.ExecRequest, 16)
	var answered atomic.Int32
	sub, err := h.nc.Subscribe(h.subjects.ProbeExec(h.partition(string(pod.UID))), func(m *nats.Msg) {
		e, err := bus.DecodeMsg(m.Header, m.Data)
		if err != nil {
			return
		}
		req, err := bus.DecodeExecRequest(e)
		if err != nil || req.PodUID != pod.UID {
			return // another case's pod in the same partition
		}
		select {
		case asked <- req:
		default:
		}
		_ = h.workers.Send(m.Reply, bus.KindExecResult, &bus.ExecResult{ExitCode: exit, Stdout: []byte("checked\n")})
		answered.Add(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	from := probes.count()
	st := h.startPod(t, pod)
	id := st.ContainerStatuses[0].ContainerID
	if want == bus.ProbeFailure {
		h.failedRuns(t, probes, pod, id, from, func() int { return int(answered.Load()) })
	} else {
		_, r := probes.waitFor(t, from, fmt.Sprintf("readiness %s for exit code %d", want, exit), result(pod, id, bus.ProbeReadiness, want))
		h.checkResult(t, pod, r)
	}
	select {
	case req := <-asked:
		if req.Container != "app" || len(req.Command) != 2 || req.Command[0] != "check" {
			t.Errorf("ExecRequest for container %q command %q, want app [check health]", req.Container, req.Command)
		}
	default:
		t.Error("a result came but no ExecRequest reached runtime.probeexec")
	}
}
