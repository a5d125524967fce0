package podsync

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/runtime"
)

// WithDevices sets where a container's devices come from (the node's
// device manager): options returns what the container is created with, nil
// for none; its error fails the start with CreateContainerConfigError
// (kubelet: GenerateRunContainerOptions).
func WithDevices(options func(ctx context.Context, pod *corev1.Pod, container string) (*runtime.DeviceOptions, error)) Option {
	return func(s *Syncer) { s.devices = options }
}

// podDevices sets the container's devices in opts.
func (s *Syncer) podDevices(ctx context.Context, pod *corev1.Pod, c *corev1.Container, attempt int, opts *runtime.StartOptions) (runtime.ContainerStatus, error) {
	if s.devices == nil {
		return runtime.ContainerStatus{}, nil
	}
	d, err := s.devices(ctx, pod, c.Name)
	if err != nil {
		return runtime.ContainerStatus{PodUID: pod.UID, Name: c.Name, Attempt: attempt, Hash: runtime.ContainerHash(c),
			Image: c.Image, State: runtime.StateExited, Reason: ReasonCreateContainerConfigError, Message: err.Error()}, err
	}
	opts.Devices = d
	return runtime.ContainerStatus{}, nil
}
