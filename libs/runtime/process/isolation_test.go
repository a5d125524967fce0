package process

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/testenv"
)

// needRoot: only a root runtime switches users. Under -short the test is
// skipped without root; otherwise it fails.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if testing.Short() {
			t.Skip("needs root: only a root runtime switches users")
		}
		t.Fatal("this test needs root: only a root runtime switches users")
	}
}

// testRange is a small range of pod uids for a test.
var testRange = UserRange{First: DefaultUserRange.First + 4096, Count: 64}

// podUsersRuntime is a root runtime that runs each pod as a user of its
// own, with its claims in a directory of the test's.
func podUsersRuntime(t *testing.T, opts ...Option) *testRuntime {
	t.Helper()
	needRoot(t)
	root := filepath.Join(t.TempDir(), "root")
	testenv.OpenWay(t, root)
	opts = append([]Option{WithRootDir(root), WithPodUsers(testRange, filepath.Join(t.TempDir(), "uids"))}, opts...)
	return newRuntime(t, opts...)
}

// agentFiles makes a stand-in for the agent's data directory and
// credentials (kubeconfig, NATS seed) as a node has them: files of mode
// 0600 in a directory pods may pass through but not list.
func agentFiles(t *testing.T) (dir string, files []string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	testenv.OpenWay(t, dir)
	for name, data := range map[string]string{"kubeconfig": "token: s3cret-kubeconfig", "nats.nk": "SUAs3cret-seed"} {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return dir, files
}

func waitOutput(t *testing.T, r *testRuntime, p *corev1.Pod, name, mark string) string {
	t.Helper()
	var out string
	testenv.EventuallyTrue(t, 20*time.Second, "output of "+string(p.UID)+"/"+name, func() bool {
		out = r.logs(p, name, runtime.LogOptions{TailLines: -1})
		return strings.Contains(out, mark)
	})
	return out
}

func (tr *testRuntime) pidOf(id string) int {
	tr.Runtime.Mu.Lock()
	defer tr.Runtime.Mu.Unlock()
	c, _ := tr.Runtime.Table.ByID(id)
	return c.pid
}

// Two pods run as two users of the range, neither of them root: one
// cannot read the other's files, its environment (/proc/<pid>/environ,
// where a Secret given as env lives) nor the agent's data directory and
// credentials; exec runs as the pod's user. The pod's directory is the
// pod's alone.
func TestPodsRunAsUsersOfTheirOwn(t *testing.T) {
	r := podUsersRuntime(t)
	data, creds := agentFiles(t)
	a := shPod("u-pod-a", `echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"; echo private > mine; chmod 644 mine; echo ready; sleep 300`)
	a.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PASSWORD", Value: "s3cret-of-a"}}
	b := shPod("u-pod-b", `echo "uid=$(id -u) gid=$(id -g)"; sleep 300`)
	stA := r.start(a, 0, 0)
	r.start(b, 0, 0)
	outA := waitOutput(t, r, a, "c0", "ready")
	outB := waitOutput(t, r, b, "c0", "uid=")

	uidA, gidA, ok, err := r.PodUser(a)
	if err != nil || !ok {
		t.Fatalf("PodUser: %v %v", ok, err)
	}
	uidB, _, _, _ := r.PodUser(b)
	if uidA == uidB || uidA < testRange.First || uidA > testRange.Last() || uidB < testRange.First || uidB > testRange.Last() {
		t.Fatalf("pod users %d and %d: want two distinct uids of %s", uidA, uidB, testRange)
	}
	if want := fmt.Sprintf("uid=%d gid=%d groups=%d\n", uidA, gidA, gidA); !strings.Contains(outA, want) {
		t.Errorf("pod a: want %q in\n%s", want, outA)
	}
	if want := fmt.Sprintf("uid=%d ", uidB); !strings.Contains(outB, want) {
		t.Errorf("pod b: want %q in\n%s", want, outB)
	}

	// what b may try, through exec (which runs as b's user).
	mine := filepath.Join(r.RootDir(), "pods", "u-pod-a", "c0", "mine")
	if got, err := os.ReadFile(mine); err != nil || string(got) != "private\n" {
		t.Fatalf("pod a's file %s: %q %v", mine, got, err)
	}
	script := fmt.Sprintf(`id -u; cat /proc/%d/environ; cat %s; ls %s; cat %s; ls %s`, r.pidOf(stA.ID), mine,
		filepath.Dir(mine), strings.Join(creds, " "), data)
	res, err := r.Exec(t.Context(), b.UID, "c0", []string{"sh", "-c", script}, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout)
	if strings.TrimSpace(strings.Split(out, "\n")[0]) != strconv.Itoa(int(uidB)) {
		t.Errorf("exec in pod b ran as %q, want uid %d", out, uidB)
	}
	for _, leak := range []string{"s3cret", "private", "mine", "kubeconfig", "nats.nk"} {
		if strings.Contains(out, leak) {
			t.Errorf("pod b sees %q of pod a or of the agent:\n%s\n%s", leak, out, res.Stderr)
		}
	}
	// the pod's directory: root's, in the pod's group, 0750; the
	// container's: the pod's, 0700.
	for dir, want := range map[string][3]uint32{
		filepath.Dir(filepath.Dir(mine)): {0, gidA, 0o750},
		filepath.Dir(mine):               {uidA, gidA, 0o700},
	} {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != want[0] || st.Gid != want[1] || uint32(fi.Mode().Perm()) != want[2] {
			t.Errorf("%s: %d:%d %v, want %d:%d %o", dir, st.Uid, st.Gid, fi.Mode().Perm(), want[0], want[1], want[2])
		}
	}
}

// A pod's uid is claimed on disk: a runtime started afresh on the same
// claims (a pod worker restarted, or killed with SIGKILL) gives the pod
// the same uid, and another pod another one; releasing it frees it.
func TestPodUserSurvivesTheRuntime(t *testing.T) {
	needRoot(t)
	claims := filepath.Join(t.TempDir(), "uids")
	first := newRuntime(t, WithPodUsers(testRange, claims))
	p, q := shPod("u-stable", "true"), shPod("u-other", "true")
	uid, _, _, err := first.PodUser(p)
	if err != nil {
		t.Fatal(err)
	}
	second := newRuntime(t, WithPodUsers(testRange, claims))
	if again, _, _, err := second.PodUser(p); err != nil || again != uid {
		t.Fatalf("the next runtime gives the pod uid %d (%v), want %d", again, err, uid)
	}
	if other, _, _, _ := second.PodUser(q); other == uid {
		t.Fatalf("two pods got uid %d", uid)
	}
	if err := second.ReleasePodUser(p.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(claims, strconv.Itoa(int(uid)))); !os.IsNotExist(err) {
		t.Fatalf("the claim on %d is left after the release: %v", uid, err)
	}
}

// A pod that asks for root (runAsUser or runAsGroup 0), or for a uid or
// gid other than its own, is refused with CreateContainerConfigError and
// a message that says why; with WithAllowRoot, root is given. Its own uid
// may be asked for.
func TestRootAndOtherUsersAreRefused(t *testing.T) {
	r := podUsersRuntime(t)
	_, creds := agentFiles(t)
	root, other := int64(0), int64(1000)
	p := shPod("u-asks", "cat "+strings.Join(creds, " "), "id -u", "id -g", "id -u")
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: &root}
	p.Spec.Containers[1].SecurityContext = &corev1.SecurityContext{RunAsUser: &other}
	p.Spec.Containers[2].SecurityContext = &corev1.SecurityContext{RunAsGroup: &root}
	own, _, _, _ := r.PodUser(p)
	ownID := int64(own)
	p.Spec.Containers[3].SecurityContext = &corev1.SecurityContext{RunAsUser: &ownID}
	for i, want := range []string{"runAsUser 0 is refused", "runAsUser 1000 is refused", "runAsGroup 0 is refused"} {
		st, err := r.StartContainer(t.Context(), p, &p.Spec.Containers[i], 0, runtime.StartOptions{})
		r.track(st.ID)
		if err == nil || st.Reason != ReasonConfigError || !strings.Contains(st.Message, want) || st.ID != "" {
			t.Errorf("container c%d: %+v %v, want it refused (%s: %q)", i, st, err, ReasonConfigError, want)
		}
	}
	st := r.start(p, 3, 0)
	r.waitExit(st.ID)
	if out := r.logs(p, "c3", runtime.LogOptions{TailLines: -1}); strings.TrimSpace(out) != strconv.Itoa(int(own)) {
		t.Errorf("asking for its own uid: %q, want %d", out, own)
	}
	nonRoot := true
	p.Spec.Containers[0].SecurityContext.RunAsNonRoot = &nonRoot
	allowing := podUsersRuntime(t, WithAllowRoot(true))
	if st, err := allowing.StartContainer(t.Context(), p, &p.Spec.Containers[0], 0, runtime.StartOptions{}); err == nil || !strings.Contains(st.Message, "breaks non-root policy") {
		t.Errorf("runAsUser 0 with runAsNonRoot: %+v %v", st, err)
	}
	p.Spec.Containers[0].SecurityContext.RunAsNonRoot = nil
	st = allowing.start(p, 0, 0)
	allowing.waitExit(st.ID)
	if out := allowing.logs(p, "c0", runtime.LogOptions{TailLines: -1}); !strings.Contains(out, "s3cret") {
		t.Errorf("with root allowed, runAsUser 0 runs as root and reads what root may:\n%s", out)
	}
}

// A container can write its own directory, where its logs, mounts and
// termination message file are: the links it plants there, to a host
// file, are neither followed when the runtime makes the next instance's
// log and termination message file (the file is left whole), nor when
// it reads a log or a message (nothing of the file comes out), nor when
// it makes a mount point (the start fails).
func TestPlantedLinksAreNotFollowed(t *testing.T) {
	r := podUsersRuntime(t)
	victims := filepath.Join(t.TempDir(), "host")
	if err := os.MkdirAll(filepath.Join(victims, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.OpenWay(t, victims)
	victim := func(name string) string { return filepath.Join(victims, name) }
	for _, name := range []string{"log", "term", "read"} {
		if err := os.WriteFile(victim(name), []byte("precious "+name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := shPod("u-plant", fmt.Sprintf(`ln -s %s 1.log && ln -sf %s termination-log && rm 0.log && ln -s %s 0.log &&
ln -s %s etc && echo planted; exit 3`, victim("log"), victim("term"), victim("read"), victims))
	c := &p.Spec.Containers[0]
	c.TerminationMessagePath = "/termination-log"
	c.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	st := r.start(p, 0, 0)
	end := r.waitExit(st.ID)
	if end.ExitCode != 3 {
		t.Fatalf("the planting container: %+v", end)
	}
	if strings.Contains(end.Message, "precious") {
		t.Errorf("the termination message came through a link: %q", end.Message)
	}
	var buf strings.Builder
	err := r.Logs(t.Context(), p.UID, "c0", runtime.LogOptions{TailLines: -1}, &buf)
	if strings.Contains(buf.String(), "precious") {
		t.Errorf("the log was read through a link: %q", buf.String())
	}
	if err == nil {
		t.Errorf("a log that is a link was read: %q", buf.String())
	}

	// the next instance: its log and termination message file are made
	// fresh, the links replaced.
	st = r.start(p, 0, 1)
	r.waitExit(st.ID)
	for _, name := range []string{"log", "term", "read"} {
		if got, err := os.ReadFile(victim(name)); err != nil || string(got) != "precious "+name+"\n" {
			t.Errorf("the host file %s behind a planted link: %q %v", name, got, err)
		}
	}
	if fi, err := os.Lstat(filepath.Join(r.RootDir(), "pods", "u-plant", "c0", "1.log")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the new instance's log: %v %v", fi, err)
	}

	// a mount under a planted link: refused, nothing made on the host.
	_, err = r.StartContainer(t.Context(), p, c, 2, runtime.StartOptions{Mounts: []runtime.Mount{{ContainerPath: "/etc/config", HostPath: t.TempDir()}}})
	if err == nil {
		t.Error("a mount through a planted link was made")
	}
	if _, err := os.Lstat(filepath.Join(victims, "config")); !os.IsNotExist(err) {
		t.Errorf("a mount point was made on the host: %v", err)
	}
}

// Without pod users, a root runtime runs a container as the user it asks
// for (runAsUser, runAsGroup), else as itself; a runtime that is not root
// refuses another user.
func TestRuntimeWithoutPodUsers(t *testing.T) {
	r := newRuntime(t)
	u, g := int64(1234), int64(4321)
	p := shPod("u-asked", `echo "uid=$(id -u) gid=$(id -g)"`)
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &u, RunAsGroup: &g}
	if os.Geteuid() != 0 {
		if _, err := r.StartContainer(t.Context(), p, &p.Spec.Containers[0], 0, runtime.StartOptions{}); err == nil {
			t.Fatal("a runtime that is not root switched users")
		}
		return
	}
	st := r.start(p, 0, 0)
	r.waitExit(st.ID)
	if out := r.logs(p, "c0", runtime.LogOptions{TailLines: -1}); !strings.Contains(out, "uid=1234 gid=4321") {
		t.Errorf("want uid=1234 gid=4321 in\n%s", out)
	}
}

// What a container writes to its termination message file (at its
// terminationMessagePath under its directory) is its message; an empty
// file leaves FallbackToLogsOnError to the log.
func TestTerminationMessageFile(t *testing.T) {
	r := newRuntime(t)
	p := shPod("u-term", `printf 'gone fishing' > dev/termination-log; exit 3`, `echo from the log; exit 4`)
	for i := range p.Spec.Containers {
		p.Spec.Containers[i].TerminationMessagePath = "/dev/termination-log"
		p.Spec.Containers[i].TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	}
	for i, want := range []string{"gone fishing", "from the log\n"} {
		st := r.start(p, i, 0)
		if end := r.waitExit(st.ID); end.Message != want {
			t.Errorf("container c%d: message %q, want %q", i, end.Message, want)
		}
	}
}
