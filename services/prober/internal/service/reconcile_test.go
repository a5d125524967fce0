package service_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/prober/internal/service"
)

// TestReconcilesAreNotSent: the prober's consumer of the pod-updates
// stream takes podupdates.* alone, so the server never sends it the
// reconciles (status-only changes, which the kubelet's probe manager
// ignores), published on podupdates.reconcile.<p>: of a RECONCILE and an
// UPDATE published after it, only the UPDATE is delivered.
func TestReconcilesAreNotSent(t *testing.T) {
	e := newEnv(t)
	pod := newPod("reconciled", nil, nil, nil)
	e.publishPods(bus.OpAdd, pod)
	stream, err := e.js.Stream(t.Context(), bus.StreamName(node, bus.StreamPodUpdates))
	if err != nil {
		t.Fatal(err)
	}
	// delivered waits until the consumer has delivered and seen
	// acknowledged the stream's last message, and returns how many
	// messages it has delivered.
	delivered := func() uint64 {
		t.Helper()
		var n uint64
		testenv.Eventually(t, 10*time.Second, "the pod-updates consumer caught up", func() (bool, string) {
			si, err := stream.Info(t.Context())
			if err != nil {
				return false, err.Error()
			}
			cons, err := stream.Consumer(t.Context(), service.DurablePodUpdates)
			if err != nil {
				return false, err.Error()
			}
			ci, err := cons.Info(t.Context())
			if err != nil {
				return false, err.Error()
			}
			n = ci.Delivered.Consumer
			return ci.NumPending == 0 && ci.NumAckPending == 0 && ci.Delivered.Stream >= si.State.LastSeq,
				fmt.Sprintf("delivered up to %d of %d, %d pending, %d not acknowledged", ci.Delivered.Stream, si.State.LastSeq, ci.NumPending, ci.NumAckPending)
		})
		return n
	}
	before := delivered()
	reconciled := pod.DeepCopy()
	reconciled.Status.Message = "a status-only change"
	if err := e.podPub.Publish(t.Context(), e.subjects.PodReconciles(bus.Partition(string(pod.UID), partitions)), bus.KindPodUpdate, bus.OpReconcile,
		&bus.PodUpdate{Pods: []corev1.Pod{*reconciled}}); err != nil {
		t.Fatal(err)
	}
	e.publishPods(bus.OpUpdate, pod)
	if n := delivered() - before; n != 1 {
		t.Fatalf("%d messages delivered for a RECONCILE and an UPDATE, want 1 (the UPDATE)", n)
	}
}
