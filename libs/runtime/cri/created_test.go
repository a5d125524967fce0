package cri

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/testenv"
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
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	r.mu.Lock()
	pd := r.pods[p.UID]
	r.mu.Unlock()
	sb, err := r.ensureSandbox(ctx, p, pd, runtime.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	imageRef, _, _, err := r.ensureImage(ctx, p, p.Spec.Containers[1].Image, PullPolicy(&p.Spec.Containers[1]), sb.config, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.containerConfig(ctx, p, &p.Spec.Containers[1], 0, imageRef, sb.ip, runtime.StartOptions{})
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
	testenv.Eventually(t, 20*time.Second, "the sandbox's shim exits", func() (bool, string) {
		s := shimsOf(t, sb.id)
		return len(s) == 0, strings.Join(s, ",")
	})
}

// containerd's report of a start the caller cancelled (a pod worker killed
// mid-start: exited, StartError, "context canceled", never started) counts
// as Created, to be started again; a start that failed on its own stays a
// failure.
func TestCancelledStartCountsAsCreated(t *testing.T) {
	r := &Runtime{name: "containerd"}
	status := func(msg string) *runtimeapi.ContainerStatus {
		return &runtimeapi.ContainerStatus{Id: "abc", State: runtimeapi.ContainerState_CONTAINER_EXITED, ExitCode: 128,
			Reason: "StartError", Message: msg, CreatedAt: time.Now().UnixNano(), FinishedAt: time.Now().UnixNano(),
			Labels: map[string]string{labelPodUID: "u1", labelContainerName: "c"}, Metadata: &runtimeapi.ContainerMetadata{Name: "c"}}
	}
	st, ok := r.convert(t.Context(), status(`failed to start containerd task "abc": context canceled: unknown`))
	if !ok || st.State != runtime.StateCreated || st.ExitCode != 0 || st.Reason != "" {
		t.Errorf("cancelled start: %+v", st)
	}
	st, ok = r.convert(t.Context(), status(`failed to create containerd task: exec: "nope": executable file not found in $PATH: unknown`))
	if !ok || st.State != runtime.StateExited || st.ExitCode != 128 || st.Reason != "StartError" {
		t.Errorf("failed start: %+v", st)
	}
}

// Two nodes on one containerd see only their own pods (their sandboxes and
// containers carry the node's name), so neither takes the other's for an
// orphan.
func TestNodesShareARuntime(t *testing.T) {
	a := newRuntime(t, WithNode("node-a"))
	b := newRuntime(t, WithNode("node-b"))
	p := newPod("node-a-pod", true, shell("c", `sleep 3600`))
	cleanupPod(t, p)
	start(t, a, p, 0, 0)
	ctx := t.Context()
	for _, r := range []*Runtime{a, b} {
		if err := r.Relist(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !hasPod(a.Pods(), p) {
		t.Error("node-a does not list its own pod")
	}
	if hasPod(b.Pods(), p) || len(b.PodContainers(p.UID)) != 0 {
		t.Error("node-b lists node-a's pod")
	}
}
