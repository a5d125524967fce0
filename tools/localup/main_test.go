package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/testenv"
)

// buildSplitlet builds bin/splitlet from this checkout, so that localup
// runs the code under test.
func buildSplitlet(t *testing.T) {
	t.Helper()
	testenv.SkipShort(t, "etcd and kube-apiserver")
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(bin)
	if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "splitlet"), filepath.Join(root, "cmd", "splitlet")).CombinedOutput(); err != nil {
		t.Fatalf("build splitlet: %v\n%s", err, out)
	}
}

func kubectlPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is not on PATH: the newcomer's path runs it (%v)", err)
	}
	return path
}

// hints returns the shell lines localup printed under "Try:".
func hints(t *testing.T, printed string) []string {
	t.Helper()
	_, after, ok := strings.Cut(printed, "Try:\n")
	if !ok {
		t.Fatalf("no Try: block in\n%s", printed)
	}
	var lines []string
	for _, l := range strings.Split(after, "\n") {
		if strings.TrimSpace(l) == "" {
			break
		}
		lines = append(lines, strings.TrimSpace(l))
	}
	return lines
}

// shell runs one printed line after the export line, as a newcomer pastes
// them into a shell.
func shell(ctx context.Context, export, line string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", "-c", export+"\n"+line)
	cmd.Env = os.Environ()
	return cmd
}

// untilOK runs a printed line until it succeeds and its output passes check.
func untilOK(t *testing.T, ctx context.Context, export, line string, check func(out string) bool) string {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		out, err := shell(cctx, export, line).CombinedOutput()
		cancel()
		last = fmt.Sprintf("%v\n%s", err, out)
		if err == nil && check(string(out)) {
			t.Logf("$ %s\n%s", line, out)
			return string(out)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v; last try: %s", line, ctx.Err(), last)
		case <-time.After(time.Second):
		}
	}
	t.Fatalf("%s: no good answer within the deadline; last try: %s", line, last)
	return ""
}

var helloLine = regexp.MustCompile(`hello from splitlet (\d+)`)

// follow runs `kubectl logs -f` and waits for a line the demo writes after
// the ones already seen: the stream must stay open and deliver it.
func follow(t *testing.T, ctx context.Context, export, line string, seen string) {
	t.Helper()
	known := map[string]bool{}
	for _, m := range helloLine.FindAllString(seen, -1) {
		known[m] = true
	}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := shell(cctx, export, "exec "+line)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if m := helloLine.FindString(sc.Text()); m != "" && !known[m] {
			t.Logf("$ %s\n... %s (new line, followed)", line, sc.Text())
			return
		}
	}
	t.Fatalf("%s: the stream ended without a new line (%v): %s", line, cctx.Err(), stderr.String())
}

// TestLocalUpWalk is the newcomer's path: what `make run` runs (process
// runtime, as make run's default), then every kubectl line it prints, run
// as printed through the real kubectl and the API server: nodes, pods,
// describe, logs, logs -f, exec, delete. Then everything stops. The agent
// ran as the node (checkAgentIdentity), the kubeconfigs are private.
func TestLocalUpWalk(t *testing.T) {
	buildSplitlet(t)
	kubectl := kubectlPath(t)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	var out apptest.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	walked := false
	walk := func(ctx context.Context, kubeconfig string) error {
		lines := hints(t, out.String())
		if len(lines) == 0 || !strings.HasPrefix(lines[0], "export KUBECONFIG=") {
			t.Fatalf("the hints do not start with the KUBECONFIG export: %q", lines)
		}
		export := lines[0]
		if !strings.Contains(export, kubeconfig) {
			t.Errorf("printed %q, kubeconfig is %s", export, kubeconfig)
		}
		var logs string
		for _, line := range lines[1:] {
			if !strings.HasPrefix(line, "kubectl ") {
				t.Fatalf("unexpected hint %q", line)
			}
			switch {
			case line == "kubectl get nodes":
				untilOK(t, ctx, export, line, func(o string) bool { return regexp.MustCompile(`splitlet-node\s+Ready`).MatchString(o) })
			case line == "kubectl get pods -o wide":
				untilOK(t, ctx, export, line, func(o string) bool { return regexp.MustCompile(`demo\s+1/1\s+Running`).MatchString(o) })
			case line == "kubectl describe pod demo":
				untilOK(t, ctx, export, line, func(o string) bool {
					return strings.Contains(o, "Node:") && strings.Contains(o, "splitlet-node") && regexp.MustCompile(`Status:\s+Running`).MatchString(o)
				})
			case line == "kubectl logs demo":
				logs = untilOK(t, ctx, export, line, func(o string) bool { return helloLine.MatchString(o) })
			case line == "kubectl logs -f demo":
				follow(t, ctx, export, line, logs)
			case strings.HasPrefix(line, "kubectl exec demo "):
				untilOK(t, ctx, export, line, func(o string) bool { return strings.TrimSpace(o) == "hello from exec" })
			case line == "kubectl delete pod demo":
				untilOK(t, ctx, export, line, func(o string) bool { return strings.Contains(o, `pod "demo" deleted`) })
				// kubectl delete waits until the pod is gone: the node
				// stopped its container and the pod object was removed.
				untilOK(t, ctx, export, "kubectl get pods -o name", func(o string) bool { return !strings.Contains(o, "pod/demo") })
			default:
				t.Errorf("hint %q is not walked by this test: add it", line)
			}
		}
		readmeMatches(t, lines[1:])
		walked = true
		return nil
	}
	t.Logf("kubectl: %s", kubectl)
	state := t.TempDir()
	err = run(ctx, options{stateDir: state, node: "splitlet-node", runtime: "process", kubeletPort: port, once: true, out: &out, up: walk, audit: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !walked {
		t.Fatal("localup returned without walking the hints")
	}
	for _, want := range []string{"Splitlet is up", "stopping splitlet", "stopping the control plane"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	checkAgentIdentity(t, state, "splitlet-node")
}

// checkAgentIdentity reads the API server's audit log of a run: every
// request of splitlet (its user agent) came from the node's identity,
// system:node:<node> but those that asked for the node's certificate with
// the bootstrap token, none was refused, and the node's join, its
// registration and the demo pod's status were among them; the admin
// kubeconfig, the node's, its bootstrap kubeconfig and certificate are
// 0600, their directories 0700.
func checkAgentIdentity(t *testing.T, state, node string) {
	t.Helper()
	records, err := testenv.ReadAudit(filepath.Join(state, "controlplane", "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	user := testenv.NodeUser(node)
	seen := map[string]bool{}
	for _, r := range records {
		if !strings.HasPrefix(r.UserAgent, "splitlet-") {
			continue
		}
		// The bootstrap token serves only to ask for the node's
		// certificate.
		if strings.HasPrefix(r.User, "system:bootstrap:") && strings.HasPrefix(r.URI, "/apis/certificates.k8s.io/v1/certificatesigningrequests") {
			seen["bootstrap "+r.Verb] = true
			continue
		}
		if r.User != user {
			t.Errorf("splitlet asked as %q, not the node (%s): %s %s", r.User, user, r.Verb, r.URI)
		}
		if r.Code == http.StatusForbidden {
			t.Errorf("the node was refused %s %s", r.Verb, r.URI)
		}
		seen[r.Verb+" "+strings.SplitN(r.URI, "?", 2)[0]] = true
	}
	for _, want := range []string{"bootstrap create", "create /api/v1/nodes", "patch /api/v1/namespaces/default/pods/demo/status"} {
		if !seen[want] {
			t.Errorf("no %s by splitlet in the audit log", want)
		}
	}
	for path, mode := range map[string]os.FileMode{
		filepath.Join(state, "kubeconfig"):                                0o600,
		filepath.Join(state, "node"):                                      0o700,
		filepath.Join(state, "node", "kubeconfig"):                        0o600,
		filepath.Join(state, "node", "bootstrap-kubeconfig"):              0o600,
		filepath.Join(state, "node", "pki", "kubelet-client-current.pem"): 0o600,
		filepath.Join(state, "controlplane"):                              0o700,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Error(err)
			continue
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %#o, want %#o", path, fi.Mode().Perm(), mode)
		}
	}
}

// readmeMatches checks that README.md shows the same kubectl lines as
// localup prints, so the walk above covers what the README promises.
func readmeMatches(t *testing.T, printed []string) {
	t.Helper()
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(bin), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(data), "export KUBECONFIG=$PWD/.splitlet/kubeconfig\n")
	if !ok {
		t.Fatal("README.md has no make run block starting with export KUBECONFIG=$PWD/.splitlet/kubeconfig")
	}
	block, _, _ = strings.Cut(block, "```")
	var readme []string
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		readme = append(readme, strings.TrimSpace(l))
	}
	if strings.Join(readme, "\n") != strings.Join(printed, "\n") {
		t.Errorf("README.md's make run commands differ from what localup prints:\nREADME:\n%s\nprinted:\n%s",
			strings.Join(readme, "\n"), strings.Join(printed, "\n"))
	}
}

// TestLocalUpInterrupt: Ctrl-C (SIGINT) stops make run's program cleanly,
// with exit status 0 and a last line that says everything is down, and the
// control plane it started no longer answers.
func TestLocalUpInterrupt(t *testing.T) {
	buildSplitlet(t)
	dir := t.TempDir()
	localup := filepath.Join(dir, "localup")
	if out, err := exec.Command("go", "build", "-o", localup, ".").CombinedOutput(); err != nil {
		t.Fatalf("build localup: %v\n%s", err, out)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	bin, _ := testenv.BinDir()
	cmd := exec.Command(localup, "--state-dir="+filepath.Join(dir, "state"), "--runtime=sim", fmt.Sprintf("--kubelet-port=%d", port))
	cmd.Env = append(os.Environ(), testenv.BinDirEnv+"="+bin)
	var out apptest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.After(3 * time.Minute)
	for !strings.Contains(out.String(), "Ctrl-C stops everything") {
		select {
		case <-exited:
			t.Fatalf("localup exited before it was up: %v\n%s", exitErr, out.String())
		case <-deadline:
			t.Fatalf("localup not up within 3 minutes:\n%s", out.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
	apiURL := regexp.MustCompile(`API server (https://\S+),`).FindStringSubmatch(out.String())
	if apiURL == nil {
		t.Fatalf("no API server URL in\n%s", out.String())
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if exitErr != nil {
			t.Fatalf("exit after Ctrl-C: %v (want status 0)\n%s", exitErr, out.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("localup still running a minute after SIGINT:\n%s", out.String())
	}
	text := strings.TrimSpace(out.String())
	if !strings.HasSuffix(text, "stopped: the control plane and splitlet are down") {
		t.Errorf("last line after Ctrl-C is not the stop message:\n%s", text)
	}
	if answers(apiURL[1]) {
		t.Errorf("the API server at %s still answers after localup stopped", apiURL[1])
	}
}

// answers says whether anything accepts connections at the URL's address.
func answers(url string) bool {
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "https://"), 2*time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// A run's own cgroup root is one per state directory, a single level under
// the host's root.
func TestKubeletCgroupRoot(t *testing.T) {
	a, err := runCgroupRoot("/work/main/.splitlet/node-conformance-kubelet")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := runCgroupRoot("/tmp/other/node-conformance-kubelet")
	again, _ := runCgroupRoot("/work/main/.splitlet/node-conformance-kubelet")
	if !strings.HasPrefix(a, "/localup-node-conformance-kubelet-") || a == b || a != again || strings.Count(a, "/") != 1 {
		t.Errorf("cgroup roots %q, %q, %q", a, b, again)
	}
	if odd, _ := runCgroupRoot("/tmp/a b.c"); !strings.HasPrefix(odd, "/localup-a_b_c-") {
		t.Errorf("cgroup root %q", odd)
	}
}

// The kubepods lock: a kubelet run holds it alone, Splitlet runs share
// it; a waiting run says so once and gives up when its context ends.
func TestLockKubepods(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubepods.lock")
	var out bytes.Buffer
	s1, err := lockKubepods(t.Context(), path, false, &out)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := lockKubepods(t.Context(), path, false, &out)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	if _, err := lockKubepods(ctx, path, true, &out); err == nil {
		t.Fatal("a kubelet run took the lock beside Splitlet runs")
	}
	if !strings.Contains(out.String(), "waiting for") || strings.Count(out.String(), "waiting for") != 1 {
		t.Errorf("output %q", out.String())
	}
	s1()
	s2()
	ex, err := lockKubepods(t.Context(), path, true, &out)
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel2()
	if _, err := lockKubepods(ctx2, path, false, &out); err == nil {
		t.Fatal("a Splitlet run took the lock beside a kubelet run")
	}
	ex()
	link := filepath.Join(t.TempDir(), "link.lock")
	if err := os.Symlink(filepath.Join(t.TempDir(), "target"), link); err != nil {
		t.Fatal(err)
	}
	if _, err := lockKubepods(t.Context(), link, false, &out); err == nil {
		t.Error("the lock was taken through a symbolic link")
	}
	if s3, err := lockKubepods(t.Context(), path, false, &out); err != nil {
		t.Fatal(err)
	} else {
		s3()
	}
}

// The e2e suite's runs get a cgroup root of their own per state
// directory; the node suite's keep the host's root (it checks /kubepods).
func TestConformanceCgroupRoot(t *testing.T) {
	for _, c := range []struct {
		suite, agent string
		own          bool
	}{{suiteE2E, agentSplitlet, true}, {suiteE2E, agentKubelet, true}, {suiteNodeE2E, agentSplitlet, false}, {suiteNodeE2E, agentKubelet, false}} {
		o, _, err := conformanceNode(options{stateDir: t.TempDir(), nodeAgent: c.agent}, conformanceOptions{suite: c.suite}, suiteOf(c.suite))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.HasPrefix(o.cgroupRoot, "/localup-"); got != c.own {
			t.Errorf("%s %s: cgroup root %q", c.suite, c.agent, o.cgroupRoot)
		}
	}
}
