package merge

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
)

func pod(uid, name string, mut ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: name, Namespace: "default", ResourceVersion: "1"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

// ops flattens a result into "OP:uid,uid" strings, in order, "owner OP:..."
// for a message only the partition's owner is sent.
func ops(r Result) []string {
	var out []string
	for _, m := range r.Messages {
		s := string(m.Op) + ":"
		if m.OwnerOnly {
			s = "owner " + s
		}
		for i, p := range m.Pods {
			if i > 0 {
				s += ","
			}
			s += string(p.UID)
		}
		out = append(out, s)
	}
	return out
}

func eq(t *testing.T, got []string, want ...string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestIncrementalLifecycle(t *testing.T) {
	s := New(1)
	r := s.Merge(Update{Source: "api", Op: bus.OpAdd, Pods: []*corev1.Pod{pod("a", "a")}})
	eq(t, ops(r), "ADD:a")
	if r.FirstSeen || s.Seen("api") {
		t.Fatal("an ADD must not mark the source seen")
	}
	if got := r.Messages[0].Pods[0].Annotations[AnnotationSource]; got != "api" {
		t.Fatalf("source annotation %q", got)
	}
	seenAt := r.Messages[0].Pods[0].Annotations[AnnotationSeen]
	if seenAt == "" {
		t.Fatal("no config.seen annotation")
	}
	r = s.Merge(Update{Source: "api", Op: OpSeen})
	if !r.FirstSeen || len(r.Messages) != 0 {
		t.Fatalf("seen marker: %+v", r)
	}
	// resourceVersion alone: nothing (kubelet ignores it).
	r = s.Merge(Update{Source: "api", Op: bus.OpUpdate, Pods: []*corev1.Pod{pod("a", "a", func(p *corev1.Pod) { p.ResourceVersion = "2" })}})
	eq(t, ops(r))
	// status alone: RECONCILE.
	r = s.Merge(Update{Source: "api", Op: bus.OpUpdate, Pods: []*corev1.Pod{pod("a", "a", func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning })}})
	eq(t, ops(r), "owner RECONCILE:a")
	// a local annotation alone: nothing.
	r = s.Merge(Update{Source: "api", Op: bus.OpUpdate, Pods: []*corev1.Pod{pod("a", "a", func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Annotations = map[string]string{AnnotationMirror: "x"}
	})}})
	eq(t, ops(r))
	// a label: UPDATE, and the first-seen time is kept.
	r = s.Merge(Update{Source: "api", Op: bus.OpUpdate, Pods: []*corev1.Pod{pod("a", "a", func(p *corev1.Pod) {
		p.Labels = map[string]string{"x": "y"}
		p.Status.Phase = corev1.PodRunning
	})}})
	eq(t, ops(r), "UPDATE:a")
	if got := r.Messages[0].Pods[0].Annotations[AnnotationSeen]; got != seenAt {
		t.Fatalf("config.seen changed: %q -> %q", seenAt, got)
	}
	// deletionTimestamp: DELETE.
	now := metav1.Now()
	r = s.Merge(Update{Source: "api", Op: bus.OpUpdate, Pods: []*corev1.Pod{pod("a", "a", func(p *corev1.Pod) {
		p.Labels = map[string]string{"x": "y"}
		p.DeletionTimestamp = &now
	})}})
	eq(t, ops(r), "DELETE:a")
	// a shorter grace period of the terminating pod (the agent's own grace-0
	// delete of a finished pod): a DELETE for the owner alone.
	grace0 := metav1.NewTime(now.Add(-30 * time.Second))
	r = s.Merge(Update{Source: "api", Op: bus.OpUpdate, Pods: []*corev1.Pod{pod("a", "a", func(p *corev1.Pod) {
		p.Labels = map[string]string{"x": "y"}
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &grace0, new(int64)
		p.Status.Phase = corev1.PodFailed
	})}})
	eq(t, ops(r), "owner DELETE:a")
	if got := r.Messages[0].Pods[0]; got.DeletionGracePeriodSeconds == nil || *got.DeletionGracePeriodSeconds != 0 || got.Status.Phase != corev1.PodFailed {
		t.Fatalf("the owner's DELETE carries %v, %q; want the new grace period and status", got.DeletionGracePeriodSeconds, got.Status.Phase)
	}
	// ... unless something the other stages read changed with it.
	r = s.Merge(Update{Source: "api", Op: bus.OpUpdate, Pods: []*corev1.Pod{pod("a", "a", func(p *corev1.Pod) {
		p.Labels = map[string]string{"x": "z"}
		p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, new(int64)
		p.Status.Phase = corev1.PodFailed
	})}})
	eq(t, ops(r), "DELETE:a")
	r = s.Merge(Update{Source: "api", Op: bus.OpRemove, Pods: []*corev1.Pod{pod("a", "a")}})
	eq(t, ops(r), "REMOVE:a")
	// removing what is not there: nothing.
	r = s.Merge(Update{Source: "api", Op: bus.OpRemove, Pods: []*corev1.Pod{pod("a", "a")}})
	eq(t, ops(r))
}

// An API pod's spec is compared by generation: the same generation is the
// same spec (a change of status alone is a RECONCILE, and the spec is not
// walked), a new one is an UPDATE. A manifest's generation says nothing:
// its spec is compared field by field, and so is an API pod's without a
// generation.
func TestSpecComparedByGenerationForAPIPodsOnly(t *testing.T) {
	version := func(g int64, image string, phase corev1.PodPhase) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Generation, p.Spec.Containers[0].Image, p.Status.Phase = g, image, phase }
	}
	for _, tc := range []struct {
		source        string
		first, second func(*corev1.Pod)
		want          []string
	}{
		{"api", version(1, "busybox", ""), version(1, "busybox", corev1.PodRunning), []string{"owner RECONCILE:a"}},
		{"api", version(1, "busybox", ""), version(1, "nginx", ""), nil},
		{"api", version(1, "busybox", ""), version(2, "nginx", ""), []string{"UPDATE:a"}},
		{"api", version(0, "busybox", ""), version(0, "nginx", ""), []string{"UPDATE:a"}},
		{"file", version(1, "busybox", ""), version(1, "nginx", ""), []string{"UPDATE:a"}},
	} {
		s := New(1)
		s.Merge(Update{Source: tc.source, Op: bus.OpSet, Pods: []*corev1.Pod{pod("a", "a", tc.first)}})
		r := s.Merge(Update{Source: tc.source, Op: bus.OpSet, Pods: []*corev1.Pod{pod("a", "a", tc.second)}})
		if got := ops(r); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s pod, %v then %v: got %v, want %v", tc.source, pod("a", "a", tc.first).Generation,
				pod("a", "a", tc.second).Generation, got, tc.want)
		}
	}
}

func TestSetOrderAndFirstSeen(t *testing.T) {
	s := New(1)
	r := s.Merge(Update{Source: "file", Op: bus.OpSet, Pods: []*corev1.Pod{}})
	if !r.FirstSeen || len(r.Messages) != 0 {
		t.Fatalf("empty first SET: %+v", r)
	}
	r = s.Merge(Update{Source: "file", Op: bus.OpSet, Pods: []*corev1.Pod{pod("a", "a"), pod("b", "b")}})
	eq(t, ops(r), "ADD:a,b")
	if r.FirstSeen {
		t.Fatal("second SET is not a first sight")
	}
	// b changes, a goes, c comes, and b's status: kubelet order REMOVE, ADD, UPDATE.
	r = s.Merge(Update{Source: "file", Op: bus.OpSet, Pods: []*corev1.Pod{
		pod("c", "c"), pod("b", "b", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "nginx" })}})
	eq(t, ops(r), "REMOVE:a", "ADD:c", "UPDATE:b")
}

func TestDuplicateNamesDropped(t *testing.T) {
	s := New(1)
	r := s.Merge(Update{Source: "file", Op: bus.OpSet, Pods: []*corev1.Pod{pod("a", "same"), pod("b", "same")}})
	eq(t, ops(r), "ADD:a")
}

func TestPartitionsAndSnapshot(t *testing.T) {
	s := New(4)
	var pods []*corev1.Pod
	for i := 0; i < 20; i++ {
		pods = append(pods, pod(fmt.Sprintf("uid-%d", i), fmt.Sprintf("p%d", i)))
	}
	r := s.Merge(Update{Source: "api", Op: bus.OpAdd, Pods: pods})
	total := 0
	for _, m := range r.Messages {
		for _, p := range m.Pods {
			if got := bus.Partition(string(p.UID), 4); got != m.Partition {
				t.Fatalf("pod %s in partition %d, belongs to %d", p.UID, m.Partition, got)
			}
			total++
		}
	}
	if total != 20 {
		t.Fatalf("%d pods published, want 20", total)
	}
	snap := s.Snapshot("api")
	if len(snap) != 4 {
		t.Fatalf("%d partitions", len(snap))
	}
	n := 0
	for _, p := range snap {
		n += len(p)
	}
	if n != 20 {
		t.Fatalf("snapshot holds %d pods", n)
	}
}

func TestSnapshotModes(t *testing.T) {
	s := New(2, WithMode(Snapshot))
	r := s.Merge(Update{Source: "file", Op: bus.OpSet, Pods: []*corev1.Pod{}})
	eq(t, ops(r), "SET:", "SET:") // first sight: every partition, empty ones too
	r = s.Merge(Update{Source: "file", Op: bus.OpSet, Pods: []*corev1.Pod{pod("a", "a")}})
	if len(r.Messages) != 1 || r.Messages[0].Op != bus.OpSet || r.Messages[0].Partition != s.Partition("a") {
		t.Fatalf("snapshot of the changed partition: %+v", r.Messages)
	}

	s = New(1, WithMode(SnapshotAndUpdates))
	s.Merge(Update{Source: "file", Op: bus.OpSet, Pods: []*corev1.Pod{pod("a", "a")}})
	r = s.Merge(Update{Source: "file", Op: bus.OpSet, Pods: []*corev1.Pod{pod("a", "a", func(p *corev1.Pod) { p.Labels = map[string]string{"k": "v"} }), pod("b", "b")}})
	eq(t, ops(r), "SET:a,b", "UPDATE:a")
}

// What a merge hands out (messages, snapshots) shares the stored pods
// without copying them, so the storage never changes a pod in place: a
// later update, a status-only reconcile or a graceful delete leaves every
// earlier result as it was.
func TestOutputIsNeverChangedLater(t *testing.T) {
	s := New(1)
	r := s.Merge(Update{Source: "api", Op: bus.OpAdd, Pods: []*corev1.Pod{pod("a", "a")}})
	snap := s.Snapshot("api")[0][0]
	s.Merge(Update{Source: "api", Op: bus.OpUpdate, Pods: []*corev1.Pod{pod("a", "a", func(p *corev1.Pod) {
		p.Spec.Containers[0].Image = "x"
		p.Labels = map[string]string{"k": "v"}
	})}})
	updated := s.Snapshot("api")[0][0]
	s.Merge(Update{Source: "api", Op: bus.OpUpdate, Pods: []*corev1.Pod{pod("a", "a", func(p *corev1.Pod) {
		p.Spec.Containers[0].Image = "x"
		p.Labels = map[string]string{"k": "v"}
		p.Status.Phase = corev1.PodRunning
	})}})
	now := metav1.Now()
	s.Merge(Update{Source: "api", Op: bus.OpUpdate, Pods: []*corev1.Pod{pod("a", "a", func(p *corev1.Pod) {
		p.Spec.Containers[0].Image = "x"
		p.Labels = map[string]string{"k": "v"}
		p.Status.Phase = corev1.PodRunning
		p.DeletionTimestamp = &now
	})}})
	for _, p := range []*corev1.Pod{r.Messages[0].Pods[0], snap} {
		if p.Spec.Containers[0].Image != "busybox" || p.Labels != nil || p.Status.Phase != "" || p.DeletionTimestamp != nil {
			t.Fatalf("a later merge changed an earlier result: %+v", p)
		}
	}
	if updated.Spec.Containers[0].Image != "x" || updated.Status.Phase != "" || updated.DeletionTimestamp != nil {
		t.Fatalf("a later merge changed the updated pod handed out: %+v", updated)
	}
	last := s.Snapshot("api")[0][0]
	if last.Status.Phase != corev1.PodRunning || last.DeletionTimestamp == nil || last.Annotations[AnnotationSeen] == "" {
		t.Fatalf("the stored pod lacks the later merges: %+v", last)
	}
}

func BenchmarkMerge5000(b *testing.B) {
	pods := make([]*corev1.Pod, 5000)
	for i := range pods {
		pods[i] = pod(fmt.Sprintf("0b9d3c7e-6a2b-4f1e-9a51-%012d", i), fmt.Sprintf("pod-%d", i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := New(16)
		for _, p := range pods {
			s.Merge(Update{Source: "api", Op: bus.OpAdd, Pods: []*corev1.Pod{p.DeepCopy()}})
		}
	}
	b.ReportMetric(float64(b.N*len(pods))/b.Elapsed().Seconds(), "pods/s")
}

// BenchmarkStatusChange merges a change of an API pod's status alone (a
// RECONCILE): the spec is not compared field by field when the generation
// is the one held.
func BenchmarkStatusChange(b *testing.B) {
	rich := func(p *corev1.Pod) {
		p.Generation = 1
		p.Spec.Containers = nil
		for i := range 3 {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
				Name: fmt.Sprintf("c%d", i), Image: "registry.local/app:1.0", Command: []string{"/app", "--serve", "--port=8080"},
				Env:          []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}, {Name: "C", Value: "3"}},
				Ports:        []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "token", MountPath: "/var/run/secrets"}},
			})
		}
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}}
		p.Spec.Tolerations = []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists}}
	}
	s := New(1)
	s.Merge(Update{Source: "api", Op: bus.OpSet, Pods: []*corev1.Pod{pod("a", "a", rich)}})
	phases := []corev1.PodPhase{corev1.PodPending, corev1.PodRunning}
	updates := make([]*corev1.Pod, 2)
	for i, ph := range phases {
		updates[i] = pod("a", "a", rich, func(p *corev1.Pod) { p.Status.Phase = ph })
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Merge(Update{Source: "api", Op: bus.OpSet, Pods: []*corev1.Pod{updates[i%2]}})
	}
}
