package cri

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/testenv"
)

// On a containerd that reports no recursive read-only mounts (1.6 reports
// no handler features), a mount asking for recursiveReadOnly Enabled fails
// the start with CreateContainerConfigError and the kubelet's message, and
// starts nothing; IfPossible gives a plain read-only mount.
func TestRecursiveReadOnlyUnsupported(t *testing.T) {
	r := newRuntime(t)
	if r.RecursiveReadOnlyMounts(nil) {
		t.Skip("this containerd supports recursive read-only mounts")
	}
	ctx := t.Context()
	mode := func(m corev1.RecursiveReadOnlyMode) *corev1.RecursiveReadOnlyMode { return &m }
	vol := t.TempDir()
	mount := func(m corev1.RecursiveReadOnlyMode) runtime.StartOptions {
		return runtime.StartOptions{Mounts: []runtime.Mount{{ContainerPath: "/mnt", HostPath: vol, ReadOnly: true, Volume: "mnt", RecursiveReadOnly: mode(m)}}}
	}
	p := newPod("rro-enabled", true, shell("c", `sleep 3600`))
	cleanupPod(t, p)
	st, err := r.StartContainer(ctx, p, &p.Spec.Containers[0], 0, mount(corev1.RecursiveReadOnlyEnabled))
	if err == nil {
		t.Fatal("a recursive read-only mount started on a runtime without them")
	}
	want := `failed to resolve recursive read-only mode: volume "mnt" requested recursive read-only mode, but it is not supported by the runtime`
	if st.Reason != ReasonCreateConfigError || st.Message != want {
		t.Errorf("reason %q message %q, want %s %q", st.Reason, st.Message, ReasonCreateConfigError, want)
	}
	if cs := r.PodContainers(p.UID); len(cs) != 0 {
		t.Errorf("containers %+v made", cs)
	}

	q := newPod("rro-if-possible", true, shell("c", `touch /mnt/x 2>&1; sleep 3600`))
	cleanupPod(t, q)
	startWithOpts(t, r, q, mount(corev1.RecursiveReadOnlyIfPossible))
	testenv.Eventually(t, time.Minute, "the read-only mount refusing a write", func() (bool, string) {
		out := logs(t, r, q.UID, "c", runtime.LogOptions{})
		return strings.Contains(out, "Read-only file system"), out
	})
}

// startWithOpts starts the pod's first container with opts.
func startWithOpts(t *testing.T, r *Runtime, p *corev1.Pod, opts runtime.StartOptions) {
	t.Helper()
	if _, err := r.StartContainer(t.Context(), p, &p.Spec.Containers[0], 0, opts); err != nil {
		t.Fatalf("start %s: %v", p.Name, err)
	}
}
