package service_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/services/prober/internal/service"
)

// A pod's status that reaches the prober behind another pod's newer one on
// the same subject (a redelivery after a NATS server was lost) is still
// taken and its container probed; the pod's own older status, behind it,
// is not.
func TestStatusOvertakenOnItsSubject(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ta, tb := newTarget(t, http.StatusOK), newTarget(t, http.StatusOK)
	a := newPod("overtaken-a", httpProbe(ta.port(), "/"), nil, nil)
	b := newPod("overtaken-b", httpProbe(tb.port(), "/"), nil, nil)
	part := bus.Partition(string(a.UID), partitions)
	for bus.Partition(string(b.UID), partitions) != part {
		b.UID = uuid.NewUUID()
	}
	e.publishPods(bus.OpAdd, a, b)

	// sealed in seq order, published out of it.
	var sealed [][]byte
	for _, st := range []*bus.PodRuntimeStatus{running(a, "sim://a1", time.Now()), running(a, "sim://a2", time.Now()), running(b, "sim://b1", time.Now())} {
		data, _, err := e.statPub.Seal(bus.KindPodRuntimeStatus, "", st)
		if err != nil {
			t.Fatal(err)
		}
		sealed = append(sealed, data)
	}
	ctx := context.Background()
	for _, i := range []int{2, 1, 0} {
		if _, err := e.js.Publish(ctx, e.subjects.PodStatus(part), sealed[i]); err != nil {
			t.Fatal(err)
		}
	}
	e.waitResult(b.UID, bus.ProbeReadiness, bus.ProbeSuccess, "sim://b1", 10*time.Second)
	e.waitResult(a.UID, bus.ProbeReadiness, bus.ProbeSuccess, "sim://a2", 10*time.Second)

	cons, err := e.js.Consumer(ctx, bus.StreamName(node, bus.StreamPodStatus), service.DurablePodStatus)
	if err != nil {
		t.Fatal(err)
	}
	e.eventually("the status consumer drained", 10*time.Second, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	// two more runs of a's readiness probe read whatever status a has now.
	hits := ta.hits.Load()
	e.eventually("two more probes of a", 10*time.Second, func() bool { return ta.hits.Load() >= hits+2 })
	for _, r := range e.resultsOf(a.UID) {
		if r.ContainerID != "sim://a2" {
			t.Fatalf("a result for %s after the newer sim://a2: %+v", r.ContainerID, e.resultsOf(a.UID))
		}
	}
}
