package cri

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/gc"
	"github.com/splitlet/splitlet/libs/testenv"
)

// containersInRuntime lists the IDs containerd holds for the pod.
func containersInRuntime(t *testing.T, r *Runtime, p string) []string {
	t.Helper()
	cs, err := r.rs.ListContainers(t.Context(), &runtimeapi.ContainerFilter{LabelSelector: map[string]string{labelPodUID: p}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range cs {
		ids = append(ids, r.containerID(c.Id))
	}
	return ids
}

// A container restarted several times keeps its running instance and
// exactly one dead one (the newest) after container GC, in containerd and
// on disk; a minimum age keeps young ones; with all, eviction's call, only
// the newest instance stays, and a pod's dead sandboxes other than its
// newest go once no container is in them.
func TestContainerGC(t *testing.T) {
	// no pruning at start: the GC pass alone does the work here.
	// a node of its own: the collection leaves other tests' pods alone.
	r := newRuntime(t, WithNode(string(uid())), WithContainerPolicy(gc.ContainerPolicy{MaxPerPodContainer: -1}))
	p := newPod("gc", true, shell("c", `echo attempt $ATTEMPT; exit 1`))
	cleanupPod(t, p)
	var ids, logPaths []string
	for attempt := range 4 {
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "ATTEMPT", Value: fmt.Sprint(attempt)}}
		if attempt == 3 {
			p.Spec.Containers[0].Command = []string{"sh", "-c", "echo running; sleep 600"}
		}
		st := start(t, r, p, 0, attempt)
		if attempt < 3 {
			waitExited(t, r, p.UID, st.ID)
		}
		ids, logPaths = append(ids, st.ID), append(logPaths, st.LogPath)
	}
	if n := len(containersInRuntime(t, r, string(p.UID))); n != 4 {
		t.Fatalf("%d instances before GC, want 4", n)
	}
	if err := r.CollectContainers(t.Context(), gc.ContainerPolicy{MaxPerPodContainer: 1, MinAge: time.Hour}, false); err != nil {
		t.Fatal(err)
	}
	if n := len(containersInRuntime(t, r, string(p.UID))); n != 4 {
		t.Fatalf("%d instances after GC with a minimum age of an hour, want 4", n)
	}
	if err := r.CollectContainers(t.Context(), gc.ContainerPolicy{MaxPerPodContainer: 1}, false); err != nil {
		t.Fatal(err)
	}
	got := containersInRuntime(t, r, string(p.UID))
	if len(got) != 2 || !contains(got, ids[2]) || !contains(got, ids[3]) {
		t.Fatalf("instances after GC %v, want the running %s and the newest dead %s", got, ids[3], ids[2])
	}
	var dead int
	for _, c := range r.PodContainers(p.UID) {
		if c.State == runtime.StateExited {
			dead++
		}
	}
	if dead != 1 {
		t.Errorf("%d dead instances cached, want 1", dead)
	}
	for i, path := range logPaths[:2] {
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("log of removed attempt %d still there (%v)", i, err)
		}
	}
	if l := logs(t, r, p.UID, "c", runtime.LogOptions{Previous: true}); l != "attempt 2\n" {
		t.Errorf("previous log after GC %q", l)
	}

	// eviction: every dead instance but the newest instance goes, and so
	// does a sandbox no longer ready nor newest once it holds no container.
	if err := r.StopContainer(t.Context(), ids[3], 0); err != nil {
		t.Fatal(err)
	}
	old := sandboxesOf(t, r, p.UID)
	if len(old) != 1 {
		t.Fatalf("sandboxes %v", old)
	}
	if err := r.rs.StopPodSandbox(t.Context(), old[0]); err != nil {
		t.Fatal(err)
	}
	p.Spec.Containers[0].Command = []string{"sh", "-c", "echo new sandbox"}
	last := start(t, r, p, 0, 4)
	waitExited(t, r, p.UID, last.ID)
	if err := r.CollectContainers(t.Context(), gc.ContainerPolicy{MaxPerPodContainer: 1}, true); err != nil {
		t.Fatal(err)
	}
	if got := containersInRuntime(t, r, string(p.UID)); len(got) != 1 || got[0] != last.ID {
		t.Errorf("instances after GC of all %v, want only %s", got, last.ID)
	}
	if sbs := sandboxesOf(t, r, p.UID); len(sbs) != 1 || sbs[0] == old[0] {
		t.Errorf("sandboxes after GC %v, want only the new one (old %s)", sbs, old[0])
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// rotatedFiles lists the rotated files of a log.
func rotatedFiles(t *testing.T, path string) []string {
	t.Helper()
	files, err := filepath.Glob(globEscape(path) + ".*")
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// lineSeq parses the sequence numbers of the rotation test's lines.
func lineSeq(t *testing.T, text string) []int {
	t.Helper()
	var seq []int
	for _, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		var n int
		if _, err := fmt.Sscanf(l, "line %d", &n); err != nil {
			t.Fatalf("unexpected log line %q", l)
		}
		seq = append(seq, n)
	}
	return seq
}

// A running container's log past the maximum size is rotated as the
// kubelet rotates it: at most max-files files, the older rotated ones
// gzipped, the newest rotated one plain; a follower reads on across every
// rotation without losing or repeating a line, a plain read shows the
// newest lines, and --previous of the next instance the old one's last.
func TestLogRotation(t *testing.T) {
	r := newRuntime(t, WithNode(string(uid())))
	p := newPod("rotate", true, shell("w", `i=0; while true; do echo "line $i 0123456789012345678901234567890123456789"; i=$((i+1)); usleep 5000; done`))
	cleanupPod(t, p)
	st := start(t, r, p, 0, 0)
	policy := gc.LogPolicy{MaxSize: 4 << 10, MaxFiles: 3, Workers: 2}

	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var followed bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- r.Logs(ctx, p.UID, "w", runtime.LogOptions{Follow: true, TailLines: -1}, lockedWriter{&mu, &followed})
	}()
	rotations := 0
	var seenGz bool
	testenv.Eventually(t, time.Minute, "five rotations", func() (bool, string) {
		before, _ := os.Stat(st.LogPath)
		if err := r.RotateLogs(t.Context(), policy); err != nil {
			t.Fatal(err)
		}
		if after, err := os.Stat(st.LogPath); err == nil && before != nil && !os.SameFile(before, after) {
			rotations++
		}
		files := rotatedFiles(t, st.LogPath)
		if len(files)+1 > policy.MaxFiles {
			t.Fatalf("%d log files, more than max-files %d: %v", len(files)+1, policy.MaxFiles, files)
		}
		var plain int
		for _, f := range files {
			if strings.HasSuffix(f, ".gz") {
				seenGz = true
			} else {
				plain++
			}
		}
		if plain > 1 {
			t.Fatalf("%d rotated files not compressed, want only the newest: %v", plain, files)
		}
		return rotations >= 5 && seenGz, fmt.Sprintf("%d rotations, files %v", rotations, files)
	})

	// the newest lines: a plain read after the rotations ends at least
	// where the follower was.
	mu.Lock()
	seen := lineSeq(t, followed.String())
	mu.Unlock()
	// (the live file just rotated may hold no line yet: kubectl logs
	// reads the live file, as on a kubelet)
	var text string
	testenv.Eventually(t, 10*time.Second, "a line in the live log", func() (bool, string) {
		text = logs(t, r, p.UID, "w", runtime.LogOptions{})
		return text != "", "empty"
	})
	plain := lineSeq(t, text)
	if plain[len(plain)-1] < seen[len(seen)-1] {
		t.Errorf("plain read ends at line %d, the follower saw %d", plain[len(plain)-1], seen[len(seen)-1])
	}
	if plain[0] == 0 {
		t.Errorf("plain read starts at line 0: not the live file")
	}
	if err := r.StopContainer(t.Context(), st.ID, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("follow did not end with the container")
	}
	cancel()
	seen = lineSeq(t, followed.String())
	for i, n := range seen {
		if n != i {
			t.Fatalf("followed line %d is line %d: lines lost or repeated across the rotations", i, n)
		}
	}
	last := seen[len(seen)-1]

	p.Spec.Containers[0].Command = []string{"sh", "-c", "sleep 600"}
	next := start(t, r, p, 0, 1)
	defer func() { _ = r.StopContainer(t.Context(), next.ID, 0) }()
	prev := lineSeq(t, logs(t, r, p.UID, "w", runtime.LogOptions{Previous: true}))
	if prev[len(prev)-1] != last {
		t.Errorf("--previous ends at line %d, the container's last was %d", prev[len(prev)-1], last)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
