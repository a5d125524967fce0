// Package devices is the pod workers' side of the node's device plugin
// manager, which nodehb runs: at admission a pod that requests extended
// resources gets its containers' devices allocated (or is rejected as the
// kubelet rejects it, UnexpectedAdmissionError), and each container, as
// it is created, gets what the plugins answered for it (devices, mounts,
// environment, annotations). The requests go over the bus
// (DeviceAllocateRequest on devices.allocate), so any replica serves any
// pod, and the allocation, which nodehb keeps, survives a restart of
// either side.
package devices

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/services/podworkers/internal/admission"
)

// ReasonUnexpectedAdmissionError is the kubelet's rejection when a pod's
// devices cannot be allocated.
const ReasonUnexpectedAdmissionError = "UnexpectedAdmissionError"

// DefaultTimeout bounds one request to the device manager (its plugin
// calls included).
const DefaultTimeout = 30 * time.Second

// Requester sends a request on the bus (bus.Publisher.Request).
type Requester interface {
	Request(ctx context.Context, subject string, kind bus.Kind, payload any) (*bus.Envelope, error)
}

// Client asks the node's device manager.
type Client struct {
	bus     Requester
	subject string
	// runtime names the pods' runtime; supported: it gives containers
	// devices (cri).
	runtime   string
	supported bool
	// node is the Node object (its capacity tells a device resource of a
	// device manager that does not answer from a resource no plugin has).
	node    func() *corev1.Node
	timeout time.Duration
	log     *zap.Logger
}

// New builds a client on subject for a runtime of the given type.
func New(b Requester, subject, runtimeType string, supported bool, node func() *corev1.Node, log *zap.Logger) *Client {
	return &Client{bus: b, subject: subject, runtime: runtimeType, supported: supported, node: node, timeout: DefaultTimeout, log: log}
}

// Request is the allocation request of a pod's containers that ask for
// extended resources (their limits, as the kubelet's device manager reads
// them), nil when none does.
func Request(p *corev1.Pod) *bus.DeviceAllocateRequest {
	req := &bus.DeviceAllocateRequest{PodUID: p.UID, Namespace: p.Namespace, Pod: p.Name}
	add := func(c *corev1.Container, init bool) {
		res := map[string]int64{}
		for name, q := range c.Resources.Limits {
			if kube.IsExtendedResourceName(string(name)) && q.Value() > 0 {
				res[string(name)] = q.Value()
			}
		}
		if len(res) == 0 {
			return
		}
		restartable := init && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		req.Containers = append(req.Containers, bus.DeviceContainer{Name: c.Name, Init: init, Restartable: restartable, Resources: res})
	}
	for i := range p.Spec.InitContainers {
		add(&p.Spec.InitContainers[i], true)
	}
	for i := range p.Spec.Containers {
		add(&p.Spec.Containers[i], false)
	}
	if len(req.Containers) == 0 {
		return nil
	}
	return req
}

// Admit allocates the devices of a pod at admission (an admission.Handler,
// last in the chain, as the kubelet's resource managers come after the
// predicates). A device manager that cannot be reached leaves the
// allocation to the containers' start.
func (c *Client) Admit(a *admission.Attributes) admission.Result {
	req := Request(a.Pod)
	if req == nil {
		return admission.Result{Admit: true}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	res, err := c.ask(ctx, req)
	if err != nil {
		c.log.Warn("device manager not reached at admission, the devices are allocated at start",
			zap.String("pod", a.Pod.Namespace+"/"+a.Pod.Name), zap.String("uid", string(a.Pod.UID)), zap.Error(err))
		return admission.Result{Admit: true}
	}
	if res.Reason != "" {
		return admission.Result{Reason: res.Reason, Message: res.Message}
	}
	if !c.supported && hasDevices(res) {
		return admission.Result{Reason: ReasonUnexpectedAdmissionError,
			Message: fmt.Sprintf("Allocate failed due to the %s runtime gives containers no devices, which is unexpected", c.runtime)}
	}
	return admission.Result{Admit: true}
}

// Options are what container cn of the pod is created with from its
// devices, nil when it has none. The plugins that ask for it are called
// (PreStartContainer) first. An error fails the start (kubelet:
// CreateContainerConfigError), and the next attempt asks again.
func (c *Client) Options(ctx context.Context, p *corev1.Pod, cn string) (*runtime.DeviceOptions, error) {
	req := Request(p)
	if req == nil {
		return nil, nil
	}
	req.Start = cn
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	res, err := c.ask(ctx, req)
	if errors.Is(err, nats.ErrNoResponders) && !c.deviceResource(req, cn) {
		// no device manager runs, and the node has none of the resources.
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("device manager: %w", err)
	}
	if res.Reason != "" {
		return nil, errors.New(res.Message)
	}
	for _, o := range res.Containers {
		if o.Name != cn {
			continue
		}
		if !c.supported && !emptyOptions(o) {
			return nil, fmt.Errorf("the %s runtime gives containers no devices", c.runtime)
		}
		return deviceOptions(o), nil
	}
	return nil, nil
}

// ask sends the request and reads the answer; an answer's Error is an
// error.
func (c *Client) ask(ctx context.Context, req *bus.DeviceAllocateRequest) (*bus.DeviceAllocateResult, error) {
	e, err := c.bus.Request(ctx, c.subject, bus.KindDeviceAllocateRequest, req)
	if err != nil {
		return nil, err
	}
	res, err := bus.DecodeDeviceAllocateResult(e)
	if err != nil {
		return nil, err
	}
	if res.Error != "" {
		return nil, errors.New(res.Error)
	}
	return res, nil
}

// deviceResource: the Node states one of the container's extended
// resources, so a device plugin may stand behind it.
func (c *Client) deviceResource(req *bus.DeviceAllocateRequest, cn string) bool {
	var n *corev1.Node
	if c.node != nil {
		n = c.node()
	}
	if n == nil {
		return false
	}
	for _, ct := range req.Containers {
		if ct.Name != cn {
			continue
		}
		for name := range ct.Resources {
			if _, ok := n.Status.Capacity[corev1.ResourceName(name)]; ok {
				return true
			}
		}
	}
	return false
}

func hasDevices(res *bus.DeviceAllocateResult) bool {
	for _, o := range res.Containers {
		if !emptyOptions(o) {
			return true
		}
	}
	return false
}

func emptyOptions(o bus.DeviceContainerOptions) bool {
	return len(o.Devices) == 0 && len(o.Mounts) == 0 && len(o.Envs) == 0 && len(o.Annotations) == 0
}

func deviceOptions(o bus.DeviceContainerOptions) *runtime.DeviceOptions {
	out := &runtime.DeviceOptions{Envs: o.Envs, Annotations: o.Annotations}
	for _, d := range o.Devices {
		out.Devices = append(out.Devices, runtime.Device{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
	}
	for _, m := range o.Mounts {
		out.Mounts = append(out.Mounts, runtime.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	return out
}
