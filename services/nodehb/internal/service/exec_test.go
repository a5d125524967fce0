package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// runtimeResponder answers exec and stats requests of every partition as a
// pod worker would: exec echoes its command (exit code 3 for "fail") and
// stdin; stats report the given pods, each from its own partition.
func runtimeResponder(t *testing.T, s *stack, pods []*corev1.Pod) {
	t.Helper()
	pub := bus.NewPublisher(s.nc, nil, s.node, "podworkers-test")
	var subs []*nats.Subscription
	sub, err := s.nc.Subscribe(bus.For(s.node).Prefix()+".runtime.exec.*", func(m *nats.Msg) {
		e, err := bus.Decode(m.Data)
		if err != nil {
			t.Errorf("decode exec request: %v", err)
			return
		}
		req, err := bus.DecodeExecRequest(e)
		if err != nil {
			t.Errorf("decode exec request: %v", err)
			return
		}
		res := &bus.ExecResult{Stdout: []byte(strings.Join(req.Command, " ") + "\n" + string(req.Stdin)), Stderr: []byte("to stderr\n")}
		if req.Command[0] == "fail" {
			res.ExitCode = 3
		}
		if err := pub.Send(m.Reply, bus.KindExecResult, res); err != nil {
			t.Errorf("exec reply: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	subs = append(subs, sub)
	sub, err = s.nc.Subscribe(bus.For(s.node).Prefix()+".runtime.stats.*", func(m *nats.Msg) {
		p, _ := bus.PartitionOf(m.Subject)
		res := &bus.StatsResult{}
		for _, pod := range pods {
			if bus.Partition(string(pod.UID), 4) != p {
				continue
			}
			res.Pods = append(res.Pods, bus.PodStats{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, StartTime: metav1.Now(),
				Containers: []bus.ContainerStats{{Name: "hello", StartTime: metav1.Now(), CPUUsageNanoCores: 1000000, CPUUsageCoreNanoSecs: 2000000000, MemoryWorkingSetBytes: 1 << 20}}})
		}
		if err := pub.Send(m.Reply, bus.KindStatsResult, res); err != nil {
			t.Errorf("stats reply: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	subs = append(subs, sub)
	t.Cleanup(func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	})
}

func TestExecRunAndStats(t *testing.T) {
	s := startStack(t, "exec-node")
	pod := createPod(t, s.cs, s.node, "exec-pod", nil)
	other := createPod(t, s.cs, s.node, "other-pod", nil)
	runtimeResponder(t, s, []*corev1.Pod{pod, other})
	eventually(t, 15*time.Second, "node registered", func() error {
		_, err := s.cs.CoreV1().Nodes().Get(t.Context(), s.node, metav1.GetOptions{})
		return err
	})

	// kubectl exec through the API server (SPDY to the kubelet API).
	var stdout, stderr bytes.Buffer
	exec := func(cmd []string, stdin string) error {
		stdout.Reset()
		stderr.Reset()
		req := s.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod.Name).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: "hello", Command: cmd, Stdin: stdin != "", Stdout: true, Stderr: true}, scheme.ParameterCodec)
		ex, err := remotecommand.NewSPDYExecutor(cp.Config, "POST", req.URL())
		if err != nil {
			return err
		}
		opts := remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}
		if stdin != "" {
			opts.Stdin = strings.NewReader(stdin)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return ex.StreamWithContext(ctx, opts)
	}
	eventually(t, 20*time.Second, "exec through the API server", func() error {
		return exec([]string{"echo", "hi"}, "")
	})
	if stdout.String() != "echo hi\n" || stderr.String() != "to stderr\n" {
		t.Errorf("exec stdout %q stderr %q", stdout.String(), stderr.String())
	}
	if err := exec([]string{"cat"}, "from stdin"); err != nil || stdout.String() != "cat\nfrom stdin" {
		t.Errorf("exec with stdin: %q %v", stdout.String(), err)
	}
	err := exec([]string{"fail"}, "")
	var exitErr interface{ ExitStatus() int }
	if !errors.As(err, &exitErr) || exitErr.ExitStatus() != 3 {
		t.Errorf("exec of a failing command: %v, want exit status 3", err)
	}

	// /run, /stats/summary and /metrics/resource on the kubelet API directly.
	base := fmt.Sprintf("https://127.0.0.1:%d", s.port)
	c := apiClient(t, nil)
	admin := cp.Tokens[testenv.AdminUser]
	req, _ := http.NewRequest(http.MethodPost, base+"/run/default/exec-pod/hello?cmd=ls+-l", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ls -l\nto stderr\n" {
		t.Errorf("/run: %d %q", resp.StatusCode, body)
	}
	code, sum := get(t, c, base+"/stats/summary", admin)
	if code != http.StatusOK {
		t.Fatalf("/stats/summary: %d %s", code, sum)
	}
	var summary struct {
		Node struct {
			NodeName string `json:"nodeName"`
			Memory   struct {
				WorkingSetBytes uint64 `json:"workingSetBytes"`
			} `json:"memory"`
		} `json:"node"`
		Pods []struct {
			PodRef struct{ Name, Namespace, UID string } `json:"podRef"`
		} `json:"pods"`
	}
	if err := json.Unmarshal([]byte(sum), &summary); err != nil {
		t.Fatal(err)
	}
	if summary.Node.NodeName != s.node || len(summary.Pods) != 2 || summary.Node.Memory.WorkingSetBytes != 2<<20 {
		t.Errorf("summary = %s", sum)
	}
	code, metrics := get(t, c, base+"/metrics/resource", admin)
	if code != http.StatusOK || !strings.Contains(metrics, `container_memory_working_set_bytes{container="hello",namespace="default",pod="exec-pod"} 1.048576e+06`) ||
		!strings.Contains(metrics, "node_cpu_usage_seconds_total 4") || !strings.Contains(metrics, "resource_scrape_error 0") {
		t.Errorf("/metrics/resource: %d\n%s", code, metrics)
	}
	if code, body := get(t, c, base+"/stats/summary", cp.Tokens[testenv.NobodyUser]); code != http.StatusForbidden {
		t.Errorf("nobody /stats/summary: %d %s", code, body)
	}
}

// streamResponder answers runtime.stream.<p> with res, as a pod worker on a
// runtime without a streaming server (or a failing one) would.
func streamResponder(t *testing.T, s *stack, res *bus.StreamResult) {
	t.Helper()
	pub := bus.NewPublisher(s.nc, nil, s.node, "podworkers-test")
	sub, err := s.nc.Subscribe(bus.For(s.node).Prefix()+".runtime.stream.*", func(m *nats.Msg) {
		e, err := bus.Decode(m.Data)
		if err == nil {
			_, err = bus.DecodeStreamRequest(e)
		}
		if err != nil {
			t.Errorf("decode stream request: %v", err)
			return
		}
		if err := pub.Send(m.Reply, bus.KindStreamResult, res); err != nil {
			t.Errorf("stream reply: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// The ways an exec goes when the runtime cannot stream: a pod worker that
// does not serve runtime.stream (nobody answers) or says its runtime cannot
// stream: the command runs over the bus, and a TTY is refused with the
// reason; a runtime that refuses the stream: its error, and nothing runs.
func TestExecWithoutStreamingRuntime(t *testing.T) {
	s := startStack(t, "exec-fallback-node")
	pod := createPod(t, s.cs, s.node, "fallback-pod", nil)
	runtimeResponder(t, s, []*corev1.Pod{pod})
	exec := func(tty bool) (string, error) {
		req := s.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod.Name).SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: "hello", Command: []string{"echo", "hi"}, Stdout: true, TTY: tty}, scheme.ParameterCodec)
		ex, err := remotecommand.NewSPDYExecutor(cp.Config, "POST", req.URL())
		if err != nil {
			return "", err
		}
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Tty: tty})
		return out.String(), err
	}
	eventually(t, 20*time.Second, "exec over the bus when nobody serves runtime.stream", func() error {
		out, err := exec(false)
		if err == nil && out != "echo hi\n" {
			err = fmt.Errorf("stdout %q", out)
		}
		return err
	})
	if _, err := exec(true); err == nil || !strings.Contains(err.Error(), "tty: not supported by this agent") {
		t.Errorf("exec -t with nobody serving runtime.stream: %v", err)
	}

	streamResponder(t, s, &bus.StreamResult{Unsupported: true, Error: "tty: not supported by the process runtime"})
	if out, err := exec(false); err != nil || out != "echo hi\n" {
		t.Errorf("exec on a runtime that cannot stream: %q %v", out, err)
	}
	if _, err := exec(true); err == nil || !strings.Contains(err.Error(), "tty: not supported by the process runtime") {
		t.Errorf("exec -t on a runtime that cannot stream: %v", err)
	}
}

// A runtime that refuses the stream: its error reaches the client, and the
// command is not run over the bus instead.
func TestExecStreamRefused(t *testing.T) {
	s := startStack(t, "exec-refused-node")
	pod := createPod(t, s.cs, s.node, "refused-pod", nil)
	var ran atomic.Bool
	sub, err := s.nc.Subscribe(bus.For(s.node).Prefix()+".runtime.exec.*", func(*nats.Msg) { ran.Store(true) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	streamResponder(t, s, &bus.StreamResult{Error: `cri: exec: container "hello" of pod x is not running`})
	req := s.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "hello", Command: []string{"sh"}, Stdin: true, Stdout: true, TTY: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cp.Config, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the runtime's refusal", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader(""), Stdout: io.Discard, Tty: true})
		if err == nil || !strings.Contains(err.Error(), "is not running") {
			return fmt.Errorf("exec: %v", err)
		}
		return nil
	})
	if ran.Load() {
		t.Error("the command ran over the bus after the runtime refused the stream")
	}
}

// execRecorder answers exec requests of every partition as a pod worker
// would, with "ran in <pod UID>", and records them.
func execRecorder(t *testing.T, s *stack) func() []*bus.ExecRequest {
	t.Helper()
	var mu sync.Mutex
	var got []*bus.ExecRequest
	pub := bus.NewPublisher(s.nc, nil, s.node, "podworkers-test")
	sub, err := s.nc.Subscribe(bus.For(s.node).Prefix()+".runtime.exec.*", func(m *nats.Msg) {
		e, err := bus.Decode(m.Data)
		var req *bus.ExecRequest
		if err == nil {
			req, err = bus.DecodeExecRequest(e)
		}
		if err != nil {
			t.Errorf("decode exec request: %v", err)
			return
		}
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		if err := pub.Send(m.Reply, bus.KindExecResult, &bus.ExecResult{Stdout: []byte("ran in " + string(req.PodUID))}); err != nil {
			t.Errorf("exec reply: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() []*bus.ExecRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]*bus.ExecRequest(nil), got...)
	}
}

// execThroughAPI runs `kubectl exec <pod> -c hello -- cmd` through the API
// server and returns its stdout.
func execThroughAPI(ctx context.Context, cs kubernetes.Interface, pod string, cmd ...string) (string, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "hello", Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cp.Config, "POST", req.URL())
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	return stdout.String(), err
}

// TestForgedMirrorAnnotationRefused: the kubelet API resolves a pod by
// namespace and name. A pod whose author set kubernetes.io/config.mirror to
// another pod's UID is a mirror pod of no static pod: exec, run and logs on
// it answer 404 (the kubelet's "does not exist"), and nothing reaches
// the bus for the other pod. Neither does a pod named as a static pod whose
// annotation is not that pod's UID. The mirror pod of a static pod of the
// same full name, with the static pod's UID, is served as the static pod.
func TestForgedMirrorAnnotationRefused(t *testing.T) {
	s := startStack(t, "forged-mirror-node")
	victim := createPod(t, s.cs, s.node, "victim", nil)
	forged := createPod(t, s.cs, s.node, "forged", map[string]string{"kubernetes.io/config.mirror": string(victim.UID)})
	mirror := createPod(t, s.cs, s.node, "static-db", map[string]string{"kubernetes.io/config.mirror": "static-uid-2"})
	wrongHash := createPod(t, s.cs, s.node, "static-old", map[string]string{"kubernetes.io/config.mirror": "static-uid-3"})
	s.announceStatic(t, bus.StaticPod{UID: "static-uid-2", Namespace: "default", Name: mirror.Name},
		bus.StaticPod{UID: "static-uid-4", Namespace: "default", Name: wrongHash.Name})
	execs := execRecorder(t, s)
	logs := logResponder(t, s, "the pod's log\n")
	ctx := t.Context()
	eventually(t, 15*time.Second, "node registered", func() error {
		_, err := s.cs.CoreV1().Nodes().Get(ctx, s.node, metav1.GetOptions{})
		return err
	})

	var out string
	eventually(t, 20*time.Second, "exec in the static pod's mirror", func() error {
		var err error
		out, err = execThroughAPI(ctx, s.cs, mirror.Name, "id")
		return err
	})
	if out != "ran in static-uid-2" {
		t.Errorf("exec in the mirror pod ran %q, want in static-uid-2", out)
	}
	if got, err := s.cs.CoreV1().Pods("default").GetLogs(mirror.Name, &corev1.PodLogOptions{Container: "hello"}).DoRaw(ctx); err != nil || string(got) != "the pod's log\n" {
		t.Errorf("logs of the mirror pod: %q, %v", got, err)
	}

	base := fmt.Sprintf("https://127.0.0.1:%d", s.port)
	admin := cp.Tokens[testenv.AdminUser]
	for _, p := range []*corev1.Pod{forged, wrongHash} {
		if out, err := execThroughAPI(ctx, s.cs, p.Name, "id"); err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("exec in %s: %q, %v; want refused: does not exist", p.Name, out, err)
		}
		// the API server passes the kubelet's 404 on as NotFound.
		if got, err := s.cs.CoreV1().Pods("default").GetLogs(p.Name, &corev1.PodLogOptions{Container: "hello"}).DoRaw(ctx); !apierrors.IsNotFound(err) {
			t.Errorf("logs of %s: %q, %v; want refused: not found", p.Name, got, err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/run/default/"+p.Name+"/hello?cmd=id", nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := apiClient(t, nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || string(body) != fmt.Sprintf("pod %q does not exist\n", p.Name) {
			t.Errorf("/run in %s: %d %q, want 404 pod does not exist", p.Name, resp.StatusCode, body)
		}
	}
	for _, r := range execs() {
		if r.PodUID != "static-uid-2" || r.Namespace != "default" || r.Pod != mirror.Name {
			t.Errorf("an exec request reached the bus for %s/%s (UID %s)", r.Namespace, r.Pod, r.PodUID)
		}
	}
	for _, r := range logs() {
		if r.PodUID != "static-uid-2" || r.Pod != mirror.Name {
			t.Errorf("a logs request reached the bus for %s/%s (UID %s)", r.Namespace, r.Pod, r.PodUID)
		}
	}
}
