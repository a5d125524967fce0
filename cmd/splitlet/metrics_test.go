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

// sampler reads the root cgroup every 100 ms while the test waits, so that
// the root's CPU rate over any window metrics-server reports can be taken
// from the samples nearest its ends.
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
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// nearest is the sample closest to at.
func (s *sampler) nearest(at time.Time) rootSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	best := s.samples[0]
	for _, r := range s.samples {
		if r.at.Sub(at).Abs() < best.at.Sub(at).Abs() {
			best = r
		}
	}
	return best
}

// TestResourceMetricsAPI: metrics-server (v0.8.0) against a Splitlet node
// on containerd, through the API server's aggregation layer, as `kubectl
// top` reads it: a busy pod's CPU is above an idle pod's; the node's
// figures are the node's own, the root cgroup's CPU rate over the same
// window (within 15 % and 50m) and working set (within 15 %), far above
// the sum of the pods'.
func TestResourceMetricsAPI(t *testing.T) {
	testenv.SkipShort(t, "containerd, etcd, kube-apiserver and metrics-server")
	ctx := t.Context()
	cd, err := testenv.EnsureContainerd(ctx, testenv.ContainerdOptions{})
	if err != nil {
		t.Fatalf("--runtime=cri needs a containerd: %v", err)
	}
	t.Cleanup(cd.Stop)
	cp := testenv.ControlPlaneForTest(t, testenv.ControlPlaneOptions{AggregationLayer: true})
	const node = "e2e-top"
	startSplitlet(t, buildBinary(t), cp, node, "agent", "--services=all", "--runtime=cri", "--cri-endpoint="+cd.Endpoint)
	cs := cp.Clientset()
	waitNodeReady(t, cs, node)

	for name, command := range map[string]string{"busy": "while true; do :; done", "idle": "sleep 3600"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: node, HostNetwork: true, TerminationGracePeriodSeconds: ptr(int64(0)),
				Containers: []corev1.Container{{Name: name, Image: testenv.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
					Command: []string{"sh", "-c", command}}}}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cs.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
		})
	}
	dir := t.TempDir()
	ms, err := testenv.StartMetricsServer(ctx, cp, testenv.MetricsServerOptions{Dir: dir})
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

	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var s sampler
	first, err := readRoot()
	if err != nil {
		t.Fatal(err)
	}
	s.samples = []rootSample{first}
	done := make(chan struct{})
	go func() { defer close(done); s.run(sctx) }()
	defer func() { stop(); <-done }()

	// kubectl top pods: both pods listed, the busy one above the idle one.
	var busy, idle podMetrics
	eventually(t, 2*time.Minute, "PodMetrics of busy and idle", func() (bool, string) {
		if err := metricsGet(ctx, cs, "/namespaces/default/pods/busy", &busy); err != nil {
			return false, err.Error()
		}
		if err := metricsGet(ctx, cs, "/namespaces/default/pods/idle", &idle); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	t.Logf("busy %dm, idle %dm", busy.cpu(), idle.cpu())
	if busy.cpu() < 100 || busy.cpu() <= idle.cpu() || idle.cpu() > 50 {
		t.Errorf("kubectl top pods: busy %dm, idle %dm; want busy above 100m and idle's (under 50m)", busy.cpu(), idle.cpu())
	}

	// kubectl top nodes: the root cgroup's figures over the same window.
	var nm nodeMetrics
	eventually(t, time.Minute, "NodeMetrics of "+node, func() (bool, string) {
		if err := metricsGet(ctx, cs, "/nodes/"+node, &nm); err != nil {
			return false, err.Error()
		}
		return nm.Timestamp.Time.Before(time.Now().Add(-100 * time.Millisecond)), "window still open"
	})
	end, start := nm.Timestamp.Time, nm.Timestamp.Time.Add(-nm.Window.Duration)
	r0, r1 := s.nearest(start), s.nearest(end)
	if r0.at.Sub(start).Abs() > 500*time.Millisecond || r1.at.Sub(end).Abs() > 500*time.Millisecond {
		t.Fatalf("no root cgroup samples near the window %v..%v (nearest %v, %v)", start, end, r0.at, r1.at)
	}
	rootMilli := int64(float64(r1.cpu-r0.cpu) / r1.at.Sub(r0.at).Seconds() / 1e6)
	nodeMilli, nodeMem := nm.Usage.CPU.MilliValue(), nm.Usage.Memory.Value()
	t.Logf("node %dm %dMi over %v; root cgroup %dm, working set %dMi", nodeMilli, nodeMem>>20, nm.Window.Duration, rootMilli, r1.workingSet>>20)
	if d := nodeMilli - rootMilli; d > rootMilli*15/100+50 || -d > rootMilli*15/100+50 {
		t.Errorf("node CPU %dm, the root cgroup's over the same window %dm", nodeMilli, rootMilli)
	}
	if nodeMilli > int64(runtime.NumCPU())*1000+50 {
		t.Errorf("node CPU %dm on %d CPUs", nodeMilli, runtime.NumCPU())
	}
	if d := nodeMem - r1.workingSet; d > r1.workingSet*15/100 || -d > r1.workingSet*15/100 {
		t.Errorf("node memory %dMi, the root cgroup's working set %dMi", nodeMem>>20, r1.workingSet>>20)
	}
	var podMem int64
	for _, p := range []podMetrics{busy, idle} {
		for _, c := range p.Containers {
			podMem += c.Usage.Memory.Value()
		}
	}
	if nodeMem < 10*podMem {
		t.Errorf("node memory %dMi, barely the pods' %dMi: not the node's own", nodeMem>>20, podMem>>20)
	}
}
