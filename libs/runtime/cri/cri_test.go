package cri

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/machine"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/testenv"
)

// The tests run against a real containerd: the host's when it answers,
// else one started for them (root). They fail, not skip, without one;
// under -short they are skipped (newRuntime) and none is looked for.
var (
	containerd *testenv.Containerd
	logRoot    string
	// linkDir is the tests' container log directory (the host's
	// /var/log/containers is left alone).
	linkDir string
)

func TestMain(m *testing.M) {
	if testenv.Short() {
		os.Exit(m.Run())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cd, err := testenv.EnsureContainerd(ctx, testenv.ContainerdOptions{})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the CRI runtime tests need a containerd with its CRI plugin: %v\n", err)
		os.Exit(1)
	}
	containerd = cd
	logRoot, err = os.MkdirTemp("", "splitlet-cri-logs-")
	if err != nil {
		cd.Stop()
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	linkDir = filepath.Join(logRoot, "containers")
	code := m.Run()
	_ = os.RemoveAll(logRoot)
	cd.Stop()
	os.Exit(code)
}

func newRuntime(t *testing.T, opts ...Option) *Runtime {
	t.Helper()
	testenv.SkipShort(t, "containerd")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts = append([]Option{WithEndpoint(containerd.Endpoint), WithLogRoot(logRoot), WithContainerLogDir(linkDir), WithPollInterval(200 * time.Millisecond)}, opts...)
	r, err := New(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func uid() types.UID {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return types.UID("test-" + hex.EncodeToString(b[:]))
}

func newPod(name string, hostNetwork bool, containers ...corev1.Container) *corev1.Pod {
	for i := range containers {
		if containers[i].Image == "" {
			containers[i].Image = "busybox"
		}
		if containers[i].ImagePullPolicy == "" {
			containers[i].ImagePullPolicy = corev1.PullIfNotPresent
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: uid()},
		Spec:       corev1.PodSpec{HostNetwork: hostNetwork, Containers: containers},
	}
}

func shell(name, script string) corev1.Container {
	return corev1.Container{Name: name, Command: []string{"sh", "-c", script}}
}

// cleanupPod stops what is left of the pod and removes it, through a
// runtime of its own (the test's may be closed by then).
func cleanupPod(t *testing.T, p *corev1.Pod) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := New(ctx, WithEndpoint(containerd.Endpoint), WithLogRoot(logRoot), WithContainerLogDir(linkDir))
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer r.Close()
		for _, c := range r.PodContainers(p.UID) {
			_ = r.StopContainer(ctx, c.ID, 0)
		}
		if err := r.RemovePod(ctx, p.UID); err != nil {
			t.Errorf("remove pod: %v", err)
		}
	})
}

func start(t *testing.T, r *Runtime, p *corev1.Pod, i, attempt int) runtime.ContainerStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := r.StartContainer(ctx, p, &p.Spec.Containers[i], attempt, runtime.StartOptions{})
	if err != nil {
		t.Fatalf("start %s: %v", p.Spec.Containers[i].Name, err)
	}
	return st
}

func instanceOf(r *Runtime, uid types.UID, id string) (runtime.ContainerStatus, bool) {
	for _, c := range r.PodContainers(uid) {
		if c.ID == id {
			return c, true
		}
	}
	return runtime.ContainerStatus{}, false
}

func waitExited(t *testing.T, r *Runtime, uid types.UID, id string) runtime.ContainerStatus {
	t.Helper()
	var got runtime.ContainerStatus
	testenv.Eventually(t, time.Minute, "container "+id+" exited", func() (bool, string) {
		c, ok := instanceOf(r, uid, id)
		got = c
		return ok && c.State == runtime.StateExited, fmt.Sprintf("%+v", c)
	})
	return got
}

func waitEvent(t *testing.T, r *Runtime, id string) {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case ev := <-r.Events():
			if ev.ContainerID == id && ev.State == runtime.StateExited {
				return
			}
		case <-timeout:
			t.Fatalf("no exit event for %s", id)
		}
	}
}

func logs(t *testing.T, r *Runtime, uid types.UID, name string, opts runtime.LogOptions) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b bytes.Buffer
	if opts.TailLines == 0 {
		opts.TailLines = -1
	}
	if err := r.Logs(ctx, uid, name, opts, &b); err != nil {
		t.Fatalf("logs of %s: %v", name, err)
	}
	return b.String()
}

// A busybox pod on the host network runs; its log, exec (with and without
// stdin, a liveness-style check), stats and IP work; a stop within the
// grace lets it finish, one past the grace kills it.
func TestPodRunsOnHostNetwork(t *testing.T) {
	r := newRuntime(t, WithHostIP("127.0.0.1"))
	p := newPod("web", true,
		shell("main", `trap 'echo bye; exit 0' TERM; echo hello; echo oops >&2; while true; do sleep 0.2; done`),
		shell("stubborn", `trap '' TERM; echo started; while true; do sleep 0.2; done`))
	grace := int64(30)
	p.Spec.TerminationGracePeriodSeconds = &grace
	cleanupPod(t, p)
	// kubelet: a pod of its own network has no IP before its sandbox.
	if ip := r.PodIP(newPod("nosandbox", false, shell("main", "true"))); ip != "" {
		t.Errorf("pod without a sandbox: IP %q, want none", ip)
	}
	main := start(t, r, p, 0, 0)
	if !strings.HasPrefix(main.ID, r.RuntimeName()+"://") || r.RuntimeName() == "" {
		t.Errorf("container ID %q does not carry the runtime's name %q", main.ID, r.RuntimeName())
	}
	if main.State != runtime.StateRunning || main.Attempt != 0 || main.Hash != runtime.ContainerHash(&p.Spec.Containers[0]) {
		t.Errorf("started: %+v", main)
	}
	stubborn := start(t, r, p, 1, 0)
	if ip := r.PodIP(p); ip != "127.0.0.1" {
		t.Errorf("host-network pod IP %q, want the host IP", ip)
	}
	testenv.Eventually(t, 30*time.Second, "log lines", func() (bool, string) {
		l := logs(t, r, p.UID, "main", runtime.LogOptions{})
		return strings.Contains(l, "hello\n") && strings.Contains(l, "oops\n"), l
	})

	ctx := t.Context()
	res, err := r.Exec(ctx, p.UID, "main", []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, nil, 10*time.Second)
	if err != nil || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 3 {
		t.Errorf("exec: %q %q %d %v", res.Stdout, res.Stderr, res.ExitCode, err)
	}
	// liveness-style: fails until the file exists.
	probe := []string{"test", "-e", "/tmp/healthy"}
	if res, err := r.Exec(ctx, p.UID, "main", probe, nil, 5*time.Second); err != nil || res.ExitCode != 1 {
		t.Errorf("probe before: %d %v", res.ExitCode, err)
	}
	if res, err := r.Exec(ctx, p.UID, "main", []string{"touch", "/tmp/healthy"}, bytes.NewReader(nil), 5*time.Second); err != nil || res.ExitCode != 0 {
		t.Errorf("touch: %d %v", res.ExitCode, err)
	}
	if res, err := r.Exec(ctx, p.UID, "main", probe, nil, 5*time.Second); err != nil || res.ExitCode != 0 {
		t.Errorf("probe after: %d %v", res.ExitCode, err)
	}
	if res, err := r.Exec(ctx, p.UID, "main", []string{"cat"}, strings.NewReader("from stdin"), 10*time.Second); err != nil || string(res.Stdout) != "from stdin" {
		t.Errorf("exec with stdin: %q %v", res.Stdout, err)
	}
	if _, err := r.Exec(ctx, p.UID, "main", []string{"no-such-program"}, nil, 5*time.Second); err == nil {
		t.Error("exec of a missing program: no error")
	}
	if _, err := r.Exec(ctx, p.UID, "nope", []string{"true"}, nil, 5*time.Second); err == nil {
		t.Error("exec in a missing container: no error")
	}
	var stats []runtime.ContainerStats
	testenv.Eventually(t, 30*time.Second, "stats", func() (bool, string) {
		stats = r.Stats(p.UID)
		return len(stats) == 2, fmt.Sprintf("%+v", stats)
	})

	// follow: a reader started now sees the exit line, then ends.
	followed := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		fctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_ = r.Logs(fctx, p.UID, "main", runtime.LogOptions{Follow: true, TailLines: -1}, &b)
		followed <- b.String()
	}()
	if err := r.StopContainer(ctx, main.ID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	got, _ := instanceOf(r, p.UID, main.ID)
	if got.State != runtime.StateExited || got.ExitCode != 0 || got.Reason != "Completed" || got.FinishedAt.IsZero() {
		t.Errorf("after a stop within grace: %+v", got)
	}
	waitEvent(t, r, main.ID)
	select {
	case l := <-followed:
		if !strings.Contains(l, "hello\n") || !strings.Contains(l, "bye\n") {
			t.Errorf("followed log %q", l)
		}
	case <-time.After(time.Minute):
		t.Fatal("following the log did not end with the container")
	}
	if err := r.StopContainer(ctx, stubborn.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	got, _ = instanceOf(r, p.UID, stubborn.ID)
	if got.State != runtime.StateExited || got.ExitCode != 137 || got.Reason != "Error" {
		t.Errorf("after a stop past its grace: %+v", got)
	}
	if err := r.StopContainer(ctx, stubborn.ID, time.Second); err != nil {
		t.Errorf("stopping an exited container: %v", err)
	}
	if err := r.StopContainer(ctx, r.RuntimeName()+"://nonexistent", time.Second); err == nil {
		t.Error("stopping an unknown container: no error")
	}
}

// Exit codes and reasons come from the runtime and each exit is announced;
// a restart is a new instance, the previous one's log stays readable, and
// only the newest two instances of a name are kept.
func TestExitsAndRestarts(t *testing.T) {
	r := newRuntime(t)
	p := newPod("exits", true,
		shell("fails", `echo attempt $ATTEMPT; exit 3`),
		shell("ok", `echo done`),
		corev1.Container{Name: "oom", Command: []string{"sh", "-c", `echo start; x=a; while true; do x="$x$x"; done`},
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError})
	cleanupPod(t, p)
	var ids []string
	for attempt := 0; attempt < 4; attempt++ {
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "ATTEMPT", Value: fmt.Sprint(attempt)}}
		st := start(t, r, p, 0, attempt)
		got := waitExited(t, r, p.UID, st.ID)
		if got.ExitCode != 3 || got.Reason != "Error" || got.Attempt != attempt {
			t.Errorf("attempt %d: %+v", attempt, got)
		}
		waitEvent(t, r, st.ID)
		ids = append(ids, st.ID)
	}
	var names []string
	for _, c := range r.PodContainers(p.UID) {
		if c.Name == "fails" {
			names = append(names, c.ID)
		}
	}
	if len(names) != 2 || names[0] != ids[2] || names[1] != ids[3] {
		t.Errorf("instances kept %v, want the newest two of %v", names, ids)
	}
	if l := logs(t, r, p.UID, "fails", runtime.LogOptions{}); l != "attempt 3\n" {
		t.Errorf("log %q", l)
	}
	if l := logs(t, r, p.UID, "fails", runtime.LogOptions{Previous: true}); l != "attempt 2\n" {
		t.Errorf("previous log %q", l)
	}

	ok := start(t, r, p, 1, 0)
	if got := waitExited(t, r, p.UID, ok.ID); got.ExitCode != 0 || got.Reason != "Completed" {
		t.Errorf("exit 0: %+v", got)
	}

	// a memory limit the container outgrows: containerd reports OOMKilled.
	p.Spec.Containers[2].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: mustQuantity("16Mi")}
	oom := start(t, r, p, 2, 0)
	got := waitExited(t, r, p.UID, oom.ID)
	if got.Reason != "OOMKilled" || got.ExitCode != 137 {
		t.Errorf("over its memory limit: %+v", got)
	}
	if !strings.Contains(got.Message, "start") {
		t.Errorf("FallbackToLogsOnError message %q lacks the log", got.Message)
	}
}

// Image pull policy: a missing image under IfNotPresent is pulled and the
// pull fails with ErrImagePull, then ImagePullBackOff within the back-off;
// under Never it is ErrImageNeverPull. No instance is left, and the
// runtime goes on.
func TestImageFailures(t *testing.T) {
	r := newRuntime(t)
	ctx := t.Context()
	// a registry on a closed local port: the pull fails at once, and no
	// traffic leaves the host.
	p := newPod("badimage", true, corev1.Container{Name: "c", Image: "127.0.0.1:1/nonexistent:v1", Command: []string{"true"}})
	cleanupPod(t, p)
	st, err := r.StartContainer(ctx, p, &p.Spec.Containers[0], 0, runtime.StartOptions{})
	if err == nil || st.ID != "" || st.Reason != ReasonErrImagePull || st.Message == "" {
		t.Fatalf("first start: %+v, %v", st, err)
	}
	st, err = r.StartContainer(ctx, p, &p.Spec.Containers[0], 0, runtime.StartOptions{})
	if err == nil || st.ID != "" || st.Reason != ReasonImagePullBackOff || !strings.Contains(st.Message, "Back-off pulling image") {
		t.Fatalf("second start: %+v, %v", st, err)
	}
	p.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
	st, err = r.StartContainer(ctx, p, &p.Spec.Containers[0], 0, runtime.StartOptions{})
	if err == nil || st.Reason != ReasonErrImageNeverPull {
		t.Fatalf("never: %+v, %v", st, err)
	}
	p.Spec.Containers[0].Image = "bad image"
	st, err = r.StartContainer(ctx, p, &p.Spec.Containers[0], 0, runtime.StartOptions{})
	if err == nil || st.Reason != ReasonInvalidImageName {
		t.Fatalf("invalid name: %+v, %v", st, err)
	}
	if n := len(r.PodContainers(p.UID)); n != 0 {
		t.Errorf("%d instances after failed pulls", n)
	}
	// the present image under Never runs.
	p.Spec.Containers[0].Image = "busybox:latest"
	p.Spec.Containers[0].Command = []string{"sleep", "3600"}
	st = start(t, r, p, 0, 0)
	if st.State != runtime.StateRunning {
		t.Errorf("busybox under Never: %+v", st)
	}
}

func TestPullPolicyDefaults(t *testing.T) {
	for image, want := range map[string]corev1.PullPolicy{
		"busybox": corev1.PullAlways, "busybox:latest": corev1.PullAlways, "busybox:1.36": corev1.PullIfNotPresent,
		"localhost:5000/busybox": corev1.PullAlways, "localhost:5000/busybox:v1": corev1.PullIfNotPresent,
		"busybox@sha256:0123": corev1.PullIfNotPresent,
	} {
		if got := PullPolicy(&corev1.Container{Image: image}); got != want {
			t.Errorf("%s: %s, want %s", image, got, want)
		}
	}
}

// A second runtime on the same containerd (a restarted pod worker) reads
// the pods back: the same IDs, attempts, hashes, states and exit codes; it
// stops and announces the first one's containers, and reuses the sandbox.
func TestReadBack(t *testing.T) {
	first := newRuntime(t)
	p := newPod("adopted", false,
		shell("runs", `while true; do sleep 0.2; done`),
		shell("exited", `exit 3`))
	cleanupPod(t, p)
	running := start(t, first, p, 0, 2)
	exited := start(t, first, p, 1, 5)
	waitExited(t, first, p.UID, exited.ID)
	want := first.PodContainers(p.UID)
	if len(want) != 2 {
		t.Fatalf("first runtime holds %+v", want)
	}
	sandboxIP := first.PodIP(p)
	if sandboxIP == "" || sandboxIP == "127.0.0.1" {
		t.Errorf("pod IP %q: want the sandbox's own", sandboxIP)
	}
	_ = first.Close()

	second := newRuntime(t)
	got := second.PodContainers(p.UID)
	if len(got) != len(want) {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
	for i := range want {
		w, g := want[i], got[i]
		if g.ID != w.ID || g.Name != w.Name || g.Attempt != w.Attempt || g.Hash != w.Hash || g.State != w.State ||
			g.ExitCode != w.ExitCode || g.Reason != w.Reason || g.PodUID != w.PodUID || !g.StartedAt.Equal(w.StartedAt) {
			t.Errorf("read back %+v, want %+v", g, w)
		}
	}
	if got[0].ID != running.ID || got[0].Attempt != 2 || got[1].Attempt != 5 || got[1].ExitCode != 3 {
		t.Errorf("read back %+v", got)
	}
	if ip := second.PodIP(p); ip != sandboxIP {
		t.Errorf("pod IP read back %q, want %q", ip, sandboxIP)
	}
	// a new container joins the same sandbox.
	late := shell("late", `sleep 3600`)
	late.Image, late.ImagePullPolicy = "busybox", corev1.PullIfNotPresent
	p.Spec.Containers = append(p.Spec.Containers, late)
	lateSt := start(t, second, p, 2, 0)
	sbs := sandboxesOf(t, second, p.UID)
	if len(sbs) != 1 {
		t.Errorf("pod has %d sandboxes, want 1", len(sbs))
	}
	ctx := t.Context()
	for _, id := range []string{running.ID, lateSt.ID} {
		if err := second.StopContainer(ctx, id, time.Second); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, second, id)
	}
}

func sandboxesOf(t *testing.T, r *Runtime, uid types.UID) []string {
	t.Helper()
	sbs, err := r.rs.ListPodSandbox(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, sb := range sbs {
		if sb.GetLabels()[labelPodUID] == string(uid) {
			out = append(out, sb.GetId())
		}
	}
	return out
}

// RemovePod refuses while a container runs; afterwards the sandbox, the
// containers and the logs are gone.
func TestRemovePod(t *testing.T) {
	r := newRuntime(t)
	p := newPod("removed", true, shell("c", `echo x; sleep 3600`))
	st := start(t, r, p, 0, 0)
	ctx := t.Context()
	if err := r.RemovePod(ctx, p.UID); err == nil {
		t.Error("RemovePod with a running container: no error")
	}
	if err := r.StopContainer(ctx, st.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := r.RemovePod(ctx, p.UID); err != nil {
		t.Fatal(err)
	}
	if got := r.PodContainers(p.UID); len(got) != 0 {
		t.Errorf("after RemovePod: %+v", got)
	}
	if n := len(sandboxesOf(t, r, p.UID)); n != 0 {
		t.Errorf("%d sandboxes left", n)
	}
	if _, err := os.Stat(PodLogDir(logRoot, p)); !os.IsNotExist(err) {
		t.Errorf("log directory: %v", err)
	}
	if err := r.RemovePod(ctx, "../x"); err == nil {
		t.Error("RemovePod of a bad UID: no error")
	}
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

func hasPod(list []runtime.PodRef, p *corev1.Pod) bool {
	for _, ref := range list {
		if ref.UID == p.UID {
			return ref.Namespace == p.Namespace && ref.Name == p.Name
		}
	}
	return false
}

// Pods lists the pods of every sandbox and container in the runtime, with
// namespace and name, whoever made them; a runtime that polls rarely sees a
// pod another one just made once it relists, and a removed pod is no
// longer listed.
func TestPodsAndRelist(t *testing.T) {
	first := newRuntime(t)
	// second polls rarely: only Relist shows it what first does meanwhile.
	second := newRuntime(t, WithPollInterval(time.Hour))
	p := newPod("listed", true, shell("c", `sleep 3600`))
	p.Namespace = "other"
	cleanupPod(t, p)
	if hasPod(second.Pods(), p) {
		t.Fatal("pod listed before it exists")
	}
	st := start(t, first, p, 0, 0)
	if !hasPod(first.Pods(), p) {
		t.Errorf("the runtime that made the pod does not list it: %+v", first.Pods())
	}
	if hasPod(second.Pods(), p) || len(second.PodContainers(p.UID)) != 0 {
		t.Fatal("second runtime saw the pod without relisting: the test would prove nothing")
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := second.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	if !hasPod(second.Pods(), p) {
		t.Errorf("after Relist the pod is not listed as %s/%s: %+v", p.Namespace, p.Name, second.Pods())
	}
	if got := second.PodContainers(p.UID); len(got) != 1 || got[0].ID != st.ID || got[0].State != runtime.StateRunning {
		t.Errorf("after Relist: %+v, want %s running", got, st.ID)
	}
	// a runtime started afresh lists it from the sandbox's labels.
	third := newRuntime(t)
	if !hasPod(third.Pods(), p) {
		t.Errorf("a new runtime does not list the pod: %+v", third.Pods())
	}
	if err := first.StopContainer(ctx, st.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := first.RemovePod(ctx, p.UID); err != nil {
		t.Fatal(err)
	}
	if hasPod(first.Pods(), p) {
		t.Error("removed pod still listed")
	}
	if err := second.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	if hasPod(second.Pods(), p) {
		t.Error("removed pod still listed by the other runtime after Relist")
	}
}

// kubelet: a best-effort container is the OOM killer's first pick (1000),
// a burstable one gets less the more of the node's memory it requests.
// (A guaranteed one's -997 is not checked: the test containerd restricts
// scores to its own, since a sandbox here may not lower them.)
func TestOOMScoreAdj(t *testing.T) {
	r := newRuntime(t, WithHostIP("127.0.0.1"))
	burstable := shell("burstable", `cat /proc/self/oom_score_adj; sleep 3600`)
	burstable.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: mustQuantity("1Gi")}
	for _, c := range []struct {
		ctr  corev1.Container
		want string
	}{
		{shell("besteffort", `cat /proc/self/oom_score_adj; sleep 3600`), "1000"},
		{burstable, strconv.FormatInt(1000-1000*(1<<30)/machine.MemoryCapacity(), 10)},
	} {
		p := newPod("oom-"+c.ctr.Name, true, c.ctr)
		cleanupPod(t, p)
		start(t, r, p, 0, 0)
		testenv.Eventually(t, 30*time.Second, c.ctr.Name+"'s oom_score_adj in its log", func() (bool, string) {
			out := strings.TrimSpace(logs(t, r, p.UID, c.ctr.Name, runtime.LogOptions{}))
			return out == c.want, fmt.Sprintf("log %q, want %q", out, c.want)
		})
	}
}

// kubelet: an ephemeral container with a target joins the target's process
// namespace (kubectl debug --target): its PID 1 is the target's process.
func TestEphemeralTargetSharesProcesses(t *testing.T) {
	r := newRuntime(t, WithHostIP("127.0.0.1"))
	p := newPod("debug-target", true, shell("app", `exec sleep 3600`))
	cleanupPod(t, p)
	start(t, r, p, 0, 0)
	// PID 1 is read again each second: the target's shell may not have
	// exec'd its sleep yet when the debugger first looks.
	show := `while :; do tr '\0' ' ' < /proc/1/cmdline; echo; sleep 1; done`
	for _, c := range []struct {
		ctr    corev1.Container
		target string
		want   string
	}{
		{shell("debugger", show), "app", "sleep 3600"},
		{shell("loner", show), "", "sh -c " + show},
	} {
		c.ctr.Image, c.ctr.ImagePullPolicy = p.Spec.Containers[0].Image, p.Spec.Containers[0].ImagePullPolicy
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		_, err := r.StartContainer(ctx, p, &c.ctr, 0, runtime.StartOptions{TargetContainer: c.target})
		cancel()
		if err != nil {
			t.Fatalf("start %s: %v", c.ctr.Name, err)
		}
		testenv.Eventually(t, 30*time.Second, c.ctr.Name+"'s PID 1", func() (bool, string) {
			lines := strings.Split(strings.TrimSpace(logs(t, r, p.UID, c.ctr.Name, runtime.LogOptions{})), "\n")
			out := strings.TrimSpace(lines[len(lines)-1])
			return out == c.want, fmt.Sprintf("PID 1 is %q, want %q", out, c.want)
		})
	}
	// the debuggers stop before their target: stopping the target first
	// kills whatever shares its process namespace under the runtime's feet.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	list := r.PodContainers(p.UID)
	for i := len(list) - 1; i >= 0; i-- {
		if err := r.StopContainer(ctx, list[i].ID, 0); err != nil {
			t.Errorf("stop %s: %v", list[i].Name, err)
		}
	}
}
