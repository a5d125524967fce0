package bus

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
)

// KindDeviceAllocateRequest and KindDeviceAllocateResult carry the device
// plugin allocation of a pod's containers (kubelet: the device manager's
// Allocate at admission and its run options at container start).
const (
	KindDeviceAllocateRequest Kind = "DeviceAllocateRequest"
	KindDeviceAllocateResult  Kind = "DeviceAllocateResult"
)

const tokDevices = "devices"

// DevicesAllocate is the request/reply subject where a pod worker asks the
// node's device manager (nodehb) for the devices of a pod's containers
// (DeviceAllocateRequest). One subject for the node: the device manager is
// one per node, whichever replica holds the pod.
func (s Subjects) DevicesAllocate() string { return s.prefix + "." + tokDevices + ".allocate" }

// DeviceAllocateRequest asks for the devices of every container of a pod
// that requests extended resources (kubelet: the device manager's
// Allocate, init containers first). The answer is the same for the same
// pod until the pod has gone: a container already given devices keeps them.
type DeviceAllocateRequest struct {
	PodUID    types.UID `json:"podUID"`
	Namespace string    `json:"namespace"`
	Pod       string    `json:"pod"`
	// Containers are the pod's containers that request extended
	// resources, init containers first in their order, then the others.
	Containers []DeviceContainer `json:"containers"`
	// Start, when set, names the container about to be created: the
	// plugins that asked for it get their PreStartContainer call for its
	// devices before the answer.
	Start string `json:"start,omitempty"`
}

// DeviceContainer is one container's extended resources (their limits, as
// the kubelet's device manager reads them), by resource name.
type DeviceContainer struct {
	Name string `json:"name"`
	// Init: an init container; Restartable: an init container that keeps
	// running (a sidecar), whose devices are not handed on.
	Init        bool             `json:"init,omitempty"`
	Restartable bool             `json:"restartable,omitempty"`
	Resources   map[string]int64 `json:"resources"`
}

func (p *DeviceAllocateRequest) validate(*Envelope) error {
	switch {
	case p.PodUID == "":
		return fieldErr("payload.podUID", "required")
	case p.Namespace == "":
		return fieldErr("payload.namespace", "required")
	case p.Pod == "":
		return fieldErr("payload.pod", "required")
	}
	seen := map[string]bool{}
	for i, c := range p.Containers {
		if c.Name == "" {
			return fieldErr(fmt.Sprintf("payload.containers[%d].name", i), "required")
		}
		if seen[c.Name] {
			return fieldErr(fmt.Sprintf("payload.containers[%d].name", i), "duplicate %q", c.Name)
		}
		seen[c.Name] = true
		for r, n := range c.Resources {
			if n < 0 {
				return fieldErr(fmt.Sprintf("payload.containers[%d].resources[%s]", i, r), "negative")
			}
		}
	}
	return nil
}

// DecodeDeviceAllocateRequest decodes and checks a DeviceAllocateRequest payload.
func DecodeDeviceAllocateRequest(e *Envelope) (*DeviceAllocateRequest, error) {
	return DecodePayload[DeviceAllocateRequest](e, KindDeviceAllocateRequest)
}

// DeviceAllocateResult answers a DeviceAllocateRequest: what each
// container that got devices gets in its CreateContainer, or, when the
// pod cannot have them, Reason and Message, the pod's rejection (kubelet:
// UnexpectedAdmissionError, "Allocate failed due to ..."). Error: the
// request could not be answered (a bus or plugin failure to retry).
type DeviceAllocateResult struct {
	Containers []DeviceContainerOptions `json:"containers,omitempty"`
	Reason     string                   `json:"reason,omitempty"`
	Message    string                   `json:"message,omitempty"`
	Error      string                   `json:"error,omitempty"`
}

// DeviceContainerOptions are the device plugins' answers for one container
// (their ContainerAllocateResponses, merged over its resources).
type DeviceContainerOptions struct {
	Name        string            `json:"name"`
	Devices     []DeviceNode      `json:"devices,omitempty"`
	Mounts      []DeviceMount     `json:"mounts,omitempty"`
	Envs        map[string]string `json:"envs,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// DeviceNode is a device file the container gets (a CRI Device).
type DeviceNode struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	Permissions   string `json:"permissions,omitempty"`
}

// DeviceMount is a host path the container gets mounted (a CRI Mount).
type DeviceMount struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	ReadOnly      bool   `json:"readOnly,omitempty"`
}

func (p *DeviceAllocateResult) validate(*Envelope) error {
	if p.Reason != "" && len(p.Containers) > 0 {
		return fieldErr("payload.containers", "set with a rejection reason")
	}
	for i, c := range p.Containers {
		if c.Name == "" {
			return fieldErr(fmt.Sprintf("payload.containers[%d].name", i), "required")
		}
	}
	return nil
}

// DecodeDeviceAllocateResult decodes and checks a DeviceAllocateResult payload.
func DecodeDeviceAllocateResult(e *Envelope) (*DeviceAllocateResult, error) {
	return DecodePayload[DeviceAllocateResult](e, KindDeviceAllocateResult)
}
