package service

import corev1 "k8s.io/api/core/v1"

// busPodView trims the pods of a PodUpdate to what podworkers reads of them
// before they are kept (by the controller, the workers and the replay): of
// the API status only the phase (a pod the API shows terminal is not run
// again), the start time (a pod's start time is the one the API has) and
// the QoS class (the OOM score). The rest of the status, a running pod's
// conditions and container statuses, is most of what a RECONCILE brings,
// and statussync is the stage that owns it.
func busPodView(pods []corev1.Pod) {
	for i := range pods {
		st := pods[i].Status
		pods[i].Status = corev1.PodStatus{Phase: st.Phase, StartTime: st.StartTime, QOSClass: st.QOSClass}
	}
}
