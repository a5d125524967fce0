package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/splitlet/splitlet/libs/recording"
	"github.com/splitlet/splitlet/libs/testenv"
)

// TestRecordReplayDiff is docs/experiments.md's A/B loop: a node runs a
// pod with a tcpSocket and an httpGet readiness probe (the HTTP server
// answers 500); `splitlet bus record` takes the prober's inputs; `bus
// replay` feeds them, each time on a private server, to two versions of
// examples/tcpprober: A checks httpGet probes with a GET
// (--tcpprober.http-get=get), B as a TCP connect (the default: the
// planted behaviour change); `bus diff` must find exactly that: the
// httpGet probe's results differ, the tcpSocket probe's do not.
func TestRecordReplayDiff(t *testing.T) {
	testenv.SkipShort(t, "etcd and kube-apiserver")
	const node = "rec-node"
	bin := buildBinary(t)
	tcpprober := filepath.Join(t.TempDir(), "tcpprober")
	if out, err := exec.Command("go", "build", "-o", tcpprober, "github.com/splitlet/splitlet/examples/tcpprober/cmd/tcpprober").CombinedOutput(); err != nil {
		t.Fatalf("go build tcpprober: %v\n%s", err, out)
	}
	tcpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcpLn.Close()
	go func() {
		for {
			c, err := tcpLn.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })}
	go func() { _ = srv.Serve(httpLn) }()
	defer srv.Close()

	cp := testenv.ControlPlaneForTest(t)
	natsPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	startSplitlet(t, bin, cp, node, "splitlet", "--services=all", "--runtime=sim", fmt.Sprintf("--nats-listen=127.0.0.1:%d", natsPort))
	liveURL := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	cs := cp.Clientset()
	ctx := t.Context()
	waitNodeReady(t, cs, node)
	probe := func(h corev1.ProbeHandler) *corev1.Probe { return &corev1.Probe{ProbeHandler: h, PeriodSeconds: 1} }
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ab", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr(int64(1)), Containers: []corev1.Container{
			{Name: "tcp", Image: "busybox", ReadinessProbe: probe(corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{
				Port: intstr.FromInt(tcpLn.Addr().(*net.TCPAddr).Port)}})},
			{Name: "http", Image: "busybox", ReadinessProbe: probe(corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromInt(httpLn.Addr().(*net.TCPAddr).Port)}})},
		}},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "tcp Ready, http not (its server answers 500)", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := map[string]bool{}
		for _, c := range p.Status.ContainerStatuses {
			ready[c.Name] = c.Ready
		}
		return p.Status.Phase == corev1.PodRunning && ready["tcp"] && !ready["http"] && len(ready) == 2, fmt.Sprint(p.Status.Phase, ready)
	})

	dir := t.TempDir()
	rec := filepath.Join(dir, "prober-inputs.jsonl")
	if out, err := exec.Command(bin, "bus", "record", "--node-name", node, "--nats-url", liveURL, "--stage", "prober", "--since", "5m", "--out", rec).CombinedOutput(); err != nil {
		t.Fatalf("bus record: %v\n%s", err, out)
	}
	entries := readEntries(t, rec)
	if len(entries) == 0 {
		t.Fatal("the recording is empty")
	}
	for _, e := range entries {
		if e.Stream != "podupdates" && e.Stream != "podstatus" {
			t.Errorf("the prober's inputs hold a message of stream %s (%s)", e.Stream, e.Subject)
		}
	}

	// One replay per implementation, each on a private server of its own.
	replay := func(name string, start func(url string)) string {
		t.Helper()
		ns := testenv.NATSForTest(t)
		url := ns.URL
		start(url)
		out := filepath.Join(dir, name+".jsonl")
		if b, err := exec.Command(bin, "bus", "replay", "--node-name", node, "--nats-url", url, "--in", rec, "--stage", "prober",
			"--pace", "fast", "--settle", "6s", "--out", out).CombinedOutput(); err != nil {
			t.Fatalf("bus replay to %s: %v\n%s", name, err, b)
		}
		if len(readEntries(t, out)) == 0 {
			t.Fatalf("%s published nothing during the replay", name)
		}
		return out
	}
	tcpproberOn := func(url string, args ...string) {
		startProcess(t, tcpprober, "tcpprober", append([]string{"--kubeconfig=" + cp.Kubeconfig, "--node-name=" + node,
			"--data-dir=" + t.TempDir(), "--http-addr=127.0.0.1:0", "--nats-url=" + url}, args...)...)
	}
	a := replay("get", func(url string) { tcpproberOn(url, "--tcpprober.http-get=get") })
	b := replay("tcp", func(url string) { tcpproberOn(url) })

	same, err := exec.Command(bin, "bus", "diff", a, a).CombinedOutput()
	if err != nil || !strings.Contains(string(same), "0 of 2 pods/probes differ") {
		t.Errorf("bus diff of a run with itself: %v\n%s", err, same)
	}
	out, err := exec.Command(bin, "bus", "diff", a, b).CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.ExitCode() != 1 {
		t.Fatalf("bus diff of two versions of the prober: %v (want exit 1)\n%s", err, out)
	}
	t.Logf("bus diff get tcp:\n%s", out)
	report := string(out)
	if !strings.Contains(report, "1 of 2 pods/probes differ") || !strings.Contains(report, "container=http") || strings.Contains(report, "container=tcp ") {
		t.Errorf("bus diff should find the httpGet probe alone:\n%s", report)
	}
}

func readEntries(t *testing.T, path string) []recording.Entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries, err := recording.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	return entries
}
