package nodestatus

import (
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

type fakeReady struct {
	mu    sync.Mutex
	ready bool
	ch    chan struct{}
}

func (f *fakeReady) AgentReady() (bool, string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ready {
		return true, "", ""
	}
	return false, "AgentNotReady", "not yet"
}

func (f *fakeReady) Changed() <-chan struct{} { return f.ch }

func (f *fakeReady) set(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready = v
}

func desired() *Desired {
	return &Desired{
		Name:        "n1",
		Labels:      map[string]string{LabelHostname: "n1"},
		Capacity:    corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
		Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
		Addresses:   []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		Port:        10250,
	}
}

func patches(cs *fake.Clientset) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "patch" {
			n++
		}
	}
	return n
}

// TestWritesOnlyOnChangeOrReportPeriod: an unchanged status is not written
// until the report period passes (kubelet: nodeStatusReportFrequency); a
// change is written at once; transition times move only on a change.
func TestWritesOnlyOnChangeOrReportPeriod(t *testing.T) {
	cs := fake.NewSimpleClientset()
	ready := &fakeReady{ch: make(chan struct{})}
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	c := New(cs, desired(), ready, WithReportFrequency(5*time.Minute))
	c.now = func() time.Time { return now }
	ctx := t.Context()
	if err := c.Sync(ctx); err != nil { // registers
		t.Fatal(err)
	}
	if c.NodeUID() == "" && len(cs.Actions()) == 0 {
		t.Fatal("not registered")
	}
	now = now.Add(10 * time.Second)
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := patches(cs); n != 0 {
		t.Fatalf("unchanged status written %d times", n)
	}
	now = now.Add(5 * time.Minute)
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := patches(cs); n != 1 {
		t.Fatalf("report period passed: %d writes, want 1", n)
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := cond(node, corev1.NodeReady)
	if !r.LastHeartbeatTime.Time.Equal(now) || r.LastTransitionTime.Time.Equal(now) {
		t.Fatalf("heartbeat %v transition %v at %v", r.LastHeartbeatTime, r.LastTransitionTime, now)
	}
	ready.set(true)
	now = now.Add(time.Second)
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n := patches(cs); n != 2 {
		t.Fatalf("change not written at once: %d writes", n)
	}
	node, _ = cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	r = cond(node, corev1.NodeReady)
	if r.Status != corev1.ConditionTrue || !r.LastTransitionTime.Time.Equal(now) || r.Reason != "KubeletReady" {
		t.Fatalf("ready condition %+v", r)
	}
	m := cond(node, corev1.NodeMemoryPressure)
	if m.LastTransitionTime.Time.Equal(now) {
		t.Fatalf("memory pressure transition moved without a change: %+v", m)
	}
}

func cond(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return &corev1.NodeCondition{}
}

// TestStatusChanged ignores heartbeats only.
func TestStatusChanged(t *testing.T) {
	a := &corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: "Ready", Status: "True", LastHeartbeatTime: metav1.Now()}}}
	b := a.DeepCopy()
	b.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Now().Add(time.Minute))
	if statusChanged(a, b) {
		t.Fatal("a heartbeat counted as a change")
	}
	b.Conditions[0].Status = "False"
	if !statusChanged(a, b) {
		t.Fatal("a status change missed")
	}
	b = a.DeepCopy()
	b.Capacity = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}
	if !statusChanged(a, b) {
		t.Fatal("a capacity change missed")
	}
}
