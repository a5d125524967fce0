package statusmanager

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/splitlet/splitlet/libs/bus"
)

// Pure logic of the cache: a fake clientset and an informer that is never
// started (no API server behaviour is under test here).
func newManager(t *testing.T) *Manager {
	t.Helper()
	cs := fake.NewClientset()
	inf := informers.NewSharedInformerFactory(cs, 0).Core().V1().Pods().Informer()
	m, err := New(cs, inf, zap.NewNop(), Options{Partitions: 4, CoalesceDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.queue.ShutDown)
	return m
}

func specPod(uid types.UID, policy corev1.RestartPolicy) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: string(uid), Namespace: "ns", UID: uid},
		Spec:       corev1.PodSpec{RestartPolicy: policy, Containers: []corev1.Container{{Name: "c"}}},
	}
}

func rs(uid types.UID, st corev1.ContainerState) *bus.PodRuntimeStatus {
	return &bus.PodRuntimeStatus{UID: uid, Namespace: "ns", Name: string(uid),
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c", ContainerID: "sim://1", State: st}}}
}

var (
	runningState    = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
	terminatedState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
)

func TestVersions(t *testing.T) {
	m := newManager(t)
	p := specPod("a", corev1.RestartPolicyNever)
	m.PodUpdate(bus.OpAdd, "api", bus.Partition("a", 4), []corev1.Pod{p})
	m.RuntimeStatus(rs("a", runningState))
	_, v1, ok := m.Status("a")
	if !ok || v1 != 1 {
		t.Fatalf("first status: version %d ok %v", v1, ok)
	}
	// The same again: no new version.
	m.RuntimeStatus(rs("a", runningState))
	if _, v, _ := m.Status("a"); v != v1 {
		t.Fatalf("equal status got version %d", v)
	}
	m.RuntimeStatus(rs("a", terminatedState))
	s, v2, _ := m.Status("a")
	if v2 != 2 || s.Phase != corev1.PodSucceeded {
		t.Fatalf("version %d phase %s", v2, s.Phase)
	}
	// Illegal under Never: refused, the cache keeps the terminated state.
	m.RuntimeStatus(rs("a", runningState))
	s, v3, _ := m.Status("a")
	if v3 != v2 || s.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("illegal transition taken: version %d state %+v", v3, s.ContainerStatuses[0].State)
	}
}

func TestUnknownPodHeldUntilSpec(t *testing.T) {
	m := newManager(t)
	m.RuntimeStatus(rs("b", runningState))
	if _, _, ok := m.Status("b"); ok {
		t.Fatal("status generated without a spec")
	}
	m.PodUpdate(bus.OpAdd, "file", bus.Partition("b", 4), []corev1.Pod{specPod("b", corev1.RestartPolicyAlways)})
	if s, _, ok := m.Status("b"); !ok || s.Phase != corev1.PodRunning {
		t.Fatalf("held status not generated once the spec came: %v %s", ok, s.Phase)
	}
}

func TestSetAndRemoveForget(t *testing.T) {
	m := newManager(t)
	var uids []types.UID
	for _, u := range []types.UID{"p1", "p2", "p3", "p4", "p5", "p6"} {
		m.PodUpdate(bus.OpAdd, "api", bus.Partition(string(u), 4), []corev1.Pod{specPod(u, corev1.RestartPolicyAlways)})
		m.RuntimeStatus(rs(u, runningState))
		uids = append(uids, u)
	}
	// An empty SET for p1's partition forgets every api pod of it.
	part := bus.Partition("p1", 4)
	m.PodUpdate(bus.OpSet, "api", part, nil)
	for _, u := range uids {
		_, _, ok := m.Status(u)
		if inPart := bus.Partition(string(u), 4) == part; ok == inPart {
			t.Errorf("%s (partition %d, SET for %d): kept %v", u, bus.Partition(string(u), 4), part, ok)
		}
	}
	// A SET of another source does not touch api pods.
	m.PodUpdate(bus.OpSet, "file", bus.Partition("p2", 4), nil)
	m.PodUpdate(bus.OpRemove, "api", 0, []corev1.Pod{specPod("p2", corev1.RestartPolicyAlways)})
	if _, _, ok := m.Status("p2"); ok && bus.Partition("p2", 4) != part {
		t.Error("REMOVE did not forget p2")
	}
}

func TestProbesDecideReadiness(t *testing.T) {
	m := newManager(t)
	p := specPod("r", corev1.RestartPolicyAlways)
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{}
	m.PodUpdate(bus.OpAdd, "api", 0, []corev1.Pod{p})
	status := rs("r", runningState)
	status.ContainerStatuses[0].Ready = true // ignored
	m.RuntimeStatus(status)
	if s, _, _ := m.Status("r"); s.ContainerStatuses[0].Ready {
		t.Fatal("ready from the runtime, not the probe")
	}
	m.ProbeResult(&bus.ProbeResult{PodUID: "r", Container: "c", ContainerID: "sim://1", Probe: bus.ProbeReadiness, Result: bus.ProbeSuccess})
	if s, _, _ := m.Status("r"); !s.ContainerStatuses[0].Ready {
		t.Fatal("not ready after a successful readiness probe")
	}
	// A new container instance forgets the old instance's result.
	status = rs("r", runningState)
	status.ContainerStatuses[0].ContainerID = "sim://2"
	m.RuntimeStatus(status)
	if s, _, _ := m.Status("r"); s.ContainerStatuses[0].Ready {
		t.Fatal("new container ready from the old one's probe")
	}
}

func TestFreshestAndCanBeDeleted(t *testing.T) {
	inf := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u", ResourceVersion: "10"}}
	w := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u", ResourceVersion: "12"}}
	if freshest(inf, w) != w || freshest(w, inf) != w {
		t.Fatal("newer copy not chosen")
	}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "x", ResourceVersion: "99"}}
	if freshest(inf, other) != inf {
		t.Fatal("a copy of another pod chosen")
	}
	now := metav1.Now()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.PodStatus{Phase: corev1.PodFailed}}
	if !canBeDeleted(p, &versioned{finished: true}) {
		t.Fatal("finished, terminal, deleted pod not deletable")
	}
	if canBeDeleted(p, &versioned{finished: false}) {
		t.Fatal("deletable before the worker finished")
	}
	p.Status.Phase = corev1.PodRunning
	if canBeDeleted(p, &versioned{finished: true}) {
		t.Fatal("deletable with a non-terminal API phase")
	}
	p.Status.Phase = corev1.PodFailed
	p.Annotations = map[string]string{AnnotationMirror: "h"}
	if canBeDeleted(p, &versioned{finished: true}) {
		t.Fatal("mirror pod deletable")
	}
}

// A probe result may overtake the runtime status that introduces its
// container instance (different streams): it is kept, even across an older
// runtime status.
func TestProbeOvertakingStatusKept(t *testing.T) {
	m := newManager(t)
	p := specPod("o", corev1.RestartPolicyAlways)
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{}
	m.PodUpdate(bus.OpAdd, "api", 0, []corev1.Pod{p})
	m.RuntimeStatus(rs("o", runningState)) // instance sim://1
	m.ProbeResult(&bus.ProbeResult{PodUID: "o", Container: "c", ContainerID: "sim://2", Probe: bus.ProbeReadiness, Result: bus.ProbeSuccess})
	m.RuntimeStatus(rs("o", terminatedState)) // still sim://1
	next := rs("o", runningState)
	next.ContainerStatuses[0].ContainerID = "sim://2"
	m.RuntimeStatus(next)
	if s, _, _ := m.Status("o"); !s.ContainerStatuses[0].Ready {
		t.Fatal("the early readiness result of sim://2 was lost")
	}
}

// Runtime statuses are ordered per pod: a pod's status that another pod's
// newer one overtook (a redelivery after a NATS server was lost) is taken;
// one older than the pod's own last, or the same again, is not; another
// source (a replica) has its own sequence.
func TestRuntimeStatusOrderedPerPod(t *testing.T) {
	m := newManager(t)
	for _, uid := range []types.UID{"a", "b"} {
		m.PodUpdate(bus.OpAdd, "api", bus.Partition(string(uid), 4), []corev1.Pod{specPod(uid, corev1.RestartPolicyAlways)})
	}
	if !m.RuntimeStatusFrom("podworkers-r1", 12, rs("b", runningState)) {
		t.Fatal("first status of b not taken")
	}
	if !m.RuntimeStatusFrom("podworkers-r1", 10, rs("a", runningState)) {
		t.Fatal("a's status, overtaken by b's newer one, not taken")
	}
	if s, _, ok := m.Status("a"); !ok || s.Phase != corev1.PodRunning {
		t.Fatalf("a: %v %s", ok, s.Phase)
	}
	pending := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	for _, seq := range []uint64{9, 10} {
		if m.RuntimeStatusFrom("podworkers-r1", seq, rs("a", pending)) {
			t.Errorf("a's status %d taken after its status 10", seq)
		}
	}
	if s, _, _ := m.Status("a"); s.ContainerStatuses[0].State.Running == nil {
		t.Fatalf("a's status went back: %+v", s.ContainerStatuses[0].State)
	}
	if !m.RuntimeStatusFrom("podworkers-r2", 5, rs("a", runningState)) {
		t.Fatal("another source's status not taken")
	}
}

// The pod becoming Ready and the pod finishing are queued at once; other
// changes wait the coalescing delay (an hour here).
func TestReadyAndFinishedSkipTheCoalescingWait(t *testing.T) {
	m := newManager(t)
	p := specPod("a", corev1.RestartPolicyAlways)
	m.PodUpdate(bus.OpAdd, "api", bus.Partition("a", 4), []corev1.Pod{p})
	due := func() int {
		t.Helper()
		n := m.queue.Len()
		for range n {
			uid, _ := m.queue.Get()
			m.queue.Done(uid)
		}
		return n
	}
	m.RuntimeStatus(rs("a", corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}))
	if n := due(); n != 0 {
		t.Fatalf("a pod still creating its container was queued at once (%d due)", n)
	}
	m.RuntimeStatus(rs("a", runningState))
	if st, _, _ := m.Status("a"); !isReady(&st) {
		t.Fatalf("a running pod without probes is not Ready: %+v", st.Conditions)
	}
	if n := due(); n != 1 {
		t.Fatalf("the pod becoming Ready was not queued at once (%d due)", n)
	}
	// a restart count going up while Ready stays: it waits.
	restarted := rs("a", runningState)
	restarted.ContainerStatuses[0].RestartCount = 1
	_, before, _ := m.Status("a")
	m.RuntimeStatus(restarted)
	if _, v, _ := m.Status("a"); v != before+1 {
		t.Fatalf("the restart made no new version (%d after %d)", v, before)
	}
	if n := due(); n != 0 {
		t.Fatalf("a change of a Ready pod was queued at once (%d due)", n)
	}
	done := rs("a", terminatedState)
	done.Terminated = true
	m.RuntimeStatus(done)
	if n := due(); n != 1 {
		t.Fatalf("the pod finishing was not queued at once (%d due)", n)
	}
}

// syncBatch compares without the manager's lock: a status that arrives while
// a batch compares is taken at once. A pair found different is re-sent; a
// pair whose status was replaced meanwhile is neither matched nor re-sent
// on the strength of the stale comparison.
func TestSyncBatchComparesWithoutTheLock(t *testing.T) {
	m := newManager(t)
	for _, uid := range []types.UID{"same", "differs", "replaced"} {
		p := specPod(uid, corev1.RestartPolicyAlways)
		m.PodUpdate(bus.OpAdd, "api", bus.Partition(string(uid), 4), []corev1.Pod{p})
		m.RuntimeStatus(rs(uid, runningState))
		st, v, ok := m.Status(uid)
		if !ok {
			t.Fatalf("%s: no status", uid)
		}
		m.mu.Lock()
		m.apiVersions[uid] = v // as if written
		m.mu.Unlock()
		api := p.DeepCopy()
		if uid == "same" {
			api.Status = st // the API shows the cached status; the others show none
		}
		if err := m.indexer.Add(api); err != nil {
			t.Fatal(err)
		}
	}
	for n := m.queue.Len(); n > 0; n-- {
		uid, _ := m.queue.Get()
		m.queue.Done(uid)
	}

	_, before, _ := m.Status("replaced")
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	m.agrees = func(api *corev1.Pod, st *versioned) bool {
		once.Do(func() { close(entered); <-release })
		return agreesByAgent(api, st)
	}
	batchDone := make(chan struct{})
	go func() { defer close(batchDone); m.syncBatch() }()
	deadline := time.After(10 * time.Second)
	select {
	case <-entered:
	case <-deadline:
		t.Fatal("syncBatch compared nothing")
	}
	// nothing here may take the lock itself: the status's arrival is the probe.
	took := make(chan struct{})
	go func() {
		defer close(took)
		restarted := rs("replaced", runningState)
		restarted.ContainerStatuses[0].RestartCount = 1
		m.RuntimeStatus(restarted)
	}()
	select {
	case <-took:
	case <-deadline:
		close(release)
		t.Fatal("a runtime status waited for the batch's comparisons")
	}
	close(release)
	select {
	case <-batchDone:
	case <-time.After(10 * time.Second):
		t.Fatal("syncBatch did not finish")
	}

	if _, after, _ := m.Status("replaced"); after != before+1 {
		t.Fatalf("the status arriving during the batch made no new version (%d after %d)", after, before)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.matched["same"]; !ok {
		t.Error("the agreeing pair was not recorded as matched")
	}
	if _, ok := m.matched["differs"]; ok {
		t.Error("the differing pair was recorded as matched")
	}
	if _, ok := m.apiVersions["differs"]; ok {
		t.Error("the differing pod still counts as written")
	}
	if _, ok := m.matched["replaced"]; ok {
		t.Error("a pair whose status was replaced during the batch was recorded as matched")
	}
	if _, ok := m.apiVersions["replaced"]; !ok {
		t.Error("the stale comparison of a replaced status reset its written version")
	}
	if n := m.queue.Len(); n != 1 {
		t.Errorf("%d pods queued; want the differing one alone", n)
	}
}
