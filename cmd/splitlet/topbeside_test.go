package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/splitlet/splitlet/libs/cgroups"
	"github.com/splitlet/splitlet/libs/testenv"
)

// The two nodes of TestTopBesideKubelet, on the same host.
const (
	topSplitlet = "top-splitlet"
	topKubelet  = "top-kubelet"
)

// topSpan is how much time the figures of each pair (Splitlet's, the
// kubelet's) must cover in common before they are compared.
const topSpan = 80 * time.Second

// TestTopBesideKubelet: a Splitlet node (all in one, on containerd) and the
// real kubelet v1.36.3 (on a containerd of its own: it stops every pod of
// its runtime it does not know) on the same host, registered with one
// control plane, each running the same busy pod (a shell loop held to
// 300m by its CPU limit) and the same idle pod (holding 8 MiB), scraped by
// one metrics-server: the resource metrics API (what `kubectl top` shows)
// gives the same node CPU and memory for both nodes (one machine), the
// same busy pod CPU and the same idle pod memory, within 10 %.
func TestTopBesideKubelet(t *testing.T) {
	testenv.SkipShort(t, "containerd, etcd, kube-apiserver, the kubelet and metrics-server")
	ctx := t.Context()
	nodeIP := testenv.HostAddress()
	if nodeIP == "" {
		t.Fatal("the kubelet needs a node IP that is not loopback: the host has no address on a default route")
	}
	// Each agent lays out its kubepods under a cgroup of its own: the
	// kubelet destroys every pod cgroup under its kubepods it does not
	// know, which would be the other agent's (or another run's).
	cgRoot := agentCgroups(t, "splitlet", "kubelet")
	cd := hostContainerd(t)
	kcd := ownContainerd(t)
	cp := testenv.ControlPlaneForTest(t, testenv.ControlPlaneOptions{AggregationLayer: true})
	startTopSplitlet(t, cp, cd, cgRoot+"/splitlet")
	startTopKubelet(t, cp, kcd, nodeIP, cgRoot+"/kubelet")
	cs := cp.Clientset()
	waitNodeReady(t, cs, topSplitlet)
	waitNodeReady(t, cs, topKubelet)
	for _, node := range []string{topSplitlet, topKubelet} {
		createTopPod(t, cs, "busy-"+node, node, "while :; do :; done", "300m")
		// 8 MiB held in a shell variable: a working set far above what
		// an idle process's page cache charges may move
		createTopPod(t, cs, "idle-"+node, node, "x=$(yes | head -c 8388608); while :; do sleep 3600; done", "100m")
	}
	// Both nodes' serving certificates are signed by the control plane's
	// CA, which metrics-server verifies (no --kubelet-insecure-tls).
	ms, err := testenv.StartMetricsServer(ctx, cp, testenv.MetricsServerOptions{Dir: t.TempDir(), KubeletCAFile: cp.CAFile})
	if err != nil {
		t.Fatalf("metrics-server: %v", err)
	}
	t.Cleanup(func() {
		ms.Stop()
		if t.Failed() {
			log, _ := os.ReadFile(ms.Log)
			t.Logf("metrics-server log:\n%s", tail(string(log), 6000))
		}
	})

	nodes := &topPair{what: "node", paths: [2]string{"/nodes/" + topSplitlet, "/nodes/" + topKubelet}}
	busy := podPair("busy")
	idle := podPair("idle")
	sampleTop(t, cs, nodes, busy, idle)
	checkTop(t, nodes, busy, idle)
	kubectlTop(t, cp)
}

// startTopSplitlet runs the Splitlet node: every stage in one process on
// cd, its kubepods under cgroupRoot, its kubelet API at 127.0.0.1 with a
// serving certificate of the control plane's CA.
func startTopSplitlet(t *testing.T, cp *testenv.ControlPlane, cd *testenv.Containerd, cgroupRoot string) {
	t.Helper()
	dir := t.TempDir()
	certPEM, keyPEM, err := cp.ServerCertificate([]net.IP{net.ParseIP("127.0.0.1")}, []string{topSplitlet, "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	if err := os.WriteFile(cert, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	// no eviction thresholds: a host short of disk evicts no test pod
	startSplitlet(t, buildBinary(t), cp, topSplitlet, "splitlet", "--services=all", "--runtime=cri", "--cri-endpoint="+cd.Endpoint,
		"--nodehb.eviction-hard=", "--cgroup-root="+cgroupRoot, "--nodehb.tls-cert-file="+cert, "--nodehb.tls-private-key-file="+key)
}

// startTopKubelet runs bin/kubelet as the peer node on kcd (its own
// containerd), its kubepods under cgroupRoot, its kubelet API at nodeIP
// (it refuses a loopback node IP); the kernel settings it changes are put
// back and its volumes' mounts undone once it has stopped.
func startTopKubelet(t *testing.T, cp *testenv.ControlPlane, kcd *testenv.Containerd, nodeIP, cgroupRoot string) {
	t.Helper()
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	kl, err := testenv.NewKubelet(cp, testenv.KubeletOptions{
		Dir: t.TempDir(), Node: topKubelet, NodeIP: nodeIP, Port: port,
		CRIEndpoint: kcd.Endpoint, CgroupRoot: cgroupRoot,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(testenv.SaveSysctls(testenv.KubeletSysctls))
	t.Cleanup(func() { _ = testenv.UnmountUnder(testenv.KubeletRoot(kl.Dir)) })
	startProcess(t, kl.Cmd.Path, "kubelet", kl.Cmd.Args[1:]...)
}

// ownContainerd starts a containerd for this test alone, with the test
// images, stopped (its pods removed) when the test ends.
func ownContainerd(t *testing.T) *testenv.Containerd {
	t.Helper()
	dir, err := os.MkdirTemp("", "splitlet-top-cd-") // short: the socket's path has a limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cd, err := testenv.EnsureContainerd(t.Context(), testenv.ContainerdOptions{Address: filepath.Join(dir, "containerd.sock"), Dir: dir})
	if err != nil {
		t.Fatalf("the kubelet's containerd: %v", err)
	}
	t.Cleanup(cd.Stop)
	if !cd.Started {
		t.Fatalf("a containerd answers at %s already: the kubelet needs one of its own", cd.Address)
	}
	return cd
}

// createTopPod runs script in busybox on node (host network: no CNI), a
// Guaranteed pod of cpu and 128 Mi, and deletes it when the test ends
// while the node still runs.
func createTopPod(t *testing.T, cs kubernetes.Interface, name, node, script, cpu string) {
	t.Helper()
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("128Mi")}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, HostNetwork: true, TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{Name: "main", Image: testenv.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", script}, Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}}}}
	if _, err := cs.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePodAndWait(t, cs, name) })
}

// figure is one reading of the resource metrics API: CPU in millicores,
// the rate over (end-window, end]; memory, the working set at end.
type figure struct {
	end    time.Time
	window time.Duration
	cpu    int64
	mem    int64
}

func (f figure) mid() time.Time { return f.end.Add(-f.window / 2) }

// topPair is one thing seen on both nodes: its metrics API paths and the
// distinct figures read from each (Splitlet's first, the kubelet's second).
type topPair struct {
	what  string
	paths [2]string
	figs  [2][]figure
}

func podPair(kind string) *topPair {
	return &topPair{what: kind + " pod", paths: [2]string{
		"/namespaces/default/pods/" + kind + "-" + topSplitlet, "/namespaces/default/pods/" + kind + "-" + topKubelet}}
}

// read adds side i's current figure when it is a new one.
func (p *topPair) read(ctx context.Context, cs kubernetes.Interface, i int) error {
	var f figure
	if strings.HasPrefix(p.paths[i], "/nodes/") {
		var nm nodeMetrics
		if err := metricsGet(ctx, cs, p.paths[i], &nm); err != nil {
			return err
		}
		f = figure{nm.Timestamp.Time, nm.Window.Duration, nm.Usage.CPU.MilliValue(), nm.Usage.Memory.Value()}
	} else {
		var pm podMetrics
		if err := metricsGet(ctx, cs, p.paths[i], &pm); err != nil {
			return err
		}
		if len(pm.Containers) == 0 {
			return fmt.Errorf("no containers yet")
		}
		f = figure{pm.Timestamp.Time, pm.Window.Duration, pm.cpu(), pm.mem()}
	}
	if n := len(p.figs[i]); n == 0 || p.figs[i][n-1].end != f.end || p.figs[i][n-1].window != f.window {
		p.figs[i] = append(p.figs[i], f)
	}
	return nil
}

// common is each side's figures whose windows' middles lie in the span
// both sides cover (from the later first window's start to the earlier
// last window's end), and that span.
func (p *topPair) common() (sides [2][]figure, span time.Duration) {
	if len(p.figs[0]) == 0 || len(p.figs[1]) == 0 {
		return sides, 0
	}
	start := func(f figure) time.Time { return f.end.Add(-f.window) }
	lo := start(p.figs[0][0])
	if s := start(p.figs[1][0]); s.After(lo) {
		lo = s
	}
	hi := p.figs[0][len(p.figs[0])-1].end
	if e := p.figs[1][len(p.figs[1])-1].end; e.Before(hi) {
		hi = e
	}
	for i := range 2 {
		for _, f := range p.figs[i] {
			if m := f.mid(); !m.Before(lo) && !m.After(hi) {
				sides[i] = append(sides[i], f)
			}
		}
	}
	return sides, hi.Sub(lo)
}

// averages are a side's CPU over the common span and its memory: the CPU
// weighted by each window's length (the CPU used over the windows' union
// divided by its length); the memory the median reading.
func averages(figs []figure) (cpu float64, mem int64) {
	var used, length float64
	mems := make([]int64, 0, len(figs))
	for _, f := range figs {
		used += float64(f.cpu) * f.window.Seconds()
		length += f.window.Seconds()
		mems = append(mems, f.mem)
	}
	if length == 0 {
		return 0, 0
	}
	slices.Sort(mems)
	return used / length, mems[len(mems)/2]
}

// sampleTop reads every pair's figures from both nodes every 2 s until
// each pair's common span is topSpan long.
func sampleTop(t *testing.T, cs kubernetes.Interface, pairs ...*topPair) {
	t.Helper()
	var waiting []string
	err := wait.PollUntilContextTimeout(t.Context(), 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		waiting = waiting[:0]
		for _, p := range pairs {
			for i := range 2 {
				if err := p.read(ctx, cs, i); err != nil {
					waiting = append(waiting, fmt.Sprintf("%s: %v", p.paths[i], err))
				}
			}
			if _, span := p.common(); span < topSpan {
				waiting = append(waiting, fmt.Sprintf("%s: %v of %v covered", p.what, span.Round(time.Second), topSpan))
			}
		}
		return len(waiting) == 0, nil
	})
	if err != nil {
		t.Fatalf("the resource metrics API's figures: %v: %s", err, strings.Join(waiting, "; "))
	}
}

// within10 reports whether Splitlet's figure is within 10 % of the
// kubelet's.
func within10(splitlet, kubelet float64) (float64, bool) {
	if kubelet <= 0 {
		return 0, false
	}
	r := splitlet / kubelet
	return r, r >= 0.9 && r <= 1.1
}

// checkTop compares the two nodes' figures. Why averages over the common
// span rather than pairs of readings: the kubelet's figures are cadvisor's
// samples (every 10 to 15 s, at times of its own), Splitlet's are read at
// each scrape, so no two windows coincide, and the host's CPU (a loaded
// machine) moves by far more than 10 % from one 10 s window to the next.
// Over the same 80 s or more the CPU used is the same machine's, whatever
// the windows; the memory moves slowly and its median resists a spike.
func checkTop(t *testing.T, nodes, busy, idle *topPair) {
	t.Helper()
	type avg struct {
		cpu float64
		mem int64
	}
	var got [3][2]avg
	for k, p := range []*topPair{nodes, busy, idle} {
		sides, span := p.common()
		for i := range 2 {
			got[k][i].cpu, got[k][i].mem = averages(sides[i])
		}
		t.Logf("%s over %v: Splitlet %.0fm %dKi (%d readings), kubelet %.0fm %dKi (%d readings)", p.what, span.Round(time.Second),
			got[k][0].cpu, got[k][0].mem>>10, len(sides[0]), got[k][1].cpu, got[k][1].mem>>10, len(sides[1]))
	}
	compare := func(what string, s, k float64) {
		r, ok := within10(s, k)
		t.Logf("%s: Splitlet/kubelet %.3f", what, r)
		if !ok {
			t.Errorf("%s: Splitlet %.0f, the kubelet %.0f (ratio %.3f): not within 10 %%", what, s, k, r)
		}
	}
	compare("node CPU (m)", got[0][0].cpu, got[0][1].cpu)
	compare("node memory (bytes)", float64(got[0][0].mem), float64(got[0][1].mem))
	compare("busy pod CPU (m)", got[1][0].cpu, got[1][1].cpu)
	compare("idle pod memory (bytes)", float64(got[2][0].mem), float64(got[2][1].mem))
	for i, node := range []string{topSplitlet, topKubelet} {
		if b, id := got[1][i].cpu, got[2][i].cpu; b < 100 || b <= id {
			t.Errorf("%s: busy pod %.0fm, idle pod %.0fm: want the busy one above 100m and the idle one's", node, b, id)
		}
	}
}

// kubectlTop runs `kubectl top nodes` and `kubectl top pods` when kubectl
// is installed: both nodes and the four pods listed.
func kubectlTop(t *testing.T, cp *testenv.ControlPlane) {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Log("no kubectl installed: the metrics API was read directly")
		return
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"top", "nodes"}, []string{topSplitlet, topKubelet}},
		{[]string{"top", "pods", "-n", "default"}, []string{"busy-" + topSplitlet, "busy-" + topKubelet, "idle-" + topSplitlet, "idle-" + topKubelet}},
	} {
		out, err := exec.CommandContext(t.Context(), kubectl, append([]string{"--kubeconfig=" + cp.Kubeconfig}, c.args...)...).CombinedOutput()
		t.Logf("kubectl %s:\n%s", strings.Join(c.args, " "), out)
		if err != nil {
			t.Errorf("kubectl %s: %v", strings.Join(c.args, " "), err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("kubectl %s: no %s", strings.Join(c.args, " "), w)
			}
		}
	}
}

// agentCgroups makes a cgroup of this test's, with a child per agent, in
// every hierarchy (libs/cgroups: a v1 cpuset gets its parent's CPUs and
// memory nodes) and returns its name (cgroupfs form); once the test is
// done it removes what is left under it, deepest first.
func agentCgroups(t *testing.T, agents ...string) string {
	t.Helper()
	name := fmt.Sprintf("/splitlet-top-%d", os.Getpid())
	fsys, err := cgroups.DetectFS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fsys.Remove(name); err != nil {
			t.Logf("cgroups left: %v", err)
		}
	})
	for _, a := range agents {
		if err := fsys.Ensure(filepath.Join(name, a), cgroups.Resources{}); err != nil {
			t.Fatal(err)
		}
	}
	return name
}
