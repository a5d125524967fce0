package eviction

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
)

// The kubelet's reason and message parts of an eviction.
const (
	Reason               = "Evicted"
	nodeLowMessageFmt    = "The node was low on resource: %v. "
	thresholdMetFmt      = "Threshold quantity: %v, available: %v. "
	containerMessageFmt  = "Container %s was using %s, request is %s, has larger consumption of %v. "
	nodeConditionMessage = "The node had condition: %v. "
)

// ConditionMessage is the admission message of a node under pressure
// (kubelet: the eviction manager's Admit).
func ConditionMessage(conds []corev1.NodeConditionType) string {
	return fmt.Sprintf(nodeConditionMessage, conds)
}

// rankKey is what a pod is ranked by for one signal: whether its usage
// exceeds its request, its priority, and its usage above the request.
type rankKey struct {
	exceeds  bool
	priority int32
	above    int64
}

// Rank orders pods for eviction to relieve signal s, the first to evict
// first, as the kubelet's rank functions do:
//   - memory.available: usage above requests first, then the lower
//     priority, then the larger working set above the memory request;
//   - nodefs.*, imagefs.*: usage above the ephemeral-storage request first,
//     then the lower priority, then the larger usage above that request
//     (bytes for *.available, inodes for *.inodesFree), usage being that of
//     the signal's file system (DiskMeasure);
//   - pid.available: the lower priority, then the more processes.
//
// dedicatedImageFs says the runtime's image file system is not the
// node's (its own device).
func Rank(s Signal, dedicatedImageFs bool, pods []bus.PodStats) {
	keys := make(map[types.UID]rankKey, len(pods))
	for i := range pods {
		keys[pods[i].UID] = key(s, dedicatedImageFs, &pods[i])
	}
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := keys[pods[i].UID], keys[pods[j].UID]
		if a.exceeds != b.exceeds {
			return a.exceeds
		}
		if a.priority != b.priority {
			return a.priority < b.priority
		}
		return a.above > b.above
	})
}

// key is the pod's rankKey for signal s.
func key(s Signal, dedicatedImageFs bool, p *bus.PodStats) rankKey {
	k := rankKey{priority: p.Priority}
	switch s.Resource() {
	case corev1.ResourceMemory:
		usage, req := memoryUsage(p), memoryRequest(p)
		k.exceeds, k.above = usage > req, usage-req
	case ResourcePIDs:
		k.above = int64(p.ProcessCount) // no request: priority, then count
	case corev1.ResourceEphemeralStorage, ResourceInodes:
		m := DiskMeasure(s, dedicatedImageFs)
		bytes, inodes := m.usage(p)
		req := quantity(p.EphemeralStorageRequest)
		if s.Resource() == ResourceInodes {
			// kubelet: no pod requests inodes, so any use exceeds; the
			// order within subtracts the ephemeral-storage request still.
			k.exceeds, k.above = inodes > 0, inodes-req
		} else {
			k.exceeds, k.above = bytes > req, bytes-req
		}
	}
	return k
}

// Measure names the figures of a pod that count on a file system: its
// containers' writable layers, their logs, its local volumes.
type Measure struct {
	Rootfs, Logs, Volumes bool
}

// DiskMeasure is what counts for a disk signal (kubelet: the fs stats of
// its rank function): with an image file system of its own, nodefs holds
// the logs and local volumes and imagefs the writable layers; on one file
// system, everything counts for both.
func DiskMeasure(s Signal, dedicatedImageFs bool) Measure {
	if !dedicatedImageFs {
		return Measure{Rootfs: true, Logs: true, Volumes: true}
	}
	if s == ImageFsAvailable || s == ImageFsInodesFree {
		return Measure{Rootfs: true}
	}
	return Measure{Logs: true, Volumes: true}
}

// usage is the bytes and inodes of the pod the measure counts.
func (m Measure) usage(p *bus.PodStats) (bytes, inodes int64) {
	for _, c := range p.Containers {
		if m.Rootfs {
			bytes, inodes = bytes+int64(c.RootfsUsedBytes), inodes+int64(c.RootfsInodesUsed)
		}
		if m.Logs {
			bytes, inodes = bytes+int64(c.LogsUsedBytes), inodes+int64(c.LogsInodesUsed)
		}
	}
	if m.Volumes {
		bytes, inodes = bytes+int64(p.VolumeUsedBytes), inodes+int64(p.VolumeInodesUsed)
	}
	return bytes, inodes
}

// memoryUsage is the pod's working set, in bytes.
func memoryUsage(p *bus.PodStats) int64 {
	var ws uint64
	for _, c := range p.Containers {
		ws += c.MemoryWorkingSetBytes
	}
	return int64(ws)
}

// memoryRequest is the sum of the pod's containers' memory requests.
func memoryRequest(p *bus.PodStats) int64 {
	var sum int64
	for _, c := range p.Containers {
		sum += quantity(c.MemoryRequest)
	}
	return sum
}

// quantity is q's value, 0 for none.
func quantity(q *resource.Quantity) int64 {
	if q == nil {
		return 0
	}
	return q.Value()
}

// Message is the eviction message of a pod evicted to reclaim the
// threshold's resource (kubelet: evictionMessage): the resource, the
// threshold and what was available, and for memory and ephemeral-storage
// each container using more than it requested (its working set; its
// writable layer and logs).
func Message(t Threshold, obs Observations, p *bus.PodStats) string {
	res := t.Signal.Resource()
	msg := fmt.Sprintf(nodeLowMessageFmt, res)
	if q, avail, ok := MetInfo(t, obs); ok {
		msg += fmt.Sprintf(thresholdMetFmt, q, avail)
	}
	if res != corev1.ResourceMemory && res != corev1.ResourceEphemeralStorage {
		return msg
	}
	for _, c := range p.Containers {
		used, request := c.MemoryWorkingSetBytes, c.MemoryRequest
		if res == corev1.ResourceEphemeralStorage {
			used, request = c.RootfsUsedBytes+c.LogsUsedBytes, c.EphemeralStorageRequest
		}
		usage := resource.NewQuantity(int64(used), resource.BinarySI)
		req := resource.Quantity{}
		if request != nil {
			req = *request
		}
		if usage.Cmp(req) > 0 {
			msg += fmt.Sprintf(containerMessageFmt, c.Name, usage.String(), req.String(), res)
		}
	}
	return msg
}

// GracePeriod is the grace period an eviction asks for (kubelet: 1 s for
// a hard threshold; for a soft one eviction-max-pod-grace-period, which
// the pod worker lowers to the pod's own when that is shorter).
func GracePeriod(t Threshold, maxPod int64) int64 {
	if t.Hard {
		return immediateGrace
	}
	return maxPod
}

// immediateGrace is the kubelet's grace period of an eviction for a hard
// threshold or a local storage limit.
const immediateGrace = 1
