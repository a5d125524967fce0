package service

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
)

// A pod from the bus, in either encoding, keeps the phase, reason,
// message, start time and QoS class of its API status, and nothing else
// of it; its spec and metadata are whole.
func TestBusPodKeepsWhatPodworkersReads(t *testing.T) {
	start := metav1.NewTime(time.Now().Truncate(time.Second))
	pod := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u", Labels: map[string]string{"k": "v"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory. ",
			StartTime: &start, QOSClass: corev1.PodQOSBurstable, PodIP: "10.0.0.1",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true}}},
	}
	for _, enc := range []bus.Encoding{bus.EncodingProtobuf, bus.EncodingJSON} {
		e, err := bus.NewEnvelopeAs(enc, bus.KindPodUpdate, "n", "w", bus.OpUpdate, &bus.PodUpdate{Pods: []corev1.Pod{pod}})
		if err != nil {
			t.Fatal(err)
		}
		e.Seq, e.SentAt = 1, time.Now()
		data, err := bus.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if e, err = bus.Decode(data); err != nil {
			t.Fatal(err)
		}
		u, err := decodePodUpdate(e)
		if err != nil {
			t.Fatalf("%s: %v", enc, err)
		}
		got := u.Pods[0]
		st := got.Status
		if st.Phase != corev1.PodFailed || st.Reason != "Evicted" || st.Message != pod.Status.Message || st.StartTime == nil ||
			!st.StartTime.Equal(&start) || st.QOSClass != corev1.PodQOSBurstable {
			t.Errorf("%s: lost what podworkers reads: %+v", enc, st)
		}
		if st.PodIP != "" || st.Conditions != nil || st.ContainerStatuses != nil {
			t.Errorf("%s: kept what podworkers does not read: %+v", enc, st)
		}
		if got.Labels["k"] != "v" || got.UID != "u" || len(got.Spec.Containers) != 1 || got.Spec.Containers[0].Image != "busybox" {
			t.Errorf("%s: spec or metadata changed: %+v", enc, got)
		}
	}
}
