package runtime

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A mount's recursive read-only mode resolves as the kubelet's: Enabled
// only where the runtime supports it (an error naming the volume
// otherwise), IfPossible where it does, never for a writable or
// propagating mount.
func TestResolveRecursiveReadOnly(t *testing.T) {
	mode := func(m corev1.RecursiveReadOnlyMode) *corev1.RecursiveReadOnlyMode { return &m }
	for _, c := range []struct {
		name      string
		m         Mount
		supported bool
		want      bool
		err       string
	}{
		{"unset", Mount{Volume: "v", ReadOnly: true}, true, false, ""},
		{"disabled", Mount{Volume: "v", ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyDisabled)}, true, false, ""},
		{"if possible, supported", Mount{Volume: "v", ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyIfPossible)}, true, true, ""},
		{"if possible, unsupported", Mount{Volume: "v", ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyIfPossible)}, false, false, ""},
		{"enabled, supported", Mount{Volume: "v", ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyEnabled)}, true, true, ""},
		{"enabled, unsupported", Mount{Volume: "mnt", ReadOnly: true, RecursiveReadOnly: mode(corev1.RecursiveReadOnlyEnabled)}, false, false,
			`volume "mnt" requested recursive read-only mode, but it is not supported by the runtime`},
		{"not read-only", Mount{Volume: "v", RecursiveReadOnly: mode(corev1.RecursiveReadOnlyEnabled)}, true, false, "it is not read-only"},
		{"propagating", Mount{Volume: "v", ReadOnly: true, Propagation: corev1.MountPropagationHostToContainer,
			RecursiveReadOnly: mode(corev1.RecursiveReadOnlyEnabled)}, true, false, `not compatible with propagation "HostToContainer"`},
	} {
		got, err := ResolveRecursiveReadOnly(c.m, c.supported)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want %q", c.name, err, c.err)
		case got != c.want:
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
