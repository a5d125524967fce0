package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/testenv"
)

// startAgent runs splitlet --services=all against the control plane and
// stops it (SIGTERM) when the test ends.
func startAgent(t *testing.T, cp *testenv.ControlPlane, node string, args ...string) *apptest.Buffer {
	t.Helper()
	return startSplitlet(t, buildBinary(t), cp, node, "splitlet", append([]string{"--services=all"}, args...)...)
}

// hostContainerd is the containerd the CRI tests share (the host's, or one
// started for them), stopped with the test if started for it.
func hostContainerd(t *testing.T) *testenv.Containerd {
	t.Helper()
	cd, err := testenv.EnsureContainerd(t.Context(), testenv.ContainerdOptions{})
	if err != nil {
		t.Fatalf("--runtime=cri needs a containerd: %v", err)
	}
	t.Cleanup(cd.Stop)
	return cd
}

// startSplitlet runs bin (splitlet) for node against the control plane,
// with its own data dir, health and kubelet ports, and stops it (SIGTERM,
// then SIGKILL after 15 s) when the test ends, printing its log if the
// test failed.
func startSplitlet(t *testing.T, bin string, cp *testenv.ControlPlane, node, name string, args ...string) *apptest.Buffer {
	t.Helper()
	kubeletPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return startProcess(t, bin, name, append([]string{"--kubeconfig=" + cp.Kubeconfig, "--node-name=" + node,
		"--data-dir=" + testenv.DataDir(t), "--http-addr=127.0.0.1:0",
		fmt.Sprintf("--nodehb.port=%d", kubeletPort), "--nodehb.client-ca-file=" + cp.CAFile}, args...)...)
}

// startProcess runs bin with args and stops it (SIGTERM, then SIGKILL
// after 15 s) when the test ends, printing its log if the test failed.
func startProcess(t *testing.T, bin, name string, args ...string) *apptest.Buffer {
	t.Helper()
	logs := &apptest.Buffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, tail(logs.String(), 8000))
		}
	})
	return logs
}

// waitNodeReady waits for the Node's Ready condition.
func waitNodeReady(t *testing.T, cs kubernetes.Interface, node string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "node Ready", func() (bool, string) {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, c.Reason + ": " + c.Message
			}
		}
		return false, "no Ready condition"
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func podCondition(p *corev1.Pod, c corev1.PodConditionType) corev1.ConditionStatus {
	for _, cond := range p.Status.Conditions {
		if cond.Type == c {
			return cond.Status
		}
	}
	return ""
}

// TestEndToEndProcessPod: with every stage in one process on the process
// runtime, a pod bound to the node behaves as under a kubelet: the Node is
// Ready, the pod gets Running and Ready (readiness probe), `kubectl logs`
// through the API server returns its output, a liveness failure restarts it,
// and `kubectl delete pod` finishes.
func TestEndToEndProcessPod(t *testing.T) {
	cp := testenv.ControlPlaneForTest(t)
	const node = "e2e-node"
	httpPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	startAgent(t, cp, node, "--runtime=process", fmt.Sprintf("--http-addr=127.0.0.1:%d", httpPort))
	cs := cp.Clientset()
	ctx := t.Context()
	waitNodeReady(t, cs, node)

	// the container runs as a uid of its own (podworkers.process-uid-range):
	// the directory it writes its marks to is open to it.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr(int64(5)),
			Containers: []corev1.Container{{
				Name:    "hello",
				Image:   "busybox",
				Command: []string{"sh", "-c", fmt.Sprintf(`touch %[1]s/ready; i=0; while true; do echo "hello $i"; i=$((i+1)); sleep 1; done`, dir)},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", dir + "/ready"}}},
					PeriodSeconds: 1,
				},
				LivenessProbe: &corev1.Probe{
					ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "!", "-f", dir + "/kill"}}},
					PeriodSeconds:    1,
					FailureThreshold: 1,
				},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "pod Running and Ready", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning && podCondition(p, corev1.PodReady) == corev1.ConditionTrue &&
				podCondition(p, corev1.PodScheduled) == corev1.ConditionTrue, // kubelet: set even with no scheduler
			fmt.Sprintf("phase %s ready %s scheduled %s", p.Status.Phase, podCondition(p, corev1.PodReady), podCondition(p, corev1.PodScheduled))
	})

	testenv.Eventually(t, 30*time.Second, "kubectl logs", func() (bool, string) {
		out, err := logsOf(ctx, cs, "hello", &corev1.PodLogOptions{Container: "hello"})
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(out, "hello 1"), out
	})

	// No terminal on the process runtime: the runtime's reason, as before.
	if _, err := execTTY(ctx, cp, "default", "hello", "hello", []string{"sh"}, "exit\n", remotecommand.TerminalSize{Width: 80, Height: 24}); err == nil ||
		!strings.Contains(err.Error(), "tty: not supported by the process runtime") {
		t.Errorf("exec -it on the process runtime: %v, want tty: not supported by the process runtime", err)
	}
	if _, err := attachTTY(ctx, cp, "default", "hello", "hello", "", "never shown"); err == nil ||
		!strings.Contains(err.Error(), "attach: not supported by the process runtime") {
		t.Errorf("attach on the process runtime: %v, want attach: not supported by the process runtime", err)
	}

	// Readiness flips: the file goes, Ready goes False.
	if err := exec.Command("rm", dir+"/ready").Run(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "pod not Ready", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return podCondition(p, corev1.PodReady) == corev1.ConditionFalse, string(podCondition(p, corev1.PodReady))
	})

	// Liveness fails: the container restarts and its restart count goes up.
	if err := exec.Command("touch", dir+"/kill").Run(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "restart after liveness failure", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, fmt.Sprint(err)
		}
		return p.Status.ContainerStatuses[0].RestartCount >= 1, fmt.Sprint(p.Status.ContainerStatuses[0].RestartCount)
	})
	if err := exec.Command("rm", dir+"/kill").Run(); err != nil {
		t.Fatal(err)
	}

	// An ephemeral container (kubectl debug): started once, shown in
	// ephemeralContainerStatuses, its logs served, the pod not restarted.
	live, err := cs.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restarts := live.Status.ContainerStatuses[0].RestartCount
	live.Spec.EphemeralContainers = append(live.Spec.EphemeralContainers, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger", Image: "busybox",
			Command: []string{"sh", "-c", "echo debugging; sleep 3600"}}})
	if _, err := cs.CoreV1().Pods("default").UpdateEphemeralContainers(ctx, "hello", live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the ephemeral container running", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
		if err != nil || len(p.Status.EphemeralContainerStatuses) == 0 {
			return false, fmt.Sprint(err)
		}
		ec := p.Status.EphemeralContainerStatuses[0]
		return ec.Name == "debugger" && ec.State.Running != nil, fmt.Sprintf("%+v", ec.State)
	})
	testenv.Eventually(t, 30*time.Second, "the ephemeral container's logs", func() (bool, string) {
		out, err := logsOf(ctx, cs, "hello", &corev1.PodLogOptions{Container: "debugger"})
		return err == nil && strings.TrimSpace(out) == "debugging", fmt.Sprint(out, err)
	})
	if p, _ := cs.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{}); p.Status.ContainerStatuses[0].RestartCount != restarts {
		t.Errorf("adding an ephemeral container restarted the pod's container: %+v", p.Status.ContainerStatuses[0])
	}

	// The kubelet's metrics, under its names and labels.
	testenv.Eventually(t, 30*time.Second, "the kubelet's metrics", func() (bool, string) {
		code, body, err := get(fmt.Sprintf("http://127.0.0.1:%d/metrics", httpPort))
		if err != nil || code != http.StatusOK {
			return false, fmt.Sprint(code, err)
		}
		for _, want := range []struct {
			series string
			min    float64
		}{
			{`kubelet_node_name{node="` + node + `"}`, 1},
			{"kubelet_running_pods", 1},
			{`kubelet_running_containers{container_state="running"}`, 1},
			{`kubelet_started_containers_total{container_type="container"}`, 2}, // the restart too
			{`kubelet_pod_worker_duration_seconds_count{operation_type="sync"}`, 1},
			{`prober_probe_total{container="hello",namespace="default",pod="hello",pod_uid=`, 1},
			{"kubelet_pod_start_duration_seconds_count", 1},
			{"kubelet_pod_start_total_duration_seconds_count", 1},
			{"kubelet_pod_start_sli_duration_seconds_count", 1},
			{`splitlet_pod_stage_duration_seconds_count{stage="podconfig"}`, 1},
			{`splitlet_pod_stage_duration_seconds_count{stage="podworkers"}`, 1},
			{`splitlet_pod_stage_duration_seconds_count{stage="statussync"}`, 1},
			{`splitlet_bus_delivery_seconds_count{stream="podupdates"}`, 1},
			{`splitlet_bus_delivery_seconds_count{stream="podstatus"}`, 1},
		} {
			if v, ok := metricValue(body, want.series); !ok || v < want.min {
				return false, fmt.Sprintf("%s = %v (present %v), want at least %v", want.series, v, ok, want.min)
			}
		}
		return true, ""
	})

	// A crash-looping container: the kubelet's Events, on the container.
	crash := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "crash", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{Name: "crash", Image: "busybox", Command: []string{"sh", "-c", "exit 1"}}}},
	}
	crash, err = cs.CoreV1().Pods("default").Create(ctx, crash, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitEvents(t, cs, "crash", []wantEvent{
		{corev1.EventTypeNormal, "Created", "spec.containers{crash}", "Container created"},
		{corev1.EventTypeNormal, "Started", "spec.containers{crash}", "Container started"},
		{corev1.EventTypeWarning, "BackOff", "spec.containers{crash}", fmt.Sprintf("Back-off restarting failed container crash in pod crash_default(%s)", crash.UID)},
	})

	for _, name := range []string{"hello", "crash"} {
		if err := cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 60*time.Second, "pods gone after delete", func() (bool, string) {
		_, err := cs.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
		_, err2 := cs.CoreV1().Pods("default").Get(ctx, "crash", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(err2), fmt.Sprint(err, err2)
	})
	waitEvents(t, cs, "hello", []wantEvent{
		{corev1.EventTypeNormal, "Created", "spec.containers{hello}", "Container created"},
		{corev1.EventTypeNormal, "Killing", "spec.containers{hello}", "Container hello failed liveness probe, will be restarted"},
		{corev1.EventTypeNormal, "Killing", "spec.containers{hello}", "Stopping container hello"},
	})
}

// wantEvent is an Event a test waits for on a pod.
type wantEvent struct{ eventType, reason, fieldPath, message string }

// waitEvents waits until the pod's Events include every one of want.
func waitEvents(t *testing.T, cs kubernetes.Interface, pod string, want []wantEvent) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "the Events of pod "+pod, func() (bool, string) {
		list, err := cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			seen = append(seen, fmt.Sprintf("%s %s %s %q", e.Type, e.Reason, e.InvolvedObject.FieldPath, e.Message))
		}
		for _, w := range want {
			found := false
			for _, e := range list.Items {
				found = found || (e.Type == w.eventType && e.Reason == w.reason && e.InvolvedObject.FieldPath == w.fieldPath && e.Message == w.message)
			}
			if !found {
				return false, fmt.Sprintf("no %+v among %s", w, strings.Join(seen, "; "))
			}
		}
		return true, ""
	})
}

// metricValue sums the values of the series in a /metrics text body whose
// line starts with series (a name, or a name with its first labels).
func metricValue(body, series string) (float64, bool) {
	sum, found := 0.0, false
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, series) {
			continue
		}
		partial := strings.Contains(series, "{") && !strings.HasSuffix(series, "}")
		if rest := line[len(series):]; !partial && (rest == "" || (rest[0] != ' ' && rest[0] != '{')) {
			continue // another metric whose name starts the same
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		sum, found = sum+v, true
	}
	return sum, found
}

func logsOf(ctx context.Context, cs kubernetes.Interface, name string, opts *corev1.PodLogOptions) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	data, err := cs.CoreV1().Pods("default").GetLogs(name, opts).DoRaw(ctx)
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSpace(data)), nil
}

func ptr[T any](v T) *T { return &v }
