package bus

import (
	"fmt"
	"strings"
)

// Root is the first two tokens of every Splitlet subject: the project and the
// contract version. A breaking change to the contract gets a new root.
const Root = "splitlet.v1"

// NodeToken turns a node name into one subject token. Node names are DNS
// subdomains ([a-z0-9.-]); a '.' would split the token, so it becomes '_',
// which a node name never holds, and the mapping stays reversible.
func NodeToken(node string) string {
	return strings.ReplaceAll(node, ".", "_")
}

// NodeFromToken reverses NodeToken.
func NodeFromToken(token string) string {
	return strings.ReplaceAll(token, "_", ".")
}

// Subjects names every subject of one node. The zero value is not usable:
// build it with For.
type Subjects struct {
	prefix string // splitlet.v1.<node>
}

// For returns the subjects of the named node.
func For(node string) Subjects {
	return Subjects{prefix: Root + "." + NodeToken(node)}
}

// Prefix is splitlet.v1.<node>.
func (s Subjects) Prefix() string { return s.prefix }

// All matches every subject of the node.
func (s Subjects) All() string { return s.prefix + ".>" }

func (s Subjects) part(name string, partition int) string {
	return fmt.Sprintf("%s.%s.%d", s.prefix, name, partition)
}

// PodUpdates is where podconfig publishes the PodUpdate events of the pods
// whose UID falls in the partition, all but those only the owner reads
// (PodReconciles).
// Published by podconfig; consumed by podworkers (the owner of the
// partition), prober and statussync.
func (s Subjects) PodUpdates(partition int) string { return s.part(tokPodUpdates, partition) }

// PodUpdatesAll matches the pod updates of every partition, and not their
// reconciles: podupdates.* is one token after podupdates, and
// podupdates.reconcile.<p> has two.
func (s Subjects) PodUpdatesAll() string { return s.prefix + "." + tokPodUpdates + ".*" }

// PodReconciles is where podconfig publishes the PodUpdates of the pods in
// the partition that only the partition's owner (podworkers) reads: the
// RECONCILEs (status-only changes) and the DELETEs that only shorten a
// terminating pod's grace period. Only the owner consumes it, so the NATS
// server does not send the prober and statussync, which filter
// PodUpdatesAll, what they have no use for.
func (s Subjects) PodReconciles(partition int) string {
	return s.part(tokPodUpdates+"."+tokReconcile, partition)
}

// PodUpdatesFor is the subject of a PodUpdate with the given op: a
// RECONCILE's own (PodReconciles), or the partition's pod updates.
func (s Subjects) PodUpdatesFor(op Op, partition int) string {
	if op == OpReconcile {
		return s.PodReconciles(partition)
	}
	return s.PodUpdates(partition)
}

// PodReconcilesAll matches the reconciles of every partition.
func (s Subjects) PodReconcilesAll() string {
	return s.prefix + "." + tokPodUpdates + "." + tokReconcile + ".*"
}

// PodUpdatesStream matches every subject of the pod-updates stream: the pod
// updates and the reconciles of every partition (podupdates.>). One stream
// holds both, so a consumer of both subjects of a partition
// (PartitionPodUpdates) gets a pod's UPDATEs and RECONCILEs in publish
// order.
func (s Subjects) PodUpdatesStream() string { return s.prefix + "." + tokPodUpdates + ".>" }

// PartitionPodUpdates are the subjects the owner of a partition consumes
// from the pod-updates stream: the partition's pod updates and reconciles.
func (s Subjects) PartitionPodUpdates(partition int) []string {
	return []string{s.PodUpdates(partition), s.PodReconciles(partition)}
}

// PodStatus is where podworkers publish the runtime status of pods in the
// partition. Consumed by statussync and prober.
func (s Subjects) PodStatus(partition int) string { return s.part(tokPodStatus, partition) }

// PodStatusAll matches the runtime status of every partition.
func (s Subjects) PodStatusAll() string { return s.prefix + "." + tokPodStatus + ".*" }

// ProbeResults is where the prober publishes probe results of pods in the
// partition. Consumed by statussync (readiness, startup) and podworkers
// (liveness).
func (s Subjects) ProbeResults(partition int) string { return s.part(tokProbes, partition) }

// ProbeResultsAll matches the probe results of every partition.
func (s Subjects) ProbeResultsAll() string { return s.prefix + "." + tokProbes + ".*" }

// SourcesReady carries the set of pod sources podconfig has seen in full
// (kubelet: SeenAllSources). Last value kept.
func (s Subjects) SourcesReady() string { return s.prefix + "." + tokState + ".sources" }

// AgentReady carries the pod workers' readiness (every partition has a live
// owner), re-published as a heartbeat. Last value kept. Consumed by nodehb.
func (s Subjects) AgentReady() string { return s.prefix + "." + tokState + ".agent" }

// StaticPods carries the node's static pods (StaticPods), so that a stage
// that meets a mirror pod in the API server can tell whether it stands for
// one. Last value kept. Published by podconfig; consumed by nodehb.
func (s Subjects) StaticPods() string { return s.prefix + "." + tokState + ".static" }

// NodePressure carries the node's pressure conditions (MemoryPressure,
// DiskPressure, PIDPressure) as the eviction manager observes them. Last
// value kept. Published by nodehb; consumed by podworkers (admission).
func (s Subjects) NodePressure() string { return s.prefix + "." + tokState + ".pressure" }

// StateAll matches the last-value subjects.
func (s Subjects) StateAll() string { return s.prefix + "." + tokState + ".>" }

// Logs is the request/reply subject for container logs of a pod in the
// partition; the pod worker replica that owns the partition answers.
func (s Subjects) Logs(partition int) string { return s.part(tokRuntime+".logs", partition) }

// Exec is the request/reply subject to run a command in a container of a pod
// in the partition.
func (s Subjects) Exec(partition int) string { return s.part(tokRuntime+".exec", partition) }

// ProbeExec is the request/reply subject of the prober's exec probes: an
// ExecRequest that the owner of the partition runs only when its command is
// one of the exec probe commands (liveness, readiness, startup) of that
// container of the pod, and refuses otherwise. It is kept apart from Exec
// (the kubelet API's exec, which the API server authorised) so that the
// prober's bus identity may ask for probes and nothing else.
func (s Subjects) ProbeExec(partition int) string {
	return s.part(tokRuntime+"."+tokProbeExec, partition)
}

// Stats is the request/reply subject for the runtime's resource figures
// (stats summary) of pods in the partition.
func (s Subjects) Stats(partition int) string { return s.part(tokRuntime+".stats", partition) }

// Stream is the request/reply subject that asks for the URL of the
// runtime's streaming server for an interactive exec (TTY, stdin as typed,
// output as written) in a container of a pod in the partition. A pod worker
// that does not serve it leaves the request unanswered, and the requester
// falls back to Exec.
func (s Subjects) Stream(partition int) string { return s.part(tokRuntime+".stream", partition) }

// Evict is the request/reply subject where the eviction manager (nodehb)
// asks the owner of a pod's partition to evict it (EvictRequest).
func (s Subjects) Evict(partition int) string { return s.part(tokRuntime+"."+tokEvict, partition) }

// Reclaim is the request/reply subject where the eviction manager (nodehb)
// asks the node's garbage collector, the owner of partition 0, to free
// node-level resources (ReclaimRequest).
func (s Subjects) Reclaim(partition int) string { return s.part(tokRuntime+"."+tokReclaim, partition) }

// Status is the request/reply subject where every instance of a stage
// answers with its StageStatus (the NATS service API's endpoint of the
// stage; `$SRV.STATS` carries the same in its endpoint data). A stage that
// does not serve it is absent from `splitlet status`.
func (s Subjects) Status(stage string) string { return s.prefix + "." + tokStatus + "." + stage }

const (
	tokStatus     = "status"
	tokPodUpdates = "podupdates"
	tokReconcile  = "reconcile"
	tokPodStatus  = "podstatus"
	tokProbes     = "probes"
	tokState      = "state"
	tokRuntime    = "runtime"
	tokProbeExec  = "probeexec"
	tokEvict      = "evict"
	tokReclaim    = "reclaim"
)

// PartitionOf reads the partition number from a partitioned subject (its
// last token). It returns false when the subject has none.
func PartitionOf(subject string) (int, bool) {
	i := strings.LastIndexByte(subject, '.')
	if i < 0 || i == len(subject)-1 {
		return 0, false
	}
	n := 0
	for _, c := range subject[i+1:] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
		if n > MaxPartitions {
			return 0, false
		}
	}
	return n, true
}
