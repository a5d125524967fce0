package podsync

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/runtime"
)

// WithStartCheck makes every container start pass check first: a container
// it refuses is not started and waits with CreateContainerConfigError and
// the error as message (the process runtime's security settings, for an
// ephemeral container or an annotation added after admission).
func WithStartCheck(check func(*corev1.Pod, *corev1.Container) error) Option {
	return func(s *Syncer) { s.startCheck = check }
}

// checkStart runs the start check, if any: a refusal is the status of a
// start that left no instance.
func (s *Syncer) checkStart(pod *corev1.Pod, c *corev1.Container, attempt int) (runtime.ContainerStatus, error) {
	if s.startCheck == nil {
		return runtime.ContainerStatus{}, nil
	}
	err := s.startCheck(pod, c)
	if err == nil {
		return runtime.ContainerStatus{}, nil
	}
	return runtime.ContainerStatus{PodUID: pod.UID, Name: c.Name, Attempt: attempt, Hash: runtime.ContainerHash(c),
		Image: c.Image, State: runtime.StateExited, Reason: ReasonCreateContainerConfigError, Message: err.Error()}, err
}
