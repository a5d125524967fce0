package cgroups

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const uid = "1234-abcd"

func TestNames(t *testing.T) {
	pod := Name{"kubepods", "burstable", "pod" + uid}
	if got := pod.Path(DriverCgroupfs); got != "/kubepods/burstable/pod1234-abcd" {
		t.Errorf("cgroupfs %q", got)
	}
	if got := pod.Path(DriverSystemd); got != "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice" {
		t.Errorf("systemd %q", got)
	}
	if got := (Name{}).Path(DriverSystemd); got != "/" {
		t.Errorf("root %q", got)
	}
	for _, c := range []struct {
		root   string
		d      Driver
		want   string
		failed bool
	}{
		{"/", DriverCgroupfs, "/kubepods", false},
		{"/a/b", DriverCgroupfs, "/a/b/kubepods", false},
		{"a", DriverCgroupfs, "", true},
		{"/a/../..", DriverCgroupfs, "/kubepods", false},
		{"/", DriverSystemd, "/kubepods.slice", false},
		{"my-nodes.slice", DriverSystemd, "/my.slice/my-nodes.slice/my-nodes-kubepods.slice", false},
		{"/my.slice/my-nodes.slice", DriverSystemd, "/my.slice/my-nodes.slice/my-nodes-kubepods.slice", false},
		{"/a/b", DriverSystemd, "", true},
	} {
		root, err := ParseRoot(c.root, c.d)
		if (err != nil) != c.failed {
			t.Errorf("ParseRoot(%q, %s): %v", c.root, c.d, err)
			continue
		}
		if err == nil {
			if got := root.Child(KubepodsName).Path(c.d); got != c.want {
				t.Errorf("kubepods under %q (%s): %q, want %q", c.root, c.d, got, c.want)
			}
		}
	}
	for _, c := range []struct {
		base string
		d    Driver
		want string
	}{
		{"pod" + uid, DriverCgroupfs, uid},
		{"burstable", DriverCgroupfs, ""},
		{"kubepods-burstable-pod1234_abcd.slice", DriverSystemd, uid},
		{"kubepods-pod1234_abcd.slice", DriverSystemd, uid},
		{"kubepods-besteffort.slice", DriverSystemd, ""},
	} {
		if got := podUID(c.base, c.d); got != c.want {
			t.Errorf("podUID(%q, %s) = %q, want %q", c.base, c.d, got, c.want)
		}
	}
}

func list(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func container(name string, req, lim corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
}

func pod(cs ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Spec: corev1.PodSpec{Containers: cs}}
}

func val[T any](p *T) any {
	if p == nil {
		return "unset"
	}
	return *p
}

func check(t *testing.T, what string, got Resources, shares, quota, period, memory, pids any) {
	t.Helper()
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"shares", val(got.CPUShares), shares}, {"quota", val(got.CPUQuota), quota}, {"period", val(got.CPUPeriod), period},
		{"memory", val(got.Memory), memory}, {"pids", val(got.PidsLimit), pids},
	} {
		if c.got != c.want {
			t.Errorf("%s: %s %v, want %v", what, c.name, c.got, c.want)
		}
	}
}

// The pod cgroup's values, as the kubelet's ResourceConfigForPod computes
// them, for each QoS class, with overhead and pod-level resources.
func TestPodResources(t *testing.T) {
	g := pod(container("a", list("cpu", "250m", "memory", "64Mi"), list("cpu", "250m", "memory", "64Mi")),
		container("b", list("cpu", "500m", "memory", "32Mi"), list("cpu", "500m", "memory", "32Mi")))
	check(t, "guaranteed", PodResources(g, -1), uint64(768), int64(75000), uint64(100000), int64(96<<20), "unset")

	// Burstable: a quota only when every container has a CPU limit, a
	// memory limit only when every one has a memory limit.
	b := pod(container("a", list("cpu", "100m"), list("cpu", "200m", "memory", "64Mi")), container("b", list("cpu", "100m"), nil))
	check(t, "burstable, one unlimited", PodResources(b, 1024), uint64(204), "unset", "unset", "unset", int64(1024))
	b.Spec.Containers[1].Resources.Limits = list("cpu", "300m")
	check(t, "burstable, CPU limited", PodResources(b, 0), uint64(204), int64(50000), uint64(100000), "unset", "unset")

	// a tiny request: at least 2 shares, a quota at least 1000 µs.
	tiny := pod(container("a", list("cpu", "1m"), list("cpu", "1m")))
	check(t, "burstable, 1m", PodResources(tiny, -1), uint64(2), int64(1000), uint64(100000), "unset", "unset")

	check(t, "besteffort", PodResources(pod(container("a", nil, nil)), 100), uint64(2), "unset", "unset", "unset", int64(100))

	// RuntimeClass overhead is added to requests and limits.
	o := pod(container("a", list("cpu", "250m", "memory", "64Mi"), list("cpu", "250m", "memory", "64Mi")))
	o.Spec.Overhead = list("cpu", "250m", "memory", "32Mi")
	check(t, "guaranteed with overhead", PodResources(o, -1), uint64(512), int64(50000), uint64(100000), int64(96<<20), "unset")
	if got := CPURequestMilli(o); got != 500 {
		t.Errorf("CPU request with overhead %d, want 500", got)
	}

	// init containers: the larger of the longest init container and the
	// sum of the app containers.
	in := pod(container("a", list("cpu", "100m"), nil))
	in.Spec.InitContainers = []corev1.Container{container("init", list("cpu", "1"), nil)}
	check(t, "init container", PodResources(in, -1), uint64(1024), "unset", "unset", "unset", "unset")

	// pod-level resources replace the containers'.
	pl := pod(container("a", nil, nil), container("b", nil, nil))
	pl.Spec.Resources = &corev1.ResourceRequirements{Requests: list("cpu", "1", "memory", "128Mi"), Limits: list("cpu", "2", "memory", "256Mi")}
	check(t, "pod-level resources", PodResources(pl, -1), uint64(1024), int64(200000), uint64(100000), int64(256<<20), "unset")
}

func TestConversions(t *testing.T) {
	for shares, want := range map[uint64]uint64{0: 1, 2: 1, 1024: 39, 262144: 10000, 300000: 10000, 204: 8} {
		if got := WeightOf(shares); got != want {
			t.Errorf("WeightOf(%d) = %d, want %d", shares, got, want)
		}
	}
	for milli, want := range map[int64]uint64{0: 2, 1: 2, 100: 102, 1000: 1024, 1_000_000: 262144} {
		if got := SharesOf(milli); got != want {
			t.Errorf("SharesOf(%d) = %d, want %d", milli, got, want)
		}
	}
	check(t, "kubepods", KubepodsResources(list("cpu", "2", "memory", "1Gi"), true), uint64(2048), "unset", "unset", int64(1<<30), "unset")
	check(t, "kubepods, not enforced", KubepodsResources(list("cpu", "2"), false), "unset", "unset", "unset", "unset", "unset")
	check(t, "burstable", BurstableResources(350), uint64(358), "unset", "unset", "unset", "unset")
}

// A fake cgroup v2 tree: each directory the layout makes gets the
// controllers enabled in its parent and the values in v2's files.
func TestLayoutV2(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpuset cpu io memory hugetlb pids rdma misc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fake := &FS{V2: true, Mount: root}
	// a fake cgroup directory lists the controllers its parent enables.
	n, err := NewNode(Config{PerQOS: true, Driver: DriverSystemd, Root: "/", PodPidsLimit: 100, EnforcePods: true}, fake,
		func() corev1.ResourceList { return list("cpu", "2", "memory", "1Gi") })
	if err != nil {
		t.Fatal(err)
	}
	kubepods := filepath.Join(root, "kubepods.slice")
	if err := os.MkdirAll(kubepods, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(kubepods, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.EnsureQoS(600); err != nil {
		t.Fatal(err)
	}
	b := pod(container("a", list("cpu", "100m"), list("cpu", "200m", "memory", "64Mi")))
	if err := n.EnsurePod(b); err != nil {
		t.Fatal(err)
	}
	read := func(rel string) string {
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Error(err)
		}
		return strings.TrimSpace(string(data))
	}
	want := map[string]string{
		"kubepods.slice/cgroup.subtree_control":                                                    "+cpu +memory +pids",
		"kubepods.slice/cpu.weight":                                                                "79",
		"kubepods.slice/memory.max":                                                                "1073741824",
		"kubepods.slice/kubepods-burstable.slice/cpu.weight":                                       "24",
		"kubepods.slice/kubepods-besteffort.slice/cpu.weight":                                      "1",
		"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice/cpu.weight": "4",
		"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice/cpu.max":    "20000 100000",
		"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice/memory.max": "67108864",
		"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice/pids.max":   "100",
	}
	for rel, v := range want {
		if got := read(rel); got != v {
			t.Errorf("%s: %q, want %q", rel, got, v)
		}
	}
	if got := n.Parent(b); got != "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice" {
		t.Errorf("CgroupParent %q", got)
	}
	pods, err := n.PodCgroups()
	if err != nil || len(pods) != 1 || pods[uid] == "" {
		t.Errorf("pod cgroups %v (%v)", pods, err)
	}
	podDir := filepath.Join(root, n.Parent(b))
	if err := os.WriteFile(filepath.Join(podDir, "pids.current"), []byte("7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := fake.Pids(n.Parent(b)); got != 7 || err != nil {
		t.Errorf("Pids: %d (%v), want 7", got, err)
	}
}

// Without cgroups-per-qos nothing is written and sandboxes go under the
// root.
func TestNoQoS(t *testing.T) {
	root := t.TempDir()
	n, err := NewNode(Config{Driver: DriverCgroupfs, Root: "/custom"}, &FS{V2: true, Mount: root}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := pod(container("a", nil, nil))
	if err := errorsOf(n.EnsureQoS(0), n.EnsurePod(p)); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("wrote %v", entries)
	}
	if got := n.Parent(p); got != "/custom" {
		t.Errorf("CgroupParent %q, want the root", got)
	}
}

func errorsOf(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func TestMountinfo(t *testing.T) {
	in := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	f, err := parseMountinfo(bufio.NewScanner(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(f.Hierarchies, " ") != "/sys/fs/cgroup/cpu,cpuacct /sys/fs/cgroup/memory /sys/fs/cgroup/systemd /sys/fs/cgroup/unified" {
		t.Errorf("hierarchies %v", f.Hierarchies)
	}
	if f.Controllers["cpu"] != "/sys/fs/cgroup/cpu,cpuacct" || f.Controllers["memory"] != "/sys/fs/cgroup/memory" || f.Controllers["pids"] != "" {
		t.Errorf("controllers %v", f.Controllers)
	}
}

// A resize first writes, value by value, the looser of the old and new
// values: a container's new limit is never above its pod's.
func TestLooser(t *testing.T) {
	old := PodResources(pod(container("a", list("cpu", "200m", "memory", "64Mi"), list("cpu", "200m", "memory", "64Mi"))), 100)
	up := PodResources(pod(container("a", list("cpu", "100m", "memory", "128Mi"), list("cpu", "300m", "memory", "128Mi"))), 100)
	check(t, "up", Looser(old, up), uint64(204), int64(30000), uint64(100000), int64(128<<20), int64(100))
	check(t, "down", Looser(up, old), uint64(204), int64(30000), uint64(100000), int64(128<<20), int64(100))
	unlimited := PodResources(pod(container("a", list("cpu", "100m"), nil)), -1)
	check(t, "to no limit", Looser(old, unlimited), uint64(204), int64(-1), uint64(100000), int64(-1), int64(-1))
}
