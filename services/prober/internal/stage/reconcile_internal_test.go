package stage

import (
	"context"
	"encoding/json"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/splitlet/splitlet/libs/bus"
)

// A RECONCILE is a status-only change, which the kubelet's
// HandlePodReconcile keeps from the probe manager: its payload is not even
// decoded. The same malformed payload as an UPDATE is decoded and reported.
// The subject is the one a v1 podconfig sends reconciles on (podupdates.<p>;
// v2 sends them on podupdates.reconcile.<p>, which the prober's consumer
// does not take).
func TestReconcileIsNotDecoded(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	r := &Runner{log: zap.New(core)}
	bad := json.RawMessage(`{"pods": "not a list"}`)
	subject := "splitlet.v1.n.podupdates.0"
	if err := r.onPodUpdate(context.Background(), subject, &bus.Envelope{Op: bus.OpReconcile, Payload: bad}); err != nil {
		t.Fatal(err)
	}
	if n := logs.Len(); n != 0 {
		t.Fatalf("a RECONCILE was decoded: %v", logs.All())
	}
	if err := r.onPodUpdate(context.Background(), subject, &bus.Envelope{Op: bus.OpUpdate, Payload: bad}); err != nil {
		t.Fatal(err)
	}
	if logs.FilterMessage("dropping bad pod update").Len() != 1 {
		t.Fatalf("a malformed UPDATE was not reported: %v", logs.All())
	}
}
