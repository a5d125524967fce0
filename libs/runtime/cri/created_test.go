package cri

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/runtime"
)

// shimsOf lists the pids of containerd shims serving a sandbox (the shim's
// command line names the sandbox's id).
func shimsOf(t *testing.T, sandboxID string) []string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || !strings.Contains(args[0], "containerd-shim") {
			continue
		}
		for _, a := range args {
			if a == sandboxID {
				out = append(out, filepath.Base(filepath.Dir(p)))
			}
		}
	}
	return out
}

// A container created but never started (a start cut short) is removed
// when the container is started again, and with its pod; the sandbox's
// shim goes with the pod.
func TestCreatedContainerRemoved(t *testing.T) {
	r := newRuntime(t)
	p := newPod("created", true, shell("a", `sleep 3600`), shell("b", `sleep 3600`))
	cleanupPod(t, p)
	st := start(t, r, p, 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.mu.Lock()
	pd := r.pods[p.UID]
	r.mu.Unlock()
	sb, err := r.ensureSandbox(ctx, p, pd)
	if err != nil {
		t.Fatal(err)
	}
	imageRef, _, _, err := r.ensureImage(ctx, p, &p.Spec.Containers[1], sb.config)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.containerConfig(p, &p.Spec.Containers[1], 0, imageRef, sb.ip)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := r.rs.CreateContainer(ctx, sb.id, cfg, sb.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	var created bool
	for _, c := range r.PodContainers(p.UID) {
		created = created || (c.Name == "b" && c.State == runtime.StateCreated)
	}
	if !created {
		t.Fatalf("no Created container b after relist: %+v", r.PodContainers(p.UID))
	}
	if len(shimsOf(t, sb.id)) == 0 {
		t.Fatalf("no shim found for sandbox %s (the test cannot see shims)", sb.id)
	}
	again := start(t, r, p, 1, 1)
	if again.State != runtime.StateRunning || again.Attempt != 1 {
		t.Fatalf("b started again: %+v", again)
	}
	if _, err := r.rs.ContainerStatus(ctx, stale, false); !isNotFound(err) {
		t.Errorf("the Created instance %s is still in the runtime (err %v)", stale, err)
	}
	for _, id := range []string{st.ID, again.ID} {
		if err := r.StopContainer(ctx, id, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.RemovePod(ctx, p.UID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sandbox's shim exits", 20*time.Second, func() (bool, string) {
		s := shimsOf(t, sb.id)
		return len(s) == 0, strings.Join(s, ",")
	})
}
