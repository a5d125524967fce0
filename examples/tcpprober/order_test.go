package tcpprober

import (
	"testing"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
)

// Runtime statuses are ordered per pod: a pod's status that another pod's
// newer one overtook on their subject (a redelivery after a NATS server was
// lost) is taken; a pod's status not above its last from the same source is
// not; a removed pod's order is forgotten with it.
func TestStatusOrderedPerPod(t *testing.T) {
	r, err := New(&Config{Instance: "t", HTTPGet: "tcp"}, &config.Common{NodeName: "n", Partitions: 1}, zap.NewNop(), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	send := func(uid string, seq uint64, phase string) {
		t.Helper()
		podTable{r}.PodStatus(t.Context(), "podworkers-a", seq,
			&bus.PodRuntimeStatus{UID: types.UID(uid), Namespace: "ns", Name: uid, Phase: corev1.PodPhase(phase)})
	}
	phaseOf := func(uid string) string {
		r.mu.Lock()
		defer r.mu.Unlock()
		if st := r.status[types.UID(uid)]; st != nil {
			return string(st.Phase)
		}
		return ""
	}
	send("a", 5, "Running")
	send("b", 4, "Pending")
	if got := phaseOf("b"); got != "Pending" {
		t.Fatalf("pod b's status overtaken by pod a's newer one: phase %q, want Pending", got)
	}
	send("a", 3, "Pending")
	send("a", 5, "Pending")
	if got := phaseOf("a"); got != "Running" {
		t.Fatalf("pod a's stale status taken: phase %q, want Running", got)
	}
	podTable{r}.PodRemoved("a")
	send("a", 2, "Pending")
	if got := phaseOf("a"); got != "Pending" {
		t.Fatalf("a removed pod's order was kept: phase %q, want Pending", got)
	}
}
