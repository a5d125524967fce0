package cri

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/runtime"
)

// runAsNonRoot against containerd: busybox runs as root, so a container
// that asks for non-root without a user of its own does not start (the
// kubelet's CreateContainerConfigError and message); with runAsUser 1000
// it runs, as uid 1000; allowPrivilegeEscalation false sets no_new_privs.
func TestRunAsNonRoot(t *testing.T) {
	r := newRuntime(t)
	yes, no := true, false
	uid := int64(1000)
	refused := shell("refused", "sleep 30")
	refused.SecurityContext = &corev1.SecurityContext{RunAsNonRoot: &yes}
	allowed := shell("allowed", `echo "$(id -u) $(grep NoNewPrivs /proc/self/status | tr -d '\t ')"; sleep 30`)
	allowed.SecurityContext = &corev1.SecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, AllowPrivilegeEscalation: &no}
	p := newPod("nonroot", true, refused, allowed)
	cleanupPod(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := r.StartContainer(ctx, p, &p.Spec.Containers[0], 0, runtime.StartOptions{})
	if err == nil || st.Reason != ReasonCreateConfigError || !strings.Contains(st.Message, "container has runAsNonRoot and image will run as root") {
		t.Fatalf("root image with runAsNonRoot: %+v, %v", st, err)
	}
	st = start(t, r, p, 1, 0)
	waitFor(t, "the non-root container's output", 30*time.Second, func() (bool, string) {
		var b strings.Builder
		_ = r.Logs(ctx, p.UID, "allowed", runtime.LogOptions{TailLines: -1}, &b)
		return b.String() == "1000 NoNewPrivs:1\n", b.String()
	})
}

// The kubelet's rules and messages, without a runtime.
func TestVerifyNonRoot(t *testing.T) {
	yes := true
	zero, some := int64(0), int64(7)
	p := newPod("p", true, corev1.Container{Name: "c"})
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &yes}
	c := &p.Spec.Containers[0]
	for _, tc := range []struct {
		runAs    *int64
		imageUID *int64
		user     string
		want     string
	}{
		{runAs: &zero, want: "container's runAsUser breaks non-root policy"},
		{runAs: &some},
		{imageUID: &some},
		{imageUID: &zero, want: "image will run as root"},
		{want: "image will run as root"},
		{user: "app", want: "image has non-numeric user (app), cannot verify user is non-root"},
	} {
		c.SecurityContext = &corev1.SecurityContext{RunAsUser: tc.runAs}
		err := verifyNonRoot(p, c, tc.imageUID, tc.user)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc, err, tc.want)
		}
	}
}
