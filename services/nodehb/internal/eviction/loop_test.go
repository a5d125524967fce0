package eviction

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/bus"
)

// fakePods stands for the pod workers: the pods' figures and an owner that
// answers already for a pod it evicted before.
type fakePods struct {
	mu      sync.Mutex
	pods    []bus.PodStats
	evicted map[string]int
	asked   []string
	imageFs *bus.FsStats
}

func (f *fakePods) Stats(context.Context) ([]bus.PodStats, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bus.PodStats(nil), f.pods...), 0
}

func (f *fakePods) ImageFs(context.Context) *bus.FsStats { return f.imageFs }

func (f *fakePods) Evict(_ context.Context, _ int, req *bus.EvictRequest) (*bus.EvictResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, req.Pod)
	f.evicted[req.Pod]++
	if f.evicted[req.Pod] > 1 {
		return &bus.EvictResult{Already: true}, nil
	}
	return &bus.EvictResult{Evicted: true}, nil
}

type reclaimFunc func(context.Context, string) error

func (f reclaimFunc) Reclaim(ctx context.Context, s string) error { return f(ctx, s) }

func newTestLoop(t *testing.T, pods *fakePods, avail *int64) *Loop {
	ts := mustParse(t, "memory.available<100Mi", "", nil, nil)
	observe := func(o Observations) error {
		o[MemoryAvailable] = Observation{Available: *avail, Capacity: 1 << 30}
		return nil
	}
	l := NewLoop(Config{Thresholds: ts, Interval: time.Second, Transition: time.Minute, Partitions: 4, Node: "n"},
		observe, pods, nil, func(context.Context, []corev1.NodeConditionType) error { return nil },
		record.NewFakeRecorder(100), zap.NewNop())
	return l
}

func TestLoopEvictsOnePodAndWaitsForIt(t *testing.T) {
	pods := &fakePods{evicted: map[string]int{}, pods: []bus.PodStats{
		pod("guaranteed", 0, 10<<20, q("64Mi")), pod("besteffort", 0, 200<<20, nil)}}
	avail := int64(50 << 20)
	l := newTestLoop(t, pods, &avail)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	l.Round(t.Context())
	if len(pods.asked) != 1 || pods.asked[0] != "besteffort" {
		t.Fatalf("first round asked %v, want besteffort", pods.asked)
	}
	if c := l.Conditions(); len(c) != 1 || c[0] != corev1.NodeMemoryPressure {
		t.Fatalf("conditions %v", c)
	}
	// still stopping: the next rounds wait for it, and evict nothing else.
	now = now.Add(10 * time.Second)
	l.Round(t.Context())
	if len(pods.asked) != 1 {
		t.Fatalf("a second pod evicted while the first stops: %v", pods.asked)
	}
	// a new manager (nodehb restarted) asks for the same pod, which the
	// owner answers already: nothing else is evicted.
	l2 := newTestLoop(t, pods, &avail)
	l2.Round(t.Context())
	if len(pods.asked) != 2 || pods.asked[1] != "besteffort" {
		t.Fatalf("after a restart asked %v", pods.asked)
	}
	now = now.Add(5 * time.Second)
	l.Round(t.Context())
	l2.Round(t.Context())
	if len(pods.asked) != 2 {
		t.Fatalf("evicted past an eviction under way: %v", pods.asked)
	}
	// gone: the next is evicted if the pressure stays.
	pods.mu.Lock()
	pods.pods = pods.pods[:1]
	pods.mu.Unlock()
	l.Round(t.Context())
	if len(pods.asked) != 3 || pods.asked[2] != "guaranteed" {
		t.Fatalf("after the first pod went: %v", pods.asked)
	}
}

func TestLoopNodeLevelReclaimFirst(t *testing.T) {
	pods := &fakePods{evicted: map[string]int{}, pods: []bus.PodStats{pod("besteffort", 0, 200<<20, nil)}}
	avail := int64(5)
	l := NewLoop(Config{Thresholds: mustParse(t, "nodefs.available<10%,memory.available<100Mi", "", nil, nil), Interval: time.Second, Transition: time.Minute, Partitions: 1},
		func(o Observations) error {
			o[NodeFsAvailable] = Observation{Available: avail, Capacity: 100}
			o[MemoryAvailable] = Observation{Available: 1 << 30, Capacity: 2 << 30}
			return nil
		}, pods, nil, func(context.Context, []corev1.NodeConditionType) error { return nil }, record.NewFakeRecorder(10), zap.NewNop())
	var reclaimed []string
	l.SetReclaimer(reclaimFunc(func(_ context.Context, s string) error {
		reclaimed = append(reclaimed, s)
		avail = 50
		return nil
	}))
	l.Round(t.Context())
	if len(reclaimed) != 1 || reclaimed[0] != string(NodeFsAvailable) || len(pods.asked) != 0 {
		t.Fatalf("reclaimed %v, asked %v: want a node-level reclaim and no eviction", reclaimed, pods.asked)
	}
}

func TestLoopImageFsFromTheRuntime(t *testing.T) {
	pods := &fakePods{evicted: map[string]int{}, pods: []bus.PodStats{pod("a", 0, 1, nil)},
		imageFs: &bus.FsStats{AvailableBytes: 10, CapacityBytes: 100, InodesFree: 50, Inodes: 100}}
	l := NewLoop(Config{Thresholds: mustParse(t, "imagefs.available<15%", "", nil, nil), Interval: time.Second, Transition: time.Minute, Partitions: 1},
		func(Observations) error { return nil }, pods, nil, func(context.Context, []corev1.NodeConditionType) error { return nil },
		record.NewFakeRecorder(10), zap.NewNop())
	l.Round(t.Context())
	if c := l.Conditions(); len(c) != 1 || c[0] != corev1.NodeDiskPressure || len(pods.asked) != 1 {
		t.Fatalf("conditions %v, asked %v: want DiskPressure and an eviction", c, pods.asked)
	}
}

// TestLoopRanksByTheSignalsFileSystem: under nodefs pressure with an image
// file system on another device, the pod writing its logs and volumes goes
// first; with both on one device, the pod writing more in all (here its
// writable layer) does.
func TestLoopRanksByTheSignalsFileSystem(t *testing.T) {
	for _, tc := range []struct {
		imageFsDevice uint64
		want          string
	}{{imageFsDevice: 9, want: "volume-writer"}, {imageFsDevice: 7, want: "layer-writer"}} {
		pods := &fakePods{evicted: map[string]int{}, pods: []bus.PodStats{
			diskPod("layer-writer", 0, 500<<20, 0, 0, nil), diskPod("volume-writer", 0, 0, 0, 100<<20, nil)},
			imageFs: &bus.FsStats{AvailableBytes: 90, CapacityBytes: 100, Device: tc.imageFsDevice}}
		l := NewLoop(Config{Thresholds: mustParse(t, "nodefs.available<10%,imagefs.available<15%", "", nil, nil), Interval: time.Second,
			Transition: time.Minute, Partitions: 1, NodeFsDevice: 7},
			func(o Observations) error { o[NodeFsAvailable] = Observation{Available: 5, Capacity: 100}; return nil },
			pods, nil, func(context.Context, []corev1.NodeConditionType) error { return nil }, record.NewFakeRecorder(10), zap.NewNop())
		l.Round(t.Context())
		if len(pods.asked) != 1 || pods.asked[0] != tc.want {
			t.Errorf("imagefs device %d: evicted %v, want %s", tc.imageFsDevice, pods.asked, tc.want)
		}
	}
}

// TestLoopReportsRoundCost: each round run by Run reports its CPU and wall
// time; a round that burns CPU shows it.
func TestLoopReportsRoundCost(t *testing.T) {
	pods := &fakePods{evicted: map[string]int{}}
	burn := func(Observations) error {
		for end := threadCPU() + 20*time.Millisecond; threadCPU() < end; {
		}
		return nil
	}
	l := NewLoop(Config{Thresholds: mustParse(t, "memory.available<100Mi", "", nil, nil), Interval: time.Hour, Partitions: 1},
		burn, pods, nil, func(context.Context, []corev1.NodeConditionType) error { return nil }, record.NewFakeRecorder(10), zap.NewNop())
	got := make(chan RoundCost, 1)
	l.SetRoundObserver(func(c RoundCost) { got <- c })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go l.Run(ctx)
	select {
	case c := <-got:
		if c.CPU < 20*time.Millisecond || c.Wall < 20*time.Millisecond {
			t.Fatalf("round cost %+v, want CPU and wall time >= 20ms", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no round reported")
	}
}
