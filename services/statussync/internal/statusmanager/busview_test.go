package statusmanager

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
)

// onBus is p as podconfig publishes it: without managed fields (its
// informer drops them), with its source and the time the node first saw
// it.
func onBus(p *corev1.Pod, source string) *corev1.Pod {
	b := p.DeepCopy()
	b.ManagedFields = nil
	if b.Annotations == nil {
		b.Annotations = map[string]string{}
	}
	b.Annotations[AnnotationSource] = source
	b.Annotations[bus.AnnotationSeen] = "2025-03-01T12:00:01.5Z"
	return b
}

// TestBusViewDrops: the bus view keeps what statussync reads of a pod from
// the bus and nothing else.
func TestBusViewDrops(t *testing.T) {
	full := onBus(conformancePod(1), "api")
	full.Spec.Volumes = append(full.Spec.Volumes, corev1.Volume{Name: "host",
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/e2e"}}})
	full.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debugger", Image: "busybox", Command: []string{"sh"}}, TargetContainerName: "app"}}
	gone := metav1.NewTime(fixtureTime.Add(time.Minute))
	full.DeletionTimestamp = &gone
	v := busView(full.DeepCopy())

	if v.Name != full.Name || v.Namespace != full.Namespace || v.UID != full.UID || v.Generation != full.Generation ||
		!v.DeletionTimestamp.Equal(full.DeletionTimestamp) {
		t.Errorf("metadata lost: %+v", v.ObjectMeta)
	}
	if v.Labels != nil || v.ResourceVersion != "" || !v.CreationTimestamp.IsZero() || len(v.Annotations) != 2 ||
		v.Annotations[AnnotationSource] != "api" || v.Annotations[bus.AnnotationSeen] != full.Annotations[bus.AnnotationSeen] {
		t.Errorf("metadata kept: labels %v, resourceVersion %q, created %v, annotations %v", v.Labels, v.ResourceVersion, v.CreationTimestamp, v.Annotations)
	}
	// the spec is APIView's but for the volumes, which no reader of the bus
	// copy asks for
	want := apiView(full).Spec
	want.Volumes = nil
	if !equality.Semantic.DeepEqual(v.Spec, want) {
		t.Errorf("spec:\n got %+v\nwant %+v", v.Spec, want)
	}
	if !equality.Semantic.DeepEqual(v.Status, corev1.PodStatus{QOSClass: full.Status.QOSClass}) {
		t.Errorf("status: %+v, want the QoS class alone", v.Status)
	}
	if !bus.FirstSeen(v).Equal(bus.FirstSeen(full)) || bus.FirstSeen(v).IsZero() {
		t.Errorf("first seen %v, want %v", bus.FirstSeen(v), bus.FirstSeen(full))
	}
	static := onBus(conformancePod(2), "file")
	if !isStatic(busView(static), "") || isStatic(v, "") {
		t.Error("a static pod is not told by the source annotation of its view")
	}
	if again := busView(v.DeepCopy()); !equality.Semantic.DeepEqual(again, v) {
		t.Error("the view is not idempotent")
	}
	fullJSON, _ := json.Marshal(full)
	viewJSON, _ := json.Marshal(v)
	t.Logf("conformance pod on the bus as JSON: %d bytes, its bus view %d", len(fullJSON), len(viewJSON))
}

// TestBusViewSameRequests: a manager that keeps the bus view of each pod
// from the bus (and the API view of each API pod) makes the same status
// patches and deletes, and caches the same statuses, as one that keeps both
// whole, where the bus copy is the spec: its probes, sidecars, ephemeral
// containers and readiness gate, a generation newer than the informer's, a
// QoS class and restart policy the API copy does not show, a deletion the
// bus brings before the API copy is read again, and a static pod told by
// its source annotation.
func TestBusViewSameRequests(t *testing.T) {
	update := func(tw *twin, op bus.Op, source string, p *corev1.Pod) {
		tw.m.PodUpdate(op, source, bus.Partition(string(p.UID), 4), []corev1.Pod{*p.DeepCopy()})
	}
	t.Run("spec from the bus", func(t *testing.T) {
		api := boundPod(20)
		b := onBus(api, "api")
		b.Generation = 3 // updated; the informer has not caught up
		b.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: "registry.k8s.io/e2e-test-images/busybox:1.37.0-1", Command: []string{"sh"}}, TargetContainerName: "app"}}
		sameRequests(t, b.UID, []*corev1.Pod{api}, append([]func(*twin){
			func(tw *twin) {
				update(tw, bus.OpAdd, "api", b)
				tw.m.RuntimeStatus(podStatus(b, []corev1.ContainerStatus{cRunning("setup", "c://setup")}, nil))
			},
		}, sidecarToReady(b)...)...)
	})
	t.Run("QoS class and restart policy from the bus", func(t *testing.T) {
		api := boundPod(21)
		api.Status.QOSClass = ""
		b := onBus(api, "api")
		b.Status.QOSClass = corev1.PodQOSGuaranteed
		b.Spec.RestartPolicy = corev1.RestartPolicyNever
		sameRequests(t, b.UID, []*corev1.Pod{api},
			func(tw *twin) {
				update(tw, bus.OpAdd, "api", b)
				tw.m.RuntimeStatus(podStatus(b, []corev1.ContainerStatus{cTerminated("setup", "c://setup", 1)}, nil))
			},
		)
	})
	t.Run("deleted on the bus, finished and deleted", func(t *testing.T) {
		api := conformancePod(22)
		api.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		b := onBus(api, "api")
		now := metav1.NewTime(fixtureTime.Add(time.Minute))
		api.DeletionTimestamp = &now
		deleted := b.DeepCopy()
		deleted.DeletionTimestamp = &now
		sameRequests(t, b.UID, []*corev1.Pod{api},
			func(tw *twin) {
				update(tw, bus.OpAdd, "api", b)
				readyProbes(tw.m, b, "proxy", "app", "worker")
				tw.m.ProbeResult(probe(b, "proxy", "c://proxy", bus.ProbeStartup, bus.ProbeSuccess))
				tw.m.RuntimeStatus(allRunning(b))
			},
			// the bus says the pod is being deleted; the containers stop and
			// the runtime lost the logger, which was running: shown stopped,
			// its restart not counted (the bus copy's deletionTimestamp)
			func(tw *twin) {
				update(tw, bus.OpDelete, "api", deleted)
				tw.m.RuntimeStatus(deletionStatus(b, false))
			},
			func(tw *twin) {
				tw.m.RuntimeStatus(deletionStatus(b, true))
			},
		)
	})
	t.Run("static pod told by its annotation", func(t *testing.T) {
		static := onBus(boundPod(23), "file")
		static.UID = "static-pod-hash-23"
		mirror := boundPod(23)
		mirror.UID = "mirror-uid-23"
		mirror.Annotations[AnnotationSource] = "file"
		mirror.Annotations[AnnotationMirror] = string(static.UID)
		sameRequests(t, static.UID, []*corev1.Pod{mirror},
			func(tw *twin) {
				// a message that names no source: the annotation decides
				update(tw, bus.OpAdd, "", static)
				tw.m.RuntimeStatus(allRunning(static))
			},
			func(tw *twin) { readyProbes(tw.m, static, "proxy", "app", "worker") },
		)
	})
}

// BenchmarkBusPodBytes: heap the manager's copy of a pod from the bus holds
// (entry.spec), over 5000 pods, as PodUpdate kept it before the bus view
// ("shallow": a shallow copy of the decoded pod, so everything decoded)
// and with it ("view": busView), for conformance-like pods and for bench/'s
// one-container pods, each as podconfig publishes it (onBus).
//
//	go test -run '^$' -bench BusPodBytes -benchtime 1x ./services/statussync/internal/statusmanager/
func BenchmarkBusPodBytes(b *testing.B) {
	benchPodBytes(b, func(p *corev1.Pod) *corev1.Pod { return onBus(p, "api") },
		podKeep{"shallow", func(p *corev1.Pod) any { c := *p; return &c }},
		podKeep{"view", func(p *corev1.Pod) any { return busView(p) }})
}
