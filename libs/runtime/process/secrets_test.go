package process

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/runtime"
)

// A container's environment and directory give it nothing of the pod
// worker's own: not its environment (where a stage's NATS URL, kubeconfig
// path and credentials live), not its files.
func TestContainerGetsNoneOfTheAgentsEnvironment(t *testing.T) {
	t.Setenv("SPLITLET_NATS_URL", "nats://stage:s3cret@127.0.0.1:4222")
	t.Setenv("SPLITLET_KUBECONFIG", "/state/kubeconfig")
	t.Setenv("KUBECONFIG", "/state/kubeconfig")
	r := newRuntime(t)
	p := shPod("u-noenv", `env; ls -a`)
	st := r.start(p, 0, 0)
	r.waitExit(st.ID)
	out := r.logs(p, "c0", runtime.LogOptions{TailLines: -1})
	for _, leak := range []string{"s3cret", "SPLITLET_", "KUBECONFIG", "/state"} {
		if strings.Contains(out, leak) {
			t.Errorf("the container sees %q:\n%s", leak, out)
		}
	}
	if !strings.Contains(out, "PATH=") {
		t.Fatalf("the container's env was not printed:\n%s", out)
	}
}

// With a default user (as podworkers runs it when root), a container runs
// unprivileged: it cannot read a file only the agent may (a kubeconfig, a
// bus identity's seed), and exec runs as the same user. A container that
// asks for a user (runAsUser, runAsGroup; root included) gets it.
func TestContainersRunUnprivileged(t *testing.T) {
	if testing.Short() {
		t.Skip("needs root: skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root: only a root runtime switches users")
	}
	dir, err := os.MkdirTemp("", "splitlet-secret-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(secret, []byte("s3cret-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, WithDefaultUser(Nobody))
	p := shPod("u-nobody", fmt.Sprintf(`echo "uid=$(id -u) gid=$(id -g)"; cat %s; sleep 300`, secret))
	st := r.start(p, 0, 0)
	poll(t, "the container's output", func() bool { return strings.Contains(r.logs(p, "c0", runtime.LogOptions{TailLines: -1}), "uid=") })
	out := r.logs(p, "c0", runtime.LogOptions{TailLines: -1})
	if !strings.Contains(out, "uid=65534 gid=65534") || strings.Contains(out, "s3cret") {
		t.Errorf("container as the default user:\n%s", out)
	}
	res, err := r.Exec(context.Background(), p.UID, "c0", []string{"sh", "-c", "id -u; cat " + secret}, nil, 10*time.Second)
	if err != nil || strings.TrimSpace(strings.Split(string(res.Stdout), "\n")[0]) != "65534" || strings.Contains(string(res.Stdout), "s3cret") {
		t.Errorf("exec: %q %q %v", res.Stdout, res.Stderr, err)
	}
	if err := r.StopContainer(context.Background(), st.ID, 0); err != nil {
		t.Fatal(err)
	}

	root, u, g := int64(0), int64(1234), int64(4321)
	asked := shPod("u-asked", `echo "uid=$(id -u) gid=$(id -g)"`, `echo "uid=$(id -u) gid=$(id -g)"; cat `+secret)
	asked.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &u, RunAsGroup: &g}
	asked.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{RunAsUser: &root, RunAsGroup: &root}
	for i, want := range []string{"uid=1234 gid=4321", "uid=0 gid=0"} {
		st := r.start(asked, i, 0)
		r.waitExit(st.ID)
		if out := r.logs(asked, fmt.Sprintf("c%d", i), runtime.LogOptions{TailLines: -1}); !strings.Contains(out, want) {
			t.Errorf("container c%d: want %q in\n%s", i, want, out)
		}
	}
	if out := r.logs(asked, "c1", runtime.LogOptions{TailLines: -1}); !strings.Contains(out, "s3cret") {
		t.Errorf("a container that asked for root cannot read the file:\n%s", out)
	}
}
