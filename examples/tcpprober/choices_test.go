package tcpprober_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/splitlet/splitlet/examples/tcpprober"
	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// TestDocumentedChoices: what tcpprober does instead of the kubelet for the
// handlers it does not run (docs/experiments.md): an httpGet probe is a TCP
// connect, so a server answering 500 is Success; exec and grpc are Unknown
// with a message that says why.
func TestDocumentedChoices(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())

	n := testenv.NATSForTest(t)
	const node = "tcpprober-choices"
	apptest.Start(t, "tcpprober", []string{"--nats-url=" + n.URL, "--node-name=" + node, "--partitions=1"}, tcpprober.Service())
	nc, js := n.Connect(t)
	subjects := bus.For(node)
	got := make(chan *bus.ProbeResult, 64)
	sub, err := nc.Subscribe(subjects.ProbeResultsAll(), func(m *nats.Msg) {
		if e, err := bus.Decode(m.Data); err == nil {
			if r, err := bus.DecodeProbeResult(e); err == nil {
				got <- r
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	probe := func(h corev1.ProbeHandler) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: h, PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1}
	}
	pod := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "choices", Namespace: "default", UID: "choices-uid"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{
			{Name: "http", ReadinessProbe: probe(corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt(port)}})},
			{Name: "exec", ReadinessProbe: probe(corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}})},
			{Name: "grpc", ReadinessProbe: probe(corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: int32(port)}})},
		}},
	}
	now := metav1.Now()
	st := &bus.PodRuntimeStatus{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, PodIP: "127.0.0.1"}
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, ContainerID: "sim://" + c.Name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	api := bus.NewPublisher(nc, js, node, "api")
	if err := api.Publish(ctx, subjects.PodUpdates(0), bus.KindPodUpdate, bus.OpAdd, &bus.PodUpdate{Pods: []corev1.Pod{pod}}); err != nil {
		t.Fatal(err)
	}
	workers := bus.NewPublisher(nc, js, node, "podworkers-test")
	if err := workers.Publish(ctx, subjects.PodStatus(0), bus.KindPodRuntimeStatus, "", st); err != nil {
		t.Fatal(err)
	}

	want := map[string]bus.ProbeOutcome{"http": bus.ProbeSuccess, "exec": bus.ProbeUnknown, "grpc": bus.ProbeUnknown}
	deadline := time.After(20 * time.Second)
	for len(want) > 0 {
		select {
		case r := <-got:
			if w, ok := want[r.Container]; ok && r.Result == w {
				if w == bus.ProbeUnknown && !strings.Contains(r.Message, "does not run "+r.Container+" probes") {
					t.Errorf("%s: Unknown with message %q, want one saying tcpprober does not run them", r.Container, r.Message)
				}
				delete(want, r.Container)
			}
		case <-deadline:
			t.Fatalf("no results within 20 s for %v", want)
		}
	}
}
