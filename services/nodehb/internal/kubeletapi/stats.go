package kubeletapi

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/services/nodehb/internal/eviction"
)

// The /stats/summary document, in the JSON form of the kubelet's stats API
// (k8s.io/kubelet/pkg/apis/stats/v1alpha1), limited to what the runtime
// reports: CPU and memory of pods and containers, and their sum for the node.

// Summary is the kubelet's stats summary.
type Summary struct {
	Node NodeStats  `json:"node"`
	Pods []PodStats `json:"pods"`
}

// NodeStats are the node's figures.
type NodeStats struct {
	NodeName         string           `json:"nodeName"`
	SystemContainers []ContainerStats `json:"systemContainers,omitempty"`
	StartTime        metav1.Time      `json:"startTime"`
	CPU              *CPUStats        `json:"cpu,omitempty"`
	Memory           *MemoryStats     `json:"memory,omitempty"`
	Fs               *FsStats         `json:"fs,omitempty"`
	Rlimit           *RlimitStats     `json:"rlimit,omitempty"`
}

// FsStats are a file system's figures.
type FsStats struct {
	Time           metav1.Time `json:"time"`
	AvailableBytes *uint64     `json:"availableBytes,omitempty"`
	CapacityBytes  *uint64     `json:"capacityBytes,omitempty"`
	UsedBytes      *uint64     `json:"usedBytes,omitempty"`
	InodesFree     *uint64     `json:"inodesFree,omitempty"`
	Inodes         *uint64     `json:"inodes,omitempty"`
	InodesUsed     *uint64     `json:"inodesUsed,omitempty"`
}

// RlimitStats are the node's process figures.
type RlimitStats struct {
	Time                  metav1.Time `json:"time"`
	MaxPID                *int64      `json:"maxpid,omitempty"`
	NumOfRunningProcesses *int64      `json:"curproc,omitempty"`
}

// PodReference names a pod.
type PodReference struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	UID       string `json:"uid"`
}

// PodStats are a pod's figures.
type PodStats struct {
	PodRef     PodReference     `json:"podRef"`
	StartTime  metav1.Time      `json:"startTime"`
	Containers []ContainerStats `json:"containers"`
	CPU        *CPUStats        `json:"cpu,omitempty"`
	Memory     *MemoryStats     `json:"memory,omitempty"`
}

// ContainerStats are a container's figures.
type ContainerStats struct {
	Name      string       `json:"name"`
	StartTime metav1.Time  `json:"startTime"`
	CPU       *CPUStats    `json:"cpu,omitempty"`
	Memory    *MemoryStats `json:"memory,omitempty"`
}

// CPUStats are CPU figures.
type CPUStats struct {
	Time                 metav1.Time `json:"time"`
	UsageNanoCores       *uint64     `json:"usageNanoCores,omitempty"`
	UsageCoreNanoSeconds *uint64     `json:"usageCoreNanoSeconds,omitempty"`
}

// MemoryStats are memory figures.
type MemoryStats struct {
	Time            metav1.Time `json:"time"`
	AvailableBytes  *uint64     `json:"availableBytes,omitempty"`
	UsageBytes      *uint64     `json:"usageBytes,omitempty"`
	WorkingSetBytes *uint64     `json:"workingSetBytes,omitempty"`
	RSSBytes        *uint64     `json:"rssBytes,omitempty"`
	PageFaults      *uint64     `json:"pageFaults,omitempty"`
	MajorPageFaults *uint64     `json:"majorPageFaults,omitempty"`
}

func u64(v uint64) *uint64 { return &v }

// gather asks every partition for its pods' figures, concurrently; a
// partition that does not answer is left out and counted.
func (s *Server) gather(ctx context.Context) ([]bus.PodStats, *bus.FsStats, int) {
	var mu sync.Mutex
	var out []bus.PodStats
	var imageFs *bus.FsStats
	failed := 0
	var wg sync.WaitGroup
	for p := 0; p < s.cfg.Partitions; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, s.reqTTL)
			defer cancel()
			subject := s.subj.Stats(p)
			e, err := s.cfg.Bus.Request(rctx, subject, bus.KindStatsRequest, &bus.StatsRequest{})
			var res *bus.StatsResult
			if err == nil {
				res, err = bus.DecodeStatsResult(e)
			}
			if err == nil && res.Error != "" {
				err = errString(res.Error)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				s.log.Debug("stats request failed", zap.String(logging.FieldSubject, subject), zap.Error(err))
				return
			}
			out = append(out, res.Pods...)
			if imageFs == nil {
				imageFs = res.ImageFs
			}
		}(p)
	}
	wg.Wait()
	// A partition that changed owner mid-request may be answered twice.
	seen := make(map[string]bool, len(out))
	uniq := out[:0]
	for _, p := range out {
		if !seen[string(p.UID)] {
			seen[string(p.UID)] = true
			uniq = append(uniq, p)
		}
	}
	out = uniq
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out, imageFs, failed
}

// PodStats are the figures of every pod of the node, and how many
// partitions did not answer (the eviction manager's view of the pods).
func (s *Server) PodStats(ctx context.Context) ([]bus.PodStats, int) {
	pods, _, failed := s.gather(ctx)
	return pods, failed
}

// ImageFs is the runtime's image file system, from the first partition
// whose owner reports one; nil when none does.
func (s *Server) ImageFs(ctx context.Context) *bus.FsStats {
	for p := 0; p < s.cfg.Partitions; p++ {
		rctx, cancel := context.WithTimeout(ctx, s.reqTTL)
		e, err := s.cfg.Bus.Request(rctx, s.subj.Stats(p), bus.KindStatsRequest, &bus.StatsRequest{ImageFsOnly: true})
		cancel()
		if err != nil {
			continue
		}
		if res, err := bus.DecodeStatsResult(e); err == nil && res.Error == "" {
			return res.ImageFs // one runtime: every owner reports the same
		}
	}
	return nil
}

// Evict asks the owner of partition p to evict a pod (EvictRequest).
func (s *Server) Evict(ctx context.Context, p int, req *bus.EvictRequest) (*bus.EvictResult, error) {
	rctx, cancel := context.WithTimeout(ctx, s.reqTTL)
	defer cancel()
	e, err := s.cfg.Bus.Request(rctx, s.subj.Evict(p), bus.KindEvictRequest, req)
	if err != nil {
		return nil, err
	}
	return bus.DecodeEvictResult(e)
}

type errString string

func (e errString) Error() string { return string(e) }

// summarize turns the runtime's figures into the summary document.
func (s *Server) summarize(pods []bus.PodStats, now time.Time, start time.Time) *Summary {
	t := metav1.NewTime(now)
	sum := &Summary{Node: NodeStats{NodeName: s.cfg.Node, StartTime: metav1.NewTime(start)}, Pods: make([]PodStats, 0, len(pods))}
	var nodeCores, nodeCPU, nodeMem uint64
	for _, p := range pods {
		ps := PodStats{
			PodRef:    PodReference{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID)},
			StartTime: p.StartTime,
		}
		var cores, cpu, mem uint64
		for _, c := range p.Containers {
			ps.Containers = append(ps.Containers, ContainerStats{
				Name:      c.Name,
				StartTime: c.StartTime,
				CPU:       &CPUStats{Time: t, UsageNanoCores: u64(c.CPUUsageNanoCores), UsageCoreNanoSeconds: u64(c.CPUUsageCoreNanoSecs)},
				Memory:    &MemoryStats{Time: t, WorkingSetBytes: u64(c.MemoryWorkingSetBytes)},
			})
			cores += c.CPUUsageNanoCores
			cpu += c.CPUUsageCoreNanoSecs
			mem += c.MemoryWorkingSetBytes
		}
		ps.CPU = &CPUStats{Time: t, UsageNanoCores: u64(cores), UsageCoreNanoSeconds: u64(cpu)}
		ps.Memory = &MemoryStats{Time: t, WorkingSetBytes: u64(mem)}
		sum.Pods = append(sum.Pods, ps)
		nodeCores += cores
		nodeCPU += cpu
		nodeMem += mem
	}
	sum.Node.CPU = &CPUStats{Time: t, UsageNanoCores: u64(nodeCores), UsageCoreNanoSeconds: u64(nodeCPU)}
	sum.Node.Memory = &MemoryStats{Time: t, WorkingSetBytes: u64(nodeMem)}
	if s.cfg.Observe != nil {
		s.nodeFigures(&sum.Node, t)
	}
	if s.cfg.NodeUsage != nil {
		s.nodeUsage(&sum.Node)
	}
	return sum
}

// nodeUsage sets the node's CPU and memory from the node itself (the root
// cgroup), as the kubelet's summary does from cadvisor's root container;
// when they cannot be read the node has none (and /metrics/resource no
// node series), rather than the sum of its pods.
func (s *Server) nodeUsage(n *NodeStats) {
	u, err := s.cfg.NodeUsage()
	if err != nil {
		s.log.Info("node usage unreadable", zap.Error(err))
		n.CPU, n.Memory = nil, nil
		return
	}
	t := metav1.NewTime(u.Time)
	n.CPU = &CPUStats{Time: t, UsageCoreNanoSeconds: u64(u.CPUUsageCoreNanoSeconds), UsageNanoCores: s.cpu.observe(u.Time, u.CPUUsageCoreNanoSeconds)}
	m := u.Memory
	n.Memory = &MemoryStats{
		Time:            t,
		AvailableBytes:  u64(uint64(max(m.Total-m.WorkingSet, 0))),
		UsageBytes:      u64(uint64(m.Usage)),
		WorkingSetBytes: u64(uint64(m.WorkingSet)),
		RSSBytes:        u64(uint64(m.RSS)),
		PageFaults:      u64(uint64(m.PageFaults)),
		MajorPageFaults: u64(uint64(m.MajorPageFaults)),
	}
}

// cpuRateWindow is the shortest time between the two samples a CPU rate
// is taken over; readings closer to the last sample get the last rate (as
// cadvisor's rate is between its last two housekeeping samples).
const cpuRateWindow = time.Second

// cpuRate turns cumulative CPU samples into usage in nanocores.
type cpuRate struct {
	mu       sync.Mutex
	lastTime time.Time
	lastNs   uint64
	rate     *uint64
}

// observe takes a sample and returns the latest rate; nil until two
// samples cpuRateWindow apart were seen.
func (c *cpuRate) observe(at time.Time, ns uint64) *uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.lastTime.IsZero() || ns < c.lastNs || at.Before(c.lastTime):
		c.lastTime, c.lastNs, c.rate = at, ns, nil
	case at.Sub(c.lastTime) >= cpuRateWindow:
		r := uint64(float64(ns-c.lastNs) / at.Sub(c.lastTime).Seconds())
		c.lastTime, c.lastNs, c.rate = at, ns, &r
	}
	if c.rate == nil {
		return nil
	}
	return u64(*c.rate)
}

// nodeFigures fills the node's own figures, as the eviction manager sees
// them (kubelet: the root cgroup's memory, the node file system, rlimit).
func (s *Server) nodeFigures(n *NodeStats, t metav1.Time) {
	obs := eviction.Observations{}
	_ = s.cfg.Observe(obs)
	if o, ok := obs[eviction.MemoryAvailable]; ok {
		n.Memory = &MemoryStats{Time: t, AvailableBytes: u64(uint64(o.Available)), WorkingSetBytes: u64(uint64(o.Capacity - o.Available))}
	}
	if o, ok := obs[eviction.NodeFsAvailable]; ok {
		n.Fs = &FsStats{Time: t, AvailableBytes: u64(uint64(o.Available)), CapacityBytes: u64(uint64(o.Capacity)), UsedBytes: u64(uint64(o.Capacity - o.Available))}
		if i, ok := obs[eviction.NodeFsInodesFree]; ok {
			n.Fs.InodesFree, n.Fs.Inodes, n.Fs.InodesUsed = u64(uint64(i.Available)), u64(uint64(i.Capacity)), u64(uint64(i.Capacity-i.Available))
		}
	}
	if o, ok := obs[eviction.PIDAvailable]; ok {
		maxPID, cur := o.Capacity, o.Capacity-o.Available
		n.Rlimit = &RlimitStats{Time: t, MaxPID: &maxPID, NumOfRunningProcesses: &cur}
	}
}

var processStart = time.Now()

func (s *Server) handleSummary(w http.ResponseWriter, r *http.Request) {
	pods, _, failed := s.gather(r.Context())
	if failed > 0 {
		s.log.Info("stats summary incomplete", zap.Int("partitionsWithoutAnswer", failed))
	}
	writeJSON(w, s.summarize(pods, time.Now(), processStart))
}

// handleResourceMetrics serves /metrics/resource: the kubelet's resource
// metrics, from the same figures as the summary.
func (s *Server) handleResourceMetrics(w http.ResponseWriter, r *http.Request) {
	pods, _, failed := s.gather(r.Context())
	reg := prometheus.NewRegistry()
	reg.MustRegister(resourceCollector{sum: s.summarize(pods, time.Now(), processStart), failed: failed > 0})
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}

var (
	descNodeCPU   = prometheus.NewDesc("node_cpu_usage_seconds_total", "Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	descNodeMem   = prometheus.NewDesc("node_memory_working_set_bytes", "Current working set of the node in bytes", nil, nil)
	descPodCPU    = prometheus.NewDesc("pod_cpu_usage_seconds_total", "Cumulative cpu time consumed by the pod in core-seconds", []string{"namespace", "pod"}, nil)
	descPodMem    = prometheus.NewDesc("pod_memory_working_set_bytes", "Current working set of the pod in bytes", []string{"namespace", "pod"}, nil)
	descCtrCPU    = prometheus.NewDesc("container_cpu_usage_seconds_total", "Cumulative cpu time consumed by the container in core-seconds", []string{"container", "namespace", "pod"}, nil)
	descCtrMem    = prometheus.NewDesc("container_memory_working_set_bytes", "Current working set of the container in bytes", []string{"container", "namespace", "pod"}, nil)
	descCtrStart  = prometheus.NewDesc("container_start_time_seconds", "Start time of the container since unix epoch in seconds", []string{"container", "namespace", "pod"}, nil)
	descScrapeErr = prometheus.NewDesc("resource_scrape_error", "1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
)

type resourceCollector struct {
	sum    *Summary
	failed bool
}

func (c resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descNodeCPU, descNodeMem, descPodCPU, descPodMem, descCtrCPU, descCtrMem, descCtrStart, descScrapeErr} {
		ch <- d
	}
}

func seconds(ns *uint64) float64 {
	if ns == nil {
		return 0
	}
	return float64(*ns) / 1e9
}

func bytes(b *uint64) float64 {
	if b == nil {
		return 0
	}
	return float64(*b)
}

func (c resourceCollector) Collect(ch chan<- prometheus.Metric) {
	errv := 0.0
	if c.failed {
		errv = 1
	}
	ch <- prometheus.MustNewConstMetric(descScrapeErr, prometheus.GaugeValue, errv)
	if n := c.sum.Node; n.CPU != nil && n.CPU.UsageCoreNanoSeconds != nil {
		ch <- prometheus.NewMetricWithTimestamp(n.CPU.Time.Time, prometheus.MustNewConstMetric(descNodeCPU, prometheus.CounterValue, seconds(n.CPU.UsageCoreNanoSeconds)))
	}
	if n := c.sum.Node; n.Memory != nil && n.Memory.WorkingSetBytes != nil {
		ch <- prometheus.NewMetricWithTimestamp(n.Memory.Time.Time, prometheus.MustNewConstMetric(descNodeMem, prometheus.GaugeValue, bytes(n.Memory.WorkingSetBytes)))
	}
	for _, p := range c.sum.Pods {
		ch <- prometheus.MustNewConstMetric(descPodCPU, prometheus.CounterValue, seconds(p.CPU.UsageCoreNanoSeconds), p.PodRef.Namespace, p.PodRef.Name)
		ch <- prometheus.MustNewConstMetric(descPodMem, prometheus.GaugeValue, bytes(p.Memory.WorkingSetBytes), p.PodRef.Namespace, p.PodRef.Name)
		for _, ct := range p.Containers {
			ch <- prometheus.MustNewConstMetric(descCtrCPU, prometheus.CounterValue, seconds(ct.CPU.UsageCoreNanoSeconds), ct.Name, p.PodRef.Namespace, p.PodRef.Name)
			ch <- prometheus.MustNewConstMetric(descCtrMem, prometheus.GaugeValue, bytes(ct.Memory.WorkingSetBytes), ct.Name, p.PodRef.Namespace, p.PodRef.Name)
			if !ct.StartTime.IsZero() {
				ch <- prometheus.MustNewConstMetric(descCtrStart, prometheus.GaugeValue, float64(ct.StartTime.UnixNano())/1e9, ct.Name, p.PodRef.Namespace, p.PodRef.Name)
			}
		}
	}
}
