package cri

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/runtime"
)

// TestRemovePodLogDirByName: RemovePod deletes the pod's own log directory
// (<namespace>_<name>_<uid>) and its log link, found by name: another
// directory ending in the same UID (not one the runtime made for this
// pod) stays.
func TestRemovePodLogDirByName(t *testing.T) {
	r := newRuntime(t)
	p := newPod("named", true, shell("c", `echo x; exit 0`))
	cleanupPod(t, p)
	st := start(t, r, p, 0, 0)
	waitExited(t, r, p.UID, st.ID)
	link := logLink(linkDir, p.Namespace, p.Name, "c", r.rawID(st.ID))
	if _, err := os.Lstat(link); err != nil {
		t.Fatalf("log link before RemovePod: %v", err)
	}
	decoy := filepath.Join(logRoot, "other_pod_"+string(p.UID))
	if err := os.MkdirAll(decoy, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(decoy) })
	if err := r.RemovePod(t.Context(), p.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(PodLogDir(logRoot, p)); !os.IsNotExist(err) {
		t.Errorf("log directory after RemovePod: %v, want it gone", err)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Errorf("log link after RemovePod: %v, want it gone", err)
	}
	if _, err := os.Stat(decoy); err != nil {
		t.Errorf("another directory of the UID: %v, want it left", err)
	}
}

// TestRemovePodLogDirUnnamed: a pod whose sandbox another hand removed,
// which a new runtime never saw, has no name left to the runtime: its log
// directory and links are still found and removed (through the log root).
func TestRemovePodLogDirUnnamed(t *testing.T) {
	r := newRuntime(t)
	p := newPod("unnamed", true, shell("c", `echo x; exit 0`))
	cleanupPod(t, p)
	st := start(t, r, p, 0, 0)
	waitExited(t, r, p.UID, st.ID)
	link := logLink(linkDir, p.Namespace, p.Name, "c", r.rawID(st.ID))
	ctx := t.Context()
	for _, id := range sandboxesOf(t, r, p.UID) {
		if err := r.rs.StopPodSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := r.rs.RemovePodSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	fresh := newRuntime(t)
	if got := fresh.PodContainers(p.UID); len(got) != 0 {
		t.Fatalf("a new runtime holds the pod: %+v", got)
	}
	if err := fresh.RemovePod(ctx, p.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(PodLogDir(logRoot, p)); !os.IsNotExist(err) {
		t.Errorf("log directory after RemovePod: %v, want it gone", err)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Errorf("log link after RemovePod: %v, want it gone", err)
	}
}

// BenchmarkRemovePodLogs: the log removal of one pod among others' log
// directories and links, with the pod named (the sandbox's metadata or the
// cache) and unnamed (the log root read).
func BenchmarkRemovePodLogs(b *testing.B) {
	for _, others := range []int{300} {
		for _, named := range []bool{true, false} {
			b.Run(fmt.Sprintf("others=%d/named=%v", others, named), func(b *testing.B) {
				benchRemovePodLogs(b, others, named)
			})
		}
	}
}

func benchRemovePodLogs(b *testing.B, others int, named bool) {
	dir := b.TempDir()
	r := &Runtime{
		opts: options{logRoot: filepath.Join(dir, "pods"), containerLogDir: filepath.Join(dir, "containers"), log: zap.NewNop()},
		log:  zap.NewNop(),
		pods: map[types.UID]*pod{},
	}
	for i := range others {
		makePodLogs(b, r, "default", fmt.Sprintf("other-%d", i), types.UID(fmt.Sprintf("uid-other-%d", i)), fmt.Sprintf("%064d", i))
	}
	id := fmt.Sprintf("%064x", 1)
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		uid := types.UID(fmt.Sprintf("uid-removed-%d", i))
		makePodLogs(b, r, "default", "removed", uid, id)
		ref := runtime.PodRef{UID: uid}
		if named {
			ref.Namespace, ref.Name = "default", "removed"
			r.mu.Lock()
			r.pods[uid] = &pod{namespace: "default", name: "removed", instances: map[string]*instance{
				id: {id: id, status: runtime.ContainerStatus{Name: "c"}},
			}}
			r.mu.Unlock()
		}
		b.StartTimer()
		if err := r.removePodLogs(ref, r.containerNames(uid, nil)); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if _, err := os.Stat(podLogDir(r.opts.logRoot, "default", "removed", uid)); !os.IsNotExist(err) {
			b.Fatalf("log directory left: %v", err)
		}
		if _, err := os.Lstat(logLink(r.opts.containerLogDir, "default", "removed", "c", id)); !os.IsNotExist(err) {
			b.Fatalf("log link left: %v", err)
		}
		r.dropPod(uid)
		b.StartTimer()
	}
}

// makePodLogs makes a pod's log directory with one container's log and
// its link, as a started container has them.
func makePodLogs(b *testing.B, r *Runtime, namespace, name string, uid types.UID, id string) {
	d := filepath.Join(podLogDir(r.opts.logRoot, namespace, name, uid), "c")
	if err := os.MkdirAll(d, 0o755); err != nil {
		b.Fatal(err)
	}
	log := filepath.Join(d, "0.log")
	if err := os.WriteFile(log, []byte(time.Now().String()), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(r.opts.containerLogDir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.Symlink(log, logLink(r.opts.containerLogDir, namespace, name, "c", id)); err != nil {
		b.Fatal(err)
	}
}
