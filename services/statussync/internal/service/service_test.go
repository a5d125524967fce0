package service

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// TestLifecycle follows pods through pending, running, ready, not ready,
// succeeded and failed, and checks the conditions' transition times.
func TestLifecycle(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	p := h.createPod("lifecycle", func(p *corev1.Pod) {
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	})

	// Pending: the container is being created.
	h.publishStatus(runtimeStatus(p, waitingC("app")))
	got := h.waitPod(p.Name, "pending", func(p *corev1.Pod) error {
		if err := wantPhase(p, corev1.PodPending); err != nil {
			return err
		}
		if err := wantCondition(p, corev1.PodReadyToStartContainers, corev1.ConditionFalse); err != nil {
			return err
		}
		if err := wantCondition(p, corev1.PodInitialized, corev1.ConditionTrue); err != nil {
			return err
		}
		return wantCondition(p, corev1.PodReady, corev1.ConditionFalse)
	})
	initialized := condition(got, corev1.PodInitialized).LastTransitionTime
	startTime := got.Status.StartTime
	if startTime == nil {
		t.Fatal("no startTime")
	}
	if got.Status.QOSClass != corev1.PodQOSBestEffort || got.Status.HostIP != "127.0.0.1" {
		t.Fatalf("qos %q hostIP %q", got.Status.QOSClass, got.Status.HostIP)
	}
	if cs := got.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Waiting == nil || cs[0].Image != "busybox" {
		t.Fatalf("container statuses %+v", cs)
	}

	// Running, not ready: the readiness probe has not answered.
	rs := runtimeStatus(p, runningC("app", "sim://a1", 0))
	rs.PodIP = "10.1.0.5"
	h.publishStatus(rs)
	got = h.waitPod(p.Name, "running", func(p *corev1.Pod) error {
		if err := wantPhase(p, corev1.PodRunning); err != nil {
			return err
		}
		if err := wantCondition(p, corev1.PodReadyToStartContainers, corev1.ConditionTrue); err != nil {
			return err
		}
		c := p.Status.ContainerStatuses[0]
		if c.State.Running == nil || c.Started == nil || !*c.Started || c.Ready {
			return fmt.Errorf("container %+v", c)
		}
		return wantCondition(p, corev1.PodReady, corev1.ConditionFalse)
	})
	if got.Status.PodIP != "10.1.0.5" || len(got.Status.PodIPs) != 1 || got.Status.ContainerStatuses[0].ContainerID != "sim://a1" ||
		got.Status.ContainerStatuses[0].ImageID != "sim://busybox" {
		t.Fatalf("podIP %q podIPs %v container %+v", got.Status.PodIP, got.Status.PodIPs, got.Status.ContainerStatuses[0])
	}
	notReadySince := condition(got, corev1.PodReady).LastTransitionTime
	waitNextSecond(t, notReadySince)

	// Ready: the readiness probe succeeds.
	h.publishProbe(p, "app", "sim://a1", bus.ProbeReadiness, bus.ProbeSuccess)
	got = h.waitPod(p.Name, "ready", func(p *corev1.Pod) error {
		if err := wantCondition(p, corev1.ContainersReady, corev1.ConditionTrue); err != nil {
			return err
		}
		return wantCondition(p, corev1.PodReady, corev1.ConditionTrue)
	})
	readySince := condition(got, corev1.PodReady).LastTransitionTime
	if !readySince.After(notReadySince.Time) {
		t.Fatalf("Ready went True but its transition time stayed %v (was %v)", readySince, notReadySince)
	}
	if c := condition(got, corev1.PodInitialized); !c.LastTransitionTime.Equal(&initialized) {
		t.Fatalf("Initialized did not change, yet its transition time moved from %v to %v", initialized, c.LastTransitionTime)
	}
	if !got.Status.ContainerStatuses[0].Ready {
		t.Fatal("container not ready")
	}

	// Not ready again.
	h.publishProbe(p, "app", "sim://a1", bus.ProbeReadiness, bus.ProbeFailure)
	h.waitPod(p.Name, "not ready", func(p *corev1.Pod) error {
		if p.Status.ContainerStatuses[0].Ready {
			return fmt.Errorf("container still ready")
		}
		return wantCondition(p, corev1.PodReady, corev1.ConditionFalse)
	})

	// Succeeded.
	rs = runtimeStatus(p, terminatedC("app", "sim://a1", 0))
	rs.PodIP = "10.1.0.5"
	rs.Terminated = true
	h.publishStatus(rs)
	got = h.waitPod(p.Name, "succeeded", func(p *corev1.Pod) error {
		if err := wantPhase(p, corev1.PodSucceeded); err != nil {
			return err
		}
		if c := condition(p, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "PodCompleted" {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})
	if !got.Status.StartTime.Equal(startTime) {
		t.Fatalf("startTime moved from %v to %v", startTime, got.Status.StartTime)
	}

	// Failed: a container exits with an error under Never.
	f := h.createPod("fails", func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever })
	h.publishStatus(runtimeStatus(f, runningC("app", "sim://f1", 0)))
	h.waitPod(f.Name, "running", func(p *corev1.Pod) error { return wantCondition(p, corev1.PodReady, corev1.ConditionTrue) })
	h.publishStatus(runtimeStatus(f, terminatedC("app", "sim://f1", 3)))
	h.waitPod(f.Name, "failed", func(p *corev1.Pod) error {
		if err := wantPhase(p, corev1.PodFailed); err != nil {
			return err
		}
		if c := p.Status.ContainerStatuses[0]; c.State.Terminated == nil || c.State.Terminated.ExitCode != 3 {
			return fmt.Errorf("container %+v", c.State)
		}
		return wantCondition(p, corev1.PodReady, corev1.ConditionFalse)
	})
}

// TestRejectedPod: a pod the workers reject at admission is Failed with
// their reason and message (the workers record the Event).
func TestRejectedPod(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	p := h.createPod("rejected", nil)
	rs := runtimeStatus(p)
	rs.Phase, rs.Reason, rs.Message, rs.Terminated = corev1.PodFailed, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 8000, used: 0, capacity: 2000", true
	h.publishStatus(rs)
	h.waitPod(p.Name, "rejected", func(p *corev1.Pod) error {
		if err := wantPhase(p, corev1.PodFailed); err != nil {
			return err
		}
		if p.Status.Reason != "OutOfcpu" || p.Status.Message != "Pod was rejected: "+rs.Message {
			return fmt.Errorf("reason %q message %q", p.Status.Reason, p.Status.Message)
		}
		return nil
	})
}

// TestNeverDoesNotRestart: once a container terminated under restartPolicy
// Never, a runtime status that shows it running again is refused.
func TestNeverDoesNotRestart(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	p := h.createPod("never", func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever })
	w, err := h.cs.CoreV1().Pods(h.ns).Watch(h.ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + p.Name, ResourceVersion: p.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	h.publishStatus(runtimeStatus(p, runningC("app", "sim://n1", 0)))
	h.waitPod(p.Name, "running", func(p *corev1.Pod) error { return wantPhase(p, corev1.PodRunning) })
	h.publishStatus(runtimeStatus(p, terminatedC("app", "sim://n1", 1)))
	h.waitPod(p.Name, "terminated", func(p *corev1.Pod) error { return wantPhase(p, corev1.PodFailed) })
	// The illegal one, then a legal marker (the host IP changes).
	h.publishStatus(runtimeStatus(p, runningC("app", "sim://n2", 1)))
	marker := runtimeStatus(p, terminatedC("app", "sim://n1", 1))
	marker.HostIP = "127.0.0.2"
	h.publishStatus(marker)
	h.waitPod(p.Name, "marker", func(p *corev1.Pod) error {
		if p.Status.HostIP != "127.0.0.2" {
			return fmt.Errorf("hostIP %q", p.Status.HostIP)
		}
		return nil
	})
	// Every status the API server held, up to the marker: once terminated,
	// never running again.
	seenTerminated := false
	deadline := time.After(30 * time.Second)
	for {
		var ev watch.Event
		select {
		case ev = <-w.ResultChan():
		case <-deadline:
			t.Fatal("the watch did not show the marker within 30s")
		}
		pod, ok := ev.Object.(*corev1.Pod)
		if !ok || len(pod.Status.ContainerStatuses) == 0 {
			continue
		}
		st := pod.Status.ContainerStatuses[0].State
		if st.Terminated != nil {
			seenTerminated = true
		}
		if seenTerminated && st.Running != nil {
			t.Fatalf("container shown running again after it terminated under Never: %+v", pod.Status.ContainerStatuses[0])
		}
		if pod.Status.HostIP == "127.0.0.2" {
			if !seenTerminated {
				t.Fatal("marker before termination")
			}
			return
		}
	}
}

// TestBatchPutsStatusBack: a status changed by hand in the API server is put
// back within one batch period.
func TestBatchPutsStatusBack(t *testing.T) {
	h := newHarness(t, harnessOptions{batchPeriod: time.Second})
	p := h.createPod("handmade", nil)
	h.publishStatus(runtimeStatus(p, runningC("app", "sim://h1", 0)))
	got := h.waitPod(p.Name, "ready", func(p *corev1.Pod) error { return wantCondition(p, corev1.PodReady, corev1.ConditionTrue) })

	c := condition(got, corev1.PodReady)
	c.Status, c.Reason = corev1.ConditionFalse, "ByHand"
	got.Status.ContainerStatuses[0].Ready = false
	got.Status.Phase = corev1.PodPending
	if _, err := h.cs.CoreV1().Pods(h.ns).UpdateStatus(h.ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitPod(p.Name, "put back", func(p *corev1.Pod) error {
		if err := wantPhase(p, corev1.PodRunning); err != nil {
			return err
		}
		if !p.Status.ContainerStatuses[0].Ready {
			return fmt.Errorf("container not ready")
		}
		return wantCondition(p, corev1.PodReady, corev1.ConditionTrue)
	})
	// Nothing but the batch compares the API copy with the cache (the
	// informer's update does not re-queue a written pod), so this is the
	// batch at work; how soon is for benchmarks, not for tests.
}

// TestGracefulDelete: a pod deleted with the default grace period is gone
// once the workers report its containers stopped.
func TestGracefulDelete(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	p := h.createPod("deleted", nil)
	h.publishStatus(runtimeStatus(p, runningC("app", "sim://d1", 0)))
	h.waitPod(p.Name, "running", func(p *corev1.Pod) error { return wantCondition(p, corev1.PodReady, corev1.ConditionTrue) })

	if err := h.cs.CoreV1().Pods(h.ns).Delete(h.ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleting := h.waitPod(p.Name, "deletion timestamp", func(p *corev1.Pod) error {
		if p.DeletionTimestamp == nil {
			return fmt.Errorf("no deletionTimestamp")
		}
		return nil
	})
	h.publishPods(bus.OpDelete, "api", deleting)
	// The worker is still stopping the containers: the pod stays.
	stopping := runtimeStatus(p, runningC("app", "sim://d1", 0))
	stopping.Terminating = true
	h.publishStatus(stopping)
	stopped := runtimeStatus(p, terminatedC("app", "sim://d1", 143))
	stopped.Terminating, stopped.Terminated = true, true
	h.publishStatus(stopped)
	h.waitGone(p.Name)
}

// TestStaticPodMirror: a static pod's status goes to its mirror pod, also
// when the mirror pod appears after the status.
func TestStaticPodMirror(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	hash := "static" + randomSuffix()
	static := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "static-web-" + h.node, Namespace: h.ns, UID: typesUID(hash),
			Annotations: map[string]string{"kubernetes.io/config.source": "file", "kubernetes.io/config.hash": hash, "kubernetes.io/config.seen": time.Now().UTC().Format(time.RFC3339)}},
		Spec: corev1.PodSpec{NodeName: h.node, RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
	}
	h.publishPods(bus.OpAdd, "file", static)
	rs := runtimeStatus(static, runningC("web", "sim://s1", 0))
	h.publishStatus(rs)

	mirror := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: static.Name, Namespace: h.ns, Annotations: map[string]string{
			"kubernetes.io/config.mirror": hash, "kubernetes.io/config.source": "file", "kubernetes.io/config.hash": hash}},
		Spec: static.Spec,
	}
	if _, err := h.cs.CoreV1().Pods(h.ns).Create(h.ctx, mirror, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitPod(mirror.Name, "mirror running and ready", func(p *corev1.Pod) error {
		if err := wantPhase(p, corev1.PodRunning); err != nil {
			return err
		}
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].ContainerID != "sim://s1" {
			return fmt.Errorf("container statuses %+v", p.Status.ContainerStatuses)
		}
		return wantCondition(p, corev1.PodReady, corev1.ConditionTrue)
	})
	// Later changes follow.
	h.publishStatus(runtimeStatus(static, runningC("web", "sim://s2", 1)))
	h.waitPod(mirror.Name, "restart count", func(p *corev1.Pod) error {
		if p.Status.ContainerStatuses[0].RestartCount != 1 {
			return fmt.Errorf("restartCount %d", p.Status.ContainerStatuses[0].RestartCount)
		}
		return nil
	})
}

// TestBurstIsCoalesced: many changes of one pod in a burst become far fewer
// patches than changes.
func TestBurstIsCoalesced(t *testing.T) {
	h := newHarness(t, harnessOptions{coalesceDelay: 200 * time.Millisecond})
	p := h.createPod("burst", nil)
	const changes = 60
	for i := 1; i <= changes; i++ {
		if _, err := h.workers.PublishAsync(t.Context(), bus.For(h.node).PodStatus(h.partition(p.UID)), bus.KindPodRuntimeStatus, "",
			runtimeStatus(p, runningC("app", fmt.Sprintf("sim://b%d", i), int32(i)))); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.workers.Flush(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.waitPod(p.Name, "last change", func(p *corev1.Pod) error {
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].RestartCount != changes {
			return fmt.Errorf("not yet at the last change")
		}
		return nil
	})
	patches := h.requests.statusPatches(h.ns, p.Name)
	t.Logf("%d changes, %d patches", changes, patches)
	if patches < 1 || patches > changes/6 {
		t.Fatalf("%d changes gave %d patches; want far fewer", changes, patches)
	}
}

// TestBadInput: malformed messages, statuses of unknown pods and probe
// results of unknown containers are dropped; the stage goes on.
func TestBadInput(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	s := bus.For(h.node)
	if _, err := h.js.Publish(h.ctx, s.PodStatus(0), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.js.Publish(h.ctx, s.PodStatus(1), []byte(`{"schemaVersion":1,"kind":"PodRuntimeStatus","node":"x","source":"s","seq":1,"sentAt":"2026-01-01T00:00:00Z","payload":{"name":"n"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.js.Publish(h.ctx, s.PodUpdates(2), []byte(`{"schemaVersion":1,"kind":"ProbeResult","node":"x","source":"s","seq":1,"sentAt":"2026-01-01T00:00:00Z","payload":{}}`)); err != nil {
		t.Fatal(err)
	}
	ghost := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ghost", Namespace: h.ns, UID: "ghost-uid"}}
	h.publishStatus(runtimeStatus(ghost, runningC("app", "sim://g", 0)))
	h.publishProbe(ghost, "app", "sim://g", bus.ProbeReadiness, bus.ProbeSuccess)

	p := h.createPod("after-bad-input", nil)
	h.publishProbe(p, "app", "sim://unknown", bus.ProbeReadiness, bus.ProbeFailure)
	h.publishStatus(runtimeStatus(p, runningC("app", "sim://ok", 0)))
	h.waitPod(p.Name, "ready", func(p *corev1.Pod) error { return wantCondition(p, corev1.PodReady, corev1.ConditionTrue) })
	if _, _, ok := h.runner.Manager().Status("ghost-uid"); ok {
		t.Fatal("a status was generated for an unknown pod")
	}
}

func waitNextSecond(t *testing.T, since metav1.Time) {
	t.Helper()
	testenv.EventuallyTrue(t, 5*time.Second, "the clock past "+since.String()+"'s second", func() bool {
		now := time.Now()
		return !now.Truncate(time.Second).Equal(since.Truncate(time.Second)) && !now.Before(since.Time)
	})
}

// TestStopDrains: statuses still waiting for their coalescing delay are
// written when the stage stops.
func TestStopDrains(t *testing.T) {
	h := newHarness(t, harnessOptions{coalesceDelay: 10 * time.Second})
	p := h.createPod("drained", nil)
	h.publishStatus(runtimeStatus(p, runningC("app", "sim://dr", 0)))
	h.eventually("status taken", func() error {
		if _, _, ok := h.runner.Manager().Status(p.UID); !ok {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	if err := h.runner.Stop(h.ctx); err != nil {
		t.Fatal(err)
	}
	got, err := h.cs.CoreV1().Pods(h.ns).Get(h.ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := wantPhase(got, corev1.PodRunning); err != nil {
		t.Fatalf("after stop: %v", err)
	}
}

// TestRestartRecoversTakenStatus: a status the stage had taken (and the bus
// had forgotten as acknowledged) but not written when it crashed is written
// by the next run.
func TestRestartRecoversTakenStatus(t *testing.T) {
	h := newHarness(t, harnessOptions{coalesceDelay: 10 * time.Second, crash: true})
	// a readiness probe keeps the running pod from Ready, a change that
	// would be written at once: this one waits out the coalescing delay.
	p := h.createPod("recovered", func(p *corev1.Pod) {
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	})
	h.publishStatus(runtimeStatus(p, runningC("app", "sim://rc", 0)))
	h.eventually("status taken", func() error {
		if _, _, ok := h.runner.Manager().Status(p.UID); !ok {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	if err := h.runner.Stop(h.ctx); err != nil {
		t.Fatal(err)
	}
	got, err := h.cs.CoreV1().Pods(h.ns).Get(h.ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase == corev1.PodRunning {
		t.Fatal("the crashed stage wrote the status; the test proves nothing")
	}
	h.startRunner(harnessOptions{})
	h.waitPod(p.Name, "recovered", func(p *corev1.Pod) error { return wantPhase(p, corev1.PodRunning) })
}

// TestReadinessGate: Ready waits for the gate's condition, set by someone
// else in the API server, and follows it; the agent keeps that condition.
func TestReadinessGate(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	const gate = "example.com/load-balancer"
	p := h.createPod("gated", func(p *corev1.Pod) {
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: gate}}
	})
	h.publishStatus(runtimeStatus(p, runningC("app", "sim://g1", 0)))
	got := h.waitPod(p.Name, "containers ready, pod not", func(p *corev1.Pod) error {
		if err := wantCondition(p, corev1.ContainersReady, corev1.ConditionTrue); err != nil {
			return err
		}
		if c := condition(p, corev1.PodReady); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "ReadinessGatesNotReady" {
			return fmt.Errorf("Ready %+v", c)
		}
		return nil
	})
	got.Status.Conditions = append(got.Status.Conditions, corev1.PodCondition{Type: gate, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
	if _, err := h.cs.CoreV1().Pods(h.ns).UpdateStatus(h.ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitPod(p.Name, "ready through the gate", func(p *corev1.Pod) error {
		if err := wantCondition(p, gate, corev1.ConditionTrue); err != nil {
			return err
		}
		return wantCondition(p, corev1.PodReady, corev1.ConditionTrue)
	})
	// A later change of the agent's keeps the foreign condition.
	h.publishStatus(runtimeStatus(p, runningC("app", "sim://g2", 1)))
	h.waitPod(p.Name, "restart keeps the gate", func(p *corev1.Pod) error {
		if p.Status.ContainerStatuses[0].RestartCount != 1 {
			return fmt.Errorf("restartCount %d", p.Status.ContainerStatuses[0].RestartCount)
		}
		return wantCondition(p, gate, corev1.ConditionTrue)
	})
}

// TestMirrorPodRecreated: a mirror pod deleted and created again (new UID)
// gets the static pod's status at once.
func TestMirrorPodRecreated(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	hash := "static" + randomSuffix()
	static := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "static-db-" + h.node, Namespace: h.ns, UID: typesUID(hash),
			Annotations: map[string]string{"kubernetes.io/config.source": "file", "kubernetes.io/config.hash": hash}},
		Spec: corev1.PodSpec{NodeName: h.node, RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{{Name: "db", Image: "postgres"}}},
	}
	mirror := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: static.Name, Namespace: h.ns, Annotations: map[string]string{
				"kubernetes.io/config.mirror": hash, "kubernetes.io/config.source": "file", "kubernetes.io/config.hash": hash}},
			Spec: static.Spec,
		}
	}
	if _, err := h.cs.CoreV1().Pods(h.ns).Create(h.ctx, mirror(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.publishPods(bus.OpAdd, "file", static)
	h.publishStatus(runtimeStatus(static, runningC("db", "sim://m1", 0)))
	h.waitPod(static.Name, "mirror ready", func(p *corev1.Pod) error { return wantCondition(p, corev1.PodReady, corev1.ConditionTrue) })

	zero := int64(0)
	if err := h.cs.CoreV1().Pods(h.ns).Delete(h.ctx, static.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	h.waitGone(static.Name)
	if _, err := h.cs.CoreV1().Pods(h.ns).Create(h.ctx, mirror(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Batch period is 10 s and the harness waits at most 30 s; the check
	// below is about correctness, not speed.
	h.waitPod(static.Name, "new mirror ready", func(p *corev1.Pod) error { return wantCondition(p, corev1.PodReady, corev1.ConditionTrue) })
}

// TestDeleteFinishedPod: a pod that completed before it was deleted goes as
// soon as it is deleted, with no further runtime status.
func TestDeleteFinishedPod(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	p := h.createPod("completed", func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever })
	done := runtimeStatus(p, terminatedC("app", "sim://c1", 0))
	done.Terminated = true
	h.publishStatus(done)
	h.waitPod(p.Name, "succeeded", func(p *corev1.Pod) error { return wantPhase(p, corev1.PodSucceeded) })
	if err := h.cs.CoreV1().Pods(h.ns).Delete(h.ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitGone(p.Name)
}

// A stage restarted long after the pod workers last spoke of a pod (their
// status is beyond the replay window) still applies a probe result that
// arrives then: the runtime status and the readiness of the other
// containers are rebuilt from the API object, not reset.
func TestRestartAppliesLateProbeResult(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	p := h.createPod("late-probe", func(p *corev1.Pod) {
		probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
		p.Spec.Containers[0].ReadinessProbe = probe
		side := p.Spec.Containers[0]
		side.Name = "side"
		p.Spec.Containers = append(p.Spec.Containers, side)
	})
	h.publishStatus(runtimeStatus(p, runningC("app", "sim://late-a", 0), runningC("side", "sim://late-s", 0)))
	h.publishProbe(p, "app", "sim://late-a", bus.ProbeReadiness, bus.ProbeSuccess)
	h.publishProbe(p, "side", "sim://late-s", bus.ProbeReadiness, bus.ProbeSuccess)
	h.waitPod(p.Name, "ready", func(p *corev1.Pod) error { return wantCondition(p, corev1.PodReady, corev1.ConditionTrue) })
	if err := h.runner.Stop(h.ctx); err != nil {
		t.Fatal(err)
	}
	// No replay: as if the pod's status were older than the window.
	r := h.startRunner(harnessOptions{replayWindow: -1})
	h.runner = r
	h.publishProbe(p, "app", "sim://late-a", bus.ProbeReadiness, bus.ProbeFailure)
	got := h.waitPod(p.Name, "not ready after the late probe result", func(p *corev1.Pod) error {
		return wantCondition(p, corev1.PodReady, corev1.ConditionFalse)
	})
	for _, c := range got.Status.ContainerStatuses {
		want := c.Name == "side"
		if c.Ready != want || c.State.Running == nil || c.RestartCount != 0 {
			t.Errorf("container %s after the restart: ready %v running %v restarts %d (want ready %v, running, 0)",
				c.Name, c.Ready, c.State.Running != nil, c.RestartCount, want)
		}
	}
	if got.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s", got.Status.Phase)
	}
}

// TestReconcilesAreNotSent: statussync's consumer of the
// pod-updates stream takes podupdates.* alone, so the server never sends it
// the reconciles, which podconfig publishes on podupdates.reconcile.<p> and
// which statussync would drop: of a RECONCILE and an UPDATE published after
// it, only the UPDATE is delivered.
func TestReconcilesAreNotSent(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	p := h.createPod("reconciled", nil)
	stream, err := h.js.Stream(h.ctx, bus.StreamName(h.node, bus.StreamPodUpdates))
	if err != nil {
		t.Fatal(err)
	}
	// delivered waits until the consumer has delivered and seen
	// acknowledged the stream's last message, and returns how many
	// messages it has delivered.
	delivered := func() uint64 {
		t.Helper()
		var n uint64
		h.eventually("the pod-updates consumer caught up", func() error {
			si, err := stream.Info(h.ctx)
			if err != nil {
				return err
			}
			cons, err := stream.Consumer(h.ctx, DurablePodUpdates)
			if err != nil {
				return err
			}
			ci, err := cons.Info(h.ctx)
			if err != nil {
				return err
			}
			if ci.NumPending > 0 || ci.NumAckPending > 0 || ci.Delivered.Stream < si.State.LastSeq {
				return fmt.Errorf("delivered up to %d of %d, %d pending, %d not acknowledged",
					ci.Delivered.Stream, si.State.LastSeq, ci.NumPending, ci.NumAckPending)
			}
			n = ci.Delivered.Consumer
			return nil
		})
		return n
	}
	before := delivered()
	reconciled := p.DeepCopy()
	reconciled.Status.Message = "a status-only change"
	if err := h.podconfig.Publish(h.ctx, bus.For(h.node).PodReconciles(h.partition(p.UID)), bus.KindPodUpdate, bus.OpReconcile,
		&bus.PodUpdate{Pods: []corev1.Pod{*reconciled}}); err != nil {
		t.Fatal(err)
	}
	h.publishPods(bus.OpUpdate, "api", p)
	if n := delivered() - before; n != 1 {
		t.Fatalf("%d messages delivered for a RECONCILE and an UPDATE, want 1 (the UPDATE)", n)
	}
}

// TestWriteAnswersDroppedOnceInformed: the answer of a status write is
// held only until the informer's copy of the pod catches up with it, so
// that statussync keeps one copy of each pod, not two.
func TestWriteAnswersDroppedOnceInformed(t *testing.T) {
	// no batch within the test: the informer's own events must do it.
	h := newHarness(t, harnessOptions{batchPeriod: time.Hour})
	for i := range 5 {
		p := h.createPod(fmt.Sprint("answers-", i), nil)
		h.publishStatus(runtimeStatus(p, runningC("app", fmt.Sprint("sim://w", i), 0)))
		h.waitPod(p.Name, "running", func(p *corev1.Pod) error { return wantPhase(p, corev1.PodRunning) })
	}
	h.eventually("no write answer held", func() error {
		if n := h.runner.Manager().HeldWriteAnswers(); n != 0 {
			return fmt.Errorf("%d write answers held", n)
		}
		return nil
	})
}
