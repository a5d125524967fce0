package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/splitlet/splitlet/libs/testenv"
)

// memoryAvailable is the node's memory.available as the kubelet computes
// it: MemTotal less the root memory cgroup's working set (cgroup v1).
func memoryAvailable(t *testing.T) int64 {
	t.Helper()
	keyed := func(path string) map[string]int64 {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		out := map[string]int64{}
		s := bufio.NewScanner(f)
		for s.Scan() {
			fs := strings.Fields(s.Text())
			if len(fs) >= 2 {
				v, _ := strconv.ParseInt(fs[1], 10, 64)
				out[strings.TrimSuffix(fs[0], ":")] = v
			}
		}
		return out
	}
	total := keyed("/proc/meminfo")["MemTotal"] << 10
	b, err := os.ReadFile("/sys/fs/cgroup/memory/memory.usage_in_bytes")
	if err != nil {
		t.Fatalf("this test reads the cgroup v1 root memory cgroup: %v", err)
	}
	usage, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	inactive := keyed("/sys/fs/cgroup/memory/memory.stat")["total_inactive_file"]
	return total - (usage - inactive)
}

func nodeCondition(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func podEvents(ctx context.Context, cs kubernetes.Interface, pod, reason string) ([]corev1.Event, error) {
	list, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.name": pod, "reason": reason}.String()})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// evictedMessage is the kubelet's message of a pod evicted for memory
// whose container "hog" used more than its request (none).
var evictedMessage = regexp.MustCompile(`^The node was low on resource: memory\. Threshold quantity: \S+, available: \S+\. Container hog was using \S+, request is 0, has larger consumption of memory\. $`)

// TestEvictionUnderMemoryPressure: on containerd, with a memory.available
// threshold just under what the host has free, a BestEffort pod that
// allocates memory is evicted before a Guaranteed one, with the kubelet's
// status (Failed, Evicted, its message) and Event; the Node shows
// MemoryPressure (KubeletHasInsufficientMemory) and a BestEffort pod
// created meanwhile is refused with the kubelet's admission message; the
// eviction manager (nodehb, a process of its own) is killed with SIGKILL
// while the evicted pod still terminates, and started again: the pod is
// evicted once (one Event, the first message), the Guaranteed pod is
// never evicted, and MemoryPressure clears after the transition period.
func TestEvictionUnderMemoryPressure(t *testing.T) {
	testenv.SkipShort(t, "containerd, etcd and kube-apiserver")
	ctx := t.Context()
	cd := hostContainerd(t)
	cp := testenv.ControlPlaneForTest(t)
	bin := buildBinary(t)
	const node = "e2e-evict"
	natsPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	startSplitlet(t, bin, cp, node, "agent", "--services=podconfig,podworkers,prober,statussync",
		"--runtime=cri", "--cri-endpoint="+cd.Endpoint, fmt.Sprintf("--nats-listen=127.0.0.1:%d", natsPort))

	// The threshold: 1.2 GiB under what is free now; the hog takes 2.4 GB
	// (two buffers of 1.2 GB: busybox's tail gives up near 2 GB).
	threshold := (memoryAvailable(t) - 1229<<20) >> 20
	kubeletPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dataDir := testenv.DataDir(t)
	nodehb := func() *killable {
		return startKillable(t, bin, "--services=nodehb", "--kubeconfig="+cp.Kubeconfig, "--node-name="+node,
			"--data-dir="+dataDir, "--http-addr=127.0.0.1:0", "--runtime=cri",
			fmt.Sprintf("--nats-url=nats://127.0.0.1:%d", natsPort),
			fmt.Sprintf("--nodehb.port=%d", kubeletPort), "--nodehb.client-ca-file="+cp.CAFile,
			// a soft threshold of no grace period, and a long pod grace
			// period: the evicted pod terminates for a while (its shell, PID
			// 1, ignores SIGTERM), long enough to kill nodehb meanwhile.
			"--nodehb.eviction-hard=", fmt.Sprintf("--nodehb.eviction-soft=memory.available<%dMi", threshold),
			"--nodehb.eviction-soft-grace-period=memory.available=0s", "--nodehb.eviction-max-pod-grace-period=20",
			"--nodehb.eviction-pressure-transition-period=5s", "--nodehb.eviction-monitoring-interval=1s",
			"--nodehb.node-status-update-frequency=1s")
	}
	first := nodehb()
	cs := cp.Clientset()
	waitNodeReady(t, cs, node)

	mk := func(name string, guaranteed bool, command string) {
		c := corev1.Container{Name: "hog", Image: testenv.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"sh", "-c", command}}
		if guaranteed {
			c.Name = "steady"
			rl := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
			c.Resources = corev1.ResourceRequirements{Requests: rl, Limits: rl}
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: node, HostNetwork: true, TerminationGracePeriodSeconds: ptr(int64(60)),
				RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{c}}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
		})
	}
	podOf := func(name string) (*corev1.Pod, error) {
		return cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	}
	running := func(name string) {
		testenv.Eventually(t, 2*time.Minute, name+" Running", func() (bool, string) {
			p, err := podOf(name)
			if err != nil {
				return false, err.Error()
			}
			return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
		})
	}
	mk("steady", true, "while true; do sleep 1; done")
	running("steady")
	// its shell and the pipeline ignore SIGTERM: it stops only when killed
	// at the end of its grace period.
	mk("hog", false, "trap '' TERM; (head -c 1200000000 /dev/zero; sleep 3600) | tail -n 1 & (head -c 1200000000 /dev/zero; sleep 3600) | tail -n 1")

	// Evicted: the Event first (the pod turns Failed once its containers
	// have stopped); the Node under MemoryPressure.
	var sawPressure bool
	var message string
	testenv.Eventually(t, 2*time.Minute, "hog's Evicted Event", func() (bool, string) {
		if n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil {
			if c := nodeCondition(n, corev1.NodeMemoryPressure); c != nil && c.Status == corev1.ConditionTrue {
				if c.Reason != "KubeletHasInsufficientMemory" || c.Message != "kubelet has insufficient memory available" {
					t.Errorf("MemoryPressure: %s %q", c.Reason, c.Message)
				}
				sawPressure = true
			}
		}
		evs, err := podEvents(ctx, cs, "hog", "Evicted")
		if err != nil || len(evs) == 0 {
			return false, fmt.Sprint(err)
		}
		message = evs[0].Message
		return true, ""
	})
	if !evictedMessage.MatchString(message) {
		t.Fatalf("hog's Evicted Event: %q", message)
	}

	// Mid-eviction (hog still terminating, memory still held): SIGKILL of
	// the eviction manager, and a new one.
	if hog, err := podOf("hog"); err != nil || len(hog.Status.ContainerStatuses) != 1 || hog.Status.ContainerStatuses[0].State.Running == nil {
		t.Fatalf("hog no longer terminating when nodehb is killed: %v %+v", err, hog.Status)
	}
	first.kill(t)
	mk("late", false, "sleep 3600")
	secondLog := nodehb().logs

	// Under MemoryPressure, a BestEffort pod is refused at admission.
	testenv.Eventually(t, time.Minute, "MemoryPressure on the Node", func() (bool, string) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := nodeCondition(n, corev1.NodeMemoryPressure)
		sawPressure = sawPressure || (c != nil && c.Status == corev1.ConditionTrue)
		return sawPressure, fmt.Sprint(c)
	})
	testenv.Eventually(t, time.Minute, "late refused", func() (bool, string) {
		p, err := podOf("late")
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodFailed, fmt.Sprintf("%s %s %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
	})
	if late, _ := podOf("late"); late.Status.Reason != "Evicted" || late.Status.Message != "Pod was rejected: The node had condition: [MemoryPressure]. " {
		t.Errorf("late: %s %q", late.Status.Reason, late.Status.Message)
	}

	// The new eviction manager found the pressure and hog first, and was
	// told hog is being evicted already.
	testenv.Eventually(t, time.Minute, "the new nodehb told hog is evicted already", func() (bool, string) {
		return strings.Contains(secondLog.String(), "pod already evicted or terminating"), ""
	})

	// The pressure ends with hog; the condition clears after the
	// transition period.
	testenv.Eventually(t, 2*time.Minute, "MemoryPressure cleared", func() (bool, string) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := nodeCondition(n, corev1.NodeMemoryPressure)
		return c != nil && c.Status == corev1.ConditionFalse && c.Reason == "KubeletHasSufficientMemory", fmt.Sprint(c)
	})

	// hog ends Failed, with the kubelet's reason and the message.
	testenv.Eventually(t, time.Minute, "hog Failed", func() (bool, string) {
		p, err := podOf("hog")
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodFailed, fmt.Sprintf("%s %s %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
	})

	// Evicted once: one Event, the first message kept; steady untouched.
	events, err := podEvents(ctx, cs, "hog", "Evicted")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Count > 1 || events[0].Type != corev1.EventTypeWarning || events[0].Message != message {
		t.Fatalf("hog's Evicted events: want one with %q, got %+v", message, events)
	}
	hog, err := podOf("hog")
	if err != nil || hog.Status.Reason != "Evicted" || hog.Status.Message != message || hog.Status.Phase != corev1.PodFailed {
		t.Fatalf("hog's status: %v %+v, want Failed, Evicted, %q", err, hog.Status, message)
	}
	// kubelet: a node-pressure eviction marks the pod DisruptionTarget.
	disrupted := slices.ContainsFunc(hog.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonTerminationByKubelet && c.Message == message
	})
	if !disrupted {
		t.Fatalf("hog's conditions %+v: want DisruptionTarget True, TerminationByKubelet, %q", hog.Status.Conditions, message)
	}
	steady, err := podOf("steady")
	if err != nil {
		t.Fatal(err)
	}
	if steady.Status.Phase != corev1.PodRunning || steady.Status.Reason != "" {
		t.Fatalf("the Guaranteed pod: %s %s %q, containers %+v", steady.Status.Phase, steady.Status.Reason, steady.Status.Message, steady.Status.ContainerStatuses)
	}
	if evs, _ := podEvents(ctx, cs, "steady", "Evicted"); len(evs) != 0 {
		t.Fatalf("the Guaranteed pod was evicted: %+v", evs)
	}
}

// TestEvictionLocalStorageLimits: on containerd, a pod that fills its
// emptyDir past sizeLimit, one whose container writes past the pod's
// ephemeral-storage limit, and one whose container writes past its own are
// evicted with the kubelet's status and Event.
func TestEvictionLocalStorageLimits(t *testing.T) {
	testenv.SkipShort(t, "containerd, etcd and kube-apiserver")
	ctx := t.Context()
	cd := hostContainerd(t)
	cp := testenv.ControlPlaneForTest(t)
	const node = "e2e-localstorage"
	// no node-pressure thresholds: the host's own free disk must not evict
	// these pods before their limits do.
	startAgent(t, cp, node, "--runtime=cri", "--cri-endpoint="+cd.Endpoint, "--podworkers.local-storage-check-interval=1s",
		"--nodehb.eviction-hard=")
	cs := cp.Clientset()
	waitNodeReady(t, cs, node)
	mi := resource.MustParse("1Mi")
	storage := corev1.ResourceList{corev1.ResourceEphemeralStorage: mi}
	filler := func(name, path string) corev1.Container {
		return corev1.Container{Name: name, Image: testenv.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"sh", "-c", "dd if=/dev/zero of=" + path + " bs=1M count=4 && sync; sleep 3600"}}
	}
	idle := corev1.Container{Name: "idle", Image: testenv.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
		Command: []string{"sleep", "3600"}, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("100Mi")}}}
	emptyDir := filler("fill", "/scratch/fill")
	emptyDir.VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	podLimit := filler("fill", "/tmp/fill")
	podLimit.Resources.Limits = storage
	ownLimit := podLimit
	cases := []struct {
		name, want string
		spec       corev1.PodSpec
	}{
		{"emptydir", `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". `, corev1.PodSpec{Containers: []corev1.Container{emptyDir},
			Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &mi}}}}}},
		// one container with a limit: the pod's total limit is its own.
		{"pod-limit", "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. ", corev1.PodSpec{Containers: []corev1.Container{podLimit}}},
		// the pod stays under its total (101Mi); the container goes over its own.
		{"container-limit", `Container fill exceeded its local ephemeral storage limit "1Mi". `, corev1.PodSpec{Containers: []corev1.Container{ownLimit, idle}}},
	}
	for _, c := range cases {
		spec := c.spec
		spec.NodeName, spec.HostNetwork, spec.TerminationGracePeriodSeconds = node, true, ptr(int64(30))
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: "default"}, Spec: spec}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
		})
	}
	for _, c := range cases {
		testenv.Eventually(t, 2*time.Minute, c.name+" evicted", func() (bool, string) {
			p, err := cs.CoreV1().Pods("default").Get(ctx, c.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted" && p.Status.Message == c.want,
				fmt.Sprintf("%s %s %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
		})
		testenv.Eventually(t, time.Minute, c.name+"'s Evicted Event", func() (bool, string) {
			evs, err := podEvents(ctx, cs, c.name, "Evicted")
			if err != nil {
				return false, err.Error()
			}
			return len(evs) == 1 && evs[0].Message == c.want && evs[0].Type == corev1.EventTypeWarning, fmt.Sprint(evs)
		})
	}
}

// loopFilesystem mounts an ext4 file system of size MiB of its own at a new
// directory, unmounted when the test ends: a disk the test may fill.
func loopFilesystem(t *testing.T, size int) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "fs.img")
	dir := t.TempDir()
	for _, args := range [][]string{
		{"truncate", "-s", fmt.Sprintf("%dM", size), img},
		{"mkfs.ext4", "-q", "-F", img},
		{"mount", "-o", "loop", img, dir},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", dir, err, out)
		}
	})
	return dir
}

// startOnSmallDisk starts the node on the cri runtime with its data
// directory on a 2 GiB file system of its own (sparse: room for the bus's
// streams, which the embedded server sizes from the free space) and the
// nodefs.available threshold underFreeMiB under what is free there, with
// the eviction loop and the Node status on a one-second beat.
func startOnSmallDisk(t *testing.T, cd *testenv.Containerd, cp *testenv.ControlPlane, node string, underFreeMiB int64) {
	t.Helper()
	dataDir := loopFilesystem(t, 2048)
	var st unix.Statfs_t
	if err := unix.Statfs(dataDir, &st); err != nil {
		t.Fatal(err)
	}
	threshold := (int64(st.Bavail)*st.Bsize)>>20 - underFreeMiB
	startAgent(t, cp, node, "--runtime=cri", "--cri-endpoint="+cd.Endpoint, "--data-dir="+dataDir,
		fmt.Sprintf("--nodehb.eviction-hard=nodefs.available<%dMi", threshold), "--nodehb.eviction-pressure-transition-period=5s",
		"--nodehb.eviction-monitoring-interval=1s", "--nodehb.node-status-update-frequency=1s")
}

// TestEvictionUnderDiskPressure: the node's data directory on a small file
// system of its own; a pod filling an emptyDir there brings nodefs.available
// under the threshold: the node reports DiskPressure, reclaims at node level
// first (nothing to free there), evicts the pod with the kubelet's reason
// and message, and clears DiskPressure once the pod's volume is gone.
func TestEvictionUnderDiskPressure(t *testing.T) {
	testenv.SkipShort(t, "containerd, etcd, kube-apiserver, root and a loop device")
	ctx := t.Context()
	cd := hostContainerd(t)
	cp := testenv.ControlPlaneForTest(t)
	const node = "e2e-diskpressure"
	// the threshold 64 MiB under what is free.
	startOnSmallDisk(t, cd, cp, node, 64)
	cs := cp.Clientset()
	waitNodeReady(t, cs, node)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "disk-filler", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, HostNetwork: true, TerminationGracePeriodSeconds: ptr(int64(1)), RestartPolicy: corev1.RestartPolicyNever,
			Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{{Name: "fill", Image: testenv.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command:      []string{"sh", "-c", "dd if=/dev/zero of=/scratch/fill bs=1M count=160; sync; sleep 3600"},
				VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	})
	diskPressure := func(want corev1.ConditionStatus, reason string) func() (bool, string) {
		return func() (bool, string) {
			n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			c := nodeCondition(n, corev1.NodeDiskPressure)
			return c != nil && c.Status == want && c.Reason == reason, fmt.Sprint(c)
		}
	}
	testenv.Eventually(t, 2*time.Minute, "DiskPressure", diskPressure(corev1.ConditionTrue, "KubeletHasDiskPressure"))
	testenv.Eventually(t, 2*time.Minute, "disk-filler evicted", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted" &&
				strings.HasPrefix(p.Status.Message, "The node was low on resource: ephemeral-storage. Threshold quantity: "),
			fmt.Sprintf("%s %s %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
	})
	testenv.Eventually(t, 2*time.Minute, "DiskPressure cleared", diskPressure(corev1.ConditionFalse, "KubeletHasNoDiskPressure"))
}

// TestEvictionRanksDiskByUsage: two pods fill emptyDirs on the node's own
// small file system until, together, they bring nodefs.available under the
// threshold. The one writing more beyond its ephemeral-storage request
// goes first (kubelet: rankDiskPressureFunc), though the other writes more
// in all and comes first by name; the other keeps running once the
// pressure is gone.
func TestEvictionRanksDiskByUsage(t *testing.T) {
	testenv.SkipShort(t, "containerd, etcd, kube-apiserver, root and a loop device")
	ctx := t.Context()
	cd := hostContainerd(t)
	cp := testenv.ControlPlaneForTest(t)
	const node = "e2e-diskrank"
	// met only by both pods' writes together (130Mi + 80Mi).
	startOnSmallDisk(t, cd, cp, node, 180)
	cs := cp.Clientset()
	waitNodeReady(t, cs, node)
	filler := func(name string, mib int, request string) *corev1.Pod {
		c := corev1.Container{Name: "fill", Image: testenv.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
			Command:      []string{"sh", "-c", fmt.Sprintf("dd if=/dev/zero of=/scratch/fill bs=1M count=%d; sync; sleep 3600", mib)},
			VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}
		if request != "" {
			c.Resources.Requests = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse(request)}
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: node, HostNetwork: true, TerminationGracePeriodSeconds: ptr(int64(1)), RestartPolicy: corev1.RestartPolicyNever,
				Volumes:    []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				Containers: []corev1.Container{c}}}
	}
	// a: 130Mi, 30Mi over its request; b: 80Mi, all of it over (none).
	for _, p := range []*corev1.Pod{filler("a-over-request", 130, "100Mi"), filler("b-no-request", 80, "")} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.CoreV1().Pods("default").Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
		})
	}
	phase := func(name string) (*corev1.Pod, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err.Error()
		}
		return p, fmt.Sprintf("%s %s %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	testenv.Eventually(t, 3*time.Minute, "a pod evicted", func() (bool, string) {
		a, sa := phase("a-over-request")
		b, sb := phase("b-no-request")
		return (a != nil && a.Status.Phase == corev1.PodFailed) || (b != nil && b.Status.Phase == corev1.PodFailed), sa + "; " + sb
	})
	if b, s := phase("b-no-request"); b == nil || b.Status.Reason != "Evicted" ||
		!strings.HasPrefix(b.Status.Message, "The node was low on resource: ephemeral-storage. Threshold quantity: ") {
		a, sa := phase("a-over-request")
		t.Fatalf("b-no-request (80Mi over its request) should go first: b %s; a-over-request (30Mi over) %s (%v)", s, sa, a != nil)
	}
	testenv.Eventually(t, 2*time.Minute, "DiskPressure cleared", func() (bool, string) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := nodeCondition(n, corev1.NodeDiskPressure)
		return c != nil && c.Status == corev1.ConditionFalse, fmt.Sprint(c)
	})
	if a, s := phase("a-over-request"); a == nil || a.Status.Phase != corev1.PodRunning {
		t.Fatalf("a-over-request should still run: %s", s)
	}
}
