package podsync

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/podworkers/internal/fakeruntime"
	"github.com/splitlet/splitlet/services/podworkers/internal/podworker"
)

type sink struct {
	mu   sync.Mutex
	last map[types.UID]*bus.PodRuntimeStatus
	all  []*bus.PodRuntimeStatus
}

func (s *sink) Set(st *bus.PodRuntimeStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last[st.UID] = st
	s.all = append(s.all, st)
}

func (s *sink) get(uid types.UID) *bus.PodRuntimeStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last[uid]
}

type rig struct {
	rt *fakeruntime.Runtime
	sk *sink
	sy *Syncer
	w  *podworker.Workers
}

func newRig(t *testing.T, opts ...Option) *rig {
	rt := fakeruntime.New()
	sk := &sink{last: map[types.UID]*bus.PodRuntimeStatus{}}
	sy := New(rt, sk, opts...)
	w := podworker.New(sy, podworker.WithBackOffPeriod(20*time.Millisecond))
	go w.Run()
	done := make(chan struct{})
	go func() {
		for {
			select {
			case ev := <-rt.Events():
				if p, ok := w.Pod(ev.PodUID); ok {
					w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateSync, Pod: p})
				}
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() { close(done); w.Stop() })
	return &rig{rt, sk, sy, w}
}

func pod(uid string, policy corev1.RestartPolicy, names ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: "p" + uid, Namespace: "ns"},
		Spec: corev1.PodSpec{RestartPolicy: policy}}
	for _, n := range names {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: n, Image: "img"})
	}
	return p
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.EventuallyTrue(t, 15*time.Second, what, cond)
}

func containerState(st *bus.PodRuntimeStatus, name string) (corev1.ContainerStatus, bool) {
	if st == nil {
		return corev1.ContainerStatus{}, false
	}
	for _, c := range append(append([]corev1.ContainerStatus{}, st.InitContainerStatuses...), st.ContainerStatuses...) {
		if c.Name == name {
			return c, true
		}
	}
	return corev1.ContainerStatus{}, false
}

func running(st *bus.PodRuntimeStatus, name string) bool {
	c, ok := containerState(st, name)
	return ok && c.State.Running != nil
}

func TestInitContainersInOrderThenApp(t *testing.T) {
	r := newRig(t)
	p := pod("1", corev1.RestartPolicyAlways, "app")
	p.Spec.InitContainers = []corev1.Container{{Name: "init1"}, {Name: "init2"}}
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: p})
	eventually(t, "init1 running", func() bool { return running(r.sk.get("1"), "init1") })
	if c, _ := containerState(r.sk.get("1"), "app"); c.State.Waiting == nil || c.State.Waiting.Reason != ReasonPodInitializing {
		t.Fatalf("app container while init runs: %+v", c.State)
	}
	if r.rt.StartsOf("init2") != 0 {
		t.Fatal("init2 started before init1 finished")
	}
	r.rt.Exit("1", "init1", 0)
	eventually(t, "init2 running", func() bool { return running(r.sk.get("1"), "init2") })
	r.rt.Exit("1", "init2", 0)
	eventually(t, "app running", func() bool { return running(r.sk.get("1"), "app") })
	c, _ := containerState(r.sk.get("1"), "init1")
	if c.State.Terminated == nil || c.State.Terminated.Reason != "Completed" {
		t.Fatalf("init1 state %+v", c.State)
	}
	// delete: containers stop and the pod reports terminated.
	d := p.DeepCopy()
	now := metav1.Now()
	d.DeletionTimestamp = &now
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateUpdate, Pod: d})
	eventually(t, "terminated", func() bool { st := r.sk.get("1"); return st != nil && st.Terminated })
	if r.rt.Running() != 0 {
		t.Fatal("containers still running after termination")
	}
}

func TestCrashLoopBackOffGrows(t *testing.T) {
	r := newRig(t, WithBackOff(100*time.Millisecond, 800*time.Millisecond))
	r.rt.ExitOnStart["crash"] = 2
	p := pod("2", corev1.RestartPolicyAlways, "crash")
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: p})
	eventually(t, "five starts", func() bool {
		r.rt.PodContainers("2")
		return len(r.rt.PodContainers("2")) >= 5
	})
	list := r.rt.PodContainers("2")
	var gaps []time.Duration
	for i := 1; i < len(list); i++ {
		gaps = append(gaps, list[i].StartedAt.Sub(list[i-1].FinishedAt))
	}
	// kubelet: the first restart is immediate, then 1x, 2x, 4x the base.
	for i := 2; i < len(gaps); i++ {
		if gaps[i] < gaps[i-1] || gaps[i] < 100*time.Millisecond {
			t.Fatalf("back-off does not grow: %v", gaps)
		}
	}
	sawCrashLoop := false
	r.sk.mu.Lock()
	for _, st := range r.sk.all {
		if c, ok := containerState(st, "crash"); ok && c.State.Waiting != nil && c.State.Waiting.Reason == ReasonCrashLoopBackOff {
			sawCrashLoop = c.LastTerminationState.Terminated != nil && c.LastTerminationState.Terminated.ExitCode == 2
		}
	}
	r.sk.mu.Unlock()
	if !sawCrashLoop {
		t.Fatal("no CrashLoopBackOff waiting state with the last exit reported")
	}
	c, _ := containerState(r.sk.get("2"), "crash")
	if c.RestartCount < 3 {
		t.Fatalf("restart count %d", c.RestartCount)
	}
}

func TestRestartPolicies(t *testing.T) {
	r := newRig(t)
	// OnFailure + success: no restart, the pod is finished and torn down.
	r.rt.ExitOnStart["ok"] = 0
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: pod("3", corev1.RestartPolicyOnFailure, "ok")})
	eventually(t, "terminated", func() bool { st := r.sk.get("3"); return st != nil && st.Terminated })
	if r.rt.StartsOf("ok") != 1 {
		t.Fatalf("ok started %d times", r.rt.StartsOf("ok"))
	}
	// Never + failure: no restart.
	r.rt.ExitOnStart["bad"] = 1
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: pod("4", corev1.RestartPolicyNever, "bad")})
	eventually(t, "terminated", func() bool { st := r.sk.get("4"); return st != nil && st.Terminated })
	c, _ := containerState(r.sk.get("4"), "bad")
	if r.rt.StartsOf("bad") != 1 || c.State.Terminated == nil || c.State.Terminated.ExitCode != 1 || c.State.Terminated.Reason != "Error" {
		t.Fatalf("starts %d, state %+v", r.rt.StartsOf("bad"), c.State)
	}
	// OnFailure + failure: restarted.
	r.rt.ExitOnStart["flaky"] = 1
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: pod("5", corev1.RestartPolicyOnFailure, "flaky")})
	eventually(t, "restarted", func() bool { return len(r.rt.PodContainers("5")) >= 2 })
}

func TestLivenessFailureRestartsContainer(t *testing.T) {
	r := newRig(t)
	p := pod("6", corev1.RestartPolicyAlways, "app")
	one := int64(1)
	p.Spec.TerminationGracePeriodSeconds = &one
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: p})
	eventually(t, "running", func() bool { return running(r.sk.get("6"), "app") })
	first := r.rt.PodContainers("6")[0].ID
	r.sy.ProbeFailed(first, nil)
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateSync, Pod: p})
	eventually(t, "restarted", func() bool {
		c, _ := containerState(r.sk.get("6"), "app")
		return c.State.Running != nil && c.ContainerID != first && c.RestartCount == 1
	})
	c, _ := containerState(r.sk.get("6"), "app")
	if c.LastTerminationState.Terminated == nil || c.LastTerminationState.Terminated.ContainerID != first {
		t.Fatalf("last state %+v", c.LastTerminationState)
	}
}

func TestChangedDefinitionRestartsContainer(t *testing.T) {
	r := newRig(t)
	p := pod("7", corev1.RestartPolicyNever, "app", "side")
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: p})
	eventually(t, "running", func() bool { return running(r.sk.get("7"), "app") && running(r.sk.get("7"), "side") })
	side, _ := containerState(r.sk.get("7"), "side")
	q := p.DeepCopy()
	q.Spec.Containers[0].Image = "img:v2"
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateUpdate, Pod: q})
	// restarted even under restartPolicy Never; the other container is untouched.
	eventually(t, "app restarted with the new image", func() bool {
		c, _ := containerState(r.sk.get("7"), "app")
		return c.State.Running != nil && c.RestartCount == 1 && c.Image == "img:v2"
	})
	if c, _ := containerState(r.sk.get("7"), "side"); c.ContainerID != side.ContainerID {
		t.Fatal("an unchanged container was restarted")
	}
}

func TestKillFinalStatusKept(t *testing.T) {
	r := newRig(t)
	p := pod("8", corev1.RestartPolicyAlways, "app")
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: p})
	eventually(t, "running", func() bool { return running(r.sk.get("8"), "app") })
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateKill, Pod: p, Kill: &podworker.KillOptions{Evict: true, Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource"}})
	eventually(t, "terminated", func() bool { st := r.sk.get("8"); return st != nil && st.Terminated })
	if st := r.sk.get("8"); st.Phase != corev1.PodFailed || st.Reason != "Evicted" {
		t.Fatalf("final status %+v", st)
	}
}

func TestActiveDeadlineFailsPod(t *testing.T) {
	r := newRig(t)
	p := pod("9", corev1.RestartPolicyAlways, "app")
	one := int64(1)
	p.Spec.ActiveDeadlineSeconds = &one
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: p})
	eventually(t, "running", func() bool { return running(r.sk.get("9"), "app") })
	eventually(t, "failed past its deadline and torn down", func() bool {
		st := r.sk.get("9")
		return st.Terminated && st.Phase == corev1.PodFailed && st.Reason == ReasonDeadlineExceeded
	})
	if r.rt.Running() != 0 {
		t.Fatal("containers still running")
	}
}

// TestSidecarsStopInReverseOrder: on termination the app containers stop
// first, then each sidecar in the reverse of its order in the spec
// (kubelet: restartable init containers are stopped last, last first).
func TestSidecarsStopInReverseOrder(t *testing.T) {
	r := newRig(t)
	always := corev1.ContainerRestartPolicyAlways
	p := pod("11", corev1.RestartPolicyAlways, "app")
	p.Spec.InitContainers = []corev1.Container{{Name: "a-proxy", RestartPolicy: &always}, {Name: "b-log", RestartPolicy: &always},
		{Name: "c-mesh", RestartPolicy: &always}}
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: p})
	eventually(t, "all running", func() bool {
		st := r.sk.get("11")
		return running(st, "a-proxy") && running(st, "b-log") && running(st, "c-mesh") && running(st, "app")
	})
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateKill, Pod: p})
	eventually(t, "terminated", func() bool { st := r.sk.get("11"); return st != nil && st.Terminated })
	if got := strings.Join(r.rt.StopOrder(), ","); got != "app,c-mesh,b-log,a-proxy" {
		t.Fatalf("stop order %s, want app,c-mesh,b-log,a-proxy", got)
	}
}

func TestSidecarInitContainer(t *testing.T) {
	r := newRig(t, WithBackOff(20*time.Millisecond, 100*time.Millisecond))
	always := corev1.ContainerRestartPolicyAlways
	p := pod("10", corev1.RestartPolicyNever, "app")
	p.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: &always}, {Name: "setup"}}
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: p})
	// the sidecar runs, then the next init container starts beside it.
	eventually(t, "setup running beside the sidecar", func() bool {
		st := r.sk.get("10")
		return running(st, "proxy") && running(st, "setup")
	})
	r.rt.Exit("10", "setup", 0)
	eventually(t, "app running", func() bool { return running(r.sk.get("10"), "app") })
	// a sidecar that exits is restarted even under restartPolicy Never.
	r.rt.Exit("10", "proxy", 1)
	eventually(t, "sidecar restarted", func() bool {
		c, _ := containerState(r.sk.get("10"), "proxy")
		return c.State.Running != nil && c.RestartCount == 1
	})
	// the pod is done when its app container is, whatever the sidecar does.
	r.rt.Exit("10", "app", 0)
	eventually(t, "terminated", func() bool { st := r.sk.get("10"); return st.Terminated })
	if r.rt.Running() != 0 {
		t.Fatal("sidecar still running after the pod finished")
	}
}

// A liveness kill restarts the container under OnFailure even when it exits
// cleanly on SIGTERM, and never under Never.
func TestLivenessKillFollowsPolicyNotExitCode(t *testing.T) {
	r := newRig(t)
	r.rt.StopExitCode = 0
	for uid, policy := range map[string]corev1.RestartPolicy{"11": corev1.RestartPolicyOnFailure, "12": corev1.RestartPolicyNever} {
		p := pod(uid, policy, "app")
		r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: p})
		eventually(t, "running", func() bool { return running(r.sk.get(types.UID(uid)), "app") })
		r.sy.ProbeFailed(r.rt.PodContainers(types.UID(uid))[0].ID, nil)
		r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateSync, Pod: p})
	}
	eventually(t, "OnFailure pod restarted", func() bool {
		c, _ := containerState(r.sk.get("11"), "app")
		return c.State.Running != nil && c.RestartCount == 1
	})
	eventually(t, "Never pod finished", func() bool { st := r.sk.get("12"); return st != nil && st.Terminated })
	if n := len(r.rt.PodContainers("12")); n != 1 {
		t.Fatalf("Never pod has %d container instances", n)
	}
}

// A container left Created by a start cut short is started again as a new
// instance (restart count one up), under any restart policy and without
// waiting out a back-off; init containers alike.
func TestCreatedContainerStartedAgain(t *testing.T) {
	r := newRig(t, WithBackOff(time.Hour, time.Hour))
	r.rt.CutShort["init"] = 1
	r.rt.CutShort["app"] = 1
	p := pod("c1", corev1.RestartPolicyNever, "app")
	p.Spec.InitContainers = []corev1.Container{{Name: "init"}}
	r.rt.ExitOnStart["init"] = 0
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: p})
	eventually(t, "app running", func() bool { return running(r.sk.get("c1"), "app") })
	for _, name := range []string{"init", "app"} {
		if n := r.rt.StartsOf(name); n != 2 {
			t.Errorf("%s: %d starts, want 2 (one cut short, one that ran)", name, n)
		}
		c, _ := containerState(r.sk.get("c1"), name)
		if c.RestartCount != 1 {
			t.Errorf("%s: restartCount %d, want 1", name, c.RestartCount)
		}
	}
}

// kubelet: while the pod initializes, a sidecar with a startup probe that
// exits is started again and still holds the app back: the new container's
// probe has not passed (computeInitContainerActions stops at it).
func TestRestartedSidecarStillHoldsTheApp(t *testing.T) {
	rt := fakeruntime.New()
	sy := New(rt, &sink{last: map[types.UID]*bus.PodRuntimeStatus{}}, WithBackOff(time.Millisecond, time.Millisecond))
	always := corev1.ContainerRestartPolicyAlways
	p := pod("s3", corev1.RestartPolicyAlways, "app")
	p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "img", RestartPolicy: &always,
		StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"false"}}}}}}
	count := func(name string) int {
		n := 0
		for _, c := range rt.PodContainers(p.UID) {
			if c.Name == name {
				n++
			}
		}
		return n
	}
	sync := func() {
		t.Helper()
		if _, err := sy.SyncPod(t.Context(), podworker.UpdateSync, p); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	if err := rt.StopContainer(t.Context(), rt.PodContainers(p.UID)[0].ID, 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the sidecar started again", func() bool { sync(); return count("proxy") >= 2 })
	sync()
	if n := count("app"); n != 0 {
		t.Fatalf("the app started %d times while the restarted sidecar's startup probe had not passed", n)
	}
}

// kubelet: a sidecar with a startup probe holds the pod's next containers
// back until the probe passes; one running since before this replica began
// counts as started (its result went to the replica before).
func TestSidecarStartupProbeHoldsTheApp(t *testing.T) {
	rt := fakeruntime.New()
	sy := New(rt, &sink{last: map[types.UID]*bus.PodRuntimeStatus{}})
	always := corev1.ContainerRestartPolicyAlways
	p := pod("s1", corev1.RestartPolicyAlways, "app")
	p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "img", RestartPolicy: &always,
		StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}}}
	sync := func() {
		t.Helper()
		if _, err := sy.SyncPod(t.Context(), podworker.UpdateSync, p); err != nil {
			t.Fatal(err)
		}
	}
	names := func() []string {
		var out []string
		for _, c := range rt.PodContainers(p.UID) {
			out = append(out, c.Name+"="+string(c.State))
		}
		return out
	}
	sync()
	sync()
	if got := names(); len(got) != 1 || got[0] != "proxy="+string(runtime.StateRunning) {
		t.Fatalf("before the sidecar's startup probe passed: %v, want the sidecar alone", got)
	}
	sy.StartupSucceeded(p.UID, rt.PodContainers(p.UID)[0].ID)
	sync()
	if got := names(); len(got) != 2 {
		t.Fatalf("after the startup probe passed: %v, want the app started", got)
	}

	// a replica that begins after the sidecar started does not wait for a
	// result it will not get again.
	q := pod("s2", corev1.RestartPolicyAlways, "app")
	q.Spec.InitContainers = p.Spec.InitContainers
	if _, err := sy.SyncPod(t.Context(), podworker.UpdateSync, q); err != nil {
		t.Fatal(err)
	}
	later := New(rt, &sink{last: map[types.UID]*bus.PodRuntimeStatus{}})
	if _, err := later.SyncPod(t.Context(), podworker.UpdateSync, q); err != nil {
		t.Fatal(err)
	}
	if n := len(rt.PodContainers(q.UID)); n != 2 {
		t.Fatalf("a replica that began after the sidecar: %d containers, want the app started too", n)
	}
}

// kubelet: a running sidecar whose definition changed (a new image) is
// restarted at once, while a later init container still runs, with the
// kubelet's Killing message; the init container runs on.
func TestChangedSidecarRestartsDuringInit(t *testing.T) {
	rt := fakeruntime.New()
	rec := record.NewFakeRecorder(100)
	sy := New(rt, &sink{last: map[types.UID]*bus.PodRuntimeStatus{}}, WithRecorder(rec))
	always := corev1.ContainerRestartPolicyAlways
	p := pod("s4", corev1.RestartPolicyAlways, "app")
	p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "img", RestartPolicy: &always}, {Name: "setup", Image: "img"}}
	sync := func() {
		t.Helper()
		if _, err := sy.SyncPod(t.Context(), podworker.UpdateSync, p); err != nil {
			t.Fatal(err)
		}
	}
	running := func(name string) []runtime.ContainerStatus {
		var out []runtime.ContainerStatus
		for _, c := range rt.PodContainers(p.UID) {
			if c.Name == name && c.State == runtime.StateRunning {
				out = append(out, c)
			}
		}
		return out
	}
	sync()
	sync()
	if len(running("proxy")) != 1 || len(running("setup")) != 1 {
		t.Fatalf("containers %+v: want the sidecar and the init container running", rt.PodContainers(p.UID))
	}
	first := running("proxy")[0].ID
	p = p.DeepCopy()
	p.Spec.InitContainers[0].Image = "img2"
	sync()
	now := running("proxy")
	if len(now) != 1 || now[0].ID == first || now[0].Image != "img2" {
		t.Fatalf("sidecar instances running %+v: want a new one of img2 in place of %s", now, first)
	}
	if len(running("setup")) != 1 {
		t.Errorf("the init container stopped: %+v", rt.PodContainers(p.UID))
	}
	var killing []string
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, " "+EventKilling+" ") {
			killing = append(killing, e)
		}
	}
	if want := "Normal Killing Init container proxy definition changed"; !slices.Contains(killing, want) {
		t.Errorf("Killing Events %q: want %q", killing, want)
	}
}

// kubelet: a sidecar whose startup probe fails while it holds the pod's
// next containers is killed and started again.
func TestHoldingSidecarFailingStartupIsRestarted(t *testing.T) {
	rt := fakeruntime.New()
	sy := New(rt, &sink{last: map[types.UID]*bus.PodRuntimeStatus{}})
	always := corev1.ContainerRestartPolicyAlways
	p := pod("s5", corev1.RestartPolicyAlways, "app")
	p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "img", RestartPolicy: &always,
		StartupProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"false"}}}}}}
	sync := func() {
		t.Helper()
		if _, err := sy.SyncPod(t.Context(), podworker.UpdateSync, p); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	first := rt.PodContainers(p.UID)[0].ID
	sy.ProbeFailed(first, nil)
	sync()
	for _, c := range rt.PodContainers(p.UID) {
		if c.ID == first && c.State == runtime.StateRunning {
			t.Fatalf("the sidecar whose startup probe failed still runs: %+v", c)
		}
	}
}

// Before anything of a pod with init containers exists, every container,
// the first init container included, waits with reason PodInitializing,
// as the kubelet's default waiting state for such a pod (the InitContainer
// conformance specs fail on any other waiting reason of an init container).
func TestInitContainersWaitPodInitializing(t *testing.T) {
	r := newRig(t)
	p := pod("1", corev1.RestartPolicyNever, "run1")
	p.Spec.InitContainers = []corev1.Container{{Name: "init1"}, {Name: "init2"}}
	st := r.sy.CurrentStatus(p)
	for _, name := range []string{"init1", "init2", "run1"} {
		c, ok := containerState(st, name)
		if !ok || c.State.Waiting == nil || c.State.Waiting.Reason != ReasonPodInitializing {
			t.Errorf("%s before anything ran: %+v, want waiting %s", name, c.State, ReasonPodInitializing)
		}
	}
}
