package eviction

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
)

func mustParse(t *testing.T, hard, soft string, grace, reclaim map[string]string) []Threshold {
	t.Helper()
	ts, err := Parse(hard, soft, grace, reclaim)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestParseDefaultsAndErrors(t *testing.T) {
	ts := mustParse(t, DefaultHard, "", nil, nil)
	got := FormatThresholds(ts, true)
	// the kubelet v1.36 defaults (pkg/kubelet/eviction, defaults_linux.go).
	want := map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "15%", "nodefs.inodesFree": "5%", "imagefs.inodesFree": "5%"}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: got %q, want %q", k, got[k], v)
		}
	}
	for _, bad := range []struct{ hard, soft string }{
		{"memory.available>1Gi", ""}, {"memory.free<1Gi", ""}, {"memory.available<-1", ""},
		{"nodefs.available<101%", ""}, {"memory.available<1Gi,memory.available<2Gi", ""},
		{"", "memory.available<1Gi"}, // soft without a grace period
	} {
		if _, err := Parse(bad.hard, bad.soft, nil, nil); err == nil {
			t.Errorf("Parse(%q, %q) accepted", bad.hard, bad.soft)
		}
	}
	if ts := mustParse(t, "memory.available<0", "", nil, nil); len(ts) != 0 {
		t.Fatalf("a threshold of 0 is none, got %v", ts)
	}
	if _, err := Parse("", "", map[string]string{"memory.available": "soon"}, nil); err == nil {
		t.Fatal("a bad grace period accepted")
	}
}

func TestHardThresholdConditionAndTransition(t *testing.T) {
	s := NewState(mustParse(t, "memory.available<100Mi", "", nil, nil), 5*time.Minute)
	t0 := time.Unix(1000, 0)
	low := Observations{MemoryAvailable: {Available: 50 << 20, Capacity: 1 << 30}}
	ok := Observations{MemoryAvailable: {Available: 500 << 20, Capacity: 1 << 30}}
	r := s.Observe(low, t0)
	if len(r.Conditions) != 1 || r.Conditions[0] != corev1.NodeMemoryPressure {
		t.Fatalf("conditions %v", r.Conditions)
	}
	if th, found := r.Reclaim(); !found || th.Signal != MemoryAvailable {
		t.Fatalf("a hard threshold reclaims at once: %v", r.Starved)
	}
	// relieved: the condition stays for the transition period, no reclaim.
	r = s.Observe(ok, t0.Add(time.Minute))
	if len(r.Conditions) != 1 || len(r.Starved) != 0 {
		t.Fatalf("within the transition period: %+v", r)
	}
	r = s.Observe(ok, t0.Add(5*time.Minute))
	if len(r.Conditions) != 0 {
		t.Fatalf("after the transition period: %v", r.Conditions)
	}
}

func TestSoftThresholdWaitsForItsGracePeriod(t *testing.T) {
	s := NewState(mustParse(t, "", "nodefs.available<20%", map[string]string{"nodefs.available": "30s"}, nil), time.Minute)
	t0 := time.Unix(1000, 0)
	low := Observations{NodeFsAvailable: {Available: 10, Capacity: 100}}
	if r := s.Observe(low, t0); len(r.Starved) != 0 || len(r.Conditions) != 1 || r.Conditions[0] != corev1.NodeDiskPressure {
		t.Fatalf("at first sight: %+v", r)
	}
	if r := s.Observe(low, t0.Add(29*time.Second)); len(r.Starved) != 0 {
		t.Fatalf("before the grace period: %+v", r)
	}
	r := s.Observe(low, t0.Add(30*time.Second))
	if th, ok := r.Reclaim(); !ok || th.Hard || th.Signal != NodeFsAvailable {
		t.Fatalf("after the grace period: %+v", r)
	}
	if GracePeriod(r.Starved[0], 45) != 45 || GracePeriod(Threshold{Hard: true}, 45) != 1 {
		t.Fatal("grace periods")
	}
	// relieved for a moment: the grace period starts again.
	s.Observe(Observations{NodeFsAvailable: {Available: 50, Capacity: 100}}, t0.Add(31*time.Second))
	if r := s.Observe(low, t0.Add(32*time.Second)); len(r.Starved) != 0 {
		t.Fatalf("the grace period restarted: %+v", r)
	}
}

func TestMinimumReclaimKeepsTheThresholdUntilReclaimed(t *testing.T) {
	s := NewState(mustParse(t, "memory.available<100Mi", "", nil, map[string]string{"memory.available": "200Mi"}), 0)
	t0 := time.Unix(1000, 0)
	s.Observe(Observations{MemoryAvailable: {Available: 50 << 20, Capacity: 1 << 30}}, t0)
	// above the threshold, below threshold + minimum reclaim: still starved.
	r := s.Observe(Observations{MemoryAvailable: {Available: 250 << 20, Capacity: 1 << 30}}, t0.Add(10*time.Second))
	if _, ok := r.Reclaim(); !ok {
		t.Fatal("minimum reclaim not enforced")
	}
	r = s.Observe(Observations{MemoryAvailable: {Available: 350 << 20, Capacity: 1 << 30}}, t0.Add(20*time.Second))
	if _, ok := r.Reclaim(); ok {
		t.Fatal("reclaimed past the minimum, still starved")
	}
}

func TestMemoryFirstAmongStarvedResources(t *testing.T) {
	s := NewState(mustParse(t, "pid.available<10,nodefs.available<10%,memory.available<1Gi", "", nil, nil), 0)
	r := s.Observe(Observations{
		PIDAvailable: {Available: 1, Capacity: 100}, NodeFsAvailable: {Available: 1, Capacity: 100},
		MemoryAvailable: {Available: 1, Capacity: 2 << 30}}, time.Unix(1, 0))
	if th, _ := r.Reclaim(); th.Signal != MemoryAvailable || len(r.Conditions) != 3 {
		t.Fatalf("%+v", r)
	}
}

func q(s string) *resource.Quantity { v := resource.MustParse(s); return &v }

func pod(name string, prio int32, ws uint64, req *resource.Quantity) bus.PodStats {
	return bus.PodStats{UID: types.UID(name), Name: name, Namespace: "default", Priority: prio,
		Containers: []bus.ContainerStats{{Name: "c", MemoryWorkingSetBytes: ws, MemoryRequest: req}}}
}

func names(ps []bus.PodStats) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return strings.Join(out, ",")
}

func TestRankMemory(t *testing.T) {
	pods := []bus.PodStats{
		pod("guaranteed-big", 0, 900<<20, q("1Gi")),   // under its request
		pod("besteffort-small", 0, 10<<20, nil),       // over (no request)
		pod("burstable-over", 0, 300<<20, q("100Mi")), // over by 200Mi
		pod("besteffort-high", 1000, 500<<20, nil),    // over, higher priority
	}
	Rank(MemoryAvailable, false, pods)
	if got, want := names(pods), "burstable-over,besteffort-small,besteffort-high,guaranteed-big"; got != want {
		t.Fatalf("rank %s, want %s", got, want)
	}
}

// diskPod is a pod with one container's writable layer and logs, its
// emptyDirs, and its ephemeral-storage request.
func diskPod(name string, prio int32, rootfs, logs, volumes uint64, req *resource.Quantity) bus.PodStats {
	return bus.PodStats{UID: types.UID(name), Name: name, Namespace: "default", Priority: prio, EphemeralStorageRequest: req,
		VolumeUsedBytes: volumes, VolumeInodesUsed: volumes >> 20,
		Containers: []bus.ContainerStats{{Name: "c", RootfsUsedBytes: rootfs, LogsUsedBytes: logs, RootfsInodesUsed: rootfs >> 20, LogsInodesUsed: 1}}}
}

// TestRankDisk: the disk signals rank by usage above the ephemeral-storage
// request, then priority, then usage above the request, usage counted on
// the signal's file system (the kubelet's rankDiskPressureFunc).
func TestRankDisk(t *testing.T) {
	pods := func() []bus.PodStats {
		return []bus.PodStats{
			diskPod("a-under-request", 0, 0, 0, 900<<20, q("1Gi")),        // under its request
			diskPod("b-over-a-little", 0, 0, 10<<20, 120<<20, q("100Mi")), // over by 30Mi
			diskPod("c-over-much", 0, 0, 0, 80<<20, nil),                  // over by 80Mi
			diskPod("d-over-high-prio", 1000, 0, 0, 500<<20, nil),         // over, higher priority
			diskPod("e-rootfs-only", 0, 200<<20, 0, 0, nil),               // writes its writable layer
			diskPod("f-nothing", -10, 0, 0, 0, nil),                       // uses nothing, low priority
		}
	}
	for _, tc := range []struct {
		signal    Signal
		dedicated bool
		want      string
	}{
		// one file system: everything counts.
		{NodeFsAvailable, false, "e-rootfs-only,c-over-much,b-over-a-little,d-over-high-prio,f-nothing,a-under-request"},
		// nodefs of its own: logs and volumes only.
		{NodeFsAvailable, true, "c-over-much,b-over-a-little,d-over-high-prio,f-nothing,e-rootfs-only,a-under-request"},
		// imagefs of its own: writable layers only.
		{ImageFsAvailable, true, "e-rootfs-only,f-nothing,c-over-much,b-over-a-little,a-under-request,d-over-high-prio"},
		// inodes: any use exceeds (no pod requests inodes; every pod has a
		// log file here); then priority, then inodes less the
		// ephemeral-storage request.
		{NodeFsInodesFree, false, "f-nothing,e-rootfs-only,c-over-much,b-over-a-little,a-under-request,d-over-high-prio"},
	} {
		ps := pods()
		Rank(tc.signal, tc.dedicated, ps)
		if got := names(ps); got != tc.want {
			t.Errorf("%s dedicated=%v:\n got %s\nwant %s", tc.signal, tc.dedicated, got, tc.want)
		}
	}
}

// TestRankPIDs: priority first, then the pod with more processes.
func TestRankPIDs(t *testing.T) {
	ps := []bus.PodStats{
		{UID: "few", Name: "few", ProcessCount: 2},
		{UID: "many", Name: "many", ProcessCount: 300},
		{UID: "many-high", Name: "many-high", ProcessCount: 900, Priority: 100},
		{UID: "some-low", Name: "some-low", ProcessCount: 5, Priority: -1},
	}
	Rank(PIDAvailable, false, ps)
	if got, want := names(ps), "some-low,many,few,many-high"; got != want {
		t.Fatalf("pid rank %s, want %s", got, want)
	}
}

func TestMessages(t *testing.T) {
	th := mustParse(t, "memory.available<100Mi", "", nil, nil)[0]
	obs := Observations{MemoryAvailable: {Available: 90 << 20, Capacity: 1 << 30}}
	p := bus.PodStats{Name: "p", Containers: []bus.ContainerStats{
		{Name: "hog", MemoryWorkingSetBytes: 120 << 20},
		{Name: "calm", MemoryWorkingSetBytes: 10 << 20, MemoryRequest: q("64Mi")},
	}}
	want := "The node was low on resource: memory. Threshold quantity: 100Mi, available: 90Mi. Container hog was using 120Mi, request is 0, has larger consumption of memory. "
	if got := Message(th, obs, &p); got != want {
		t.Fatalf("message\n got %q\nwant %q", got, want)
	}
	disk := mustParse(t, "nodefs.available<10%", "", nil, nil)[0]
	got := Message(disk, Observations{NodeFsAvailable: {Available: 5 << 30, Capacity: 100 << 30}}, &p)
	if want := "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 5Gi. "; got != want {
		t.Fatalf("disk message\n got %q\nwant %q", got, want)
	}
	// ephemeral-storage: each container whose writable layer and logs
	// exceed its ephemeral-storage request.
	p = bus.PodStats{Name: "p", Containers: []bus.ContainerStats{
		{Name: "writer", RootfsUsedBytes: 100 << 20, LogsUsedBytes: 28 << 20, EphemeralStorageRequest: q("64Mi")},
		{Name: "quiet", LogsUsedBytes: 1 << 20, EphemeralStorageRequest: q("64Mi")},
	}}
	got = Message(disk, Observations{NodeFsAvailable: {Available: 5 << 30, Capacity: 100 << 30}}, &p)
	if want := "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 5Gi. Container writer was using 128Mi, request is 64Mi, has larger consumption of ephemeral-storage. "; got != want {
		t.Fatalf("disk message\n got %q\nwant %q", got, want)
	}
	if got := ConditionMessage([]corev1.NodeConditionType{corev1.NodeMemoryPressure}); got != "The node had condition: [MemoryPressure]. " {
		t.Fatalf("admission message %q", got)
	}
}

// BenchmarkRank5000 ranks 5000 pods for each kind of signal: the work of a
// round that evicts on a node of 5000 pods, besides gathering the figures.
func BenchmarkRank5000(b *testing.B) {
	pods := make([]bus.PodStats, 5000)
	for i := range pods {
		pods[i] = diskPod(fmt.Sprintf("p%d", i), int32(i%7), uint64(i*7919%5000)<<10, uint64(i%13)<<10, uint64(i*104729%5000)<<12, q("1Mi"))
		pods[i].Containers[0].MemoryWorkingSetBytes = uint64(i*31%5000) << 12
		pods[i].ProcessCount = uint64(i % 17)
	}
	work := make([]bus.PodStats, len(pods))
	for _, s := range []Signal{MemoryAvailable, NodeFsAvailable, NodeFsInodesFree, PIDAvailable} {
		b.Run(string(s), func(b *testing.B) {
			for b.Loop() {
				copy(work, pods)
				Rank(s, false, work)
			}
		})
	}
}
