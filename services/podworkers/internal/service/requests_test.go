package service

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/sim"
)

// panicky is a sim runtime whose Exec panics (a bug in a runtime).
type panicky struct{ *sim.Runtime }

func (panicky) Exec(context.Context, types.UID, string, []string, io.Reader, time.Duration) (runtime.ExecResult, error) {
	panic("exec went wrong")
}

// A request handler that panics answers with an error, is counted, and
// the replica goes on serving.
func TestRequestHandlerPanicIsAnswered(t *testing.T) {
	e := newEnv(t, "pw-panic")
	e.startReplicaRuntime(t, config.RuntimeSim, nil, panicky{sim.New()})
	p := e.busPod("panic", nil)
	e.track(p)
	e.send(bus.OpAdd, p)
	eventually(t, 30*time.Second, "running", func() bool { st, _ := e.get(p.UID); return containerRunning(st) })
	before := testutil.ToFloat64(bus.HandlerPanics.WithLabelValues("podworkers-requests"))
	part := bus.Partition(string(p.UID), partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ref := bus.ContainerRef{PodUID: p.UID, Namespace: p.Namespace, Pod: p.Name, Container: "app"}
	env, err := e.pub.Request(ctx, bus.For(e.node).Exec(part), bus.KindExecRequest, &bus.ExecRequest{ContainerRef: ref, Command: []string{"true"}, TimeoutSeconds: 5})
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	res, err := bus.DecodeExecResult(env)
	if err != nil || !strings.Contains(res.Error, "internal error") || res.ExitCode != -1 {
		t.Fatalf("exec answer %+v, %v: want an internal error", res, err)
	}
	if got := testutil.ToFloat64(bus.HandlerPanics.WithLabelValues("podworkers-requests")); got != before+1 {
		t.Errorf("panics counted %v, want %v", got, before+1)
	}
	// still serving.
	env, err = e.pub.Request(ctx, bus.For(e.node).Stats(part), bus.KindStatsRequest, &bus.StatsRequest{})
	if err != nil {
		t.Fatalf("stats after the panic: %v", err)
	}
	if _, err := bus.DecodeStatsResult(env); err != nil {
		t.Fatal(err)
	}
}
