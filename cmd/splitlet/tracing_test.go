package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/libs/tracing/tracingtest"
)

// TestTracePodAcrossStages: with tracing-endpoint set, one pod's start is
// one trace with spans of podconfig, the pod workers (their sync and the
// runtime's StartContainer), the prober and statussync, and the API
// server's own span of the status patch hangs under statussync's (the
// control plane traces too, as a kubelet's does with KEP-2831). A `kubectl
// logs` whose request carries a trace continues through the API server to
// nodehb's kubelet API and on to the pod workers' logs request. Spans reach
// a real OTLP collector: HTTP from the agent, gRPC from kube-apiserver.
func TestTracePodAcrossStages(t *testing.T) {
	col := tracingtest.ForTest(t)
	cfgFile := filepath.Join(t.TempDir(), "apiserver-tracing.yaml")
	// samplingRatePerMillion 0: the API server traces only requests that
	// come with a sampled parent (the agent's patches, the test's logs call).
	if err := os.WriteFile(cfgFile, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\nendpoint: "+
		col.GRPCAddr+"\nsamplingRatePerMillion: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cp := testenv.ControlPlaneForTest(t, testenv.ControlPlaneOptions{APIServerArgs: []string{"--tracing-config-file=" + cfgFile}})
	const node = "trace-node"
	kubeletPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	startAgent(t, cp, node, "--runtime=process", "--tracing-endpoint="+col.URL, fmt.Sprintf("--nodehb.port=%d", kubeletPort))
	cs := cp.Clientset()
	ctx := t.Context()
	waitNodeReady(t, cs, node)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "traced", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr(int64(2)),
			Containers: []corev1.Container{{
				Name:    "app",
				Image:   "busybox",
				Command: []string{"sh", "-c", `echo started; while true; do sleep 1; done`},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-d", "/"}}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
	created, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uid := string(created.UID)
	testenv.Eventually(t, 60*time.Second, "pod Ready", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "traced", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return podCondition(p, corev1.PodReady) == corev1.ConditionTrue, string(podCondition(p, corev1.PodReady))
	})

	// The start trace: podconfig's span of the ADD is its root.
	var start string
	testenv.Eventually(t, 30*time.Second, "one trace of the pod's start across the stages", func() (bool, string) {
		spans := col.Spans()
		start = ""
		for _, s := range spans {
			if s.Name == "podconfig add" && s.Attrs["k8s.pod.uid"] == uid {
				start = s.TraceID
			}
		}
		if start == "" {
			return false, "no podconfig add span for the pod; spans: " + names(spans, "")
		}
		byID := map[string]tracingtest.Span{}
		for _, s := range spans {
			if s.TraceID == start {
				byID[s.SpanID] = s
			}
		}
		for _, want := range []string{"podconfig add", "podworkers sync", "runtime StartContainer", "prober Readiness Success", "statussync sync"} {
			if !hasSpan(byID, func(s tracingtest.Span) bool { return s.Name == want }) {
				return false, "missing " + want + "; trace: " + names(spans, start)
			}
		}
		// The API server's span of a status patch, under statussync's sync.
		patched := hasSpan(byID, func(s tracingtest.Span) bool {
			if s.Service != "apiserver" || !strings.Contains(s.Name, "PATCH") && !strings.Contains(s.Attrs["http.request.method"]+s.Attrs["http.method"], "PATCH") {
				return false
			}
			for p := byID[s.ParentID]; p.SpanID != ""; p = byID[p.ParentID] {
				if p.Name == "statussync sync" {
					return true
				}
			}
			return false
		})
		if !patched {
			return false, "no API server PATCH span under statussync sync; trace: " + names(spans, start)
		}
		// Each stage's spans of the pod carry the pod's identity.
		for _, s := range byID {
			if s.Service == "splitlet" && s.Attrs["splitlet.stage"] != "" && s.Attrs["k8s.pod.uid"] != uid {
				return false, fmt.Sprintf("span %s of stage %s names pod %q", s.Name, s.Attrs["splitlet.stage"], s.Attrs["k8s.pod.uid"])
			}
		}
		return true, ""
	})

	// A logs request to the kubelet API that carries a trace context goes
	// on through nodehb to the pod workers' logs request. (kube-apiserver
	// v1.36 does not pass the context on when it proxies logs, so the
	// request comes straight to the kubelet API here, as from a client
	// that traces.)
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(ctx) }()
	lctx, span := tp.Tracer("test").Start(ctx, "test logs")
	logsTrace := span.SpanContext().TraceID().String()
	req, err := http.NewRequestWithContext(lctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/containerLogs/default/traced/app", kubeletPort), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+cp.Tokens[testenv.AdminUser])
	propagation.TraceContext{}.Inject(lctx, propagation.HeaderCarrier(req.Header))
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	span.End()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "started") {
		t.Fatalf("kubelet API logs: %d %q", resp.StatusCode, body)
	}
	testenv.Eventually(t, 30*time.Second, "the logs request traced through nodehb to the pod workers", func() (bool, string) {
		spans := col.Spans()
		var nodehb, workers bool
		for _, s := range spans {
			if s.TraceID != logsTrace {
				continue
			}
			nodehb = nodehb || strings.HasPrefix(s.Name, "nodehb ")
			workers = workers || s.Name == "podworkers logs"
		}
		return nodehb && workers, fmt.Sprintf("nodehb %v podworkers %v; trace: %s", nodehb, workers, names(spans, logsTrace))
	})
}

func hasSpan(spans map[string]tracingtest.Span, f func(tracingtest.Span) bool) bool {
	for _, s := range spans {
		if f(s) {
			return true
		}
	}
	return false
}

// names lists the spans of a trace (all spans when trace is empty).
func names(spans []tracingtest.Span, traceID string) string {
	var out []string
	for _, s := range spans {
		if traceID == "" || s.TraceID == traceID {
			out = append(out, s.Service+":"+s.Name)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
