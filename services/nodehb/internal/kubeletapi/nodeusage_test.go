package kubeletapi

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/services/nodehb/internal/eviction"
)

// rootCPU reads the kernel's root cgroup CPU counter, in nanoseconds
// (cgroup v1 cpuacct.usage; v2 the root's cpu.stat usage_usec).
func rootCPU(t *testing.T) uint64 {
	t.Helper()
	if b, err := os.ReadFile("/sys/fs/cgroup/cpuacct/cpuacct.usage"); err == nil {
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	b, err := os.ReadFile("/sys/fs/cgroup/cpu.stat")
	if err != nil {
		t.Fatalf("no root cgroup CPU counter: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return us * 1000
		}
	}
	t.Fatal("cpu.stat: no usage_usec")
	return 0
}

// TestNodeFiguresFromTheNode: with the host's usage, the summary's node
// CPU and /metrics/resource's node_cpu_usage_seconds_total are the root
// cgroup's counter read at the same time (between two reads of the kernel
// file around it), not the sum of the pods' (here 2 s of CPU and 1 MiB);
// the node's memory is the root's working set, with its usage, RSS and
// available bytes; both series carry the time they were read.
func TestNodeFiguresFromTheNode(t *testing.T) {
	host := eviction.NewHost(t.TempDir())
	s := &Server{cfg: Config{Node: "n1", NodeUsage: host.Usage}, log: zap.NewNop()}
	pods := []bus.PodStats{{Namespace: "default", Name: "p", UID: "u", StartTime: metav1.Now(),
		Containers: []bus.ContainerStats{{Name: "c", CPUUsageCoreNanoSecs: 2e9, MemoryWorkingSetBytes: 1 << 20}}}}

	before := rootCPU(t)
	sum := s.summarize(pods, time.Now(), time.Now())
	after := rootCPU(t)
	n := sum.Node
	if n.CPU == nil || n.CPU.UsageCoreNanoSeconds == nil || *n.CPU.UsageCoreNanoSeconds < before || *n.CPU.UsageCoreNanoSeconds > after {
		t.Fatalf("node cpu %+v, the kernel's root %d before and %d after", n.CPU, before, after)
	}
	m := n.Memory
	if m == nil || m.WorkingSetBytes == nil || m.UsageBytes == nil || m.AvailableBytes == nil || m.RSSBytes == nil ||
		*m.WorkingSetBytes <= 1<<20 || *m.WorkingSetBytes > *m.UsageBytes || *m.RSSBytes == 0 {
		t.Fatalf("node memory %+v", m)
	}

	before = rootCPU(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(resourceCollector{sum: s.summarize(pods, time.Now(), time.Now())})
	after = rootCPU(t)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(&text, f); err != nil {
			t.Fatal(err)
		}
		if f.GetName() != "node_cpu_usage_seconds_total" {
			continue
		}
		got := f.GetMetric()[0].GetCounter().GetValue()
		// float seconds: a nanosecond's rounding either way.
		if got < float64(before)/1e9-1e-6 || got > float64(after)/1e9+1e-6 || f.GetMetric()[0].TimestampMs == nil {
			t.Errorf("node_cpu_usage_seconds_total %v (timestamp %v), the kernel's root %d..%d ns", got, f.GetMetric()[0].TimestampMs, before, after)
		}
	}
	if !strings.Contains(text.String(), "node_memory_working_set_bytes ") {
		t.Errorf("no node memory series:\n%s", text.String())
	}
}

// TestNodeCPURate: usageNanoCores is the counter's rate between samples at
// least a second apart; a closer sample keeps the last rate, and a counter
// that went back starts over.
func TestNodeCPURate(t *testing.T) {
	var c cpuRate
	t0 := time.Unix(1000, 0)
	if r := c.observe(t0, 10e9); r != nil {
		t.Fatalf("first sample: rate %d", *r)
	}
	if r := c.observe(t0.Add(500*time.Millisecond), 10.6e9); r != nil {
		t.Fatalf("half a second later: rate %d", *r)
	}
	if r := c.observe(t0.Add(2*time.Second), 13e9); r == nil || *r != 1.5e9 {
		t.Fatalf("rate %v, want 1.5 cores", r)
	}
	if r := c.observe(t0.Add(2100*time.Millisecond), 13.5e9); r == nil || *r != 1.5e9 {
		t.Fatalf("rate %v, want the last, 1.5 cores", r)
	}
	if r := c.observe(t0.Add(4*time.Second), 1e9); r != nil {
		t.Fatalf("after a counter reset: rate %d", *r)
	}
}
