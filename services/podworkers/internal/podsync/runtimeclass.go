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
