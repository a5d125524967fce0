package podworker

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/testenv"
)

// call is one invocation of the fake handler.
type call struct {
	kind  WorkType
	t     UpdateType
	uid   types.UID
	grace int64
	pod   *corev1.Pod
	kill  *KillOptions
}

// fakeHandler records calls; a sync may block until released or cancelled.
type fakeHandler struct {
	mu       sync.Mutex
	calls    []call
	block    map[types.UID]chan struct{} // SyncPod waits on it (or ctx)
	started  chan call
	terminal map[types.UID]bool
	failOnce map[WorkType]bool
}

func newFake() *fakeHandler {
	return &fakeHandler{block: map[types.UID]chan struct{}{}, started: make(chan call, 100), terminal: map[types.UID]bool{}, failOnce: map[WorkType]bool{}}
}

func (f *fakeHandler) record(c call) error {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	fail := f.failOnce[c.kind]
	f.failOnce[c.kind] = false
	f.mu.Unlock()
	select {
	case f.started <- c:
	default:
	}
	if fail {
		return fmt.Errorf("injected failure")
	}
	return nil
}

func (f *fakeHandler) SyncPod(ctx context.Context, t UpdateType, pod *corev1.Pod) (SyncResult, error) {
	err := f.record(call{kind: SyncPodWork, t: t, uid: pod.UID, pod: pod})
	f.mu.Lock()
	ch := f.block[pod.UID]
	term := f.terminal[pod.UID]
	f.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return SyncResult{}, ctx.Err()
		}
	}
	return SyncResult{Terminal: term}, err
}

func (f *fakeHandler) SyncTerminatingPod(ctx context.Context, pod *corev1.Pod, grace int64, kill *KillOptions) error {
	return f.record(call{kind: TerminatingPodWork, uid: pod.UID, grace: grace, pod: pod, kill: kill})
}

func (f *fakeHandler) SyncTerminatedPod(ctx context.Context, pod *corev1.Pod) error {
	return f.record(call{kind: TerminatedPodWork, uid: pod.UID, pod: pod})
}

func (f *fakeHandler) callsOf(uid types.UID) []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []call
	for _, c := range f.calls {
		if c.uid == uid {
			out = append(out, c)
		}
	}
	return out
}

func newPod(uid, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: name, Namespace: "ns"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
}

func deleted(p *corev1.Pod, grace int64) *corev1.Pod {
	p = p.DeepCopy()
	now := metav1.Now()
	p.DeletionTimestamp = &now
	p.DeletionGracePeriodSeconds = &grace
	return p
}

func i64(v int64) *int64 { return &v }

func start(t *testing.T, h SyncHandler, opts ...Option) *Workers {
	t.Helper()
	w := New(h, opts...)
	go w.Run()
	t.Cleanup(w.Stop)
	return w
}

// receive waits up to 10 s for a value from ch (or its close), failing t
// with what it waited for.
func receive[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.EventuallyTrue(t, 10*time.Second, what, cond)
}

func kinds(cs []call) []WorkType {
	out := make([]WorkType, len(cs))
	for i, c := range cs {
		out[i] = c.kind
	}
	return out
}

func TestLifecycleThroughTermination(t *testing.T) {
	f := newFake()
	w := start(t, f)
	p := newPod("u1", "a")
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: p})
	eventually(t, "first sync", func() bool { return len(f.callsOf("u1")) == 1 })
	if !w.CouldHaveRunningContainers("u1") || w.IsPodTerminationRequested("u1") {
		t.Fatal("a syncing pod may run containers and is not terminating")
	}
	w.UpdatePod(UpdateOptions{Type: UpdateUpdate, Pod: deleted(p, 7)})
	eventually(t, "terminated", func() bool { return w.IsPodKnownTerminated("u1") && len(f.callsOf("u1")) >= 3 })
	cs := f.callsOf("u1")
	want := []WorkType{SyncPodWork, TerminatingPodWork, TerminatedPodWork}
	if fmt.Sprint(kinds(cs)) != fmt.Sprint(want) {
		t.Fatalf("calls %v, want %v", kinds(cs), want)
	}
	if cs[1].grace != 7 {
		t.Fatalf("grace %d, want the deletion grace 7", cs[1].grace)
	}
	eventually(t, "content removable", func() bool { return w.ShouldPodContentBeRemoved("u1") })
	if w.CouldHaveRunningContainers("u1") || !w.ShouldPodRuntimeBeRemoved("u1") {
		t.Fatal("a terminated pod has no running containers")
	}
	// a finished pod ignores updates until housekeeping forgets it.
	w.UpdatePod(UpdateOptions{Type: UpdateUpdate, Pod: p})
	w.UpdatePod(UpdateOptions{Type: UpdateSync, Pod: p})
	states := w.SyncKnownPods([]*corev1.Pod{p})
	if states["u1"] != TerminatedPodWork {
		t.Fatalf("state %v, want terminated (still desired, kept)", states["u1"])
	}
	if n := len(f.callsOf("u1")); n != 3 {
		t.Fatalf("%d calls after finish, want 3", n)
	}
	states = w.SyncKnownPods(nil)
	if _, ok := states["u1"]; ok {
		t.Fatal("a finished, undesired worker must be forgotten")
	}
	if !w.ShouldPodContentBeRemoved("u1") || w.CouldHaveRunningContainers("u1") {
		t.Fatal("after SyncKnownPods an unknown pod is gone")
	}
}

func TestUnknownPodBeforeFirstHousekeeping(t *testing.T) {
	w := start(t, newFake())
	if !w.CouldHaveRunningContainers("x") || w.ShouldPodRuntimeBeRemoved("x") || w.ShouldPodContentBeRemoved("x") || w.ShouldPodContainersBeTerminating("x") {
		t.Fatal("before the first SyncKnownPods an unknown pod may still run")
	}
	w.SyncKnownPods(nil)
	if w.CouldHaveRunningContainers("x") || !w.ShouldPodRuntimeBeRemoved("x") || !w.ShouldPodContainersBeTerminating("x") {
		t.Fatal("after the first SyncKnownPods an unknown pod cannot run")
	}
}

// A kill pending behind a running sync is never replaced by a later update.
func TestKillIsNeverOverwritten(t *testing.T) {
	f := newFake()
	release := make(chan struct{})
	f.block["u1"] = release
	w := start(t, f)
	p := newPod("u1", "a")
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: p})
	receive(t, f.started, "the first sync to start")
	done := make(chan struct{})
	w.UpdatePod(UpdateOptions{Type: UpdateKill, Pod: p, Kill: &KillOptions{CompletedCh: done, GracePeriodOverride: i64(3), Phase: corev1.PodFailed, Reason: "Evicted"}})
	// a plain update arriving after the kill
	w.UpdatePod(UpdateOptions{Type: UpdateUpdate, Pod: p})
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("kill never completed")
	}
	cs := f.callsOf("u1")
	if len(cs) < 2 || cs[1].kind != TerminatingPodWork || cs[1].grace != 3 {
		t.Fatalf("calls %+v: want terminating with grace 3 after the sync", cs)
	}
	if cs[1].kill == nil || cs[1].kill.Reason != "Evicted" {
		t.Fatalf("the kill's final status was lost: %+v", cs[1].kill)
	}
	for _, c := range cs[1:] {
		if c.kind == SyncPodWork {
			t.Fatal("a sync ran after the kill")
		}
	}
	close(release)
}

// Termination cancels the sync in flight.
func TestTerminationCancelsSync(t *testing.T) {
	f := newFake()
	f.block["u1"] = make(chan struct{}) // never released: only cancellation ends it
	w := start(t, f)
	p := newPod("u1", "a")
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: p})
	receive(t, f.started, "the first sync to start")
	w.UpdatePod(UpdateOptions{Type: UpdateUpdate, Pod: deleted(p, 30)})
	eventually(t, "terminated", func() bool { return w.IsPodKnownTerminated("u1") })
}

// The grace period only shrinks; a shorter one cancels the teardown in flight.
func TestGracePeriodOnlyShrinks(t *testing.T) {
	cases := []struct {
		name    string
		current int64
		spec    *int64
		del     *int64
		kill    *int64
		want    int64
		short   bool
	}{
		{"spec", 0, i64(20), nil, nil, 20, false},
		{"default", 0, nil, nil, nil, DefaultGracePeriod, false},
		{"deletion wins over spec", 0, i64(20), i64(5), nil, 5, false},
		{"kill shorter", 0, i64(20), i64(5), i64(2), 2, false},
		{"kill longer ignored", 10, i64(20), nil, i64(15), 10, false},
		{"shrink from current", 10, i64(20), i64(4), nil, 4, true},
		{"never below one", 0, i64(0), nil, nil, 1, false},
		{"zero deletion grace", 0, i64(30), i64(0), nil, 1, false},
	}
	for _, c := range cases {
		p := newPod("u", "a")
		p.Spec.TerminationGracePeriodSeconds = c.spec
		p.DeletionGracePeriodSeconds = c.del
		var k *KillOptions
		if c.kill != nil {
			k = &KillOptions{GracePeriodOverride: c.kill}
		}
		got, short := effectiveGrace(c.current, p, k)
		if got != c.want || short != c.short {
			t.Errorf("%s: got %d shortened %v, want %d %v", c.name, got, short, c.want, c.short)
		}
	}
}

// blockingTerminate holds SyncTerminatingPod until cancelled or released.
type blockingTerminate struct {
	*fakeHandler
	release chan struct{}
}

func (b *blockingTerminate) SyncTerminatingPod(ctx context.Context, pod *corev1.Pod, grace int64, kill *KillOptions) error {
	_ = b.fakeHandler.SyncTerminatingPod(ctx, pod, grace, kill)
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestShorterGraceRestartsTermination(t *testing.T) {
	f := newFake()
	b := &blockingTerminate{fakeHandler: f, release: make(chan struct{})}
	w := start(t, b)
	p := newPod("u1", "a")
	p.Spec.TerminationGracePeriodSeconds = i64(30)
	w.UpdatePod(UpdateOptions{Type: UpdateKill, Pod: p})
	eventually(t, "terminating with 30", func() bool {
		cs := f.callsOf("u1")
		return len(cs) == 1 && cs[0].grace == 30
	})
	w.UpdatePod(UpdateOptions{Type: UpdateUpdate, Pod: deleted(p, 5)})
	eventually(t, "terminating again with 5", func() bool {
		cs := f.callsOf("u1")
		return len(cs) == 2 && cs[1].grace == 5
	})
	// a longer one later does not lengthen it
	w.UpdatePod(UpdateOptions{Type: UpdateKill, Pod: p, Kill: &KillOptions{GracePeriodOverride: i64(20)}})
	close(b.release)
	eventually(t, "terminated", func() bool { return w.IsPodKnownTerminated("u1") })
	for _, c := range f.callsOf("u1")[1:] {
		if c.kind == TerminatingPodWork && c.grace != 5 {
			t.Fatalf("grace grew to %d", c.grace)
		}
	}
}

// A Create for a UID that is terminating restarts it once housekeeping runs.
func TestRecreateAfterTerminate(t *testing.T) {
	f := newFake()
	w := start(t, f)
	p := newPod("u1", "a")
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: p})
	w.UpdatePod(UpdateOptions{Type: UpdateKill, Pod: p})
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: p})
	eventually(t, "terminated", func() bool {
		return len(f.callsOf("u1")) > 0 && f.callsOf("u1")[len(f.callsOf("u1"))-1].kind == TerminatedPodWork
	})
	eventually(t, "recreated", func() bool {
		return w.SyncKnownPods([]*corev1.Pod{p})["u1"] == TerminatedAndRecreated
	})
	if w.IsPodTerminationRequested("u1") {
		t.Fatal("the recreated UID must start clean")
	}
	n := len(f.callsOf("u1"))
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: p})
	eventually(t, "synced again", func() bool {
		cs := f.callsOf("u1")
		return len(cs) > n && cs[n].kind == SyncPodWork
	})
}

// A pod that reaches a terminal phase is torn down; failures retry.
func TestTerminalAndRetry(t *testing.T) {
	f := newFake()
	f.terminal["u1"] = true
	f.failOnce[TerminatingPodWork] = true
	w := start(t, f, WithBackOffPeriod(10*time.Millisecond))
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: newPod("u1", "a")})
	eventually(t, "terminated after a retry", func() bool { return w.IsPodKnownTerminated("u1") })
	want := []WorkType{SyncPodWork, TerminatingPodWork, TerminatingPodWork}
	if got := kinds(f.callsOf("u1")); fmt.Sprint(got[:3]) != fmt.Sprint(want) {
		t.Fatalf("calls %v, want prefix %v", got, want)
	}
}

// Healthy pods are resynced on the resync interval; one slow pod never
// stalls another.
func TestResyncAndIndependence(t *testing.T) {
	f := newFake()
	f.block["slow"] = make(chan struct{})
	w := start(t, f, WithResyncInterval(20*time.Millisecond))
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: newPod("slow", "s")})
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: newPod("u1", "a")})
	eventually(t, "resyncs", func() bool { return len(f.callsOf("u1")) >= 3 })
	for _, c := range f.callsOf("u1")[1:] {
		if c.t != UpdateSync {
			t.Fatalf("resync with type %v", c.t)
		}
	}
	close(f.block["slow"])
}

func TestTerminalPodOnFirstSightIsNotStarted(t *testing.T) {
	f := newFake()
	w := start(t, f)
	p := newPod("u1", "a")
	p.Status.Phase = corev1.PodSucceeded
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: p})
	eventually(t, "terminated", func() bool { return w.IsPodKnownTerminated("u1") })
	for _, c := range f.callsOf("u1") {
		if c.kind == SyncPodWork {
			t.Fatal("a terminal pod was started")
		}
	}
}

func TestMirrorPodTerminatingByFullName(t *testing.T) {
	f := newFake()
	b := &blockingTerminate{fakeHandler: f, release: make(chan struct{})}
	w := start(t, b)
	p := newPod("u1", "static")
	w.UpdatePod(UpdateOptions{Type: UpdateKill, Pod: p})
	eventually(t, "terminating", func() bool { return w.IsPodForMirrorPodTerminatingByFullName("static_ns") })
	close(b.release)
	eventually(t, "done", func() bool { return !w.IsPodForMirrorPodTerminatingByFullName("static_ns") })
}

func TestKillUnknownAfterStopClosesChannel(t *testing.T) {
	w := New(newFake())
	w.Stop()
	done := make(chan struct{})
	w.UpdatePod(UpdateOptions{Type: UpdateKill, Pod: newPod("u", "a"), Kill: &KillOptions{CompletedCh: done}})
	receive(t, done, "the kill's CompletedCh to close")
}

// Many pods updated concurrently: every pod's worker ends up having synced
// its newest version (kubelet: TestUpdatePodParallel).
func TestUpdatePodParallel(t *testing.T) {
	f := newFake()
	w := start(t, f)
	const pods, updates = 50, 20
	var wg sync.WaitGroup
	for i := 0; i < pods; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < updates; j++ {
				p := newPod(fmt.Sprintf("u%d", i), "a")
				p.ResourceVersion = fmt.Sprint(j)
				w.UpdatePod(UpdateOptions{Type: UpdateUpdate, Pod: p})
			}
		}(i)
	}
	wg.Wait()
	for i := 0; i < pods; i++ {
		uid := types.UID(fmt.Sprintf("u%d", i))
		eventually(t, "newest version synced", func() bool {
			cs := f.callsOf(uid)
			return len(cs) > 0 && cs[len(cs)-1].pod.ResourceVersion == fmt.Sprint(updates-1)
		})
		if n := len(f.callsOf(uid)); n > updates {
			t.Fatalf("pod %s synced %d times for %d updates", uid, n, updates)
		}
	}
}

// SyncKnownPods is SyncKnownPodsInto with the desired pods listed, as the
// kubelet's SyncKnownPods takes them.
func (w *Workers) SyncKnownPods(desired []*corev1.Pod) map[types.UID]WorkType {
	want := make(map[types.UID]struct{}, len(desired))
	for _, p := range desired {
		want[p.UID] = struct{}{}
	}
	out := map[types.UID]WorkType{}
	w.SyncKnownPodsInto(func(uid types.UID) bool { _, ok := want[uid]; return ok }, nil, out)
	return out
}

// SyncKnownPods forgets only finished workers, and only those no longer
// desired (kubelet: TestSyncKnownPods, removeTerminatedWorker).
func TestSyncKnownPodsForgetsOnlyFinishedOrphans(t *testing.T) {
	f := newFake()
	release := make(chan struct{})
	f.block["running"] = release
	w := start(t, f)
	running, doneWanted, doneOrphan := newPod("running", "a"), newPod("done-wanted", "b"), newPod("done-orphan", "c")
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: running})
	w.UpdatePod(UpdateOptions{Type: UpdateKill, Pod: doneWanted})
	w.UpdatePod(UpdateOptions{Type: UpdateKill, Pod: doneOrphan})
	eventually(t, "two finished", func() bool {
		return w.IsPodKnownTerminated("done-wanted") && w.IsPodKnownTerminated("done-orphan") &&
			len(f.callsOf("done-wanted")) == 2 && len(f.callsOf("done-orphan")) == 2
	})
	eventually(t, "both finished", func() bool {
		states := w.SyncKnownPods([]*corev1.Pod{doneWanted})
		_, orphanKept := states["done-orphan"]
		return !orphanKept
	})
	states := w.SyncKnownPods([]*corev1.Pod{doneWanted})
	if states["running"] != SyncPodWork {
		t.Fatalf("a running worker not desired any more must stay until killed: %v", states)
	}
	if states["done-wanted"] != TerminatedPodWork {
		t.Fatalf("a finished but desired worker must stay: %v", states)
	}
	close(release)
}

// SyncKnownPodsInto clears the map it fills, so that housekeeping reuses
// one, and shows the caller every worker it held, the ones it forgets too.
func TestSyncKnownPodsIntoClearsAndShowsEveryWorker(t *testing.T) {
	f := newFake()
	release := make(chan struct{})
	f.block["running"] = release
	defer close(release)
	w := start(t, f)
	running, done := newPod("running", "a"), newPod("done", "b")
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: running})
	w.UpdatePod(UpdateOptions{Type: UpdateKill, Pod: done})
	eventually(t, "the killed one finished", func() bool {
		return w.IsPodKnownTerminated("done") && len(f.callsOf("done")) == 2
	})
	out := map[types.UID]WorkType{"stale": SyncPodWork}
	seen := map[types.UID]bool{}
	w.SyncKnownPodsInto(func(uid types.UID) bool { return uid == "running" }, func(uid types.UID) { seen[uid] = true }, out)
	if len(out) != 1 || out["running"] != SyncPodWork {
		t.Fatalf("states: %v, want only the running worker (the stale entry cleared, the finished one forgotten)", out)
	}
	if !seen["running"] || !seen["done"] || len(seen) != 2 {
		t.Fatalf("seen %v, want both workers, the one forgotten by this call too", seen)
	}
	if w.Len() != 1 {
		t.Fatalf("Len %d after forgetting one of two workers, want 1", w.Len())
	}
}

// Detach hands a pod over: the sync in flight is cancelled, nothing is
// terminated, updates are ignored until the goroutine returned, and then
// the UID is free for a new worker.
func TestDetachStopsWithoutTerminating(t *testing.T) {
	h := newFake()
	w := start(t, h)
	p := newPod("d1", "detached")
	h.mu.Lock()
	h.block[p.UID] = make(chan struct{}) // the sync hangs until cancelled
	h.mu.Unlock()
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: p})
	receive(t, h.started, "the first sync to start")
	done := w.Detach(p.UID)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("detached worker did not return")
	}
	if _, ok := w.Pod(p.UID); ok {
		t.Fatal("detached pod still known")
	}
	for _, c := range h.callsOf(p.UID) {
		if c.kind != SyncPodWork {
			t.Fatalf("detach ran %v", c.kind)
		}
	}
	if len(w.Known()) != 0 {
		t.Fatalf("known after detach: %v", w.Known())
	}
	// a finished pod detaches at once too.
	q := newPod("d2", "finished")
	h.mu.Lock()
	h.terminal[q.UID] = true
	h.mu.Unlock()
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: q})
	eventually(t, "q terminated", func() bool { return w.IsPodKnownTerminated(q.UID) && len(h.callsOf(q.UID)) == 3 })
	receive(t, w.Detach(q.UID), "the finished worker to detach")
	// the UID starts afresh with a new worker.
	h.mu.Lock()
	delete(h.block, p.UID)
	h.mu.Unlock()
	before := len(h.callsOf(p.UID))
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: p})
	eventually(t, "a new worker syncs the pod", func() bool { return len(h.callsOf(p.UID)) > before })
	receive(t, w.Detach("unknown"), "the detach of an unknown pod")
}

// running counts the pods whose goroutine is alive.
func (w *Workers) runningPods() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.pods {
		if s.running {
			n++
		}
	}
	return n
}

// An idle pod holds no goroutine: once its sync is done the worker parks,
// and an update, a resync or a detach each find it again.
func TestIdlePodsHoldNoGoroutine(t *testing.T) {
	const pods = 200
	h := newFake()
	w := start(t, h)
	base := runtime.NumGoroutine()
	for i := range pods {
		w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: newPod(fmt.Sprint("idle-", i), fmt.Sprint("p", i))})
	}
	eventually(t, "every pod synced once", func() bool {
		for i := range pods {
			if len(h.callsOf(types.UID(fmt.Sprint("idle-", i)))) == 0 {
				return false
			}
		}
		return true
	})
	eventually(t, "every worker parked", func() bool { return w.runningPods() == 0 })
	// the runtime agrees: no goroutine a pod is left behind.
	eventually(t, "the goroutines gone", func() bool { return runtime.NumGoroutine() < base+pods/10 })

	// an update wakes a parked pod; it parks again after.
	p := newPod("idle-0", "p0")
	before := len(h.callsOf(p.UID))
	w.UpdatePod(UpdateOptions{Type: UpdateUpdate, Pod: p})
	eventually(t, "the update synced", func() bool { return len(h.callsOf(p.UID)) > before })
	eventually(t, "parked again", func() bool { return w.runningPods() == 0 })

	// a parked pod detaches at once and is forgotten.
	select {
	case <-w.Detach(p.UID):
	case <-time.After(10 * time.Second):
		t.Fatal("detach of a parked pod waited")
	}
	if _, ok := w.Pod(p.UID); ok {
		t.Fatal("detached parked pod still known")
	}

	// a deletion runs terminating and terminated on a woken worker.
	q := newPod("idle-1", "p1")
	w.UpdatePod(UpdateOptions{Type: UpdateUpdate, Pod: deleted(q, 1)})
	eventually(t, "terminated", func() bool { return w.IsPodKnownTerminated(q.UID) && len(h.callsOf(q.UID)) >= 3 })
	eventually(t, "parked after termination", func() bool { return w.runningPods() == 0 })
}

// A resync of a parked pod starts a worker for it.
func TestParkedPodResyncs(t *testing.T) {
	h := newFake()
	w := start(t, h, WithResyncInterval(30*time.Millisecond))
	p := newPod("r1", "resynced")
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: p})
	eventually(t, "three resyncs", func() bool { return len(h.callsOf(p.UID)) >= 4 })
	for _, c := range h.callsOf(p.UID)[1:] {
		if c.t != UpdateSync {
			t.Fatalf("resync with type %v", c.t)
		}
	}
}

// A parked pod's state holds no work: the work that synced it is dropped
// once done, and the pod it keeps is the newest it was given.
func TestParkedPodHoldsNoWork(t *testing.T) {
	h := newFake()
	w := start(t, h)
	old := newPod("newest", "p")
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: old})
	eventually(t, "the first sync", func() bool { return len(h.callsOf(old.UID)) == 1 })
	eventually(t, "parked", func() bool { return w.runningPods() == 0 })
	newer := old.DeepCopy()
	newer.Labels = map[string]string{"v": "2"}
	w.UpdatePod(UpdateOptions{Type: UpdateUpdate, Pod: newer})
	eventually(t, "the second sync", func() bool { return len(h.callsOf(old.UID)) == 2 })
	eventually(t, "parked again", func() bool { return w.runningPods() == 0 })
	w.mu.Lock()
	s := w.pods[old.UID]
	held, active := s.pod, s.active
	w.mu.Unlock()
	if held != newer {
		t.Errorf("the state holds %v, want the newest pod", held.Labels)
	}
	if active != nil {
		t.Errorf("a parked pod still holds its last work (pod %v)", active.opts.Pod.Labels)
	}
}

// Refresh hands the worker a newer copy without a sync of its own; the
// next sync, a resync's included, gets it. A finished worker keeps its pod.
func TestRefreshReplacesThePodWithoutWork(t *testing.T) {
	h := newFake()
	w := start(t, h)
	p := newPod("refresh", "p")
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: p})
	eventually(t, "the first sync", func() bool { return len(h.callsOf(p.UID)) == 1 })
	eventually(t, "parked", func() bool { return w.runningPods() == 0 })

	fresh := p.DeepCopy()
	fresh.Status.Phase = corev1.PodRunning
	w.Refresh(fresh)
	if got, _ := w.Pod(p.UID); got != fresh {
		t.Fatalf("the worker holds %+v after Refresh, want the newer copy", got.Status)
	}
	if w.runningPods() != 0 || len(h.callsOf(p.UID)) != 1 {
		t.Fatalf("Refresh started work: %d workers running, %d syncs", w.runningPods(), len(h.callsOf(p.UID)))
	}
	w.queue.Add(p.UID) // a resync
	eventually(t, "the resync", func() bool { return len(h.callsOf(p.UID)) == 2 })
	if c := h.callsOf(p.UID)[1]; c.pod != fresh {
		t.Errorf("the resync synced %+v, want the refreshed copy", c.pod.Status)
	}

	w.Refresh(newPod("unknown", "q"))
	if _, ok := w.Pod("unknown"); ok {
		t.Error("Refresh made a worker for an unknown pod")
	}
	q := newPod("done", "q")
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: q})
	eventually(t, "q synced", func() bool { return len(h.callsOf(q.UID)) == 1 })
	w.UpdatePod(UpdateOptions{Type: UpdateUpdate, Pod: deleted(q, 1)})
	eventually(t, "terminated", func() bool { return w.IsPodKnownTerminated(q.UID) && len(h.callsOf(q.UID)) >= 3 })
	eventually(t, "parked after termination", func() bool { return w.runningPods() == 0 })
	before, _ := w.Pod(q.UID)
	w.Refresh(q)
	if after, _ := w.Pod(q.UID); after != before {
		t.Error("Refresh replaced a finished worker's pod")
	}
}
