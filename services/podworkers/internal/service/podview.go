package service

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/bus"
)

// What podworkers reads of a bus pod's API status before it keeps the pod
// (in the controller, the workers and the replay): the phase (a pod the
// API shows terminal is not run again), the reason and message (a pod
// another replica evicted goes on terminating as evicted), the start time
// (a pod's start time is the one the API has) and the QoS class (the OOM
// score). The rest of the status, a running pod's conditions and container
// statuses, is most of what a RECONCILE brings, and statussync is the
// stage that owns it.

// decodeBusPod decodes of a protobuf bus pod the metadata, the spec and
// the status fields above.
var decodeBusPod = bus.PodSpecAndStatus(bus.PodStatusPhase, bus.PodStatusReason, bus.PodStatusMessage,
	bus.PodStatusStartTime, bus.PodStatusQOSClass)

// decodePodUpdate decodes a PodUpdate and trims its pods' statuses to the
// fields above (a JSON payload is decoded whole first).
func decodePodUpdate(e *bus.Envelope) (*bus.PodUpdate, error) {
	u, err := bus.DecodePodUpdateWith(e, decodeBusPod)
	if err != nil {
		return nil, err
	}
	busPodView(u.Pods)
	return u, nil
}

// busPodView trims the pods' statuses to the fields above.
func busPodView(pods []corev1.Pod) {
	for i := range pods {
		st := pods[i].Status
		pods[i].Status = corev1.PodStatus{Phase: st.Phase, Reason: st.Reason, Message: st.Message,
			StartTime: st.StartTime, QOSClass: st.QOSClass}
	}
}
