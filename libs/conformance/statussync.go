package conformance

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/splitlet/splitlet/libs/bus"
)

// StatusSync checks a status syncer stage against the API server of
// Target.Config. What it must do (docs/bus.md, agreement 5): consume
// podupdates.*, podstatus.* and probes.*, and write the pods' status to the
// API server, deciding containers' ready and started from probe results
// only; delete a pod being deleted once its runtime status says terminated.
//
// Cases (each creates its pod in the API server, then plays podconfig, the
// pod workers and the prober on the bus):
//   - no-probes-ready-when-running: phase Running, the container running,
//     ready and started, Ready condition True, podIP and hostIP.
//   - readiness-from-probe-results: the runtime's ready: true is ignored;
//     ready only after a readiness Success, not ready again after a Failure.
//   - startup-from-probe-results: started only after a startup Success.
//   - rejected: a runtime status with phase Failed, reason OutOfcpu and no
//     containers → API phase Failed, that reason, "Pod was rejected: ...".
//   - static-pod-status-to-mirror: the status of a static pod (source file,
//     UID = its config hash) goes to its mirror pod (annotation
//     kubernetes.io/config.mirror = the hash).
//   - delete-once-terminated: a pod deleted with a grace period is removed
//     from the API server once its runtime status says terminated.
func StatusSync(t *testing.T, tg Target, opts ...Option) {
	h := newHarness(t, tg, opts)
	if h.tg.Config == nil {
		t.Fatal("conformance: StatusSync needs Target.Config (the stage's API server)")
	}
	cs, err := kubernetes.NewForConfig(h.tg.Config)
	if err != nil {
		t.Fatal(err)
	}
	h.publish(t, h.config, h.subjects.SourcesReady(), bus.KindSourcesReady, "",
		&bus.SourcesReady{Sources: []string{SourceAPI}, Ready: []string{SourceAPI}, AllReady: true})
	t.Run("concurrent", func(t *testing.T) {
		h.run(t, "no-probes-ready-when-running", true, func(t *testing.T) { h.statusNoProbesReadyWhenRunning(t, cs) })
		h.run(t, "readiness-from-probe-results", true, func(t *testing.T) { h.statusReadinessFromProbeResults(t, cs) })
		h.run(t, "startup-from-probe-results", true, func(t *testing.T) { h.statusStartupFromProbeResults(t, cs) })
		h.run(t, "rejected", true, func(t *testing.T) { h.statusRejected(t, cs) })
		h.run(t, "static-pod-status-to-mirror", true, func(t *testing.T) { h.statusStaticPodStatusToMirror(t, cs) })
		h.run(t, "delete-once-terminated", true, func(t *testing.T) { h.statusDeleteOnceTerminated(t, cs) })
	})
}

// statusNoProbesReadyWhenRunning is the no-probes-ready-when-running case of StatusSync.
func (h *harness) statusNoProbesReadyWhenRunning(t *testing.T, cs kubernetes.Interface) {
	pod := h.apiPod(t, cs, "plain", corev1.Container{Name: "app", Image: "busybox"})
	h.sendStatus(t, h.runningStatus(pod, map[string]string{"app": "sim://plain-1"}, time.Now()))
	h.waitAPIStatus(t, cs, pod, "phase Running, app running, ready and started, Ready True, IPs", func(s *corev1.PodStatus) bool {
		c := containerStatus(s, "app")
		return s.Phase == corev1.PodRunning && c != nil && c.State.Running != nil && c.Ready &&
			c.Started != nil && *c.Started && c.ContainerID == "sim://plain-1" &&
			condition(s, corev1.PodReady) == corev1.ConditionTrue && s.PodIP == h.tg.ProbeHost && s.HostIP == h.tg.ProbeHost
	})
}

// statusReadinessFromProbeResults is the readiness-from-probe-results case of StatusSync.
func (h *harness) statusReadinessFromProbeResults(t *testing.T, cs kubernetes.Interface) {
	pod := h.apiPod(t, cs, "ready", corev1.Container{Name: "app", Image: "busybox", ReadinessProbe: tcpProbe(1, 1)})
	st := h.runningStatus(pod, map[string]string{"app": "sim://ready-1"}, time.Now())
	st.ContainerStatuses[0].Ready = true // the runtime's value, which must be ignored
	h.sendStatus(t, st)
	h.waitAPIStatus(t, cs, pod, "running but not ready before any readiness result", func(s *corev1.PodStatus) bool {
		c := containerStatus(s, "app")
		return s.Phase == corev1.PodRunning && c != nil && c.State.Running != nil && !c.Ready &&
			condition(s, corev1.PodReady) == corev1.ConditionFalse
	})
	h.sendProbe(t, pod, "app", "sim://ready-1", bus.ProbeReadiness, bus.ProbeSuccess)
	h.waitAPIStatus(t, cs, pod, "ready after a readiness Success", func(s *corev1.PodStatus) bool {
		c := containerStatus(s, "app")
		return c != nil && c.Ready && condition(s, corev1.PodReady) == corev1.ConditionTrue &&
			condition(s, corev1.ContainersReady) == corev1.ConditionTrue
	})
	h.sendProbe(t, pod, "app", "sim://ready-1", bus.ProbeReadiness, bus.ProbeFailure)
	h.waitAPIStatus(t, cs, pod, "not ready after a readiness Failure", func(s *corev1.PodStatus) bool {
		c := containerStatus(s, "app")
		return c != nil && !c.Ready && condition(s, corev1.PodReady) == corev1.ConditionFalse
	})
}

// statusStartupFromProbeResults is the startup-from-probe-results case of StatusSync.
func (h *harness) statusStartupFromProbeResults(t *testing.T, cs kubernetes.Interface) {
	pod := h.apiPod(t, cs, "startup", corev1.Container{Name: "app", Image: "busybox", StartupProbe: tcpProbe(1, 30)})
	h.sendStatus(t, h.runningStatus(pod, map[string]string{"app": "sim://startup-1"}, time.Now()))
	h.waitAPIStatus(t, cs, pod, "running, not started before a startup Success", func(s *corev1.PodStatus) bool {
		c := containerStatus(s, "app")
		return c != nil && c.State.Running != nil && c.Started != nil && !*c.Started && !c.Ready
	})
	h.sendProbe(t, pod, "app", "sim://startup-1", bus.ProbeStartup, bus.ProbeSuccess)
	h.waitAPIStatus(t, cs, pod, "started after a startup Success", func(s *corev1.PodStatus) bool {
		c := containerStatus(s, "app")
		return c != nil && c.Started != nil && *c.Started
	})
}

// statusRejected is the rejected case of StatusSync.
func (h *harness) statusRejected(t *testing.T, cs kubernetes.Interface) {
	pod := h.apiPod(t, cs, "rejected", corev1.Container{Name: "app", Image: "busybox"})
	h.sendStatus(t, &bus.PodRuntimeStatus{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name,
		Phase: corev1.PodFailed, Reason: "OutOfcpu", Message: "Node didn't have enough resource: cpu, requested: 100000000, used: 0, capacity: 4000",
		Terminated: true})
	h.waitAPIStatus(t, cs, pod, "phase Failed, reason OutOfcpu, message Pod was rejected: ...", func(s *corev1.PodStatus) bool {
		return s.Phase == corev1.PodFailed && s.Reason == "OutOfcpu" && strings.HasPrefix(s.Message, "Pod was rejected: ")
	})
}

// statusStaticPodStatusToMirror is the static-pod-status-to-mirror case of StatusSync.
func (h *harness) statusStaticPodStatusToMirror(t *testing.T, cs kubernetes.Interface) {
	// Agreement 1: a static pod's bus UID is its config hash; its
	// mirror pod carries the hash in kubernetes.io/config.mirror.
	static := h.newPod("static", corev1.Container{Name: "app", Image: "busybox"})
	hash := string(static.UID)
	static.Annotations = map[string]string{
		"kubernetes.io/config.source": "file", "kubernetes.io/config.hash": hash,
		"kubernetes.io/config.seen": time.Now().UTC().Format(time.RFC3339Nano),
	}
	mirror := static.DeepCopy()
	mirror.UID, mirror.ResourceVersion, mirror.CreationTimestamp = "", "", metav1.Time{}
	mirror.Annotations = map[string]string{"kubernetes.io/config.source": "file", "kubernetes.io/config.hash": hash,
		"kubernetes.io/config.mirror": hash}
	created, err := cs.CoreV1().Pods(mirror.Namespace).Create(context.Background(), mirror, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create mirror pod: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(created.Namespace).Delete(context.Background(), created.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	})
	n := h.partition(hash)
	fileSource := bus.NewPublisher(h.nc, h.js, h.tg.Node, "file", h.tg.publisherOptions()...)
	h.publish(t, fileSource, h.subjects.PodUpdates(n), bus.KindPodUpdate, bus.OpSet, &bus.PodUpdate{Pods: []corev1.Pod{*static}})
	h.sendStatus(t, h.runningStatus(static, map[string]string{"app": "sim://static-1"}, time.Now()))
	h.waitAPIStatus(t, cs, created, "the mirror pod Running with the static pod's container", func(s *corev1.PodStatus) bool {
		c := containerStatus(s, "app")
		return s.Phase == corev1.PodRunning && c != nil && c.ContainerID == "sim://static-1"
	})
}

// statusDeleteOnceTerminated is the delete-once-terminated case of StatusSync.
func (h *harness) statusDeleteOnceTerminated(t *testing.T, cs kubernetes.Interface) {
	pod := h.apiPod(t, cs, "deleted", corev1.Container{Name: "app", Image: "busybox"})
	started := time.Now()
	h.sendStatus(t, h.runningStatus(pod, map[string]string{"app": "sim://deleted-1"}, started))
	h.waitAPIStatus(t, cs, pod, "phase Running", func(s *corev1.PodStatus) bool { return s.Phase == corev1.PodRunning })
	ctx := context.Background()
	if err := cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(30))}); err != nil {
		t.Fatal(err)
	}
	deleting, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || deleting.DeletionTimestamp == nil {
		t.Fatalf("the pod is not being deleted (err %v)", err)
	}
	h.sendPods(t, bus.OpDelete, deleting)
	st := h.runningStatus(pod, map[string]string{"app": "sim://deleted-1"}, started)
	c := &st.ContainerStatuses[0]
	c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
		StartedAt: metav1.Time{Time: started}, FinishedAt: metav1.Now(), ContainerID: c.ContainerID}}
	c.Started = ptr(false)
	st.Terminating, st.Terminated = true, true
	h.sendStatus(t, st)
	deadline := time.Now().Add(h.tg.Timeout)
	for {
		_, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pod is still in the API server %v after its runtime status said terminated (err %v)", h.tg.Timeout, err)
		}
		<-time.After(100 * time.Millisecond)
	}
}

// apiPod creates the pod in the API server and sends it on the bus (ADD).
func (h *harness) apiPod(t *testing.T, cs kubernetes.Interface, name string, c corev1.Container) *corev1.Pod {
	t.Helper()
	want := h.newPod(name, c)
	want.UID, want.ResourceVersion, want.CreationTimestamp = "", "", metav1.Time{}
	want.Spec.TerminationGracePeriodSeconds = ptr(int64(30))
	pod, err := cs.CoreV1().Pods(want.Namespace).Create(context.Background(), want, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	})
	h.sendPods(t, bus.OpAdd, pod)
	return pod
}

func (h *harness) sendProbe(t *testing.T, pod *corev1.Pod, container, id string, probe bus.ProbeType, outcome bus.ProbeOutcome) {
	t.Helper()
	msg := ""
	if outcome == bus.ProbeFailure {
		msg = "conformance: probe failed"
	}
	h.publish(t, h.prober, h.subjects.ProbeResults(h.partition(string(pod.UID))), bus.KindProbeResult, "", &bus.ProbeResult{
		PodUID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, Container: container, ContainerID: id,
		Probe: probe, Result: outcome, Message: msg,
	})
}

// waitAPIStatus polls the pod in the API server until ok holds.
func (h *harness) waitAPIStatus(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod, what string, ok func(*corev1.PodStatus) bool) {
	t.Helper()
	deadline := time.Now().Add(h.tg.Timeout)
	var last string
	for {
		got, err := cs.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
		if err == nil {
			if ok(&got.Status) {
				return
			}
			b, _ := json.Marshal(got.Status)
			last = string(b)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("API status of %s/%s not %s within %v; last: %s", pod.Namespace, pod.Name, what, h.tg.Timeout, last)
		}
		<-time.After(100 * time.Millisecond)
	}
}

func containerStatus(s *corev1.PodStatus, name string) *corev1.ContainerStatus {
	for i := range s.ContainerStatuses {
		if s.ContainerStatuses[i].Name == name {
			return &s.ContainerStatuses[i]
		}
	}
	return nil
}

func condition(s *corev1.PodStatus, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range s.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return "(none)"
}
