package service

import (
	"testing"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
)

// Results of one key not sent yet are coalesced to the newest, keys keep
// their first-queued order, and a failed result is not requeued over a
// newer one.
func TestOutboxCoalescesAndRequeues(t *testing.T) {
	o := newOutbox(nil, bus.For("n"), 4, zap.NewNop())
	r := func(uid, c string, v bus.ProbeOutcome) bus.ProbeResult {
		return bus.ProbeResult{PodUID: types.UID("u" + uid), Container: c, Probe: bus.ProbeReadiness, Result: v}
	}
	o.put(r("1", "a", bus.ProbeFailure))
	o.put(r("2", "a", bus.ProbeFailure))
	o.put(r("1", "a", bus.ProbeSuccess))
	got := o.take(10)
	if len(got) != 2 || got[0].PodUID != "u1" || got[0].Result != bus.ProbeSuccess || got[1].PodUID != "u2" {
		t.Fatalf("take = %+v", got)
	}
	if !o.empty() {
		t.Fatal("not empty after take")
	}
	o.requeue(got[0])
	if g := o.take(10); len(g) != 1 || g[0].Result != bus.ProbeSuccess {
		t.Fatalf("requeued = %+v", g)
	}
	o.put(r("1", "a", bus.ProbeFailure))
	o.requeue(r("1", "a", bus.ProbeSuccess)) // older than what waits
	if g := o.take(10); len(g) != 1 || g[0].Result != bus.ProbeFailure {
		t.Fatalf("a requeue replaced a newer result: %+v", g)
	}
}

func TestConfigValidation(t *testing.T) {
	if _, err := NewWithDeps(Deps{Config: &Config{Instance: "", ExecGrace: 0}}); err == nil {
		t.Error("empty instance accepted")
	}
	if _, err := NewWithDeps(Deps{Config: &Config{Instance: "p", ExecGrace: -1}}); err == nil {
		t.Error("negative exec grace accepted")
	}
}
