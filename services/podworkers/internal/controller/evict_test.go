package controller

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/services/podworkers/internal/fakeruntime"
)

// TestEvictOnce: an eviction stores the Failed status before anything
// else, records one Event, and stops the pod with that status; a second
// request is answered already and does nothing; a failed store evicts
// nothing and leaves the pod to a later request; a critical pod is refused.
func TestEvictOnce(t *testing.T) {
	s := newSink()
	rec := record.NewFakeRecorder(100)
	c := startWith(t, fakeruntime.New(), s, "cpu=4,pods=10", func(cfg *Config) { cfg.Recorder = rec })
	c.SetSourcesReady(true)
	p, crit := pod("e", ""), pod("crit", "")
	prio := int32(2000000000)
	crit.Spec.Priority = &prio
	c.HandleUpdate("api", bus.OpAdd, 0, []corev1.Pod{p, crit})
	eventually(t, "running", func() bool { return isRunning(s.get("e")) && isRunning(s.get("crit")) })

	ev := Eviction{UID: "e", Reason: "Evicted", Message: "The node was low on resource: memory. ", GracePeriod: 1, DisruptionTarget: true}
	failing := func(context.Context, *bus.PodRuntimeStatus) error { return errors.New("stream unavailable") }
	if _, err := c.Evict(t.Context(), ev, failing); err == nil {
		t.Fatal("an eviction whose status was not stored went ahead")
	}
	if len(rec.Events) != 0 || !isRunning(s.get("e")) {
		t.Fatal("a failed store evicted the pod")
	}
	var stored []*bus.PodRuntimeStatus
	store := func(_ context.Context, st *bus.PodRuntimeStatus) error {
		stored = append(stored, st)
		return nil
	}
	if already, err := c.Evict(t.Context(), ev, store); err != nil || already {
		t.Fatalf("eviction: already %v, %v", already, err)
	}
	if len(stored) != 1 || stored[0].Phase != corev1.PodFailed || stored[0].Reason != "Evicted" || stored[0].Message != ev.Message {
		t.Fatalf("stored %+v", stored)
	}
	disrupted := func(st *bus.PodRuntimeStatus) bool {
		return len(st.Conditions) == 1 && st.Conditions[0].Type == corev1.DisruptionTarget && st.Conditions[0].Status == corev1.ConditionTrue &&
			st.Conditions[0].Reason == "TerminationByKubelet" && st.Conditions[0].Message == ev.Message
	}
	if !disrupted(stored[0]) {
		t.Fatalf("stored conditions %+v, want DisruptionTarget", stored[0].Conditions)
	}
	second := ev
	second.Message = "another message"
	if already, err := c.Evict(t.Context(), second, store); err != nil || !already {
		t.Fatalf("second eviction: already %v, %v", already, err)
	}
	eventually(t, "terminated, Failed/Evicted", func() bool {
		st := s.get("e")
		return st.Terminated && st.Phase == corev1.PodFailed && st.Reason == "Evicted" && st.Message == ev.Message && disrupted(st)
	})
	if len(stored) != 1 || len(rec.Events) != 1 {
		t.Fatalf("stored %d statuses, %d events; want 1 each", len(stored), len(rec.Events))
	}
	if e := <-rec.Events; !strings.HasPrefix(e, "Warning Evicted The node was low on resource: memory.") {
		t.Fatalf("event %q", e)
	}
	if _, err := c.Evict(t.Context(), Eviction{UID: "crit", Reason: "Evicted", Message: "m"}, store); err == nil {
		t.Fatal("a critical pod evicted")
	}
}
