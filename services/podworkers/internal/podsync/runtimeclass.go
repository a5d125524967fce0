package podsync

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/runtime"
)

// WithRuntimeClasses sets how a pod's RuntimeClass resolves to the runtime
// handler its sandbox runs under (kubelet: the RuntimeClass manager's
// LookupRuntimeHandler); without it every pod gets the runtime's default.
func WithRuntimeClasses(lookup func(name string) (string, error)) Option {
	return func(s *Syncer) { s.runtimeClasses = lookup }
}

// podRuntimeHandler sets the runtime handler the runtime gets for the pod's
// sandbox: none for a pod without a RuntimeClass (the default handler),
// else a lookup made when the sandbox is made, whose error fails it.
func (s *Syncer) podRuntimeHandler(pod *corev1.Pod, opts *runtime.StartOptions) {
	name := pod.Spec.RuntimeClassName
	if s.runtimeClasses == nil || name == nil || *name == "" {
		return
	}
	class := *name
	opts.RuntimeHandler = func() (string, error) { return s.runtimeClasses(class) }
}

// volumeMountStatuses are the container's mounts as its status shows them
// (kubelet: status.volumeMounts): a read-only one with its recursive
// read-only mode resolved for the pod's runtime handler (Disabled when it
// cannot be), a read-write one without.
func (s *Syncer) volumeMountStatuses(pod *corev1.Pod, c *corev1.Container) []corev1.VolumeMountStatus {
	if len(c.VolumeMounts) == 0 {
		return nil
	}
	rro, ok := s.rt.(runtime.RecursiveReadOnly)
	supported := false
	if ok {
		var opts runtime.StartOptions
		s.podRuntimeHandler(pod, &opts)
		supported = rro.RecursiveReadOnlyMounts(opts.RuntimeHandler)
	}
	out := make([]corev1.VolumeMountStatus, 0, len(c.VolumeMounts))
	for _, vm := range c.VolumeMounts {
		st := corev1.VolumeMountStatus{Name: vm.Name, MountPath: vm.MountPath, ReadOnly: vm.ReadOnly}
		if vm.ReadOnly {
			mode := corev1.RecursiveReadOnlyDisabled
			m := runtime.Mount{Volume: vm.Name, ReadOnly: true, RecursiveReadOnly: vm.RecursiveReadOnly}
			if vm.MountPropagation != nil {
				m.Propagation = *vm.MountPropagation
			}
			if on, err := runtime.ResolveRecursiveReadOnly(m, supported); err == nil && on {
				mode = corev1.RecursiveReadOnlyEnabled
			}
			st.RecursiveReadOnly = &mode
		}
		out = append(out, st)
	}
	return out
}
