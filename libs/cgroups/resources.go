package cgroups

import (
	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/splitlet/splitlet/libs/kube"
)

// The kubelet's CPU arithmetic (cm: MilliCPUToShares, MilliCPUToQuota).
const (
	MinShares      = 2
	MaxShares      = 262144
	sharesPerCPU   = 1024
	milliPerCPU    = 1000
	QuotaPeriod    = 100000 // µs, the kubelet's default cpuCFSQuotaPeriod
	minQuotaPeriod = 1000
	maxWeight      = 10000
)

// Resources are the values a cgroup gets; nil leaves one as it is.
type Resources struct {
	// CPUShares is cpu.shares (v1), written as cpu.weight on v2.
	CPUShares *uint64
	// CPUQuota and CPUPeriod are cpu.cfs_quota_us and cpu.cfs_period_us
	// (v1), cpu.max on v2; a quota of -1 is no limit.
	CPUQuota  *int64
	CPUPeriod *uint64
	// Memory is memory.limit_in_bytes (v1), memory.max (v2); -1 no limit.
	Memory *int64
	// PidsLimit is pids.max; -1 no limit.
	PidsLimit *int64
}

// SharesOf is the CPU shares of a request in millicores (kubelet:
// MilliCPUToShares): 1024 a core, at least 2, at most 262144.
func SharesOf(milli int64) uint64 {
	shares := milli * sharesPerCPU / milliPerCPU
	switch {
	case shares < MinShares:
		return MinShares
	case shares > MaxShares:
		return MaxShares
	}
	return uint64(shares)
}

// QuotaOf is the CFS quota of a limit in millicores over the period
// (kubelet: MilliCPUToQuota): 0 for no limit, else at least 1000 µs.
func QuotaOf(milli int64, period uint64) int64 {
	if milli == 0 {
		return 0
	}
	return max(milli*int64(period)/milliPerCPU, minQuotaPeriod)
}

// WeightOf is the cgroup v2 cpu.weight of CPU shares, the kubelet's linear
// map of [2, 262144] onto [1, 10000].
func WeightOf(shares uint64) uint64 {
	if shares >= MaxShares {
		return maxWeight
	}
	if shares < MinShares {
		shares = MinShares
	}
	return 1 + (shares-MinShares)*(maxWeight-1)/(MaxShares-MinShares)
}

// PodResources is what a pod's cgroup gets (kubelet:
// ResourceConfigForPod, with the CFS quota enforced and the default
// period, and the pod pids limit): CPU shares from the sum of the
// requests (at least 2; 2 for a BestEffort pod), a CFS quota from the
// limits when every container has a CPU limit, a memory limit when every
// container has one, pids.max when pidsLimit > 0. The requests and limits
// are the pod's (kubelet: PodRequests, PodLimits): its containers',
// init containers and sidecars counted as the scheduler counts them, the
// RuntimeClass overhead added, or the pod-level resources when set.
func PodResources(p *corev1.Pod, pidsLimit int64) Resources {
	cpuLimited, memLimited := true, true
	reqs := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	limits := resourcehelper.PodLimits(p, resourcehelper.PodResourcesOptions{
		ContainerFn: func(res corev1.ResourceList, _ resourcehelper.ContainerType) {
			cpuLimited = cpuLimited && !res.Cpu().IsZero()
			memLimited = memLimited && !res.Memory().IsZero()
		},
	})
	if resourcehelper.IsPodLevelResourcesSet(p) {
		cpuLimited = cpuLimited || !p.Spec.Resources.Limits.Cpu().IsZero()
		memLimited = memLimited || !p.Spec.Resources.Limits.Memory().IsZero()
	}
	shares := SharesOf(reqs.Cpu().MilliValue())
	period := uint64(QuotaPeriod)
	quota := QuotaOf(limits.Cpu().MilliValue(), period)
	memory := limits.Memory().Value()

	var out Resources
	switch kube.QOSClass(p) {
	case corev1.PodQOSGuaranteed:
		out = Resources{CPUShares: &shares, CPUQuota: &quota, CPUPeriod: &period, Memory: &memory}
	case corev1.PodQOSBurstable:
		out.CPUShares = &shares
		if cpuLimited {
			out.CPUQuota, out.CPUPeriod = &quota, &period
		}
		if memLimited {
			out.Memory = &memory
		}
	default:
		minimum := uint64(MinShares)
		out.CPUShares = &minimum
	}
	if pidsLimit > 0 {
		out.PidsLimit = &pidsLimit
	}
	return out
}

// CPURequestMilli is the pod's CPU request in millicores as PodResources
// counts it (overhead and pod-level resources included).
func CPURequestMilli(p *corev1.Pod) int64 {
	reqs := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	return reqs.Cpu().MilliValue()
}

// BurstableResources is the burstable cgroup's: the shares of the summed
// CPU requests of the node's burstable pods (kubelet: setCPUCgroupConfig).
func BurstableResources(burstableMilli int64) Resources {
	shares := SharesOf(burstableMilli)
	return Resources{CPUShares: &shares}
}

// BestEffortResources is the besteffort cgroup's: the least CPU shares.
func BestEffortResources() Resources {
	shares := uint64(MinShares)
	return Resources{CPUShares: &shares}
}

// KubepodsResources is the kubepods cgroup's: the node's allocatable CPU
// (as shares) and memory when pods are held to allocatable
// (kubelet: enforceNodeAllocatable with pods); nothing without it or
// before allocatable is known.
func KubepodsResources(allocatable corev1.ResourceList, enforce bool) Resources {
	var out Resources
	if !enforce || allocatable == nil {
		return out
	}
	if q, ok := allocatable[corev1.ResourceCPU]; ok {
		shares := SharesOf(q.MilliValue())
		out.CPUShares = &shares
	}
	if q, ok := allocatable[corev1.ResourceMemory]; ok {
		v := q.Value()
		out.Memory = &v
	}
	return out
}

// Looser is, value by value, the looser of a and b: the more shares, no
// limit over a limit, else the larger limit. A resize writes it before the
// containers change and the new values after, so that no container's
// limit is above its pod's in between (cgroup v1 refuses a child's CFS
// quota above its parent's).
func Looser(a, b Resources) Resources {
	out := b
	if a.CPUShares != nil && (b.CPUShares == nil || *a.CPUShares > *b.CPUShares) {
		out.CPUShares = a.CPUShares
	}
	out.CPUQuota = looserLimit(a.CPUQuota, b.CPUQuota)
	out.Memory = looserLimit(a.Memory, b.Memory)
	out.PidsLimit = looserLimit(a.PidsLimit, b.PidsLimit)
	if out.CPUQuota != nil && out.CPUPeriod == nil {
		out.CPUPeriod = a.CPUPeriod
	}
	return out
}

// looserLimit: nil (left as it is) or <= 0 (none) over a value, else the
// larger.
func looserLimit(a, b *int64) *int64 {
	unlimited := int64(-1)
	switch {
	case a == nil || b == nil:
		if a == nil && b == nil {
			return nil
		}
		return &unlimited
	case *a <= 0 || *b <= 0:
		return &unlimited
	case *a > *b:
		return a
	}
	return b
}
