package service

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/services/podworkers/internal/admission"
	"github.com/splitlet/splitlet/services/podworkers/internal/ownership"
)

// The replicas cache only what admission and the partition index read: the
// same requests, the host ports, the phase, the mirror annotation; nothing
// of the rest (environment, commands, statuses, labels).
func TestAdmissionView(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", Labels: map[string]string{"a": "b"},
			Annotations: map[string]string{mirrorAnnotation: "hash", "other": "x"}},
		Spec: corev1.PodSpec{NodeName: "n",
			InitContainers: []corev1.Container{{Name: "side", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: req}}},
			Containers: []corev1.Container{{Name: "app", Command: []string{"sleep"}, Env: []corev1.EnvVar{{Name: "K", Value: "v"}},
				Resources: corev1.ResourceRequirements{Requests: req},
				Ports:     []corev1.ContainerPort{{ContainerPort: 80}, {ContainerPort: 81, HostPort: 8081}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app"}}},
	}
	obj, err := admissionView(p)
	if err != nil {
		t.Fatal(err)
	}
	v := obj.(*corev1.Pod)
	want, got := admission.Requests(p), admission.Requests(v)
	for n, q := range want {
		if g := got[n]; g.Cmp(q) != 0 {
			t.Errorf("requests of %s: %v, want %v", n, g.String(), q.String())
		}
	}
	if len(v.Spec.Containers[0].Ports) != 1 || v.Spec.Containers[0].Ports[0].HostPort != 8081 {
		t.Errorf("ports %+v, want the host port alone", v.Spec.Containers[0].Ports)
	}
	if v.Status.Phase != corev1.PodRunning || v.Annotations[mirrorAnnotation] != "hash" || v.UID != "u" {
		t.Errorf("kept %+v", v.ObjectMeta)
	}
	if v.Labels != nil || v.Annotations["other"] != "" || v.Spec.Containers[0].Env != nil || v.Spec.Containers[0].Command != nil ||
		v.Status.PodIP != "" || v.Status.ContainerStatuses != nil {
		t.Errorf("the view keeps more than admission reads: %+v", v)
	}
}

// A replica that owns every partition admits against its own pods and
// watches none of the node's; with two replicas, each counts the pods the
// other admitted (read from the API server), as the kubelet counts every
// pod it admitted.
func TestAdmissionCountsTheOtherReplicasPods(t *testing.T) {
	e := newEnv(t, "pw-admit-two")
	ctx := context.Background()
	n, err := e.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.node}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cs.CoreV1().Nodes().Delete(context.Background(), e.node, metav1.DeleteOptions{}) })
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi"), corev1.ResourcePods: resource.MustParse("10")}
	n.Status.Capacity = n.Status.Allocatable
	if _, err := e.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cpu := func(q string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.NodeName = e.node
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
		}
	}
	ids := spreadIDs(t, "adm", 2)
	a := e.startReplica(t, config.RuntimeSim, tuned(ids[0]))
	eventually(t, 30*time.Second, "one replica owns everything", func() bool { return len(a.OwnedPartitions()) == partitions })
	solo := e.busPod("solo", cpu("100m"))
	e.send(bus.OpAdd, solo)
	eventually(t, 30*time.Second, "the lone replica's pod running", func() bool { st, _ := e.get(solo.UID); return containerRunning(st) })
	if a.nodePods.watching() {
		t.Fatal("a replica that owns every partition watches the node's pods")
	}

	b := e.startReplica(t, config.RuntimeSim, tuned(ids[1]))
	eventually(t, 30*time.Second, "two replicas own as rendezvous says", func() bool {
		return ownersAre(ids, map[string]*Runner{ids[0]: a, ids[1]: b})
	})
	// first: in the API server, admitted by the owner of its partition.
	first := newPod(t, e.cs, "first", cpu("600m"))
	e.send(bus.OpAdd, first)
	eventually(t, 30*time.Second, "the first pod running", func() bool { st, _ := e.get(first.UID); return containerRunning(st) })
	firstOwner := ownership.Preferred(bus.Partition(string(first.UID), partitions), ids)
	// second: younger, on a partition of the other replica, which sees
	// first only through the API server.
	var second *corev1.Pod
	for second == nil || ownership.Preferred(bus.Partition(string(second.UID), partitions), ids) == firstOwner {
		second = e.busPod("second", cpu("600m"))
	}
	second.CreationTimestamp = metav1.NewTime(first.CreationTimestamp.Add(time.Second))
	e.send(bus.OpAdd, second)
	eventually(t, 30*time.Second, "the second pod rejected", func() bool {
		st, _ := e.get(second.UID)
		return st != nil && st.Phase == corev1.PodFailed && st.Terminated
	})
	if st, _ := e.get(second.UID); st.Reason != "OutOfcpu" {
		t.Fatalf("second pod: %s %q, want OutOfcpu", st.Reason, st.Message)
	}
	other := a
	if firstOwner == ids[0] {
		other = b
	}
	if !other.nodePods.watching() {
		t.Error("the replica that admitted against the other's pods does not watch the node's pods")
	}
}
