package controller

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/sim"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/podworkers/internal/admission"
	"github.com/splitlet/splitlet/services/podworkers/internal/fakeruntime"
	"github.com/splitlet/splitlet/services/podworkers/internal/podworker"
)

type sink struct {
	mu      sync.Mutex
	last    map[types.UID]*bus.PodRuntimeStatus
	running atomic.Int64
}

func newSink() *sink { return &sink{last: map[types.UID]*bus.PodRuntimeStatus{}} }

func (s *sink) Set(st *bus.PodRuntimeStatus) {
	s.mu.Lock()
	old := s.last[st.UID]
	s.last[st.UID] = st
	s.mu.Unlock()
	if !isRunning(old) && isRunning(st) {
		s.running.Add(1)
	}
}

func (s *sink) Forget(uid types.UID) {}

func (s *sink) get(uid types.UID) *bus.PodRuntimeStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last[uid]
}

func isRunning(st *bus.PodRuntimeStatus) bool {
	if st == nil || len(st.ContainerStatuses) == 0 {
		return false
	}
	for _, c := range st.ContainerStatuses {
		if c.State.Running == nil {
			return false
		}
	}
	return true
}

func start(t testing.TB, rt runtime.Runtime, s *sink, alloc string) *Controller {
	return startWith(t, rt, s, alloc, nil)
}

// startWith is start with the configuration changed by mod.
func startWith(t testing.TB, rt runtime.Runtime, s *sink, alloc string, mod func(*Config)) *Controller {
	c, stop := startStoppable(t, rt, s, alloc, mod)
	t.Cleanup(stop)
	return c
}

func startStoppable(t testing.TB, rt runtime.Runtime, s *sink, alloc string, mod func(*Config)) (*Controller, func()) {
	a, err := kube.ParseResourceList(alloc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Runtime: rt, Sink: s, Partitions: 1, Housekeeping: 20 * time.Millisecond,
		Admit:      admission.Chain{admission.Validate(), admission.ResourceFit(func() corev1.ResourceList { return a })},
		WorkerOpts: []podworker.Option{podworker.WithBackOffPeriod(20 * time.Millisecond)},
	}
	if mod != nil {
		mod(&cfg)
	}
	c := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	return c, func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the controller's Run did not return within 10 s of its cancel")
		}
	}
}

func pod(uid string, cpu string) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: "p-" + uid, Namespace: "ns", CreationTimestamp: metav1.Now()},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	if cpu != "" {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
	return p
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.EventuallyTrue(t, 10*time.Second, what, cond)
}

func TestSetSnapshotAddsUpdatesRemoves(t *testing.T) {
	s := newSink()
	rt := fakeruntime.New()
	c := start(t, rt, s, "cpu=4,pods=10")
	c.SetSourcesReady(true)
	a, b := pod("a", ""), pod("b", "")
	c.HandleUpdate("api", bus.OpSet, 0, []corev1.Pod{a, b})
	eventually(t, "both running", func() bool { return isRunning(s.get("a")) && isRunning(s.get("b")) })
	c.HandleUpdate("api", bus.OpSet, 0, []corev1.Pod{a})
	eventually(t, "b torn down", func() bool { st := s.get("b"); return st.Terminated })
	// a SET of another source does not touch api's pods.
	c.HandleUpdate("file", bus.OpSet, 0, nil)
	eventually(t, "b forgotten by housekeeping", func() bool { return len(rt.PodContainers("b")) == 0 })
	if st := s.get("a"); !isRunning(st) {
		t.Fatalf("a disturbed: %+v", st)
	}
}

// slowRemoval is a runtime whose RemovePod waits until release is closed,
// counting the removals under way.
type slowRemoval struct {
	*fakeruntime.Runtime
	inflight, most atomic.Int64
	release        chan struct{}
}

func (r *slowRemoval) RemovePod(ctx context.Context, uid types.UID) error {
	n := r.inflight.Add(1)
	defer r.inflight.Add(-1)
	for m := r.most.Load(); n > m && !r.most.CompareAndSwap(m, n); m = r.most.Load() {
	}
	<-r.release
	return r.Runtime.RemovePod(ctx, uid)
}

// Housekeeping removes the forgotten pods of one round from the runtime
// several at a time, as the kubelet's pod workers stop their sandboxes.
// Housekeeping runs by hand here, so that all six pods are forgotten in
// one round however far apart their workers finish.
func TestForgottenPodsRemovedInParallel(t *testing.T) {
	s := newSink()
	rt := &slowRemoval{Runtime: fakeruntime.New(), release: make(chan struct{})}
	c := startWith(t, rt, s, "cpu=4,pods=20", func(cfg *Config) { cfg.Housekeeping = time.Hour })
	// registered after start, so it runs before the controller is stopped.
	t.Cleanup(func() {
		select {
		case <-rt.release:
		default:
			close(rt.release)
		}
	})
	c.SetSourcesReady(true)
	var pods []corev1.Pod
	for i := range 6 {
		pods = append(pods, pod(fmt.Sprintf("u%d", i), ""))
	}
	c.HandleUpdate("api", bus.OpSet, 0, pods)
	eventually(t, "all running", func() bool {
		for _, p := range pods {
			if !isRunning(s.get(p.UID)) {
				return false
			}
		}
		return true
	})
	c.HandlePodCleanups() // tracks the six workers
	c.HandleUpdate("api", bus.OpSet, 0, nil)
	// the workers drop each worker once it has finished, as a round does;
	// the next round then finds all six forgotten at once.
	held := map[types.UID]podworker.WorkType{}
	eventually(t, "every worker finished", func() bool {
		c.Workers().SyncKnownPodsInto(func(types.UID) bool { return false }, nil, held)
		return len(held) == 0
	})
	round := make(chan struct{})
	go func() { defer close(round); c.HandlePodCleanups() }()
	eventually(t, "removals under way at once", func() bool { return rt.most.Load() >= 2 })
	close(rt.release)
	eventually(t, "the round returned", func() bool {
		select {
		case <-round:
			return true
		default:
			return false
		}
	})
	for _, p := range pods {
		if n := len(rt.PodContainers(p.UID)); n != 0 {
			t.Errorf("pod %s still has %d containers in the runtime", p.UID, n)
		}
	}
	if m := rt.most.Load(); m > removeParallelism {
		t.Fatalf("%d removals at once, more than %d", m, removeParallelism)
	}
}

func TestRejectedPodStaysRejectedAndFreesNothing(t *testing.T) {
	s := newSink()
	c := start(t, fakeruntime.New(), s, "cpu=1,pods=10")
	c.SetSourcesReady(true)
	small, big, next := pod("s", "600m"), pod("big", "2"), pod("n", "600m")
	c.HandleUpdate("api", bus.OpAdd, 0, []corev1.Pod{small, big})
	eventually(t, "small running", func() bool { return isRunning(s.get("s")) })
	eventually(t, "big rejected", func() bool { st := s.get("big"); return st != nil && st.Reason == admission.ReasonOutOfCPU })
	// updates of a rejected pod never start it.
	c.HandleUpdate("api", bus.OpUpdate, 0, []corev1.Pod{big})
	// the admitted pod's requests count: the next one does not fit.
	c.HandleUpdate("api", bus.OpAdd, 0, []corev1.Pod{next})
	eventually(t, "next rejected", func() bool { st := s.get("n"); return st != nil && st.Reason == admission.ReasonOutOfCPU })
	// once small is gone and housekeeping ran, its requests are free again.
	c.HandleUpdate("api", bus.OpRemove, 0, []corev1.Pod{small})
	eventually(t, "small terminated", func() bool { return s.get("s").Terminated })
	again := pod("again", "600m")
	c.HandleUpdate("api", bus.OpAdd, 0, []corev1.Pod{again})
	eventually(t, "again running", func() bool { return isRunning(s.get("again")) })
	if isRunning(s.get("big")) {
		t.Fatal("rejected pod started")
	}
}

func TestRecreatedUIDRunsAgain(t *testing.T) {
	s := newSink()
	rt := fakeruntime.New()
	c := start(t, rt, s, "cpu=4,pods=10")
	c.SetSourcesReady(true)
	p := pod("r", "")
	c.HandleUpdate("api", bus.OpAdd, 0, []corev1.Pod{p})
	eventually(t, "running", func() bool { return isRunning(s.get("r")) })
	c.HandleUpdate("api", bus.OpRemove, 0, []corev1.Pod{p})
	c.HandleUpdate("api", bus.OpAdd, 0, []corev1.Pod{p})
	eventually(t, "running again in a new container", func() bool {
		st := s.get("r")
		return isRunning(st) && rt.StartsOf("c") >= 2
	})
	// kubelet: the container of the instance before counts as a restart.
	if st := s.get("r"); st.ContainerStatuses[0].RestartCount != 1 {
		t.Errorf("restart count %d after the pod was created again, want 1", st.ContainerStatuses[0].RestartCount)
	}
}

func TestLivenessFailureRestartsCurrentContainerOnly(t *testing.T) {
	s := newSink()
	rt := fakeruntime.New()
	c := start(t, rt, s, "cpu=4,pods=10")
	p := pod("l", "")
	one := int64(1)
	p.Spec.TerminationGracePeriodSeconds = &one
	c.HandleUpdate("api", bus.OpAdd, 0, []corev1.Pod{p})
	eventually(t, "running", func() bool { return isRunning(s.get("l")) })
	id := s.get("l").ContainerStatuses[0].ContainerID
	// a failure for another (stale) container ID is ignored.
	c.HandleProbe(&bus.ProbeResult{PodUID: "l", Container: "c", ContainerID: "fake://stale", Probe: bus.ProbeLiveness, Result: bus.ProbeFailure})
	c.HandleProbe(&bus.ProbeResult{PodUID: "l", Container: "c", ContainerID: id, Probe: bus.ProbeReadiness, Result: bus.ProbeFailure})
	c.HandleProbe(&bus.ProbeResult{PodUID: "l", Container: "c", ContainerID: id, Probe: bus.ProbeLiveness, Result: bus.ProbeFailure})
	eventually(t, "restarted", func() bool {
		st := s.get("l")
		return isRunning(st) && st.ContainerStatuses[0].ContainerID != id && st.ContainerStatuses[0].RestartCount == 1
	})
}

// TestStartupFailureKillsPerRestartPolicy: a startup probe that failed
// (past its threshold) kills the container, as a liveness failure does;
// restartPolicy Never leaves it stopped, and the Killing Event says so.
func TestStartupFailureKillsPerRestartPolicy(t *testing.T) {
	s := newSink()
	rt := fakeruntime.New()
	rec := record.NewFakeRecorder(10)
	c := startWith(t, rt, s, "cpu=4,pods=10", func(cfg *Config) { cfg.Recorder = rec })
	one := int64(1)
	always, never := pod("sa", ""), pod("sn", "")
	always.Spec.TerminationGracePeriodSeconds, never.Spec.TerminationGracePeriodSeconds = &one, &one
	never.Spec.RestartPolicy = corev1.RestartPolicyNever
	// the probe's own grace wins over the pod's (kubelet: probe-level
	// terminationGracePeriodSeconds).
	three := int64(3)
	always.Spec.Containers[0].StartupProbe = &corev1.Probe{TerminationGracePeriodSeconds: &three,
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	c.HandleUpdate("api", bus.OpAdd, 0, []corev1.Pod{always, never})
	eventually(t, "running", func() bool { return isRunning(s.get("sa")) && isRunning(s.get("sn")) })
	idA, idN := s.get("sa").ContainerStatuses[0].ContainerID, s.get("sn").ContainerStatuses[0].ContainerID
	c.HandleProbe(&bus.ProbeResult{PodUID: "sa", Container: "c", ContainerID: idA, Probe: bus.ProbeStartup, Result: bus.ProbeFailure})
	c.HandleProbe(&bus.ProbeResult{PodUID: "sn", Container: "c", ContainerID: idN, Probe: bus.ProbeStartup, Result: bus.ProbeFailure})
	eventually(t, "restarted under Always", func() bool {
		st := s.get("sa")
		return isRunning(st) && st.ContainerStatuses[0].ContainerID != idA && st.ContainerStatuses[0].RestartCount == 1
	})
	if g, ok := rt.GraceOf(idA); !ok || g != 3*time.Second {
		t.Errorf("kill of a container whose startup probe sets 3 s of grace: %v (stopped %v)", g, ok)
	}
	if g, ok := rt.GraceOf(idN); ok && g != time.Second {
		t.Errorf("kill with the pod's grace of 1 s: %v", g)
	}
	eventually(t, "stopped under Never", func() bool {
		st := s.get("sn")
		return st != nil && len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Terminated != nil && st.ContainerStatuses[0].RestartCount == 0
	})
	want := map[string]bool{
		"Normal Killing Container c failed startup probe, will be restarted": false,
		"Normal Killing Container c failed startup probe":                    false,
	}
	for len(rec.Events) > 0 {
		ev := <-rec.Events
		if _, ok := want[ev]; ok {
			want[ev] = true
		}
	}
	for ev, seen := range want {
		if !seen {
			t.Errorf("no Event %q", ev)
		}
	}
}

// panicRuntime panics on start: one bad pod must not crash the process.
type panicRuntime struct{ *fakeruntime.Runtime }

func (p panicRuntime) StartContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, attempt int, opts runtime.StartOptions) (runtime.ContainerStatus, error) {
	if pod.Name == "p-boom" {
		panic("boom")
	}
	return p.Runtime.StartContainer(ctx, pod, c, attempt, opts)
}

func TestPanicInOnePodDoesNotStallOthers(t *testing.T) {
	s := newSink()
	c := start(t, panicRuntime{fakeruntime.New()}, s, "cpu=4,pods=10")
	c.HandleUpdate("api", bus.OpAdd, 0, []corev1.Pod{pod("boom", ""), pod("fine", "")})
	eventually(t, "fine running", func() bool { return isRunning(s.get("fine")) })
}

// BenchmarkPodsThroughWorkers: 5000 pods from ADD to running on the sim
// runtime; reports pods/s and heap bytes per pod.
func BenchmarkPodsThroughWorkers(b *testing.B) {
	const n = 5000
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := newSink()
		rt := sim.New()
		goruntime.GC()
		var before goruntime.MemStats
		goruntime.ReadMemStats(&before)
		c, stop := startStoppable(b, rt, s, fmt.Sprintf("cpu=1000,memory=1Ti,pods=%d", n), nil)
		pods := make([]corev1.Pod, n)
		for j := range pods {
			pods[j] = pod(fmt.Sprintf("bench-%d-%d", i, j), "10m")
		}
		b.StartTimer()
		t0 := time.Now()
		for j := 0; j < n; j += 100 {
			c.HandleUpdate("api", bus.OpAdd, 0, pods[j:j+100])
		}
		for s.running.Load() < n {
			time.Sleep(time.Millisecond)
		}
		elapsed := time.Since(t0)
		b.StopTimer()
		goruntime.GC()
		var after goruntime.MemStats
		goruntime.ReadMemStats(&after)
		b.ReportMetric(float64(n)/elapsed.Seconds(), "pods/s")
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "bytes/pod")
		stop()
		_ = rt.Close()
	}
}

// BenchmarkHousekeeping20000: one housekeeping round over 20000 running
// pods on the sim runtime (a round runs every 2 s, so its cost grows with
// the square of the pod count over a case).
func BenchmarkHousekeeping20000(b *testing.B) {
	const n = 20000
	s := newSink()
	rt := sim.New()
	c := startWith(b, rt, s, fmt.Sprintf("cpu=10000,memory=10Ti,pods=%d", n), nil)
	pods := make([]corev1.Pod, n)
	for j := range pods {
		pods[j] = pod(fmt.Sprintf("hk-%d", j), "1m")
	}
	for j := 0; j < n; j += 100 {
		c.HandleUpdate("api", bus.OpAdd, bus.Partition(string(pods[j].UID), 16), pods[j:j+100])
	}
	testenv.EventuallyTrue(b, 2*time.Minute, "every pod running", func() bool { return s.running.Load() == n })
	c.SetSourcesReady(true)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.HandlePodCleanups()
	}
}

// A partition released while housekeeping runs: housekeeping neither kills
// nor removes from the runtime any pod being handed over (no longer desired
// here and its worker gone, it is still no orphan): the next owner adopts
// the running containers and the finished pod's exit.
func TestReleaseDuringHousekeepingKillsAndRemovesNothing(t *testing.T) {
	rt := fakeruntime.New()
	rt.ExitOnStart["done"] = 0
	s := newSink()
	c := start(t, rt, s, "cpu=64,pods=1000")
	c.SetSourcesReady(true)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				c.HandlePodCleanups()
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	for round := 0; round < 40; round++ {
		var pods []corev1.Pod
		for i := 0; i < 4; i++ {
			pods = append(pods, pod(fmt.Sprintf("r%d-%d", round, i), ""))
		}
		done := pod(fmt.Sprintf("r%d-done", round), "")
		done.Spec.RestartPolicy = corev1.RestartPolicyNever
		done.Spec.Containers[0].Name = "done"
		pods = append(pods, done)
		c.HandleUpdate("api", bus.OpAdd, 0, pods)
		eventually(t, "pods running, the finished one terminated", func() bool {
			for _, p := range pods[:len(pods)-1] {
				if !isRunning(s.get(p.UID)) {
					return false
				}
			}
			st := s.get(done.UID)
			return st != nil && st.Terminated
		})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := c.ReleasePartition(ctx, 0)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			cs := rt.PodContainers(p.UID)
			switch {
			case len(cs) != 1:
				t.Fatalf("round %d: pod %s: the runtime holds %+v after the release", round, p.Name, cs)
			case p.UID != done.UID && cs[0].State != runtime.StateRunning:
				t.Fatalf("round %d: pod %s: container stopped by the release: %+v", round, p.Name, cs[0])
			case p.UID == done.UID && cs[0].ExitCode != 0:
				t.Fatalf("round %d: finished pod: %+v", round, cs[0])
			}
		}
	}
}

// A pod source that starts again (podconfig restarted) sends ADDs for pods
// the pod workers know: a pod that finished is not run again, and a
// terminating pod finishes and stays finished (only a pod removed and then
// added again is a new instance, TestRecreatedUIDRunsAgain).
func TestReAddedPodIsNotRestarted(t *testing.T) {
	s := newSink()
	rt := fakeruntime.New()
	rt.ExitOnStart["c"] = 0
	c := start(t, rt, s, "cpu=4,pods=10")
	c.SetSourcesReady(true)
	done := pod("done", "")
	done.Spec.RestartPolicy = corev1.RestartPolicyNever
	c.HandleUpdate("api", bus.OpAdd, 0, []corev1.Pod{done})
	eventually(t, "the pod finished", func() bool { st := s.get("done"); return st != nil && st.Terminated })

	long := pod("long", "")
	long.Spec.Containers[0].Name = "l"
	c.HandleUpdate("api", bus.OpAdd, 0, []corev1.Pod{long})
	eventually(t, "the long pod running", func() bool { return isRunning(s.get("long")) })
	deleting := long.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	c.HandleUpdate("api", bus.OpDelete, 0, []corev1.Pod{*deleting})

	// podconfig restarted: every pod of the API server again, as ADDs.
	c.HandleUpdate("api", bus.OpAdd, 0, []corev1.Pod{done, *deleting})
	eventually(t, "the deleted pod terminated", func() bool { st := s.get("long"); return st != nil && st.Terminated })
	// housekeeping rounds (20 ms) would restart a pod marked recreated.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		if n := rt.StartsOf("c"); n != 1 {
			t.Fatalf("the finished pod started %d times", n)
		}
		if n := rt.StartsOf("l"); n != 1 {
			t.Fatalf("the deleted pod started %d times", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A pod worker that starts again under disk pressure admits again the pod
// whose containers the runtime holds, and leaves them running; a pod new
// to the node is refused with the kubelet's reason.
func TestPressureReadmitsStartedPods(t *testing.T) {
	rt := fakeruntime.New()
	first, stop := startStoppable(t, rt, newSink(), "cpu=4,pods=10", nil)
	first.SetSourcesReady(true)
	a := pod("a", "")
	first.HandleUpdate("api", bus.OpSet, 0, []corev1.Pod{a})
	eventually(t, "a running", func() bool {
		return len(rt.PodContainers("a")) == 1 && rt.PodContainers("a")[0].State == runtime.StateRunning
	})
	id := rt.PodContainers("a")[0].ID
	stop()

	s := newSink()
	disk := func() []corev1.NodeConditionType { return []corev1.NodeConditionType{corev1.NodeDiskPressure} }
	second := startWith(t, rt, s, "cpu=4,pods=10", func(cfg *Config) {
		cfg.Admit = append(cfg.Admit, admission.Pressure(disk))
	})
	second.SetSourcesReady(true)
	b := pod("b", "")
	second.HandleUpdate("api", bus.OpSet, 0, []corev1.Pod{a, b})
	eventually(t, "b refused", func() bool { st := s.get("b"); return st != nil && st.Terminated })
	if st := s.get("b"); st.Reason != admission.ReasonEvicted || st.Message != "Pod was rejected: The node had condition: [DiskPressure]. " {
		t.Errorf("b: %q %q, want the kubelet's rejection under DiskPressure", st.Reason, st.Message)
	}
	eventually(t, "a reported running again", func() bool { return isRunning(s.get("a")) })
	if cs := rt.PodContainers("a"); len(cs) != 1 || cs[0].ID != id {
		t.Fatalf("a's containers after the restart: %+v, want %s alone, untouched", cs, id)
	}
}

// A pod of a SET is compared field by field unless it is the same API
// object (resource version) with the same annotations podconfig added.
func TestChangedSkipsTheSameObject(t *testing.T) {
	base := func(rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1", ResourceVersion: rv,
			Annotations: map[string]string{"kubernetes.io/config.seen": "t1", "kubernetes.io/config.source": "api"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	}
	now := metav1.Now()
	cases := []struct {
		name   string
		mutate func(p *corev1.Pod)
		rv     string
		want   bool
	}{
		{"same object", func(*corev1.Pod) {}, "7", false},
		{"same object, other annotations", func(p *corev1.Pod) { p.Annotations["kubernetes.io/config.seen"] = "t2" }, "7", true},
		{"new version, same fields", func(*corev1.Pod) {}, "8", false},
		{"new version, deleted", func(p *corev1.Pod) { p.DeletionTimestamp = &now }, "8", true},
		{"new version, image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "pause" }, "8", true},
		{"new version, labels", func(p *corev1.Pod) { p.Labels = map[string]string{"a": "b"} }, "8", true},
		{"no version (a static pod), image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "pause" }, "", true},
		{"a static pod's own version, image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "pause" }, "static", true},
		{"no version, same fields", func(*corev1.Pod) {}, "", false},
	}
	for _, c := range cases {
		oldRV, rv := "7", c.rv
		if c.rv == "" || c.rv == "static" {
			oldRV = ""
		}
		old, p := base(oldRV), base(rv)
		if c.rv == "static" {
			// a manifest that carries a resource version of its own.
			old.ResourceVersion, p.ResourceVersion = "1", "1"
			old.Annotations["kubernetes.io/config.source"], p.Annotations["kubernetes.io/config.source"] = "file", "file"
		}
		c.mutate(p)
		if got := changed(old, p); got != c.want {
			t.Errorf("%s: changed %v, want %v", c.name, got, c.want)
		}
	}
}

// A status-only change (RECONCILE) and an unchanged pod of a SET reach the
// pod's worker as its newest copy, without a restart: one copy of the pod
// is held, not the controller's and an older one of the worker's.
func TestStatusOnlyChangesReachTheWorker(t *testing.T) {
	s := newSink()
	rt := fakeruntime.New()
	c := start(t, rt, s, "cpu=4,pods=10")
	c.SetSourcesReady(true)
	a := pod("a", "")
	a.ResourceVersion = "1"
	c.HandleUpdate("api", bus.OpAdd, 0, []corev1.Pod{a})
	eventually(t, "a running", func() bool { return isRunning(s.get("a")) })
	started := s.get("a").ContainerStatuses[0].ContainerID

	held := func() (*corev1.Pod, *corev1.Pod) {
		w, _ := c.workers.Pod("a")
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.pods["a"].pod, w
	}
	running := a
	running.ResourceVersion, running.Status.Phase = "2", corev1.PodRunning
	c.HandleUpdate("api", bus.OpReconcile, 0, []corev1.Pod{running})
	if ctl, w := held(); ctl != w || w.Status.Phase != corev1.PodRunning {
		t.Fatalf("after a RECONCILE the controller holds %p (%s) and the worker %p (%s), want one copy", ctl, ctl.Status.Phase, w, w.Status.Phase)
	}
	again := running
	again.ResourceVersion = "3"
	c.HandleUpdate("api", bus.OpSet, 0, []corev1.Pod{again})
	if ctl, w := held(); ctl != w || w.ResourceVersion != "3" {
		t.Fatalf("after a SET of the unchanged pod the controller holds %p (rv %s) and the worker %p (rv %s), want one copy", ctl, ctl.ResourceVersion, w, w.ResourceVersion)
	}
	if st := s.get("a"); !isRunning(st) || st.ContainerStatuses[0].ContainerID != started {
		t.Fatalf("the container changed: %+v", st.ContainerStatuses)
	}
}
