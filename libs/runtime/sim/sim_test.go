package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/testenv"
)

func newPod(uid string, ann map[string]string, names ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "default", UID: types.UID(uid), Annotations: ann}}
	for _, n := range names {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: n, Image: "busybox"})
	}
	return p
}

func newRuntime(t *testing.T, opts ...Option) *Runtime {
	t.Helper()
	r := New(opts...)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// waitEvent waits for the next event, failing after a deadline.
func waitEvent(t *testing.T, r *Runtime) runtime.Event {
	t.Helper()
	select {
	case ev := <-r.Events():
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
		return runtime.Event{}
	}
}

func start(t *testing.T, r *Runtime, p *corev1.Pod, i, attempt int) runtime.ContainerStatus {
	t.Helper()
	st, err := r.StartContainer(context.Background(), p, &p.Spec.Containers[i], attempt, runtime.StartOptions{})
	if err != nil {
		t.Fatalf("start %s: %v", p.Spec.Containers[i].Name, err)
	}
	return st
}

func TestStartStop(t *testing.T) {
	r := newRuntime(t, WithPodIP("10.1.2.3"))
	p := newPod("u1", nil, "app")
	st := start(t, r, p, 0, 0)
	if !strings.HasPrefix(st.ID, "sim://") || st.State != runtime.StateRunning || st.StartedAt.IsZero() {
		t.Fatalf("started status %+v", st)
	}
	if ip := r.PodIP(p); ip != "10.1.2.3" {
		t.Fatalf("pod IP %q", ip)
	}
	if cs := r.PodContainers(p.UID); len(cs) != 1 || cs[0].ID != st.ID || cs[0].State != runtime.StateRunning {
		t.Fatalf("containers %+v", cs)
	}
	if s := r.Stats(p.UID); len(s) != 1 || s[0].ContainerID != st.ID {
		t.Fatalf("stats %+v", s)
	}
	if err := r.RemovePod(t.Context(), p.UID); err == nil {
		t.Fatal("RemovePod with a running container succeeded")
	}
	if err := r.StopContainer(t.Context(), st.ID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, r)
	if ev.PodUID != p.UID || ev.ContainerID != st.ID || ev.State != runtime.StateExited {
		t.Fatalf("event %+v", ev)
	}
	cs := r.PodContainers(p.UID)
	if cs[0].State != runtime.StateExited || cs[0].ExitCode != 0 || cs[0].Reason != ReasonCompleted || cs[0].FinishedAt.IsZero() {
		t.Fatalf("stopped status %+v", cs[0])
	}
	// Stopping again is a no-op; an unknown ID is not found.
	if err := r.StopContainer(t.Context(), st.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.StopContainer(t.Context(), "sim://nope", 0); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("stop unknown: %v", err)
	}
	if err := r.RemovePod(t.Context(), p.UID); err != nil {
		t.Fatal(err)
	}
	if cs := r.PodContainers(p.UID); len(cs) != 0 {
		t.Fatalf("containers after RemovePod: %+v", cs)
	}
}

func TestExitByAnnotation(t *testing.T) {
	r := newRuntime(t)
	p := newPod("u2", map[string]string{
		AnnotationExitCode + ".app":   "3",
		AnnotationExitAfter + ".app":  "20ms",
		AnnotationExitAfter + ".side": "1h",
		AnnotationExitAfter:           "1ms", // pod-wide default, overridden above
	}, "app", "side", "other")
	app := start(t, r, p, 0, 0)
	side := start(t, r, p, 1, 0)
	other := start(t, r, p, 2, 0)

	got := map[string]bool{}
	for range 2 {
		got[waitEvent(t, r).ContainerID] = true
	}
	if !got[app.ID] || !got[other.ID] {
		t.Fatalf("events for %v, want %s and %s", got, app.ID, other.ID)
	}
	byName := map[string]runtime.ContainerStatus{}
	for _, c := range r.PodContainers(p.UID) {
		byName[c.Name] = c
	}
	if c := byName["app"]; c.State != runtime.StateExited || c.ExitCode != 3 || c.Reason != ReasonError {
		t.Fatalf("app %+v", c)
	}
	if c := byName["other"]; c.State != runtime.StateExited || c.ExitCode != 0 || c.Reason != ReasonCompleted {
		t.Fatalf("other %+v", c)
	}
	if c := byName["side"]; c.State != runtime.StateRunning || c.ID != side.ID {
		t.Fatalf("side %+v", c)
	}

	// A restart gets a new ID and exits again; logs --previous reads the
	// first attempt.
	app2 := start(t, r, p, 0, 1)
	if app2.ID == app.ID {
		t.Fatal("restart reused the container ID")
	}
	if ev := waitEvent(t, r); ev.ContainerID != app2.ID {
		t.Fatalf("event %+v, want the restart's", ev)
	}
	var buf bytes.Buffer
	if err := r.Logs(t.Context(), p.UID, "app", runtime.LogOptions{Previous: true, TailLines: -1}, &buf); err != nil {
		t.Fatal(err)
	}
	if want := "sim: container app started (attempt 0)\nsim: container app exited with code 3\n"; buf.String() != want {
		t.Fatalf("previous logs %q, want %q", buf.String(), want)
	}
	// Only the newest two instances of a name are kept.
	start(t, r, p, 0, 2)
	n := 0
	for _, c := range r.PodContainers(p.UID) {
		if c.Name == "app" {
			n++
			if c.ID == app.ID {
				t.Fatal("the oldest instance was kept")
			}
		}
	}
	if n != 2 {
		t.Fatalf("%d instances of app, want 2", n)
	}
}

func TestBadAnnotationsAndStartError(t *testing.T) {
	r := newRuntime(t)
	p := newPod("u3", map[string]string{AnnotationExitAfter: "soon"}, "app")
	st, err := r.StartContainer(t.Context(), p, &p.Spec.Containers[0], 0, runtime.StartOptions{})
	if err == nil || st.Reason != ReasonConfigError || !strings.Contains(st.Message, AnnotationExitAfter) {
		t.Fatalf("bad annotation: %+v, %v", st, err)
	}
	p = newPod("u4", map[string]string{AnnotationStartError + ".app": "no such binary"}, "app")
	st, err = r.StartContainer(t.Context(), p, &p.Spec.Containers[0], 0, runtime.StartOptions{})
	if err == nil || st.State != runtime.StateExited || st.Reason != ReasonCannotRun || st.ExitCode != 128 || st.Message != "no such binary" {
		t.Fatalf("start error: %+v, %v", st, err)
	}
	if cs := r.PodContainers(p.UID); len(cs) != 1 || cs[0].Reason != ReasonCannotRun {
		t.Fatalf("containers %+v", cs)
	}
}

func TestIgnoreSIGTERM(t *testing.T) {
	r := newRuntime(t)
	p := newPod("u5", map[string]string{AnnotationIgnoreSIGTERM: "true"}, "app")
	st := start(t, r, p, 0, 0)
	stopped := make(chan error, 1)
	go func() { stopped <- r.StopContainer(t.Context(), st.ID, 50*time.Millisecond) }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not return")
	}
	waitEvent(t, r)
	if c := r.PodContainers(p.UID)[0]; c.ExitCode != 137 || c.Reason != ReasonError {
		t.Fatalf("killed status %+v", c)
	}
	// A caller that gives up kills at once.
	st = start(t, r, p, 0, 1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.StopContainer(ctx, st.ID, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("stop with a cancelled context: %v", err)
	}
	if ev := waitEvent(t, r); ev.ContainerID != st.ID {
		t.Fatalf("event %+v", ev)
	}
}

func TestStartLimit(t *testing.T) {
	r := newRuntime(t, WithStartLatency(time.Hour), WithMaxConcurrentStarts(1))
	p := newPod("u6", nil, "a", "b")
	ctxA, cancelA := context.WithCancel(t.Context())
	ctxB, cancelB := context.WithCancel(t.Context())
	defer cancelB()
	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := r.StartContainer(ctxA, p, &p.Spec.Containers[0], 0, runtime.StartOptions{})
		errA <- err
	}()
	testenv.EventuallyTrue(t, 10*time.Second, "a holds the slot", func() bool { return len(r.starts) == 1 })
	go func() {
		_, err := r.StartContainer(ctxB, p, &p.Spec.Containers[1], 0, runtime.StartOptions{})
		errB <- err
	}()
	testenv.EventuallyTrue(t, 10*time.Second, "b waits for the slot", func() bool { return r.waiting.Load() == 1 })
	cancelA()
	select {
	case err := <-errA:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a: the cancelled start did not return")
	}
	testenv.EventuallyTrue(t, 10*time.Second, "b takes the slot", func() bool { return r.waiting.Load() == 0 && len(r.starts) == 1 })
	cancelB()
	select {
	case err := <-errB:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("b: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b: the cancelled start did not return")
	}
	if cs := r.PodContainers(p.UID); len(cs) != 0 {
		t.Fatalf("cancelled starts left containers: %+v", cs)
	}
}

func TestLogsFollowAndExec(t *testing.T) {
	r := newRuntime(t)
	p := newPod("u7", map[string]string{AnnotationExecExitCode + ".app": "2", AnnotationExecStdout + ".app": "hi\n"}, "app", "plain")
	st := start(t, r, p, 0, 0)
	start(t, r, p, 1, 0)

	res, err := r.Exec(t.Context(), p.UID, "app", []string{"true"}, nil, time.Second)
	if err != nil || res.ExitCode != 2 || string(res.Stdout) != "hi\n" {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	res, err = r.Exec(t.Context(), p.UID, "plain", []string{"true"}, nil, time.Second)
	if err != nil || res.ExitCode != 0 || len(res.Stdout) != 0 {
		t.Fatalf("exec plain: %+v, %v", res, err)
	}
	// exec-after: healthy at first, failing once the container has run
	// for a while.
	early := newPod("u7a", map[string]string{AnnotationExecExitCode: "1", AnnotationExecAfter: "1h"}, "app")
	start(t, r, early, 0, 0)
	if res, err := r.Exec(t.Context(), early.UID, "app", []string{"true"}, nil, time.Second); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec before exec-after: %+v, %v", res, err)
	}
	late := newPod("u7b", map[string]string{AnnotationExecExitCode: "1", AnnotationExecAfter: "20ms"}, "app")
	start(t, r, late, 0, 0)
	testenv.EventuallyTrue(t, 10*time.Second, "exec fails after exec-after", func() bool {
		res, err := r.Exec(t.Context(), late.UID, "app", []string{"true"}, nil, time.Second)
		return err == nil && res.ExitCode == 1
	})
	if _, err := r.Exec(t.Context(), p.UID, "nope", []string{"true"}, nil, time.Second); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("exec in unknown container: %v", err)
	}

	done := make(chan error, 1)
	var buf bytes.Buffer
	go func() {
		done <- r.Logs(t.Context(), p.UID, "app", runtime.LogOptions{Follow: true, Timestamps: true, TailLines: -1}, &buf)
	}()
	select {
	case err := <-done:
		t.Fatalf("follow returned while the container runs: %v", err)
	default:
	}
	if err := r.StopContainer(t.Context(), st.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not end after the exit")
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[1], "exited with code 0") {
		t.Fatalf("followed logs %q", buf.String())
	}
	if _, err := time.Parse(time.RFC3339Nano, strings.Fields(lines[0])[0]); err != nil {
		t.Fatalf("no timestamp in %q: %v", lines[0], err)
	}
	if _, err := r.Exec(t.Context(), p.UID, "app", []string{"true"}, nil, time.Second); err == nil {
		t.Fatal("exec in an exited container succeeded")
	}
	if err := r.Logs(t.Context(), p.UID, "app", runtime.LogOptions{Previous: true, TailLines: -1}, &buf); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("previous without one: %v", err)
	}
}

// TestManyPodsCostLittle holds 10,000 pods with a planned exit and checks
// that they cost neither a goroutine each nor much memory.
func TestManyPodsCostLittle(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	const n = 10000
	r := newRuntime(t)
	pods := make([]*corev1.Pod, n)
	ann := map[string]string{AnnotationExitAfter: "1h"}
	for i := range pods {
		pods[i] = newPod(fmt.Sprintf("uid-%d", i), ann, "app")
	}
	goroutines := goruntime.NumGoroutine()
	before := heap()
	for _, p := range pods {
		start(t, r, p, 0, 0)
	}
	perPod := float64(heap()-before) / n
	t.Logf("%.0f bytes per pod", perPod)
	if g := goruntime.NumGoroutine(); g > goroutines+5 {
		t.Fatalf("%d goroutines for %d pods (had %d)", g, n, goroutines)
	}
	if perPod > 2048 {
		t.Fatalf("%.0f bytes per pod, want at most 2048", perPod)
	}
	goruntime.KeepAlive(pods)
}

func heap() uint64 {
	goruntime.GC()
	var m goruntime.MemStats
	goruntime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A replica's sim runtime is handed what another one ran: the instances
// carry on as they were, a planned exit keeps its time, the runtime's own
// view of a pod it holds wins, and Forget drops a pod without stopping it.
func TestRestoreAndForget(t *testing.T) {
	old := newRuntime(t)
	p := newPod("u-restore", map[string]string{AnnotationExitCode + ".job": "4", AnnotationExitAfter + ".job": "50ms"}, "app", "job", "done")
	app := start(t, old, p, 0, 0)
	if err := old.StopContainer(t.Context(), app.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, old)
	app = start(t, old, p, 0, 1)
	done := start(t, old, p, 2, 0)
	if err := old.StopContainer(t.Context(), done.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, old)
	reported := old.PodContainers(p.UID)
	if len(reported) != 3 {
		t.Fatalf("old runtime holds %d instances, want 3", len(reported))
	}
	// the job started a second ago: its planned exit (50 ms after its start) is due.
	job := runtime.ContainerStatus{ID: "sim://0ff1ce1", PodUID: p.UID, Name: "job", Hash: runtime.ContainerHash(&p.Spec.Containers[1]),
		State: runtime.StateRunning, Image: "busybox", ImageID: "busybox", CreatedAt: time.Now().Add(-time.Second), StartedAt: time.Now().Add(-time.Second)}
	reported = append(reported, job)

	r := newRuntime(t)
	if err := r.Restore(p, reported); err != nil {
		t.Fatal(err)
	}
	got := r.PodContainers(p.UID)
	for i := range got {
		if got[i].Name == "job" && got[i].State == runtime.StateExited {
			got[i] = reported[i] // the planned exit may already have happened
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(reported) {
		t.Fatalf("restored\n%v\nwant\n%v", got, reported)
	}
	// the job's planned exit happens in the new runtime.
	ev := waitEvent(t, r)
	if ev.ContainerID != job.ID {
		t.Fatalf("event %+v, want the exit of %s", ev, job.ID)
	}
	for _, c := range r.PodContainers(p.UID) {
		if c.ID == job.ID && (c.State != runtime.StateExited || c.ExitCode != 4) {
			t.Fatalf("job after its planned exit: %+v", c)
		}
	}
	// a running restored container stops as any other; the next attempt gets a new ID.
	if err := r.StopContainer(t.Context(), app.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, r)
	next := start(t, r, p, 0, 2)
	if next.ID == app.ID || next.Attempt != 2 {
		t.Fatalf("next instance %+v", next)
	}
	// what the runtime holds wins over a later Restore.
	if err := r.Restore(p, reported); err != nil {
		t.Fatal(err)
	}
	if c := r.PodContainers(p.UID); c[len(c)-1].ID != next.ID {
		t.Fatalf("Restore replaced a held pod: %v", c)
	}
	refs := r.Pods()
	if len(refs) != 1 || refs[0] != (runtime.PodRef{UID: p.UID, Namespace: "default", Name: p.Name}) {
		t.Fatalf("Pods() = %v", refs)
	}
	r.Forget(p.UID)
	if len(r.PodContainers(p.UID)) != 0 || len(r.Pods()) != 0 {
		t.Fatal("Forget kept the pod")
	}
	if err := r.StopContainer(t.Context(), next.ID, time.Second); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("stop of a forgotten container: %v", err)
	}
	if err := r.Restore(nil, reported); err == nil {
		t.Fatal("Restore without a pod: no error")
	}
}
