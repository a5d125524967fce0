package runtime

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// RecursiveReadOnly is a runtime that can make read-only mounts
// recursively read-only with some of its handlers.
type RecursiveReadOnly interface {
	// RecursiveReadOnlyMounts says whether the pod's runtime handler
	// (handler resolves it; nil: the default) supports them.
	RecursiveReadOnlyMounts(handler func() (string, error)) bool
}

// ResolveRecursiveReadOnly says whether a mount is made recursively
// read-only (kubelet: resolveRecursiveReadOnly): Disabled or unset never;
// IfPossible when the runtime supports it; Enabled only then, an error
// otherwise, as for a mount that is not read-only or propagates mounts.
func ResolveRecursiveReadOnly(m Mount, supported bool) (bool, error) {
	mode := m.RecursiveReadOnly
	if mode == nil || *mode == corev1.RecursiveReadOnlyDisabled {
		return false, nil
	}
	if !m.ReadOnly {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not read-only", m.Volume)
	}
	if m.Propagation != "" && m.Propagation != corev1.MountPropagationNone {
		return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not compatible with propagation %q", m.Volume, m.Propagation)
	}
	switch *mode {
	case corev1.RecursiveReadOnlyIfPossible:
		return supported, nil
	case corev1.RecursiveReadOnlyEnabled:
		if !supported {
			return false, fmt.Errorf("volume %q requested recursive read-only mode, but it is not supported by the runtime", m.Volume)
		}
		return true, nil
	}
	return false, fmt.Errorf("unknown recursive read-only mode %q", *mode)
}
