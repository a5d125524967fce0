package service_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/services/prober/internal/service"
)

// rejecter makes the prober's handlers fail on the messages about the pods
// it is told to reject on a consumer, and counts the failures by consumer.
type rejecter struct {
	mu     sync.Mutex
	pods   map[rejected]bool
	failed map[string]int
}

// podOf is the pod a message is about (the first, for a pod update).
func podOf(e *bus.Envelope) types.UID {
	switch e.Kind {
	case bus.KindPodUpdate:
		if u, err := bus.DecodePodUpdate(e); err == nil && len(u.Pods) > 0 {
			return u.Pods[0].UID
		}
	case bus.KindPodRuntimeStatus:
		if st, err := bus.DecodePodRuntimeStatus(e); err == nil {
			return st.UID
		}
	}
	return ""
}

type rejected struct {
	durable string
	pod     types.UID
}

func (rj *rejecter) hook(o *bus.ConsumerOptions, h bus.Handler) bus.Handler {
	o.RetryDelay, o.MaxRetryDelay, o.MaxDeliveries, o.RecoverEvery = 20*time.Millisecond, 80*time.Millisecond, 3, 200*time.Millisecond
	durable := o.Durable
	return func(ctx context.Context, subject string, e *bus.Envelope) error {
		rj.mu.Lock()
		reject := rj.pods[rejected{durable, podOf(e)}]
		if reject {
			rj.failed[durable]++
		}
		rj.mu.Unlock()
		if reject {
			return errors.New("rejected by the test")
		}
		return h(ctx, subject, e)
	}
}

func (rj *rejecter) set(durable string, uid types.UID, on bool) {
	rj.mu.Lock()
	defer rj.mu.Unlock()
	rj.pods[rejected{durable, uid}] = on
}

func (rj *rejecter) failures(durable string) int {
	rj.mu.Lock()
	defer rj.mu.Unlock()
	return rj.failed[durable]
}

// newRejectingEnv is a prober whose handlers the returned rejecter can make
// fail, with short redelivery delays.
func newRejectingEnv(t *testing.T) (*env, *rejecter) {
	rj := &rejecter{pods: map[rejected]bool{}, failed: map[string]int{}}
	e := newEnvWith(t, func(d service.Deps) (*service.Runner, error) {
		r, err := service.NewWithDeps(d)
		if err == nil {
			service.SetConsumerHook(r, rj.hook)
		}
		return r, err
	})
	return e, rj
}

func (e *env) terminated(durable string) float64 {
	return testutil.ToFloat64(e.busMetrics.HandlerTerminations.WithLabelValues(durable))
}

// TestRejectedPodUpdateRecoveredBySet: a pod update the prober's handler
// rejects is delivered a bounded number of times and terminated; the pod
// is then probed all the same, once the next SET of its partition lists
// it.
func TestRejectedPodUpdateRecoveredBySet(t *testing.T) {
	e, rj := newRejectingEnv(t)
	tg := newTarget(t, http.StatusOK)
	pod := newPod("rejected-update", httpProbe(tg.port(), "/"), nil, nil)
	before := e.terminated(service.DurablePodUpdates)
	rj.set(service.DurablePodUpdates, pod.UID, true)
	e.publishPods(bus.OpAdd, pod)
	e.publishStatus(running(pod, "sim://u1", time.Now()))
	e.eventually("the ADD terminated", 10*time.Second, func() bool { return e.terminated(service.DurablePodUpdates)-before == 1 })
	if n := rj.failures(service.DurablePodUpdates); n != 3 {
		t.Errorf("the ADD was handled %d times, want 3", n)
	}
	if rs := e.resultsOf(pod.UID); len(rs) != 0 {
		t.Fatalf("probed without its spec: %v", rs)
	}
	rj.set(service.DurablePodUpdates, pod.UID, false)
	e.publishPods(bus.OpSet, pod)
	e.waitResult(pod.UID, bus.ProbeReadiness, bus.ProbeSuccess, "sim://u1", 10*time.Second)
}

// TestRejectedStatusRecoveredFromStream: a runtime status the prober's
// handler rejects is delivered a bounded number of times and terminated;
// once the handler takes it, the prober takes it from the stream, with
// nothing published again, and probes the pod.
func TestRejectedStatusRecoveredFromStream(t *testing.T) {
	e, rj := newRejectingEnv(t)
	tg := newTarget(t, http.StatusOK)
	pod := newPod("rejected-status", httpProbe(tg.port(), "/"), nil, nil)
	before := e.terminated(service.DurablePodStatus)
	rj.set(service.DurablePodStatus, pod.UID, true)
	e.publishPods(bus.OpAdd, pod)
	e.publishStatus(running(pod, "sim://s1", time.Now()))
	e.eventually("the status terminated", 10*time.Second, func() bool { return e.terminated(service.DurablePodStatus)-before == 1 })
	if n := rj.failures(service.DurablePodStatus); n < 3 {
		t.Errorf("the status was handled %d times, want at least 3", n)
	}
	if rs := e.resultsOf(pod.UID); len(rs) != 0 {
		t.Fatalf("probed without its status: %v", rs)
	}
	rj.set(service.DurablePodStatus, pod.UID, false)
	e.waitResult(pod.UID, bus.ProbeReadiness, bus.ProbeSuccess, "sim://s1", 10*time.Second)
}
