package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/splitlet/splitlet/libs/testenv"
)

// usage is the resource metrics API's usage of a node or container.
type usage struct {
	CPU    resource.Quantity `json:"cpu"`
	Memory resource.Quantity `json:"memory"`
}

// nodeMetrics and podMetrics are what `kubectl top` reads
// (metrics.k8s.io/v1beta1 NodeMetrics and PodMetrics).
type nodeMetrics struct {
	Timestamp metav1.Time     `json:"timestamp"`
	Window    metav1.Duration `json:"window"`
	Usage     usage           `json:"usage"`
}

type podMetrics struct {
	Timestamp  metav1.Time     `json:"timestamp"`
	Window     metav1.Duration `json:"window"`
	Containers []struct {
		Name  string `json:"name"`
		Usage usage  `json:"usage"`
	} `json:"containers"`
}

func metricsGet(ctx context.Context, cs kubernetes.Interface, path string, out any) error {
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1" + path).DoRaw(ctx)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, out)
}

// podCPU is a pod's CPU in millicores (the sum of its containers').
func (p podMetrics) cpu() int64 {
	var m int64
	for _, c := range p.Containers {
		m += c.Usage.CPU.MilliValue()
	}
	return m
}

// mem is a pod's working set in bytes (the sum of its containers').
func (p podMetrics) mem() int64 {
	var b int64
	for _, c := range p.Containers {
		b += c.Usage.Memory.Value()
	}
	return b
}

// rootSample is the root cgroup's CPU counter (ns) and working set at a time.
type rootSample struct {
	at         time.Time
	cpu        uint64
	workingSet int64
}

// readRoot reads the kernel's root cgroup as the kubelet's cadvisor does
// (cgroup v1: cpuacct.usage; working set = memory.usage_in_bytes less
// total_inactive_file of memory.stat).
func readRoot() (rootSample, error) {
	at := time.Now()
	var v [2]int64
	for i, f := range []string{"/sys/fs/cgroup/cpuacct/cpuacct.usage", "/sys/fs/cgroup/memory/memory.usage_in_bytes"} {
		b, err := os.ReadFile(f)
		if err != nil {
			return rootSample{}, fmt.Errorf("this test reads the cgroup v1 root: %w", err)
		}
		if v[i], err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return rootSample{}, err
		}
	}
	b, err := os.ReadFile("/sys/fs/cgroup/memory/memory.stat")
	if err != nil {
		return rootSample{}, err
	}
	var inactive int64
	for _, l := range strings.Split(string(b), "\n") {
		if n, ok := strings.CutPrefix(l, "total_inactive_file "); ok {
			inactive, _ = strconv.ParseInt(n, 10, 64)
		}
	}
	return rootSample{at: at, cpu: uint64(v[0]), workingSet: v[1] - inactive}, nil
}

// sampler reads the root cgroup every 50 ms while the test waits, so that
// the root's CPU rate over any window metrics-server reports can be taken
// from the samples around its ends.
type sampler struct {
	mu      sync.Mutex
	samples []rootSample
}

func (s *sampler) run(ctx context.Context) {
	for ctx.Err() == nil {
		if r, err := readRoot(); err == nil {
			s.mu.Lock()
			s.samples = append(s.samples, r)
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// cpuAt is the root's CPU counter at a time, interpolated between the
// samples around it; false outside the samples.
func (s *sampler) cpuAt(at time.Time) (float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 1; i < len(s.samples); i++ {
		a, b := s.samples[i-1], s.samples[i]
		if at.Before(a.at) || at.After(b.at) {
			continue
		}
		f := float64(at.Sub(a.at)) / float64(b.at.Sub(a.at))
		return float64(a.cpu) + f*float64(b.cpu-a.cpu), true
	}
	return 0, false
}

// rateBand is the lowest and highest CPU rate of the root, in
// millicores, over windows of length w ending anywhere in [end, end+1s):
// the resource metrics API gives its timestamps in whole seconds.
func (s *sampler) rateBand(end time.Time, w time.Duration) (lo, hi int64, ok bool) {
	lo, hi = -1, -1
	for e := end; e.Before(end.Add(time.Second)); e = e.Add(20 * time.Millisecond) {
		c1, ok1 := s.cpuAt(e)
		c0, ok0 := s.cpuAt(e.Add(-w))
		if !ok0 || !ok1 {
			return 0, 0, false
		}
		r := int64((c1 - c0) / w.Seconds() / 1e6)
		if lo < 0 || r < lo {
			lo = r
		}
		if r > hi {
			hi = r
		}
	}
	return lo, hi, true
}

// firstAt is when the first sample was taken.
func (s *sampler) firstAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples[0].at
}

// workingSet is the root's latest working set.
func (s *sampler) workingSet() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples[len(s.samples)-1].workingSet
}

// deletePodAndWait deletes a pod and waits until the node has stopped it
// and the pod is gone.
func deletePodAndWait(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	ctx := context.Background()
	if err := cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete pod %s: %v", name, err)
		return
	}
	testenv.Eventually(t, time.Minute, "pod "+name+" gone", func() (bool, string) {
		_, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// TestResourceMetricsAPI: metrics-server (v0.8.0) against a Splitlet node
// on containerd, through the API server's aggregation layer, as `kubectl
// top` reads it: a busy pod's CPU is above an idle pod's; the node's
// figures are the node's own, the root cgroup's CPU rate over the same
// window (within 3 % and 30m: the node's system processes, the agent and
// the control plane count, not only the pods) and working set (within
// 15 %), far above the sum of the pods'.
func TestResourceMetricsAPI(t *testing.T) {
	testenv.SkipShort(t, "containerd, etcd, kube-apiserver and metrics-server")
	ctx := t.Context()
	cd := hostContainerd(t)
	cp := testenv.ControlPlaneForTest(t, testenv.ControlPlaneOptions{AggregationLayer: true})
	const node = "e2e-top"
	// no eviction thresholds: a host short of disk evicts no test pod
	startSplitlet(t, buildBinary(t), cp, node, "agent", "--services=all", "--runtime=cri", "--cri-endpoint="+cd.Endpoint,
		"--nodehb.eviction-hard=")
	cs := cp.Clientset()
	waitNodeReady(t, cs, node)
	s := startSampler(t)

	for name, command := range map[string]string{"busy": "while true; do :; done", "idle": "sleep 3600"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: node, HostNetwork: true, TerminationGracePeriodSeconds: ptr(int64(1)),
				Containers: []corev1.Container{{Name: name, Image: testenv.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
					Command: []string{"sh", "-c", command}}}}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// deleted while the node runs, so that it stops the containers
		// (a grace period above 0: the pod goes once they have stopped)
		t.Cleanup(func() { deletePodAndWait(t, cs, name) })
	}
	ms, err := testenv.StartMetricsServer(ctx, cp, testenv.MetricsServerOptions{Dir: t.TempDir()})
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

	busy, idle := topPods(t, cs)
	checkTopNode(t, cs, node, s, busy, idle)
}

// startSampler samples the root cgroup from now until the test ends.
func startSampler(t *testing.T) *sampler {
	t.Helper()
	first, err := readRoot()
	if err != nil {
		t.Fatal(err)
	}
	s := &sampler{samples: []rootSample{first}}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	return s
}

// topPods is `kubectl top pods`: both pods listed, the busy one above the
// idle one.
func topPods(t *testing.T, cs kubernetes.Interface) (busy, idle podMetrics) {
	t.Helper()
	ctx := t.Context()
	testenv.Eventually(t, 2*time.Minute, "PodMetrics of busy and idle", func() (bool, string) {
		for name, out := range map[string]*podMetrics{"busy": &busy, "idle": &idle} {
			if err := metricsGet(ctx, cs, "/namespaces/default/pods/"+name, out); err != nil {
				status := ""
				if p, perr := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); perr == nil {
					status = fmt.Sprintf("%s %s %q %+v", p.Status.Phase, p.Status.Reason, p.Status.Message, p.Status.ContainerStatuses)
				}
				return false, fmt.Sprintf("%s (%s): %v", name, status, err)
			}
		}
		return true, ""
	})
	t.Logf("busy %dm, idle %dm", busy.cpu(), idle.cpu())
	if busy.cpu() < 100 || busy.cpu() <= idle.cpu() || idle.cpu() > 50 {
		t.Errorf("kubectl top pods: busy %dm, idle %dm; want busy above 100m and idle's (under 50m)", busy.cpu(), idle.cpu())
	}
	return busy, idle
}

// checkTopNode is `kubectl top nodes`: the root cgroup's figures over the
// same window, far above the pods'.
func checkTopNode(t *testing.T, cs kubernetes.Interface, node string, s *sampler, pods ...podMetrics) {
	t.Helper()
	var nm nodeMetrics
	testenv.Eventually(t, time.Minute, "NodeMetrics of "+node, func() (bool, string) {
		if err := metricsGet(t.Context(), cs, "/nodes/"+node, &nm); err != nil {
			return false, err.Error()
		}
		// a window the samples cover, up to a second after its end
		start := nm.Timestamp.Time.Add(-nm.Window.Duration)
		return start.After(s.firstAt()) && nm.Timestamp.Time.Add(time.Second+200*time.Millisecond).Before(time.Now()), "window not covered yet"
	})
	lo, hi, ok := s.rateBand(nm.Timestamp.Time, nm.Window.Duration)
	if !ok {
		t.Fatalf("no root cgroup samples around the window of %v ending %v", nm.Window.Duration, nm.Timestamp.Time)
	}
	nodeMilli, nodeMem, rootMem := nm.Usage.CPU.MilliValue(), nm.Usage.Memory.Value(), s.workingSet()
	t.Logf("node %dm %dMi over %v; root cgroup %d..%dm, working set %dMi", nodeMilli, nodeMem>>20, nm.Window.Duration, lo, hi, rootMem>>20)
	if tol := hi*3/100 + 30; nodeMilli < lo-tol || nodeMilli > hi+tol {
		t.Errorf("node CPU %dm, the root cgroup's over the same window %d..%dm", nodeMilli, lo, hi)
	}
	if nodeMilli > int64(runtime.NumCPU())*1000+50 {
		t.Errorf("node CPU %dm on %d CPUs", nodeMilli, runtime.NumCPU())
	}
	if d := nodeMem - rootMem; d > rootMem*15/100 || -d > rootMem*15/100 {
		t.Errorf("node memory %dMi, the root cgroup's working set %dMi", nodeMem>>20, rootMem>>20)
	}
	var podMem int64
	for _, p := range pods {
		for _, c := range p.Containers {
			podMem += c.Usage.Memory.Value()
		}
	}
	if nodeMem < 10*podMem {
		t.Errorf("node memory %dMi, barely the pods' %dMi: not the node's own", nodeMem>>20, podMem>>20)
	}
}
