package process

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/testenv"
)

// testRuntime is a runtime that, at the end of the test, stops every
// container it started and checks that none of their processes is left,
// not even as a zombie.
type testRuntime struct {
	*Runtime
	t    *testing.T
	mu   sync.Mutex
	pids map[int]bool
}

func newRuntime(t *testing.T, opts ...Option) *testRuntime {
	t.Helper()
	opts = append([]Option{WithRootDir(t.TempDir()), WithSubreaper(true), WithDrainTimeout(500 * time.Millisecond)}, opts...)
	r, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	tr := &testRuntime{Runtime: r, t: t, pids: map[int]bool{}}
	t.Cleanup(tr.cleanup)
	return tr
}

func (tr *testRuntime) cleanup() {
	t := tr.t
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr.Runtime.Mu.Lock()
	var ids []string
	for c := range tr.Runtime.Table.All() {
		ids = append(ids, c.status.ID)
	}
	tr.Runtime.Mu.Unlock()
	for _, id := range ids {
		if err := tr.StopContainer(ctx, id, 0); err != nil {
			t.Errorf("cleanup: stop %s: %v", id, err)
		}
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if left := groupMembers(tr.pids); len(left) > 0 {
		t.Errorf("processes left in the containers' groups: %+v", left)
	}
	for pid := range tr.pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("process %d is left (maybe a zombie)", pid)
		}
	}
	_ = tr.Close()
}

func (tr *testRuntime) start(p *corev1.Pod, i, attempt int) runtime.ContainerStatus {
	tr.t.Helper()
	st, err := tr.StartContainer(context.Background(), p, &p.Spec.Containers[i], attempt, runtime.StartOptions{})
	if err != nil {
		tr.t.Fatalf("start %s: %v", p.Spec.Containers[i].Name, err)
	}
	tr.track(st.ID)
	return st
}

// track remembers the process group of a container, to check at the end.
func (tr *testRuntime) track(id string) {
	tr.Runtime.Mu.Lock()
	c, _ := tr.Runtime.Table.ByID(id)
	tr.Runtime.Mu.Unlock()
	if c != nil && c.pid > 0 {
		tr.mu.Lock()
		tr.pids[c.pid] = true
		tr.mu.Unlock()
	}
}

// waitExit waits for the event of container id and returns its status.
func (tr *testRuntime) waitExit(id string) runtime.ContainerStatus {
	tr.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev := <-tr.Events():
			if ev.ContainerID != id {
				continue
			}
			if ev.State != runtime.StateExited {
				tr.t.Fatalf("event %+v", ev)
			}
			for _, c := range tr.PodContainers(ev.PodUID) {
				if c.ID == id {
					return c
				}
			}
			tr.t.Fatalf("container %s is not listed after its exit", id)
		case <-deadline:
			tr.t.Fatalf("no exit event for %s within 20s", id)
		}
	}
}

func (tr *testRuntime) logs(p *corev1.Pod, name string, opts runtime.LogOptions) string {
	tr.t.Helper()
	var buf bytes.Buffer
	if err := tr.Logs(context.Background(), p.UID, name, opts, &buf); err != nil {
		tr.t.Fatalf("logs of %s: %v", name, err)
	}
	return buf.String()
}

func shPod(uid string, scripts ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-" + uid, Namespace: "ns1", UID: types.UID(uid)}}
	for i, s := range scripts {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
			Name: "c" + strconv.Itoa(i), Image: "ignored", Command: []string{"/bin/sh", "-c", s},
		})
	}
	return p
}

var criLine = regexp.MustCompile(`^(\S+) (stdout|stderr) (F|P) (.*)$`)

func TestOutputInCRILogAndLogs(t *testing.T) {
	r := newRuntime(t)
	p := shPod("u-logs", `echo one; echo two >&2; echo three; printf 'no newline'`)
	st := r.start(p, 0, 0)
	if !strings.HasPrefix(st.ID, "process://") || st.State != runtime.StateRunning {
		t.Fatalf("started %+v", st)
	}
	if want := filepath.Join(r.RootDir(), "pods", "u-logs", "c0", "0.log"); st.LogPath != want {
		t.Fatalf("log path %q, want %q", st.LogPath, want)
	}
	end := r.waitExit(st.ID)
	if end.ExitCode != 0 || end.Reason != ReasonCompleted || end.FinishedAt.IsZero() {
		t.Fatalf("exit %+v", end)
	}

	raw, err := os.ReadFile(st.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
		m := criLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("not a CRI log line: %q", l)
		}
		if _, err := time.Parse(time.RFC3339Nano, m[1]); err != nil {
			t.Fatalf("timestamp of %q: %v", l, err)
		}
		if m[3] != "F" {
			t.Fatalf("tag of %q", l)
		}
		got[m[4]] = m[2]
	}
	want := map[string]string{"one": "stdout", "two": "stderr", "three": "stdout", "no newline": "stdout"}
	if len(got) != len(want) {
		t.Fatalf("log lines %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("log lines %v, want %v", got, want)
		}
	}

	all := r.logs(p, "c0", runtime.LogOptions{TailLines: -1})
	// stdout and stderr are copied apart: their lines may interleave.
	allLines := strings.Split(strings.TrimSuffix(all, "\n"), "\n")
	if len(allLines) != 4 || !strings.Contains(all, "one\n") || !strings.Contains(all, "two\n") || !strings.Contains(all, "no newline\n") {
		t.Fatalf("logs %q", all)
	}
	if s := r.logs(p, "c0", runtime.LogOptions{TailLines: 1}); s != allLines[3]+"\n" {
		t.Fatalf("tail 1: %q of %q", s, all)
	}
	if s := r.logs(p, "c0", runtime.LogOptions{TailLines: 0}); s != "" {
		t.Fatalf("tail 0: %q", s)
	}
	if s := r.logs(p, "c0", runtime.LogOptions{TailLines: -1, LimitBytes: 5}); len(s) != 5 || !strings.HasPrefix(all, s) {
		t.Fatalf("limit 5: %q", s)
	}
	if s := r.logs(p, "c0", runtime.LogOptions{TailLines: -1, Since: time.Now().Add(time.Hour)}); s != "" {
		t.Fatalf("since the future: %q", s)
	}
	if s := r.logs(p, "c0", runtime.LogOptions{TailLines: -1, Since: st.CreatedAt.Add(-time.Second)}); s != all {
		t.Fatalf("since the start: %q", s)
	}
	ts := r.logs(p, "c0", runtime.LogOptions{TailLines: 2, Timestamps: true})
	lines := strings.Split(strings.TrimSuffix(ts, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("timestamped tail: %q", ts)
	}
	for _, l := range lines {
		stamp, text, _ := strings.Cut(l, " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil || at.Before(st.CreatedAt.Add(-time.Second)) || !strings.Contains(all, text+"\n") {
			t.Fatalf("timestamped line %q: %v", l, err)
		}
	}
	if err := r.Logs(t.Context(), p.UID, "nope", runtime.LogOptions{TailLines: -1}, &bytes.Buffer{}); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("logs of an unknown container: %v", err)
	}

	if err := r.RemovePod(t.Context(), p.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r.RootDir(), "pods", "u-logs")); !os.IsNotExist(err) {
		t.Fatalf("pod dir after RemovePod: %v", err)
	}
}

func TestPreviousAndFollow(t *testing.T) {
	r := newRuntime(t)
	dir := t.TempDir()
	p := shPod("u-follow", `echo first; exit 3`)
	c := &p.Spec.Containers[0]
	c.WorkingDir = dir
	first := r.start(p, 0, 0)
	if end := r.waitExit(first.ID); end.ExitCode != 3 || end.Reason != ReasonError {
		t.Fatalf("first attempt %+v", end)
	}
	if err := r.Logs(t.Context(), p.UID, "c0", runtime.LogOptions{Previous: true, TailLines: -1}, &bytes.Buffer{}); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("previous of a first attempt: %v", err)
	}

	// The restart prints a line, waits for the test to create "go", prints
	// another and exits.
	c.Command = []string{"/bin/sh", "-c", `echo a; while [ ! -e go ]; do sleep 0.02; done; echo b`}
	second := r.start(p, 0, 1)
	if s := r.logs(p, "c0", runtime.LogOptions{Previous: true, TailLines: -1}); s != "first\n" {
		t.Fatalf("previous logs %q", s)
	}
	var buf apptest.Buffer
	done := make(chan error, 1)
	go func() {
		done <- r.Logs(t.Context(), p.UID, "c0", runtime.LogOptions{Follow: true, TailLines: -1}, &buf)
	}()
	testenv.EventuallyTrue(t, 20*time.Second, "the first line followed", func() bool { return buf.String() == "a\n" })
	select {
	case err := <-done:
		t.Fatalf("follow ended while the container runs: %v", err)
	default:
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("follow did not end after the container exited")
	}
	if s := buf.String(); s != "a\nb\n" {
		t.Fatalf("followed %q", s)
	}
	r.waitExit(second.ID)

	// Follow stops when the caller's context ends.
	c.Command = []string{"/bin/sh", "-c", `echo x; exec sleep 100`}
	third := r.start(p, 0, 2)
	ctx, cancel := context.WithCancel(t.Context())
	var buf3 apptest.Buffer
	done3 := make(chan error, 1)
	go func() { done3 <- r.Logs(ctx, p.UID, "c0", runtime.LogOptions{Follow: true, TailLines: -1}, &buf3) }()
	testenv.EventuallyTrue(t, 20*time.Second, "the line followed", func() bool { return buf3.String() == "x\n" })
	cancel()
	select {
	case <-done3:
	case <-time.After(20 * time.Second):
		t.Fatal("follow did not end with its context")
	}
	// Only the newest two instances stay, with their logs.
	if cs := r.PodContainers(p.UID); len(cs) != 2 || cs[0].ID != second.ID || cs[1].ID != third.ID {
		t.Fatalf("instances %+v", cs)
	}
	if _, err := os.Stat(first.LogPath); !os.IsNotExist(err) {
		t.Fatalf("the oldest log is still there: %v", err)
	}
	if err := r.RemovePod(t.Context(), p.UID); err == nil {
		t.Fatal("RemovePod with a running container succeeded")
	}
}

func TestGracePeriodThenKillWholeGroup(t *testing.T) {
	r := newRuntime(t)
	p := shPod("u-term",
		`trap '' TERM; sleep 100 & sleep 100 & echo started; wait`,
		`exec sleep 100`)
	st := r.start(p, 0, 0)
	plain := r.start(p, 1, 0)
	var buf apptest.Buffer
	go func() {
		_ = r.Logs(t.Context(), p.UID, "c0", runtime.LogOptions{Follow: true, TailLines: -1}, &buf)
	}()
	testenv.EventuallyTrue(t, 20*time.Second, "the script started", func() bool { return buf.String() == "started\n" })
	r.Runtime.Mu.Lock()
	c, _ := r.Runtime.Table.ByID(st.ID)
	pgid := c.pid
	r.Runtime.Mu.Unlock()
	members := groupMembers(map[int]bool{pgid: true})
	if len(members) != 3 {
		t.Fatalf("group %d has %d members, want sh and two sleeps: %+v", pgid, len(members), members)
	}

	if err := r.StopContainer(t.Context(), st.ID, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	end := r.waitExit(st.ID)
	// 137: SIGKILL after the ignored SIGTERM.
	if end.ExitCode != 137 || end.Reason != ReasonError {
		t.Fatalf("status after the grace period %+v", end)
	}
	for _, m := range members {
		if _, err := os.Stat("/proc/" + strconv.Itoa(m.pid)); err == nil {
			t.Fatalf("process %d of the group is left", m.pid)
		}
	}

	// A process that honours SIGTERM ends with it.
	if err := r.StopContainer(t.Context(), plain.ID, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if end := r.waitExit(plain.ID); end.ExitCode != 143 || end.Reason != ReasonError {
		t.Fatalf("status after SIGTERM %+v", end)
	}
	if err := r.StopContainer(t.Context(), plain.ID, 0); err != nil {
		t.Fatalf("stopping a stopped container: %v", err)
	}
	if err := r.StopContainer(t.Context(), "process://nope", 0); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("stop of an unknown container: %v", err)
	}
}

func TestLeaderExitKillsTheGroup(t *testing.T) {
	r := newRuntime(t)
	p := shPod("u-orphan", `sleep 100 & echo $! > child; exit 0`)
	dir := t.TempDir()
	p.Spec.Containers[0].WorkingDir = dir
	st := r.start(p, 0, 0)
	end := r.waitExit(st.ID)
	if end.ExitCode != 0 {
		t.Fatalf("exit %+v", end)
	}
	b, err := os.ReadFile(filepath.Join(dir, "child"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/" + strings.TrimSpace(string(b))); err == nil {
		t.Fatalf("the background child %s outlived the container", strings.TrimSpace(string(b)))
	}
}

func TestEnvAndDownwardAPI(t *testing.T) {
	r := newRuntime(t, WithHostIP("127.0.0.2"))
	yes := true
	p := shPod("u-env", `env; echo "ARGS $0 $1"`)
	p.Labels = map[string]string{"app": "web"}
	p.Spec.NodeName = "node-a"
	p.Spec.ServiceAccountName = "robot"
	c := &p.Spec.Containers[0]
	c.Args = []string{"$(FOO)", "$$(FOO)"}
	c.WorkingDir = t.TempDir()
	c.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	c.Env = []corev1.EnvVar{
		{Name: "FOO", Value: "bar"},
		{Name: "REF", Value: "$(FOO)-x-$(UNKNOWN)"},
		{Name: "POD_NAME", ValueFrom: field("metadata.name")},
		{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
		{Name: "POD_UID", ValueFrom: field("metadata.uid")},
		{Name: "NODE", ValueFrom: field("spec.nodeName")},
		{Name: "POD_IP", ValueFrom: field("status.podIP")},
		{Name: "HOST_IP", ValueFrom: field("status.hostIP")},
		{Name: "SA", ValueFrom: field("spec.serviceAccountName")},
		{Name: "APP", ValueFrom: field("metadata.labels['app']")},
		{Name: "CPU_M", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu", Divisor: resource.MustParse("1m")}}},
		{Name: "MEM_MI", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
		{Name: "OPT", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: "k", Optional: &yes}}},
	}
	st := r.start(p, 0, 0)
	if end := r.waitExit(st.ID); end.ExitCode != 0 {
		t.Fatalf("exit %+v", end)
	}
	env := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(r.logs(p, "c0", runtime.LogOptions{TailLines: -1})))
	var argsLine string
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "ARGS ") {
			argsLine = sc.Text()
		}
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	want := map[string]string{
		"FOO": "bar", "REF": "bar-x-$(UNKNOWN)", "POD_NAME": "pod-u-env", "POD_NAMESPACE": "ns1", "POD_UID": "u-env",
		"NODE": "node-a", "POD_IP": "127.0.0.1", "HOST_IP": "127.0.0.2", "SA": "robot", "APP": "web",
		"CPU_M": "500", "MEM_MI": "64", "HOSTNAME": "pod-u-env", "PWD": c.WorkingDir,
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("env %s=%q, want %q", k, env[k], v)
		}
	}
	if _, ok := env["OPT"]; ok {
		t.Error("an optional ConfigMap key the runtime cannot read was set")
	}
	if env["PATH"] == "" {
		t.Error("no PATH")
	}
	if argsLine != "ARGS bar $(FOO)" {
		t.Errorf("args line %q", argsLine)
	}

	// What the runtime cannot resolve fails the start with a clear reason.
	for name, src := range map[string]*corev1.EnvVarSource{
		"unknown field": field("status.phase"),
		"config map":    {ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: "k"}},
		"no limit":      {ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.ephemeral-storage"}},
	} {
		bad := shPod("u-env-bad", "true")
		bad.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: src}}
		st, err := r.StartContainer(t.Context(), bad, &bad.Spec.Containers[0], 0, runtime.StartOptions{})
		if err == nil || st.Reason != ReasonConfigError || !strings.Contains(st.Message, "X") {
			t.Errorf("%s: %+v, %v", name, st, err)
		}
	}
}

func TestExitCodesAndReasons(t *testing.T) {
	r := newRuntime(t)
	for _, tc := range []struct {
		script string
		code   int
		reason string
	}{
		{"exit 0", 0, ReasonCompleted},
		{"exit 42", 42, ReasonError},
		{"kill -9 $$$$", 137, ReasonError}, // $$ is $ after the kubelet's expansion
	} {
		p := shPod("u-exit", tc.script)
		st := r.start(p, 0, 0)
		if end := r.waitExit(st.ID); end.ExitCode != tc.code || end.Reason != tc.reason || end.State != runtime.StateExited {
			t.Errorf("%q: %+v", tc.script, end)
		}
	}
	for name, mut := range map[string]func(*corev1.Container){
		"no command":      func(c *corev1.Container) { c.Command = nil },
		"missing program": func(c *corev1.Container) { c.Command = []string{"no-such-program-here"} },
		"bad workingDir":  func(c *corev1.Container) { c.WorkingDir = "/no/such/dir" },
	} {
		p := shPod("u-cannot", "true")
		mut(&p.Spec.Containers[0])
		st, err := r.StartContainer(t.Context(), p, &p.Spec.Containers[0], 0, runtime.StartOptions{})
		if err == nil || st.State != runtime.StateExited || st.Reason != ReasonCannotRun || st.ExitCode != 128 || st.Message == "" {
			t.Errorf("%s: %+v, %v", name, st, err)
		}
	}
	// FallbackToLogsOnError: the end of the log is the message.
	p := shPod("u-msg", `echo first; echo "it broke"; exit 1`)
	p.Spec.Containers[0].TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	st := r.start(p, 0, 0)
	if end := r.waitExit(st.ID); end.ExitCode != 1 || end.Message != "first\nit broke\n" {
		t.Errorf("termination message from the logs: %+v", end)
	}

	// args alone: args[0] is the program.
	p = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns1", UID: "u-args"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c0", Args: []string{"sh", "-c", "exit 5"}}}}}
	st = r.start(p, 0, 0)
	if end := r.waitExit(st.ID); end.ExitCode != 5 {
		t.Errorf("args only: %+v", end)
	}
}

func TestExec(t *testing.T) {
	r := newRuntime(t)
	p := shPod("u-exec", `exec sleep 100`)
	c := &p.Spec.Containers[0]
	c.Env = []corev1.EnvVar{{Name: "FOO", Value: "bar"}}
	c.WorkingDir = t.TempDir()
	st := r.start(p, 0, 0)
	ctx := t.Context()

	res, err := r.Exec(ctx, p.UID, "c0", []string{"sh", "-c", `echo out; echo err >&2; pwd; echo $FOO; exit 7`}, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 || string(res.Stdout) != "out\n"+c.WorkingDir+"\nbar\n" || string(res.Stderr) != "err\n" {
		t.Fatalf("exec: code %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	res, err = r.Exec(ctx, p.UID, "c0", []string{"cat"}, strings.NewReader("hello"), 10*time.Second)
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "hello" {
		t.Fatalf("exec with stdin: %+v, %v", res, err)
	}

	// A command that outlives its timeout is killed, with its children.
	res, err = r.Exec(ctx, p.UID, "c0", []string{"sh", "-c", `echo $$ > pid; sleep 100 & echo $! > child; wait`}, nil, 300*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("exec past its timeout: %+v, %v", res, err)
	}
	for _, f := range []string{"pid", "child"} {
		b, err := os.ReadFile(filepath.Join(c.WorkingDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat("/proc/" + strings.TrimSpace(string(b))); err == nil {
			t.Fatalf("exec process %s (%s) is left", strings.TrimSpace(string(b)), f)
		}
	}

	if _, err := r.Exec(ctx, p.UID, "c0", []string{"no-such-program-here"}, nil, time.Second); err == nil {
		t.Fatal("exec of a missing program succeeded")
	}
	if _, err := r.Exec(ctx, p.UID, "nope", []string{"true"}, nil, time.Second); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("exec in an unknown container: %v", err)
	}

	stats := r.Stats(p.UID)
	if len(stats) != 1 || stats[0].ContainerID != st.ID || stats[0].MemoryWorkingSetBytes == 0 || stats[0].StartedAt.IsZero() {
		t.Fatalf("stats %+v", stats)
	}

	if err := r.StopContainer(ctx, st.ID, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Exec(ctx, p.UID, "c0", []string{"true"}, nil, time.Second); err == nil {
		t.Fatal("exec in a stopped container succeeded")
	}
	if s := r.Stats(p.UID); len(s) != 0 {
		t.Fatalf("stats of a stopped pod %+v", s)
	}
}

func TestParseProcStat(t *testing.T) {
	s, err := parseProcStat([]byte("42 (a (weird) name) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 100 1000 250 18446744073709551615"))
	if err != nil {
		t.Fatal(err)
	}
	if s.pid != 42 || s.state != 'S' || s.ppid != 1 || s.pgrp != 42 || s.utime != 7 || s.stime != 3 || s.cutime != 2 || s.cstime != 1 || s.rssPages != 250 {
		t.Fatalf("%+v", s)
	}
}
