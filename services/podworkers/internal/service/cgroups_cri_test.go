package service

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/cgroups"
	"github.com/splitlet/splitlet/libs/config"
)

// removeCgroupRoot removes a test's cgroup root and what is below it.
func removeCgroupRoot(t *testing.T, root string) {
	fsys, err := cgroups.DetectFS()
	if err != nil {
		return
	}
	if err := fsys.Remove(root); err != nil {
		t.Errorf("cleanup of the cgroups under %s: %v", root, err)
	}
}

// hostCgroups reads the cgroups of a test's layout on this host, in the
// host's cgroup version.
type hostCgroups struct {
	t    *testing.T
	fs   *cgroups.FS
	root string
}

// dir is the directory of a controller's files of the cgroup at rel
// (below the test's root).
func (h *hostCgroups) dir(controller, rel string) string {
	if h.fs.V2 {
		return filepath.Join(h.fs.Mount, h.root, rel)
	}
	return filepath.Join(h.fs.Controllers[controller], h.root, rel)
}

func (h *hostCgroups) exists(rel string) bool {
	_, err := os.Stat(h.dir("cpu", rel))
	return err == nil
}

func (h *hostCgroups) read(controller, rel, file string) string {
	data, err := os.ReadFile(filepath.Join(h.dir(controller, rel), file))
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(string(data))
}

// unlimited is "no memory limit" as the host writes it.
func (h *hostCgroups) unlimited() string {
	if h.fs.V2 {
		return "max"
	}
	return h.read("memory", "", "memory.limit_in_bytes") // the root's: unlimited
}

// check compares a cgroup's values with the v1 figures wanted (quota 0
// for none, memory 0 for no limit, pids "" not checked), in the files of
// the host's version.
func (h *hostCgroups) check(rel string, shares uint64, quota int64, memory int64, pids string) {
	h.t.Helper()
	for _, e := range h.mismatches(rel, shares, quota, memory, pids) {
		h.t.Error(e)
	}
}

// eventually waits until a cgroup has the values (a QoS cgroup is sized
// again by the housekeeping when two pods' starts raced).
func (h *hostCgroups) eventually(rel string, shares uint64, quota int64, memory int64, pids string) {
	h.t.Helper()
	var last []string
	err := wait.PollUntilContextTimeout(h.t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = h.mismatches(rel, shares, quota, memory, pids)
		return len(last) == 0, nil
	})
	if err != nil {
		h.t.Fatalf("%s's values: %v (%v)", rel, last, err)
	}
}

func (h *hostCgroups) mismatches(rel string, shares uint64, quota int64, memory int64, pids string) []string {
	mem := h.unlimited()
	if memory > 0 {
		mem = strconv.FormatInt(memory, 10)
	}
	want := map[[2]string]string{}
	if h.fs.V2 {
		cpuMax := "max 100000"
		if quota > 0 {
			cpuMax = strconv.FormatInt(quota, 10) + " 100000"
		}
		want[[2]string{"cpu", "cpu.weight"}] = strconv.FormatUint(cgroups.WeightOf(shares), 10)
		want[[2]string{"cpu", "cpu.max"}] = cpuMax
		want[[2]string{"memory", "memory.max"}] = mem
	} else {
		q := "-1"
		if quota > 0 {
			q = strconv.FormatInt(quota, 10)
		}
		want[[2]string{"cpu", "cpu.shares"}] = strconv.FormatUint(shares, 10)
		want[[2]string{"cpu", "cpu.cfs_quota_us"}] = q
		want[[2]string{"memory", "memory.limit_in_bytes"}] = mem
	}
	if pids != "" {
		want[[2]string{"pids", "pids.max"}] = pids
	}
	var out []string
	for k, v := range want {
		if got := h.read(k[0], rel, k[1]); got != v {
			out = append(out, fmt.Sprintf("%s %s: %q, want %q", rel, k[1], got, v))
		}
	}
	return out
}

func resources(req, lim corev1.ResourceList) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: req, Limits: lim}
}

func cpuMem(cpu, mem string) corev1.ResourceList {
	l := corev1.ResourceList{}
	if cpu != "" {
		l[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		l[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return l
}

// --runtime=cri with cgroups-per-qos lays the pods' cgroups out on the host
// as the kubelet does: kubepods, burstable and besteffort under the
// cgroup root, a pod<uid> cgroup per pod (a Guaranteed pod's directly
// under kubepods) with its CPU shares, CFS quota, memory and pids limits,
// the RuntimeClass overhead added, the container's cgroup under the pod's;
// a deleted pod's cgroup goes, a deleted QoS cgroup comes back, and the
// cgroup of a pod without a sandbox is removed.
func TestCRICgroupsPerQOS(t *testing.T) {
	e, _ := criEnv(t, "pw-cgroups")
	fsys, err := cgroups.DetectFS()
	if err != nil {
		t.Fatal(err)
	}
	h := &hostCgroups{t: t, fs: fsys, root: e.cgroupRoot}
	e.startReplica(t, config.RuntimeCRI, func(c *Config) {
		c.Cgroups.PodPidsLimit = 512
		c.CgroupReconcile = 200 * time.Millisecond
	})
	guaranteed := e.busPod("guaranteed", func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources = resources(cpuMem("200m", "64Mi"), cpuMem("200m", "64Mi"))
	})
	burstable := e.busPod("burstable", func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources = resources(cpuMem("100m", ""), cpuMem("300m", "128Mi"))
		side := p.Spec.Containers[0]
		side.Name = "side"
		side.Resources = resources(cpuMem("150m", ""), nil)
		p.Spec.Containers = append(p.Spec.Containers, side)
	})
	bestEffort := e.busPod("besteffort", nil)
	overhead := e.busPod("overhead", func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources = resources(cpuMem("200m", "64Mi"), cpuMem("200m", "64Mi"))
		p.Spec.Overhead = cpuMem("100m", "32Mi")
	})
	pods := []*corev1.Pod{guaranteed, burstable, bestEffort, overhead}
	e.track(pods...)
	e.send(bus.OpAdd, pods...)
	eventually(t, 2*time.Minute, "the four pods running", func() bool {
		for _, p := range pods {
			if st, _ := e.get(p.UID); !settled(st) {
				return false
			}
		}
		return true
	})

	podDir := func(qos, uid string) string { return filepath.Join("kubepods", qos, "pod"+uid) }
	h.check(podDir("", string(guaranteed.UID)), 204, 20000, 64<<20, "512")
	// burstable: a CPU limit on one container only, a memory limit on one
	// only: no quota, no memory limit; shares of the summed requests.
	h.check(podDir("burstable", string(burstable.UID)), 256, 0, 0, "512")
	h.check(podDir("besteffort", string(bestEffort.UID)), 2, 0, 0, "512")
	// overhead: 200m+100m CPU, 64Mi+32Mi memory.
	h.check(podDir("", string(overhead.UID)), 307, 30000, 96<<20, "512")
	// QoS cgroups: burstable the shares of its pods' requests (250m),
	// besteffort the least.
	h.eventually("kubepods/burstable", 256, 0, 0, "")
	h.check("kubepods/besteffort", 2, 0, 0, "")

	// each container's cgroup is under its pod's (containerd's cgroupfs
	// path: <parent>/<container id>).
	for _, p := range pods {
		st, _ := e.get(p.UID)
		for _, c := range st.ContainerStatuses {
			id := strings.TrimPrefix(c.ContainerID, "containerd://")
			qos := map[*corev1.Pod]string{burstable: "burstable", bestEffort: "besteffort"}[p]
			if rel := filepath.Join(podDir(qos, string(p.UID)), id); !h.exists(rel) {
				t.Errorf("pod %s container %s: no cgroup at %s", p.Name, c.Name, rel)
			}
		}
	}

	// a deleted pod's cgroup goes with its sandbox.
	e.send(bus.OpDelete, markDeleted(burstable))
	eventually(t, time.Minute, "the burstable pod terminated", func() bool { st, _ := e.get(burstable.UID); return st.Terminated })
	e.send(bus.OpRemove, burstable)
	eventually(t, time.Minute, "the burstable pod's cgroup removed", func() bool {
		return !h.exists(podDir("burstable", string(burstable.UID)))
	})

	// a deleted QoS cgroup is made again, sized from the pods left.
	if err := fsys.Remove(filepath.Join(e.cgroupRoot, "kubepods", "burstable")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the burstable cgroup made again", func() bool { return h.exists("kubepods/burstable") })
	h.eventually("kubepods/burstable", 2, 0, 0, "")

	// the cgroup of a pod that has no sandbox (its pod removed while no
	// pod worker ran) is removed.
	orphan := filepath.Join(e.cgroupRoot, "kubepods", "besteffort", "pod"+string(uuid.NewUUID()))
	if err := fsys.Ensure(orphan, cgroups.BestEffortResources()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the orphaned pod cgroup removed", func() bool {
		return !h.exists(strings.TrimPrefix(orphan, e.cgroupRoot))
	})
	if !h.exists(podDir("besteffort", string(bestEffort.UID))) {
		t.Error("the running BestEffort pod's cgroup went with the orphan")
	}
}
