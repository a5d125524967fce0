package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/libs/tracing"
	"github.com/splitlet/splitlet/services/prober/internal/service"
)

// Unhealthy Events reach the real API server with the kubelet's reason,
// message, source and container field path, built by the constructor the
// binaries use.
func TestUnhealthyEventInAPIServer(t *testing.T) {
	t.Parallel()
	cp := testenv.ControlPlaneForTest(t)
	cs := cp.Clientset()
	e := newEnvWith(t, func(d service.Deps) (*service.Runner, error) {
		return service.New(d.Config, d.Common, d.Log, d.NC, d.JS, cs, d.Registerer, d.Metrics, tracing.Noop())
	})
	lp := execProbe("check")
	lp.FailureThreshold = 1
	want := newPod("events", nil, lp, nil)
	want.UID = ""
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	pod, err := cs.CoreV1().Pods("default").Create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.onExec(pod.UID, func(*bus.ExecRequest) *bus.ExecResult { return &bus.ExecResult{Stdout: []byte("boom"), ExitCode: 1} })
	e.publishPods(bus.OpAdd, pod)
	e.publishStatus(running(pod, "sim://ev1", time.Now()))
	e.waitResult(pod.UID, bus.ProbeLiveness, bus.ProbeFailure, "sim://ev1", 10*time.Second)

	var found *corev1.Event
	e.eventually("an Unhealthy Event in the API server", 20*time.Second, func() bool {
		list, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(pod.UID)})
		if err != nil {
			t.Logf("list events: %v", err)
			return false
		}
		for i := range list.Items {
			if list.Items[i].Reason == "Unhealthy" {
				found = &list.Items[i]
				return true
			}
		}
		return false
	})
	if found.Message != "Liveness probe failed: boom" || found.Type != corev1.EventTypeWarning ||
		found.Source.Component != "kubelet" || found.Source.Host != node ||
		found.InvolvedObject.Kind != "Pod" || found.InvolvedObject.Name != "events" ||
		!strings.Contains(found.InvolvedObject.FieldPath, "spec.containers{app}") {
		t.Errorf("event %+v", found)
	}
}
