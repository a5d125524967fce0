package service

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/services/podworkers/internal/admission"
	"github.com/splitlet/splitlet/services/podworkers/internal/devices"
)

// deviceClient asks nodehb's device manager for the devices of the pods
// this replica admits and starts; the runtime says whether it can give
// them (cri) or must refuse a pod that has some.
func (r *Runner) deviceClient(rt runtime.Runtime, node func() *corev1.Node) *devices.Client {
	supported := false
	if d, ok := rt.(runtime.DeviceRuntime); ok {
		supported = d.SupportsDevices()
	}
	pub := bus.NewPublisher(r.conn.NC, r.js, r.common.NodeName, r.Source(), r.common.BusEncodingOption())
	return devices.New(pub, r.subjects.DevicesAllocate(), rt.Type(), supported, node, r.log.Named("devices"))
}

// deviceAdmission is the last admission handler: the pod's devices
// (kubelet: the device manager's admission, after the predicates).
func (r *Runner) deviceAdmission() []admission.Handler {
	if r.devices == nil {
		return nil
	}
	return []admission.Handler{admission.HandlerFunc(r.devices.Admit)}
}
