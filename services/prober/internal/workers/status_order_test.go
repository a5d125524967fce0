package workers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
)

// Runtime statuses are ordered per pod, not per subject: a pod's status
// that another pod's newer one overtook is taken; one not above the pod's
// last from the same source is not; another source has its own seq; seq 0
// is taken as is; the order is forgotten with the pod.
func TestStatusOrderedPerPod(t *testing.T) {
	m, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Stop(t.Context()) }()
	for _, uid := range []types.UID{"a", "b"} {
		// a probe whose first run is an hour away: the pod's statuses
		// are kept, and no worker probes within the test.
		m.UpsertPod(laterProbedPod(uid))
	}
	st := func(uid types.UID, id string) *bus.PodRuntimeStatus {
		return &bus.PodRuntimeStatus{UID: uid, Namespace: "default", Name: string(uid),
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", ContainerID: id}}}
	}
	idOf := func(uid types.UID) string {
		t.Helper()
		s, ok := m.statusOf(uid)
		if !ok {
			return ""
		}
		return s.ContainerStatuses[0].ContainerID
	}
	step := func(source string, seq uint64, s *bus.PodRuntimeStatus, want bool) {
		t.Helper()
		if got := m.UpdateStatusFrom(source, seq, s); got != want {
			t.Fatalf("%s seq %d of %s (%s): taken %v, want %v", source, seq, s.UID, s.ContainerStatuses[0].ContainerID, got, want)
		}
	}
	step("pw-1", 5, st("a", "c://a2"), true)
	step("pw-1", 4, st("b", "c://b1"), true) // overtaken by a's 5: still b's only status
	if got := idOf("b"); got != "c://b1" {
		t.Fatalf("b's status %q, want c://b1", got)
	}
	step("pw-1", 3, st("a", "c://a1"), false)
	step("pw-1", 5, st("a", "c://a1"), false) // the same seq again
	if got := idOf("a"); got != "c://a2" {
		t.Fatalf("a's status went back to %q", got)
	}
	step("pw-2", 1, st("a", "c://a3"), true) // another source (a replica)
	step("", 0, st("a", "c://a4"), true)     // unordered
	step("pw-2", 1, st("a", "c://a1"), false)
	if got := idOf("a"); got != "c://a4" {
		t.Fatalf("a's status %q, want c://a4", got)
	}

	m.RemovePod("a")
	c := st("c", "c://c1")
	c.Terminated = true
	step("pw-1", 9, c, true) // a finished pod never seen: nothing kept
	m.statusMu.RLock()
	_, aKept := m.status["a"]
	_, cKept := m.status["c"]
	n := len(m.status)
	m.statusMu.RUnlock()
	if aKept || cKept || n != 1 {
		t.Fatalf("statuses kept: %d (a %v, c %v), want b's only", n, aKept, cKept)
	}
	m.UpsertPod(laterProbedPod("a"))
	step("pw-2", 1, st("a", "c://a5"), true) // a's order went with it
}

// laterProbedPod has one container with a readiness probe that first runs
// an hour from now.
func laterProbedPod(uid types.UID) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: string(uid), Namespace: "default", UID: uid},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", ReadinessProbe: &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
			InitialDelaySeconds: 3600,
		}}}}}
}

// A pod with no probe keeps no runtime status in the prober, only where
// its statuses stand; one that came before the pod's spec is dropped when
// the spec shows no probe.
func TestUnprobedPodKeepsNoStatus(t *testing.T) {
	m, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Stop(t.Context()) }()
	st := func(uid types.UID) *bus.PodRuntimeStatus {
		return &bus.PodRuntimeStatus{UID: uid, Namespace: "default", Name: string(uid),
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", ContainerID: "c://" + string(uid)}}}
	}
	held := func(uid types.UID) bool {
		s, _ := m.statusOf(uid)
		return s != nil
	}
	plain := func(uid types.UID) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: string(uid), Namespace: "default", UID: uid},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
	}

	m.UpsertPod(plain("known"))
	if !m.UpdateStatusFrom("pw-1", 5, st("known")) || held("known") {
		t.Fatal("an unprobed pod's status was not taken, or was kept")
	}
	if m.UpdateStatusFrom("pw-1", 4, st("known")) {
		t.Fatal("an older status of an unprobed pod was taken: its order was not kept")
	}

	// the status comes first: kept until the spec says there is no probe.
	if !m.UpdateStatusFrom("pw-1", 6, st("early")) || !held("early") {
		t.Fatal("a status before its pod's spec was not kept")
	}
	m.UpsertPod(plain("early"))
	if held("early") {
		t.Fatal("the early status of an unprobed pod was kept")
	}
	if m.UpdateStatusFrom("pw-1", 6, st("early")) {
		t.Fatal("the same status taken again: its order went with it")
	}

	// a probed pod keeps its status.
	m.UpsertPod(laterProbedPod("probed"))
	if !m.UpdateStatusFrom("pw-1", 7, st("probed")) || !held("probed") {
		t.Fatal("a probed pod's status was not kept")
	}
}

// TestUnprobedPodKeepsNoSpec: of a pod without probes the manager keeps no
// view of the spec, on its first upsert or a later one; a probed pod's view
// is kept for its workers.
func TestUnprobedPodKeepsNoSpec(t *testing.T) {
	m, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Stop(t.Context()) }()
	spec := func(uid types.UID) *corev1.Pod {
		m.mu.Lock()
		defer m.mu.Unlock()
		e, ok := m.pods[uid]
		if !ok {
			t.Fatalf("pod %s not known", uid)
		}
		return e.get()
	}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default", UID: "plain"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "img"}}}}
	m.UpsertPod(plain)
	if p := spec("plain"); p != nil {
		t.Fatalf("an unprobed pod's spec view was kept: %+v", p.Spec)
	}
	deleting := plain.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	m.UpsertPod(deleting)
	if p := spec("plain"); p != nil {
		t.Fatal("an update of an unprobed pod kept its spec view")
	}
	m.UpsertPod(laterProbedPod("probed"))
	if p := spec("probed"); p == nil || len(p.Spec.Containers) == 0 {
		t.Fatal("a probed pod's view was not kept for its workers")
	}
}
