package bus

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PodUpdate is the payload of a KindPodUpdate message: the kubelet's
// PodUpdate, with Op and Source in the envelope. Pods are in their own
// Kubernetes JSON form. A SET carries every pod of the source that falls in
// the subject's partition, and may be empty.
type PodUpdate struct {
	Pods []corev1.Pod `json:"pods"`
	// Snapshot places a SETPART in its snapshot; set only on SETPART.
	Snapshot *SnapshotPart `json:"snapshot,omitempty"`
}

// SnapshotPart is where a SETPART message stands in a SET sent in parts.
type SnapshotPart struct {
	// ID is the same on every part of one snapshot, and new for each.
	ID string `json:"id"`
	// Part counts from 1 to Parts.
	Part  int `json:"part"`
	Parts int `json:"parts"`
}

func (p *PodUpdate) validate(e *Envelope) error {
	if len(p.Pods) == 0 && e.Op != OpSet {
		return fieldErr("payload.pods", "empty, only a SET may be empty")
	}
	if e.Op == OpSetPart {
		switch s := p.Snapshot; {
		case s == nil:
			return fieldErr("payload.snapshot", "required on a SETPART")
		case s.ID == "":
			return fieldErr("payload.snapshot.id", "required")
		case s.Parts < 2 || s.Part < 1 || s.Part > s.Parts:
			return fieldErr("payload.snapshot.part", "%d of %d: must be 1 to parts, parts at least 2", s.Part, s.Parts)
		}
	}
	for i := range p.Pods {
		m := &p.Pods[i].ObjectMeta
		switch {
		case m.UID == "":
			return fieldErr(fmt.Sprintf("payload.pods[%d].metadata.uid", i), "required")
		case m.Name == "":
			return fieldErr(fmt.Sprintf("payload.pods[%d].metadata.name", i), "required")
		case m.Namespace == "":
			return fieldErr(fmt.Sprintf("payload.pods[%d].metadata.namespace", i), "required")
		}
	}
	return nil
}

// DecodePodUpdate decodes and checks the payload of a PodUpdate message.
func DecodePodUpdate(e *Envelope) (*PodUpdate, error) {
	return DecodePayload[PodUpdate](e, KindPodUpdate)
}

// PodDecoder decodes one pod of a protobuf PodUpdate from its Kubernetes
// protobuf form into p. It may leave out what its reader never reads, but
// must fill in the metadata (the payload's rules are checked on it).
type PodDecoder func(raw []byte, p *corev1.Pod) error

// DecodePodUpdateWith is DecodePodUpdate with each pod of a protobuf
// payload decoded by dec: a reader that needs only part of some pods
// decodes only that part. A JSON payload is decoded whole.
func DecodePodUpdateWith(e *Envelope, dec PodDecoder) (*PodUpdate, error) {
	return decodePayload(e, KindPodUpdate, func(p *PodUpdate, b []byte) error { return p.unmarshalProtoWith(b, dec) })
}

// PodRuntimeStatus is what the pod workers know of a pod from the runtime:
// the raw material of the API status that statussync builds.
type PodRuntimeStatus struct {
	UID       types.UID    `json:"uid"`
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	PodIP     string       `json:"podIP,omitempty"`
	HostIP    string       `json:"hostIP,omitempty"`
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// Phase is set only where the worker decides it outright: Failed for a
	// pod rejected at admission or evicted. Otherwise statussync derives it.
	Phase   corev1.PodPhase `json:"phase,omitempty"`
	Reason  string          `json:"reason,omitempty"`
	Message string          `json:"message,omitempty"`
	// Conditions are pod conditions the worker decides outright: statussync
	// takes DisruptionTarget (a node-pressure eviction) and sets it on the
	// API status with the terminal phase, in place of one of its type; it
	// ignores any other.
	Conditions []corev1.PodCondition `json:"conditions,omitempty"`

	InitContainerStatuses []corev1.ContainerStatus `json:"initContainerStatuses,omitempty"`
	ContainerStatuses     []corev1.ContainerStatus `json:"containerStatuses,omitempty"`
	// EphemeralContainerStatuses are the statuses of the pod's ephemeral
	// containers (kubectl debug); optional, a stage that does not know them
	// ignores them.
	EphemeralContainerStatuses []corev1.ContainerStatus `json:"ephemeralContainerStatuses,omitempty"`
	// ContainerHashes maps the ID of each container instance the statuses
	// name (current and last state) to the hash of the spec it was started
	// from, 16 hex digits (kubelet: the container hash label). Optional: a
	// pod worker that adopts the instances compares it with the spec it has.
	ContainerHashes map[string]string `json:"containerHashes,omitempty"`

	// Terminating: the worker has begun tearing the pod down.
	Terminating bool `json:"terminating,omitempty"`
	// Terminated: every container has stopped and the pod's resources are
	// reclaimed (kubelet: PodResourcesAreReclaimed), so the API object may go.
	Terminated bool `json:"terminated,omitempty"`
}

func (p *PodRuntimeStatus) validate(*Envelope) error {
	switch {
	case p.UID == "":
		return fieldErr("payload.uid", "required")
	case p.Name == "":
		return fieldErr("payload.name", "required")
	case p.Namespace == "":
		return fieldErr("payload.namespace", "required")
	}
	for i, c := range p.ContainerStatuses {
		if c.Name == "" {
			return fieldErr(fmt.Sprintf("payload.containerStatuses[%d].name", i), "required")
		}
	}
	for i, c := range p.InitContainerStatuses {
		if c.Name == "" {
			return fieldErr(fmt.Sprintf("payload.initContainerStatuses[%d].name", i), "required")
		}
	}
	for i, c := range p.EphemeralContainerStatuses {
		if c.Name == "" {
			return fieldErr(fmt.Sprintf("payload.ephemeralContainerStatuses[%d].name", i), "required")
		}
	}
	return nil
}

// DecodePodRuntimeStatus decodes and checks a PodRuntimeStatus payload.
func DecodePodRuntimeStatus(e *Envelope) (*PodRuntimeStatus, error) {
	return DecodePayload[PodRuntimeStatus](e, KindPodRuntimeStatus)
}

// ProbeType is liveness, readiness or startup.
type ProbeType string

// The probe types.
const (
	ProbeLiveness  ProbeType = "Liveness"
	ProbeReadiness ProbeType = "Readiness"
	ProbeStartup   ProbeType = "Startup"
)

// ProbeOutcome is a probe worker's result.
type ProbeOutcome string

// The probe outcomes.
const (
	ProbeSuccess ProbeOutcome = "Success"
	ProbeFailure ProbeOutcome = "Failure"
	ProbeUnknown ProbeOutcome = "Unknown"
)

// ProbeResult is sent whenever a probe worker's result changes.
type ProbeResult struct {
	PodUID      types.UID    `json:"podUID"`
	Namespace   string       `json:"namespace"`
	Name        string       `json:"name"`
	Container   string       `json:"container"`
	ContainerID string       `json:"containerID"`
	Probe       ProbeType    `json:"probe"`
	Result      ProbeOutcome `json:"result"`
	Message     string       `json:"message,omitempty"`
}

func (p *ProbeResult) validate(*Envelope) error {
	switch {
	case p.PodUID == "":
		return fieldErr("payload.podUID", "required")
	case p.Container == "":
		return fieldErr("payload.container", "required")
	case p.Probe != ProbeLiveness && p.Probe != ProbeReadiness && p.Probe != ProbeStartup:
		return fieldErr("payload.probe", "unknown probe type %q", p.Probe)
	case p.Result != ProbeSuccess && p.Result != ProbeFailure && p.Result != ProbeUnknown:
		return fieldErr("payload.result", "unknown result %q", p.Result)
	}
	return nil
}

// DecodeProbeResult decodes and checks a ProbeResult payload.
func DecodeProbeResult(e *Envelope) (*ProbeResult, error) {
	return DecodePayload[ProbeResult](e, KindProbeResult)
}

// SourcesReady tells which pod sources podconfig runs and which of them it
// has seen in full (kubelet: PodConfig.SeenAllSources). Cleanup of pods no
// longer desired is safe only once AllReady.
type SourcesReady struct {
	Sources  []string `json:"sources"`
	Ready    []string `json:"ready"`
	AllReady bool     `json:"allReady"`
}

func (p *SourcesReady) validate(*Envelope) error { return nil }

// DecodeSourcesReady decodes a SourcesReady payload.
func DecodeSourcesReady(e *Envelope) (*SourcesReady, error) {
	return DecodePayload[SourcesReady](e, KindSourcesReady)
}

// StaticPods lists the node's static pods (the file and http sources) as
// podconfig holds them: a mirror pod in the API server stands for the static
// pod of its own namespace and name, and only when its
// kubernetes.io/config.mirror annotation is that pod's UID (kubelet: the pod
// manager pairs a mirror pod with its static pod by full name). Last value
// kept; published once every static source has been seen in full.
type StaticPods struct {
	Pods []StaticPod `json:"pods"`
	// Path is where the file source reads static pod manifests
	// (podconfig.static-pod-path, the kubelet's staticPodPath), which the
	// node's /configz states; empty: no file source.
	Path string `json:"path,omitempty"`
}

// StaticPod names one static pod.
type StaticPod struct {
	UID       types.UID `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
}

func (p *StaticPods) validate(*Envelope) error {
	for i, sp := range p.Pods {
		field := fmt.Sprintf("payload.pods[%d].", i)
		switch {
		case sp.UID == "":
			return fieldErr(field+"uid", "required")
		case sp.Namespace == "":
			return fieldErr(field+"namespace", "required")
		case sp.Name == "":
			return fieldErr(field+"name", "required")
		}
	}
	return nil
}

// DecodeStaticPods decodes and checks a StaticPods payload.
func DecodeStaticPods(e *Envelope) (*StaticPods, error) {
	return DecodePayload[StaticPods](e, KindStaticPods)
}

// AgentReadiness is the pod workers' readiness: Ready when every partition
// has a live owner. Re-sent as a heartbeat; silence means not ready.
type AgentReadiness struct {
	Ready      bool     `json:"ready"`
	Partitions int      `json:"partitions"`
	Unowned    []int    `json:"unowned,omitempty"`
	Replicas   []string `json:"replicas,omitempty"`
	Reason     string   `json:"reason,omitempty"`
	Message    string   `json:"message,omitempty"`
	// Runtime is the container runtime's name and version as the Node's
	// nodeInfo.containerRuntimeVersion shows it ("containerd://1.6.20").
	Runtime string `json:"runtime,omitempty"`
}

func (p *AgentReadiness) validate(*Envelope) error {
	if p.Partitions < 1 || p.Partitions > MaxPartitions {
		return fieldErr("payload.partitions", "must be 1 to %d, is %d", MaxPartitions, p.Partitions)
	}
	return nil
}

// DecodeAgentReadiness decodes and checks an AgentReadiness payload.
func DecodeAgentReadiness(e *Envelope) (*AgentReadiness, error) {
	return DecodePayload[AgentReadiness](e, KindAgentReadiness)
}

// ContainerRef names a container of a pod for a runtime request. Namespace
// and Pod are the pod's as the requester resolved it: the pod worker answers
// only when the pod it holds under PodUID has that namespace and name.
type ContainerRef struct {
	PodUID    types.UID `json:"podUID"`
	Namespace string    `json:"namespace"`
	Pod       string    `json:"pod"`
	Container string    `json:"container"`
}

func (r *ContainerRef) validate() error {
	switch {
	case r.PodUID == "":
		return fieldErr("payload.podUID", "required")
	case r.Namespace == "":
		return fieldErr("payload.namespace", "required")
	case r.Pod == "":
		return fieldErr("payload.pod", "required")
	case r.Container == "":
		return fieldErr("payload.container", "required")
	}
	return nil
}

// LogsRequest asks for a container's log (kubelet: PodLogOptions). The
// answer is a series of LogsChunk messages to the reply subject, the last
// one with EOF set.
type LogsRequest struct {
	ContainerRef
	Follow       bool         `json:"follow,omitempty"`
	Previous     bool         `json:"previous,omitempty"`
	Timestamps   bool         `json:"timestamps,omitempty"`
	TailLines    *int64       `json:"tailLines,omitempty"`
	SinceSeconds *int64       `json:"sinceSeconds,omitempty"`
	SinceTime    *metav1.Time `json:"sinceTime,omitempty"`
	LimitBytes   *int64       `json:"limitBytes,omitempty"`
}

func (p *LogsRequest) validate(*Envelope) error { return p.ContainerRef.validate() }

// DecodeLogsRequest decodes and checks a LogsRequest payload.
func DecodeLogsRequest(e *Envelope) (*LogsRequest, error) {
	return DecodePayload[LogsRequest](e, KindLogsRequest)
}

// LogsChunk is one piece of a log answer.
type LogsChunk struct {
	Data  []byte `json:"data,omitempty"`
	EOF   bool   `json:"eof,omitempty"`
	Error string `json:"error,omitempty"`
}

func (p *LogsChunk) validate(*Envelope) error { return nil }

// DecodeLogsChunk decodes a LogsChunk payload.
func DecodeLogsChunk(e *Envelope) (*LogsChunk, error) {
	return DecodePayload[LogsChunk](e, KindLogsChunk)
}

// ExecRequest runs a command in a container's context, without a terminal.
type ExecRequest struct {
	ContainerRef
	Command        []string `json:"command"`
	Stdin          []byte   `json:"stdin,omitempty"`
	TimeoutSeconds int      `json:"timeoutSeconds,omitempty"`
}

func (p *ExecRequest) validate(*Envelope) error {
	if err := p.ContainerRef.validate(); err != nil {
		return err
	}
	if len(p.Command) == 0 {
		return fieldErr("payload.command", "required")
	}
	if p.TimeoutSeconds < 0 {
		return fieldErr("payload.timeoutSeconds", "negative")
	}
	return nil
}

// DecodeExecRequest decodes and checks an ExecRequest payload.
func DecodeExecRequest(e *Envelope) (*ExecRequest, error) {
	return DecodePayload[ExecRequest](e, KindExecRequest)
}

// ExecResult is the answer to an ExecRequest. Error is set when the command
// could not be run at all (unknown container, timeout); a command that ran
// and failed has a non-zero ExitCode.
type ExecResult struct {
	Stdout   []byte `json:"stdout,omitempty"`
	Stderr   []byte `json:"stderr,omitempty"`
	ExitCode int    `json:"exitCode"`
	Error    string `json:"error,omitempty"`
}

func (p *ExecResult) validate(*Envelope) error { return nil }

// DecodeExecResult decodes an ExecResult payload.
func DecodeExecResult(e *Envelope) (*ExecResult, error) {
	return DecodePayload[ExecResult](e, KindExecResult)
}

// StreamRequest asks the replica that owns a partition for a URL of the
// runtime's streaming server that runs Command in the container with the
// streams asked for (kubelet: the CRI Exec call behind `kubectl exec`), or
// with Attach and no Command, that attaches to the container's own process
// (CRI Attach, `kubectl attach`), or with PortForward and no container,
// that forwards connections to the pod's ports (CRI PortForward, `kubectl
// port-forward`). The requester proxies its client's connection to that
// URL, so the URL must be reachable from where the requester runs.
type StreamRequest struct {
	ContainerRef
	Command []string `json:"command,omitempty"`
	Attach  bool     `json:"attach,omitempty"`
	// PortForward asks for the pod's port forwarding; Ports are the ports
	// the client named up front (a WebSocket client's; over SPDY each
	// stream names its port).
	PortForward bool    `json:"portForward,omitempty"`
	Ports       []int32 `json:"ports,omitempty"`
	Stdin       bool    `json:"stdin,omitempty"`
	Stdout      bool    `json:"stdout,omitempty"`
	Stderr      bool    `json:"stderr,omitempty"`
	TTY         bool    `json:"tty,omitempty"`
}

func (p *StreamRequest) validate(*Envelope) error {
	if p.PortForward {
		return p.validatePortForward()
	}
	if len(p.Ports) > 0 {
		return fieldErr("payload.ports", "only with portForward")
	}
	if err := p.ContainerRef.validate(); err != nil {
		return err
	}
	switch {
	case p.Attach && len(p.Command) > 0:
		return fieldErr("payload.command", "must be empty with attach")
	case !p.Attach && len(p.Command) == 0:
		return fieldErr("payload.command", "required")
	}
	if !p.Stdin && !p.Stdout && !p.Stderr {
		return fieldErr("payload.stdin", "one of stdin, stdout, stderr required")
	}
	return nil
}

// validatePortForward checks a port-forward request: the pod, no
// container, command or streams, ports in 1..65535.
func (p *StreamRequest) validatePortForward() error {
	ref := p.ContainerRef
	ref.Container = "-"
	if err := ref.validate(); err != nil {
		return err
	}
	switch {
	case p.Container != "":
		return fieldErr("payload.container", "must be empty with portForward")
	case len(p.Command) > 0 || p.Attach:
		return fieldErr("payload.command", "must be empty with portForward")
	case p.Stdin || p.Stdout || p.Stderr || p.TTY:
		return fieldErr("payload.stdin", "no streams with portForward")
	}
	for _, port := range p.Ports {
		if port < 1 || port > 65535 {
			return fieldErr("payload.ports", "%d: not a port", port)
		}
	}
	return nil
}

// DecodeStreamRequest decodes and checks a StreamRequest payload.
func DecodeStreamRequest(e *Envelope) (*StreamRequest, error) {
	return DecodePayload[StreamRequest](e, KindStreamRequest)
}

// StreamResult answers a StreamRequest: the URL, or Error. Unsupported says
// the runtime has no streaming server (sim, process): the requester may run
// a command without a terminal through ExecRequest instead.
type StreamResult struct {
	URL         string `json:"url,omitempty"`
	Unsupported bool   `json:"unsupported,omitempty"`
	Error       string `json:"error,omitempty"`
}

func (p *StreamResult) validate(*Envelope) error {
	if p.URL == "" && p.Error == "" {
		return fieldErr("payload.url", "required without error")
	}
	return nil
}

// DecodeStreamResult decodes and checks a StreamResult payload.
func DecodeStreamResult(e *Envelope) (*StreamResult, error) {
	return DecodePayload[StreamResult](e, KindStreamResult)
}

// StatsRequest asks the replica that owns a partition for the resource
// figures of its pods. ImageFsOnly asks for the runtime's image file
// system alone (no pods; a pod worker that ignores it answers in full).
type StatsRequest struct {
	ImageFsOnly bool `json:"imageFsOnly,omitempty"`
}

func (p *StatsRequest) validate(*Envelope) error { return nil }

// ContainerStats are a container's resource figures as the runtime reports them.
type ContainerStats struct {
	Name                  string      `json:"name"`
	StartTime             metav1.Time `json:"startTime"`
	CPUUsageNanoCores     uint64      `json:"cpuUsageNanoCores"`
	CPUUsageCoreNanoSecs  uint64      `json:"cpuUsageCoreNanoSeconds"`
	MemoryWorkingSetBytes uint64      `json:"memoryWorkingSetBytes"`
	// MemoryRequest is the container's memory request as its spec states
	// it (absent: none), for the eviction manager's ranking and message.
	MemoryRequest *resource.Quantity `json:"memoryRequest,omitempty"`
	// RootfsUsedBytes and RootfsInodesUsed are the container's writable
	// layer, LogsUsedBytes and LogsInodesUsed its log files (current and
	// rotated); 0 where the runtime does not measure them.
	RootfsUsedBytes  uint64 `json:"rootfsUsedBytes,omitempty"`
	RootfsInodesUsed uint64 `json:"rootfsInodesUsed,omitempty"`
	LogsUsedBytes    uint64 `json:"logsUsedBytes,omitempty"`
	LogsInodesUsed   uint64 `json:"logsInodesUsed,omitempty"`
	// EphemeralStorageRequest is the container's ephemeral-storage request
	// (absent: none), for the eviction message.
	EphemeralStorageRequest *resource.Quantity `json:"ephemeralStorageRequest,omitempty"`
}

// PodStats are a pod's resource figures.
type PodStats struct {
	UID        types.UID        `json:"uid"`
	Namespace  string           `json:"namespace"`
	Name       string           `json:"name"`
	StartTime  metav1.Time      `json:"startTime"`
	Containers []ContainerStats `json:"containers"`
	// Priority is the pod's spec.priority (0 when unset), for the eviction
	// manager's ranking.
	Priority int32 `json:"priority,omitempty"`
	// EphemeralStorageRequest is the pod's ephemeral-storage request (its
	// containers', init containers' and overhead, as the scheduler sums
	// them; absent: none), for the disk signals' ranking.
	EphemeralStorageRequest *resource.Quantity `json:"ephemeralStorageRequest,omitempty"`
	// VolumeUsedBytes and VolumeInodesUsed are what the pod's local volumes
	// on the node's file system (emptyDir on disk) take.
	VolumeUsedBytes  uint64 `json:"volumeUsedBytes,omitempty"`
	VolumeInodesUsed uint64 `json:"volumeInodesUsed,omitempty"`
	// ProcessCount is the number of processes in the pod (its cgroup's),
	// for the pid.available ranking; 0 where the runtime does not count.
	ProcessCount uint64 `json:"processCount,omitempty"`
}

// StatsResult answers a StatsRequest.
type StatsResult struct {
	Pods  []PodStats `json:"pods"`
	Error string     `json:"error,omitempty"`
	// ImageFs is the runtime's image file system (CRI ImageFsInfo), for
	// the eviction manager's imagefs signals; absent when the runtime
	// keeps no images.
	ImageFs *FsStats `json:"imageFs,omitempty"`
}

// FsStats are a file system's figures.
type FsStats struct {
	AvailableBytes uint64 `json:"availableBytes"`
	CapacityBytes  uint64 `json:"capacityBytes"`
	InodesFree     uint64 `json:"inodesFree"`
	Inodes         uint64 `json:"inodes"`
	// Device is the file system's device number (st_dev), to tell an image
	// file system of its own from the node's; 0 when not known.
	Device uint64 `json:"device,omitempty"`
}

func (p *StatsResult) validate(*Envelope) error { return nil }

// DecodeStatsResult decodes a StatsResult payload.
func DecodeStatsResult(e *Envelope) (*StatsResult, error) {
	return DecodePayload[StatsResult](e, KindStatsResult)
}

// DecodeStatsRequest decodes a StatsRequest payload.
func DecodeStatsRequest(e *Envelope) (*StatsRequest, error) {
	return DecodePayload[StatsRequest](e, KindStatsRequest)
}

// NodePressure is the node's pressure conditions as the eviction manager
// (nodehb) last observed them: the kubelet's MemoryPressure, DiskPressure
// and PIDPressure, each listed while true (within the pressure transition
// period). The pod workers' admission reads it (kubelet: the eviction
// manager's admit handler).
type NodePressure struct {
	Conditions []corev1.NodeConditionType `json:"conditions"`
}

func (p *NodePressure) validate(*Envelope) error {
	for i, c := range p.Conditions {
		switch c {
		case corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure:
		default:
			return fieldErr(fmt.Sprintf("payload.conditions[%d]", i), "not a pressure condition")
		}
	}
	return nil
}

// DecodeNodePressure decodes and checks a NodePressure payload.
func DecodeNodePressure(e *Envelope) (*NodePressure, error) {
	return DecodePayload[NodePressure](e, KindNodePressure)
}

// EvictRequest asks the owner of a pod's partition to evict the pod: fail
// it with Reason and Message (phase Failed), record the Event, and stop its
// containers within GracePeriodSeconds (kubelet: the eviction manager's
// evictPod). The pod is named three times, as in the runtime requests.
type EvictRequest struct {
	PodUID             types.UID `json:"podUID"`
	Namespace          string    `json:"namespace"`
	Pod                string    `json:"pod"`
	Reason             string    `json:"reason"`
	Message            string    `json:"message"`
	GracePeriodSeconds int64     `json:"gracePeriodSeconds"`
	// DisruptionTarget: the failed pod also gets the DisruptionTarget
	// condition, reason TerminationByKubelet, with Message (kubelet: a
	// node-pressure eviction sets it; a local-storage one does not).
	DisruptionTarget bool `json:"disruptionTarget,omitempty"`
}

func (p *EvictRequest) validate(*Envelope) error {
	switch {
	case p.PodUID == "":
		return fieldErr("payload.podUID", "required")
	case p.Namespace == "":
		return fieldErr("payload.namespace", "required")
	case p.Pod == "":
		return fieldErr("payload.pod", "required")
	case p.Reason == "":
		return fieldErr("payload.reason", "required")
	case p.GracePeriodSeconds < 0:
		return fieldErr("payload.gracePeriodSeconds", "negative")
	}
	return nil
}

// DecodeEvictRequest decodes and checks an EvictRequest payload.
func DecodeEvictRequest(e *Envelope) (*EvictRequest, error) {
	return DecodePayload[EvictRequest](e, KindEvictRequest)
}

// EvictResult answers an EvictRequest. Evicted: this request failed the
// pod, and its Failed status is stored on the podstatus stream. Already: the
// pod was evicted or was terminating before (nothing done again). Error:
// the pod could not be evicted (not held, a runtime or bus failure).
type EvictResult struct {
	Evicted bool   `json:"evicted,omitempty"`
	Already bool   `json:"already,omitempty"`
	Error   string `json:"error,omitempty"`
}

func (p *EvictResult) validate(*Envelope) error { return nil }

// DecodeEvictResult decodes an EvictResult payload.
func DecodeEvictResult(e *Envelope) (*EvictResult, error) {
	return DecodePayload[EvictResult](e, KindEvictResult)
}

// ReclaimRequest asks the node's garbage collector to free node-level
// resources for a disk signal before pods are evicted (kubelet: the
// eviction manager's reclaimNodeLevelResources): every dead container that
// may go, then every image no container uses.
type ReclaimRequest struct {
	// Signal is the eviction signal that asks, e.g. nodefs.available.
	Signal string `json:"signal"`
}

func (p *ReclaimRequest) validate(*Envelope) error {
	if p.Signal == "" {
		return fieldErr("payload.signal", "required")
	}
	return nil
}

// DecodeReclaimRequest decodes and checks a ReclaimRequest payload.
func DecodeReclaimRequest(e *Envelope) (*ReclaimRequest, error) {
	return DecodePayload[ReclaimRequest](e, KindReclaimRequest)
}

// ReclaimResult answers a ReclaimRequest: the bytes the removed images took
// and, if a step failed or the runtime keeps nothing to collect, Error.
type ReclaimResult struct {
	ImageBytesFreed int64  `json:"imageBytesFreed,omitempty"`
	Error           string `json:"error,omitempty"`
}

func (p *ReclaimResult) validate(*Envelope) error { return nil }

// DecodeReclaimResult decodes a ReclaimResult payload.
func DecodeReclaimResult(e *Envelope) (*ReclaimResult, error) {
	return DecodePayload[ReclaimResult](e, KindReclaimResult)
}
