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

// A runtime request that names one pod by namespace and name and another by
// UID (a requester that resolved a forged mirror annotation) is refused, and
// runs nothing in either pod; so is one for a UID the replica does not hold.
// The pod named correctly is served.
func TestRuntimeRequestNamingAnotherPodRefused(t *testing.T) {
	e := newEnv(t, "pw-forged")
	e.startReplica(t, config.RuntimeProcess, nil)
	victim := e.busPod("victim", nil)
	attacker := e.busPod("attacker", nil)
	e.track(victim, attacker)
	e.send(bus.OpAdd, victim, attacker)
	eventually(t, 30*time.Second, "both running", func() bool {
		a, _ := e.get(victim.UID)
		b, _ := e.get(attacker.UID)
		return containerRunning(a) && containerRunning(b)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	part := bus.Partition(string(victim.UID), partitions)
	subj := bus.For(e.node)
	exec := func(ref bus.ContainerRef) *bus.ExecResult {
		t.Helper()
		env, err := e.pub.Request(ctx, subj.Exec(part), bus.KindExecRequest, &bus.ExecRequest{ContainerRef: ref, Command: []string{"echo", "ran"}, TimeoutSeconds: 5})
		if err != nil {
			t.Fatalf("exec: %v", err)
		}
		res, err := bus.DecodeExecResult(env)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	forged := bus.ContainerRef{PodUID: victim.UID, Namespace: attacker.Namespace, Pod: attacker.Name, Container: "app"}
	if res := exec(forged); !strings.Contains(res.Error, `pod "default/attacker" not found on this node: UID `+string(victim.UID)+" belongs to another pod") ||
		len(res.Stdout) != 0 || strings.Contains(res.Error, "victim") {
		t.Errorf("exec under the victim's UID naming the attacker: %+v (stdout %q), want refused without naming the victim", res, res.Stdout)
	}
	if res := exec(bus.ContainerRef{PodUID: "no-such-uid", Namespace: "default", Pod: "victim", Container: "app"}); !strings.Contains(res.Error, `pod "default/victim" not found on this node`) || len(res.Stdout) != 0 {
		t.Errorf("exec for a UID not held: %+v, want refused", res)
	}
	if err := e.pub.RequestLogs(ctx, subj.Logs(part), &bus.LogsRequest{ContainerRef: forged}, io.Discard); err == nil || !strings.Contains(err.Error(), "belongs to another pod") {
		t.Errorf("logs under the victim's UID naming the attacker: %v, want refused", err)
	}
	env, err := e.pub.Request(ctx, subj.Stream(part), bus.KindStreamRequest, &bus.StreamRequest{ContainerRef: forged, Command: []string{"sh"}, Stdin: true, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := bus.DecodeStreamResult(env); err != nil || res.Unsupported || !strings.Contains(res.Error, "belongs to another pod") {
		t.Errorf("stream under the victim's UID naming the attacker: %+v %v, want refused (not unsupported, which would fall back to exec)", res, err)
	}
	// the victim named as itself is served.
	if res := exec(bus.ContainerRef{PodUID: victim.UID, Namespace: victim.Namespace, Pod: victim.Name, Container: "app"}); res.Error != "" || string(res.Stdout) != "ran\n" {
		t.Errorf("exec in the victim named as itself: %+v (stdout %q)", res, res.Stdout)
	}
}
