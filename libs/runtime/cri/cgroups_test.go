package cri

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/cgroups"
)

// listCounter is a CRI runtime service that answers ListPodSandbox alone,
// with the given sandboxes, and counts the calls.
type listCounter struct {
	criapi.RuntimeService
	sandboxes []*runtimeapi.PodSandbox
	lists     int
}

func (l *listCounter) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	l.lists++
	return l.sandboxes, nil
}

func qosPod(uid string, req corev1.ResourceList, lim corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, UID: types.UID(uid)}, Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Name: "c", Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}}}}
}

// A new sandbox of a burstable pod sizes the burstable cgroup from the
// node's sandboxes; one of a best-effort or guaranteed pod lists them only
// while the QoS cgroups are missing (its start changes no QoS cgroup's size).
func TestNewSandboxListsSandboxesOnlyToSizeTheQoSCgroups(t *testing.T) {
	root := t.TempDir()
	n, err := cgroups.NewNode(cgroups.Config{PerQOS: true, Driver: cgroups.DriverCgroupfs, Root: "/"}, &cgroups.FS{V2: true, Mount: root},
		func() corev1.ResourceList { return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")} })
	if err != nil {
		t.Fatal(err)
	}
	running := &runtimeapi.PodSandbox{Metadata: &runtimeapi.PodSandboxMetadata{Uid: "running"},
		Annotations: map[string]string{annotationQOS: string(corev1.PodQOSBurstable), annotationCPURequest: "400"}}
	rs := &listCounter{sandboxes: []*runtimeapi.PodSandbox{running}}
	r := &Runtime{rs: rs, log: zap.NewNop()}
	r.opts.cgroups = n
	cpu := func(v string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(v), corev1.ResourceMemory: resource.MustParse("64Mi")}
	}
	shares := func() string {
		data, err := os.ReadFile(filepath.Join(root, "kubepods", "burstable", "cpu.weight"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data))
	}
	for _, step := range []struct {
		what  string
		pod   *corev1.Pod
		lists int
	}{
		{"a best-effort pod, no QoS cgroups yet", qosPod("be-1", nil, nil), 1},
		{"a second best-effort pod", qosPod("be-2", nil, nil), 0},
		{"a guaranteed pod", qosPod("g", cpu("1"), cpu("1")), 0},
		{"a burstable pod", qosPod("b", cpu("100m"), nil), 1},
	} {
		before := rs.lists
		if err := r.ensurePodCgroup(t.Context(), step.pod, true); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		if got := rs.lists - before; got != step.lists {
			t.Errorf("%s: %d sandbox lists, want %d", step.what, got, step.lists)
		}
		if !n.QoSExists() {
			t.Errorf("%s: the QoS cgroups are missing", step.what)
		}
	}
	// the burstable cgroup holds the running pod's 400m and the new 100m.
	if got, want := shares(), "20"; got != want {
		t.Errorf("burstable cpu.weight %s, want %s (500m)", got, want)
	}
	// a container of a pod with its sandbox already made lists nothing.
	before := rs.lists
	if err := r.ensurePodCgroup(t.Context(), qosPod("b", cpu("100m"), nil), false); err != nil {
		t.Fatal(err)
	}
	if rs.lists != before {
		t.Errorf("a container start listed the sandboxes")
	}
	// QoS cgroups removed behind the node's back are made again by the next
	// new sandbox, whatever its class.
	if err := os.RemoveAll(filepath.Join(root, "kubepods", "besteffort")); err != nil {
		t.Fatal(err)
	}
	if err := r.ensurePodCgroup(t.Context(), qosPod("be-3", nil, nil), true); err != nil {
		t.Fatal(err)
	}
	if !n.QoSExists() || rs.lists != before+1 {
		t.Errorf("QoS cgroups exist %v after %d lists, want them made again with one list", n.QoSExists(), rs.lists-before)
	}
}
