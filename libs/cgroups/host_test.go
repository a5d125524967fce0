package cgroups

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// On this host's cgroups (v1 or v2, root): the layout is made with the
// values in the kernel's files, a process can join a pod's cgroup (a v1
// cpuset got its parent's CPUs), a cgroup a process is in is not removed
// (nothing is killed), an empty one is, and PodCgroups lists the pods.
func TestHostLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("needs root and the host's cgroups: skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Fatal("writing cgroups needs root")
	}
	fsys, err := DetectFS()
	if err != nil {
		t.Fatal(err)
	}
	root := "/splitlet-test-cgroups-" + string(uuid.NewUUID())[:8]
	t.Cleanup(func() { _ = fsys.Remove(root) })
	n, err := NewNode(Config{PerQOS: true, Driver: DriverCgroupfs, Root: root, PodPidsLimit: 64, EnforcePods: true}, fsys,
		func() corev1.ResourceList { return list("cpu", "1", "memory", "512Mi") })
	if err != nil {
		t.Fatal(err)
	}
	if err := n.EnsureQoS(300); err != nil {
		t.Fatal(err)
	}
	g := pod(container("a", list("cpu", "500m", "memory", "32Mi"), list("cpu", "500m", "memory", "32Mi")))
	g.UID = uuid.NewUUID()
	if err := n.EnsurePod(g); err != nil {
		t.Fatal(err)
	}
	read := func(controller, rel, file string) string {
		data, err := os.ReadFile(filepath.Join(fsys.dir(controller, filepath.Join(root, rel)), file))
		if err != nil {
			return err.Error()
		}
		return strings.TrimSpace(string(data))
	}
	podRel := filepath.Join("kubepods", "pod"+string(g.UID))
	want := map[[3]string]string{}
	if fsys.V2 {
		want[[3]string{"cpu", "kubepods", "cpu.weight"}] = strconv.FormatUint(WeightOf(1024), 10)
		want[[3]string{"memory", "kubepods", "memory.max"}] = "536870912"
		want[[3]string{"cpu", "kubepods/burstable", "cpu.weight"}] = strconv.FormatUint(WeightOf(307), 10)
		want[[3]string{"cpu", podRel, "cpu.max"}] = "50000 100000"
		want[[3]string{"memory", podRel, "memory.max"}] = "33554432"
	} else {
		want[[3]string{"cpu", "kubepods", "cpu.shares"}] = "1024"
		want[[3]string{"memory", "kubepods", "memory.limit_in_bytes"}] = "536870912"
		want[[3]string{"cpu", "kubepods/burstable", "cpu.shares"}] = "307"
		want[[3]string{"cpu", "kubepods/besteffort", "cpu.shares"}] = "2"
		want[[3]string{"cpu", podRel, "cpu.shares"}] = "512"
		want[[3]string{"cpu", podRel, "cpu.cfs_quota_us"}] = "50000"
		want[[3]string{"memory", podRel, "memory.limit_in_bytes"}] = "33554432"
	}
	want[[3]string{"pids", podRel, "pids.max"}] = "64"
	for k, v := range want {
		if got := read(k[0], k[1], k[2]); got != v {
			t.Errorf("%s %s: %q, want %q", k[1], k[2], got, v)
		}
	}

	// a process in the pod's cgroup (every hierarchy) keeps it.
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	for _, d := range fsys.dirs(filepath.Join(root, podRel)) {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0o644); err != nil {
			t.Fatalf("a process cannot join %s: %v", d, err)
		}
	}
	if pods, err := n.PodCgroups(); err != nil || len(pods) != 1 || pods[g.UID] == "" {
		t.Errorf("PodCgroups %v (%v)", pods, err)
	}
	if err := n.RemovePod(g.UID); err == nil {
		t.Error("removed the cgroup of a running process")
	}
	if !fsys.Exists(filepath.Join(root, podRel)) {
		t.Fatal("the cgroup of a running process went")
	}
	_ = sleep.Process.Kill()
	_ = sleep.Wait()
	// a container's cgroup left below the pod's goes with it.
	for _, d := range fsys.dirs(filepath.Join(root, podRel)) {
		if err := os.Mkdir(filepath.Join(d, "container"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.RemovePod(g.UID); err != nil {
		t.Fatalf("remove a pod cgroup without processes: %v", err)
	}
	for _, d := range fsys.dirs(filepath.Join(root, podRel)) {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", d, err)
		}
	}
}
