package service

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/testenv"
)

// In-place resize on containerd: a new memory limit reaches the running
// container's cgroup without a restart, and its status shows the new
// resources; a CPU change whose resizePolicy is RestartContainer restarts
// the container once.
func TestResizeInPlaceCRI(t *testing.T) {
	e, _ := criEnv(t, "pw-resize")
	out := t.TempDir()
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	e.replicaCS = nodeClientset(t, e.node)
	e.startReplica(t, config.RuntimeCRI, func(c *Config) { c.RootDir = testenv.DataDir(t) })
	res := func(cpu, mem string) corev1.ResourceRequirements {
		l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
		return corev1.ResourceRequirements{Limits: l, Requests: l.DeepCopy()}
	}
	dir := corev1.HostPathDirectory
	admin := controlPlane(t).Clientset()
	// the API server checks a resize against the pod's Node.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.node}}
	node, err := admin.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}
	node.Status.Allocatable = node.Status.Capacity
	if _, err := admin.CoreV1().Nodes().UpdateStatus(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), e.node, metav1.DeleteOptions{}) })
	p := newPod(t, admin, "resized", func(p *corev1.Pod) {
		e.podDefaults(p)
		p.Spec.NodeName = e.node
		p.Spec.Volumes = []corev1.Volume{{Name: "out", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: out, Type: &dir}}}}
		c := &p.Spec.Containers[0]
		c.Resources = res("200m", "64Mi")
		c.ResizePolicy = []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.RestartContainer}}
		c.VolumeMounts = []corev1.VolumeMount{{Name: "out", MountPath: "/out"}}
		c.Command = []string{"sh", "-c", `while true; do cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max 2>/dev/null | head -1 > /out/mem.tmp && mv /out/mem.tmp /out/mem; sleep 0.2; done`}
	})
	e.track(p)
	e.send(bus.OpAdd, p)
	mem := func() string {
		data, _ := os.ReadFile(filepath.Join(out, "mem"))
		return strings.TrimSpace(string(data))
	}
	var resized *corev1.Pod
	eventually(t, 60*time.Second, "the container reporting its memory limit", func() bool { return mem() == "67108864" })
	eventually(t, 30*time.Second, "the container's status", func() bool { st, _ := e.get(p.UID); return containerRunning(st) })
	st, _ := e.get(p.UID)
	first := st.ContainerStatuses[0]
	if r := first.Resources; r == nil || r.Limits.Memory().String() != "64Mi" {
		t.Fatalf("status resources %+v, want the 64Mi limit", r)
	}

	// memory: in place.
	p.Spec.Containers[0].Resources = res("200m", "96Mi")
	resized, err = admin.CoreV1().Pods("default").UpdateResize(context.Background(), p.Name, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.send(bus.OpUpdate, resized)
	eventually(t, 60*time.Second, "the new memory limit in the running container", func() bool { return mem() == "100663296" })
	eventually(t, 30*time.Second, "the status showing the new limit", func() bool {
		st, _ := e.get(p.UID)
		c := st.ContainerStatuses[0]
		return c.Resources != nil && c.Resources.Limits.Memory().String() == "96Mi" &&
			c.AllocatedResources.Memory().String() == "96Mi"
	})
	if st, _ := e.get(p.UID); st.ContainerStatuses[0].ContainerID != first.ContainerID || st.ContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("a memory resize restarted the container: %+v", st.ContainerStatuses[0])
	}

	// CPU, whose policy says RestartContainer: one restart.
	resized.Spec.Containers[0].Resources = res("300m", "96Mi")
	resized, err = admin.CoreV1().Pods("default").UpdateResize(context.Background(), p.Name, resized, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.send(bus.OpUpdate, resized)
	eventually(t, 60*time.Second, "the container restarted with 300m", func() bool {
		st, _ := e.get(p.UID)
		c := st.ContainerStatuses[0]
		return c.RestartCount == 1 && c.State.Running != nil && c.Resources != nil && c.Resources.Limits.Cpu().String() == "300m"
	})
}
