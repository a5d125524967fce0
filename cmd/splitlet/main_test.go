package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/testenv"
)

// buildBinary builds splitlet into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "splitlet")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func get(url string) (int, string, error) {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), nil
}

// TestAllServicesAgainstControlPlane: splitlet --services=all with embedded
// NATS starts against a real API server, reports ready, serves metrics, and
// stops cleanly on SIGTERM within 5 s.
func TestAllServicesAgainstControlPlane(t *testing.T) {
	testenv.SkipShort(t, "etcd and kube-apiserver")
	bin := buildBinary(t)
	cp := testenv.ControlPlaneForTest(t)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	baseWatches, err := podWatches(cp)
	if err != nil {
		t.Fatal(err)
	}
	var logs apptest.Buffer
	cmd := exec.Command(bin, "--services=all", "--kubeconfig="+cp.Kubeconfig, "--node-name=test-node",
		"--data-dir="+t.TempDir(), "--http-addr="+addr)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	testenv.Eventually(t, 30*time.Second, "splitlet ready", func() (bool, string) {
		code, body, err := get("http://" + addr + "/readyz?verbose")
		if err == nil && code == http.StatusOK {
			for _, check := range []string{"nats", "kube-apiserver", "podconfig", "podworkers", "prober", "statussync", "nodehb"} {
				if !strings.Contains(body, "[+]"+check+" ok") {
					t.Fatalf("/readyz does not report %s ok:\n%s", check, body)
				}
			}
			return true, ""
		}
		select {
		case err := <-exited:
			t.Fatalf("splitlet exited before ready: %v\n%s", err, logs.String())
		default:
		}
		return false, fmt.Sprintf("%d %v %s\n%s", code, err, body, logs.String())
	})
	if code, _, err := get("http://" + addr + "/healthz"); err != nil || code != http.StatusOK {
		t.Fatalf("/healthz: %d %v", code, err)
	}
	if code, body, err := get("http://" + addr + "/metrics"); err != nil || code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	for _, svc := range []string{"podconfig", "podworkers", "prober", "statussync", "nodehb"} {
		if !strings.Contains(logs.String(), `"service":"`+svc+`"`) {
			t.Errorf("no log line from %s", svc)
		}
	}
	// podconfig and statussync, both watching the node's pods, share one
	// watch in one process (kube.NodePods).
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("one pod watch more on the API server than before splitlet started (%v)", baseWatches), func() (bool, string) {
		watches, err := podWatches(cp)
		return err == nil && watches == baseWatches+1, fmt.Sprintf("%v (%v)", watches, err)
	})

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("still running 5 s after SIGTERM\n%s", logs.String())
	}
	t.Logf("stopped in %v", time.Since(start))
	if !strings.Contains(logs.String(), "stopped cleanly") {
		t.Fatalf("no clean stop in the log:\n%s", logs.String())
	}
}

// podWatches reads from the API server's metrics how many watches of pods
// are open.
func podWatches(cp *testenv.ControlPlane) (float64, error) {
	raw, err := cp.Clientset().CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		return 0, err
	}
	var n float64
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "apiserver_longrunning_requests{") && strings.Contains(line, `resource="pods"`) &&
			strings.Contains(line, `verb="WATCH"`) && strings.Contains(line, `subresource=""`) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
				return 0, fmt.Errorf("metric line %q: %w", line, err)
			}
			n += v
		}
	}
	return n, nil
}

// TestBadFlagsExitNonZero: a bad value exits 2 with a message naming it.
// The process's code runs in the test (main adds nothing to it): no binary
// to build.
func TestBadFlagsExitNonZero(t *testing.T) {
	cases := []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--runtime=docker"}, "", "--runtime"},
		{[]string{"--services=podconfig,nope"}, "", `"nope" for services`},
		{[]string{"--node-name=Not_A_Node"}, "", "node-name"},
		{[]string{"--partitions=0"}, "", "partitions"},
		{[]string{"--no-such-flag"}, "", "no-such-flag"},
		{nil, "SPLITLET_LOG_LEVEL=loud", "SPLITLET_LOG_LEVEL"},
		// The node's certificate has one writer, the process of nodehb.
		{[]string{"--services=podworkers", "--bootstrap-kubeconfig=/nonexistent"}, "", "bootstrap-kubeconfig: only the process that runs nodehb"},
		{[]string{"--rotate-certificates"}, "", "rotate-certificates needs bootstrap-kubeconfig"},
		{[]string{"--nodehb.rotate-server-certificates", "--nodehb.tls-cert-file=/a", "--nodehb.tls-private-key-file=/b"}, "", "nodehb.rotate-server-certificates and nodehb.tls-cert-file"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " ")+c.env, func(t *testing.T) {
			if key, value, ok := strings.Cut(c.env, "="); ok {
				t.Setenv(key, value)
			}
			code, out := apptest.RunBad("splitlet", c.args, Services()...)
			if code != 2 {
				t.Fatalf("want exit code 2, got %d\n%s", code, out)
			}
			if !strings.Contains(out, c.want) {
				t.Fatalf("message does not name %q:\n%s", c.want, out)
			}
		})
	}
}

// TestHelpDocumentsEveryFlag: --help exits 0 and lists the common flags.
func TestHelpDocumentsEveryFlag(t *testing.T) {
	code, out := apptest.RunBad("splitlet", []string{"--help"}, Services()...)
	if code != 0 {
		t.Fatalf("--help: exit code %d\n%s", code, out)
	}
	for _, f := range []string{"--services", "--kubeconfig", "--node-name", "--nats-url", "--runtime", "--data-dir", "--config", "--http-addr", "--kube-api-qps"} {
		if !strings.Contains(out, f) {
			t.Errorf("--help does not document %s", f)
		}
	}
}
