package service

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/runtime/cri"
	"github.com/splitlet/splitlet/libs/testenv"
)

// criEndpoint is the CRI endpoint replicas started with --runtime=cri use.
var criEndpoint = config.DefaultCRIEndpoint

// --runtime=cri: a busybox pod runs as a real container of containerd, its
// logs, exec and stats answer over the bus, a delete stops it within its
// grace (it exits 0 on SIGTERM), and a pod whose image cannot be pulled
// waits with ErrImagePull.
func TestCRIPodRunsAndIsTornDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cd, err := testenv.EnsureContainerd(ctx, testenv.ContainerdOptions{})
	if err != nil {
		t.Fatalf("--runtime=cri needs a containerd: %v", err)
	}
	t.Cleanup(cd.Stop)
	// registered before the replica: it runs once the replica has stopped.
	var pods []*corev1.Pod
	t.Cleanup(func() { removePods(t, cd.Endpoint, pods...) })
	criEndpoint = cd.Endpoint
	t.Cleanup(func() { criEndpoint = config.DefaultCRIEndpoint })

	e := newEnv(t, "pw-cri")
	e.startReplica(t, config.RuntimeCRI, nil)
	busybox := func(p *corev1.Pod) {
		p.Spec.NodeName = e.node
		p.Spec.HostNetwork = true
		grace := int64(10)
		p.Spec.TerminationGracePeriodSeconds = &grace
		p.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
		p.Spec.Containers[0].Command = []string{"sh", "-c", `trap 'echo bye; exit 0' TERM; echo hello; while true; do sleep 0.2; done`}
	}
	p := newPod(t, e.cs, "cri-busybox", busybox)
	bad := newPod(t, e.cs, "cri-badimage", func(p *corev1.Pod) {
		busybox(p)
		p.Spec.Containers[0].Image = "127.0.0.1:1/nonexistent:v1"
	})
	pods = append(pods, p, bad)
	e.send(bus.OpAdd, p, bad)
	eventually(t, time.Minute, "the busybox container running", func() bool { st, _ := e.get(p.UID); return containerRunning(st) })
	st, _ := e.get(p.UID)
	if id := st.ContainerStatuses[0].ContainerID; !strings.HasPrefix(id, "containerd://") {
		t.Errorf("container ID %q", id)
	}
	e.checkRuntimeRequests(t, p)
	eventually(t, time.Minute, "the bad image's container waiting with ErrImagePull", func() bool {
		st, _ := e.get(bad.UID)
		return st != nil && len(st.ContainerStatuses) == 1 && st.ContainerStatuses[0].State.Waiting != nil &&
			st.ContainerStatuses[0].State.Waiting.Reason == cri.ReasonErrImagePull
	})
	e.send(bus.OpDelete, markDeleted(p))
	eventually(t, time.Minute, "pod terminated", func() bool { st, _ := e.get(p.UID); return st.Terminated })
	st, _ = e.get(p.UID)
	if term := st.ContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 0 || term.Reason != "Completed" {
		t.Fatalf("final state %+v: want exit 0 on SIGTERM within the grace", st.ContainerStatuses[0].State)
	}
}

// removePods removes what the pods left in the runtime.
func removePods(t *testing.T, endpoint string, pods ...*corev1.Pod) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := cri.New(ctx, cri.WithEndpoint(endpoint))
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer r.Close()
	for _, p := range pods {
		for _, c := range r.PodContainers(p.UID) {
			_ = r.StopContainer(ctx, c.ID, 0)
		}
		if err := r.RemovePod(ctx, p.UID); err != nil {
			t.Errorf("cleanup of %s: %v", p.Name, err)
		}
	}
}
