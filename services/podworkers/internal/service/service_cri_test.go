package service

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/runtime"
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
	e, _ := criEnv(t, "pw-cri")
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
	e.track(p, bad)
	e.send(bus.OpAdd, p, bad)
	eventually(t, time.Minute, "the busybox container running", func() bool { st, _ := e.get(p.UID); return containerRunning(st) })
	st, _ := e.get(p.UID)
	if id := st.ContainerStatuses[0].ContainerID; !strings.HasPrefix(id, "containerd://") {
		t.Errorf("container ID %q", id)
	}
	e.checkRuntimeRequests(t, p)
	_, js := e.nats.Connect(t)
	if ar := e.lastReadiness(t, js); ar == nil || !strings.HasPrefix(ar.Runtime, "containerd://1.") {
		t.Errorf("AgentReadiness %+v: want the runtime named containerd://<version>", ar)
	}
	eventually(t, time.Minute, "the bad image's container waiting with ErrImagePull", func() bool { return e.sawWaiting(bad.UID, cri.ReasonErrImagePull) })
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

// criEnv is an env whose replicas run --runtime=cri on a containerd for the
// test (the host's when it answers, else one started for it and stopped
// with what it runs): pods run busybox on the host's network, and what the
// tracked pods leave is removed once the replicas have stopped.
func criEnv(t *testing.T, node string) (*env, *testenv.Containerd) {
	t.Helper()
	testenv.SkipShort(t, "containerd")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cd, err := testenv.EnsureContainerd(ctx, testenv.ContainerdOptions{})
	if err != nil {
		t.Fatalf("--runtime=cri needs a containerd: %v", err)
	}
	t.Cleanup(cd.Stop)
	// the test's own cgroup root, removed once the pods are gone.
	cgroupRoot := "/splitlet-test-" + node + "-" + string(uuid.NewUUID())[:8]
	t.Cleanup(func() { removeCgroupRoot(t, cgroupRoot) })
	var mu sync.Mutex
	var pods []*corev1.Pod
	// registered before any replica: it runs once they have stopped.
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		removePods(t, cd.Endpoint, pods...)
	})
	criEndpoint = cd.Endpoint
	t.Cleanup(func() { criEndpoint = config.DefaultCRIEndpoint })
	e := newEnv(t, node)
	e.cgroupRoot = cgroupRoot
	e.onTrack = func(ps ...*corev1.Pod) {
		mu.Lock()
		pods = append(pods, ps...)
		mu.Unlock()
	}
	e.podDefaults = func(p *corev1.Pod) {
		p.Spec.HostNetwork = true
		for i := range p.Spec.Containers {
			p.Spec.Containers[i].ImagePullPolicy = corev1.PullIfNotPresent
		}
	}
	return e, cd
}

// criFlavour runs the adoption tests on containerd, asking containerd
// itself what it holds. With poll > 0 each replica's CRI runtime relists
// that rarely: between polls a replica knows only what it read when it
// started, what it started itself, and what it reads when it takes a
// partition over.
func criFlavour(t *testing.T, e *env, cd *testenv.Containerd, pods int, poll time.Duration) *flavour {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs, err := remote.NewRemoteRuntimeService(ctx, cd.Endpoint, time.Minute, nil, false)
	if err != nil {
		t.Fatalf("CRI client for %s: %v", cd.Endpoint, err)
	}
	t.Cleanup(func() { _ = rs.Close(context.Background()) })
	f := &flavour{runtime: config.RuntimeCRI, pods: pods, leaseTTL: 5 * time.Second}
	if poll > 0 {
		f.fresh = func(t *testing.T, e *env) runtime.Runtime {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r, err := cri.New(ctx, cri.WithEndpoint(cd.Endpoint), cri.WithPollInterval(poll), cri.WithNode(e.node))
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
	}
	// a pod started straight through CRI, as a replica would have before
	// its source deleted it while no replica ran.
	f.orphan = func(t *testing.T, e *env) (*corev1.Pod, func() bool) {
		orphan := e.busPod("orphan", nil)
		e.track(orphan)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := cri.New(ctx, cri.WithEndpoint(cd.Endpoint), cri.WithNode(e.node))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := r.StartContainer(ctx, orphan, &orphan.Spec.Containers[0], 0, runtime.StartOptions{}); err != nil {
			t.Fatalf("start the orphan: %v", err)
		}
		return orphan, func() bool {
			sbs, err := rs.ListPodSandbox(context.Background(), &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{criPodUID: string(orphan.UID)}})
			if err != nil {
				t.Fatal(err)
			}
			cs, err := rs.ListContainers(context.Background(), &runtimeapi.ContainerFilter{LabelSelector: map[string]string{criPodUID: string(orphan.UID)}})
			if err != nil {
				t.Fatal(err)
			}
			return len(sbs) == 0 && len(cs) == 0
		}
	}
	f.check = func(t *testing.T, pods []*corev1.Pod, before map[types.UID]map[string]instance, since time.Time) []string {
		mine := map[string]bool{}
		for _, p := range pods {
			mine[string(p.UID)] = true
		}
		lctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sbs, err := rs.ListPodSandbox(lctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := rs.ListContainers(lctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var problems []string
		for _, sb := range sbs {
			if mine[sb.GetLabels()[criPodUID]] && !time.Unix(0, sb.GetCreatedAt()).Before(since) {
				problems = append(problems, fmt.Sprintf("sandbox %s of pod %s created at %s", sb.GetId(), sb.GetMetadata().GetName(),
					time.Unix(0, sb.GetCreatedAt()).Format(time.RFC3339Nano)))
			}
		}
		held := map[string]bool{}
		for _, c := range cs {
			uid := c.GetLabels()[criPodUID]
			if !mine[uid] {
				continue
			}
			held["containerd://"+c.GetId()] = true
			if !time.Unix(0, c.GetCreatedAt()).Before(since) {
				problems = append(problems, fmt.Sprintf("container %s (%s) of pod %s created at %s", c.GetId(), c.GetMetadata().GetName(), uid,
					time.Unix(0, c.GetCreatedAt()).Format(time.RFC3339Nano)))
			}
		}
		for _, p := range pods {
			for name, in := range before[p.UID] {
				if !held[in.id] {
					problems = append(problems, fmt.Sprintf("pod %s container %s: %s not in containerd", p.Name, name, in.id))
				}
			}
		}
		return problems
	}
	return f
}

// criPodUID is the kubelet's pod UID label on CRI sandboxes and containers.
const criPodUID = "io.kubernetes.pod.uid"

// kill -9 of podworkers while busybox pods run in containerd: the
// restarted replica adopts them; no container or sandbox is created again.
func TestCRIRestartAdoptsPods(t *testing.T) {
	e, cd := criEnv(t, "pw-cri-restart")
	restartAdoptsPods(t, e, criFlavour(t, e, cd, 20, 0))
}

// Three replicas on one containerd, one killed: only its partitions move,
// their pods keep their containers. The replicas' runtimes poll once a
// minute: the survivors see the dead one's containers (started seconds
// before) by reading containerd when they take its partitions. (A minute,
// not never: a start cut short by fencing on a loaded machine leaves a
// container that only a poll shows running.)
func TestCRIKilledReplicaOnlyItsPartitionsMove(t *testing.T) {
	e, cd := criEnv(t, "pw-cri-three")
	killedReplicaOnlyItsPartitionsMove(t, e, criFlavour(t, e, cd, 16, time.Minute))
}

// Scale 1 -> 3 -> 1 replicas on one containerd with pods running: no
// container restarts, nothing is created again (the runtimes poll once a
// minute, as above).
func TestCRIScaleOutAndInKeepsContainers(t *testing.T) {
	e, cd := criEnv(t, "pw-cri-scale")
	scaleOutAndInKeepsContainers(t, e, criFlavour(t, e, cd, 16, time.Minute))
}
