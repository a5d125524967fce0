package service

import (
	"context"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/sim"
	"io"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	before := testutil.ToFloat64(e.busMetrics.HandlerPanics.WithLabelValues("podworkers-requests"))
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
	if got := testutil.ToFloat64(e.busMetrics.HandlerPanics.WithLabelValues("podworkers-requests")); got != before+1 {
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
	// A port-forward names the pod alone: refused the same way; the pod
	// named as itself gets the process runtime's "unsupported".
	portForward := func(ref bus.ContainerRef) *bus.StreamResult {
		t.Helper()
		ref.Container = ""
		env, err := e.pub.Request(ctx, subj.Stream(part), bus.KindStreamRequest, &bus.StreamRequest{ContainerRef: ref, PortForward: true})
		if err != nil {
			t.Fatal(err)
		}
		res, err := bus.DecodeStreamResult(env)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := portForward(forged); res.Unsupported || res.URL != "" || !strings.Contains(res.Error, "belongs to another pod") {
		t.Errorf("port-forward under the victim's UID naming the attacker: %+v, want refused", res)
	}
	if res := portForward(bus.ContainerRef{PodUID: victim.UID, Namespace: victim.Namespace, Pod: victim.Name}); !res.Unsupported || res.Error != "port-forward: not supported by the process runtime" {
		t.Errorf("port-forward to the victim named as itself: %+v, want unsupported by the process runtime", res)
	}
	// the victim named as itself is served.
	if res := exec(bus.ContainerRef{PodUID: victim.UID, Namespace: victim.Namespace, Pod: victim.Name, Container: "app"}); res.Error != "" || string(res.Stdout) != "ran\n" {
		t.Errorf("exec in the victim named as itself: %+v (stdout %q)", res, res.Stdout)
	}
}

// The prober's exec (runtime.probeexec.<p>) runs a command only when it
// is an exec probe of that container of the pod: as written, or with its
// $(VAR) references to the static env expanded as the kubelet runs it.
// Anything else (another command, another container, a pod the replica
// does not hold) is refused with an error, counted, and never run; the
// kubelet API's exec (runtime.exec.<p>) still runs any command.
func TestProbeExecRunsOnlyProbeCommands(t *testing.T) {
	e := newEnv(t, "pw-probeexec")
	r := e.startReplica(t, config.RuntimeProcess, nil)
	// the process runtime runs commands as another user: a directory it
	// may write to.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	marker := filepath.Join(dir, "ran")
	p := e.busPod("probed", func(p *corev1.Pod) {
		c := &p.Spec.Containers[0]
		c.Env = []corev1.EnvVar{{Name: "WHAT", Value: "ready"}}
		c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"echo", "$(WHAT)"}}}}
		c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
	})
	e.track(p)
	e.send(bus.OpAdd, p)
	eventually(t, 30*time.Second, "running", func() bool { st, _ := e.get(p.UID); return containerRunning(st) })
	part := bus.Partition(string(p.UID), partitions)
	subj := bus.For(e.node)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ref := bus.ContainerRef{PodUID: p.UID, Namespace: p.Namespace, Pod: p.Name, Container: "app"}
	exec := func(subject string, ref bus.ContainerRef, cmd ...string) *bus.ExecResult {
		t.Helper()
		env, err := e.pub.Request(ctx, subject, bus.KindExecRequest, &bus.ExecRequest{ContainerRef: ref, Command: cmd, TimeoutSeconds: 5})
		if err != nil {
			t.Fatalf("exec %q on %s: %v", cmd, subject, err)
		}
		res, err := bus.DecodeExecResult(env)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, cmd := range [][]string{{"echo", "ready"}, {"echo", "$(WHAT)"}, {"true"}} {
		if res := exec(subj.ProbeExec(part), ref, cmd...); res.Error != "" || res.ExitCode != 0 {
			t.Errorf("probe command %q: %+v, want it run", cmd, res)
		}
	}
	if res := exec(subj.ProbeExec(part), ref, "echo", "ready"); string(res.Stdout) != "ready\n" {
		t.Errorf("probe command's output %q, want the expanded command's", res.Stdout)
	}
	before := testutil.ToFloat64(r.metrics.probeExecRefused)
	other := ref
	other.Container = "nope"
	stranger := ref
	stranger.PodUID = "no-such-pod"
	for _, c := range []struct {
		ref bus.ContainerRef
		cmd []string
	}{
		{ref, []string{"sh", "-c", "echo ran > " + marker}}, // not a probe
		{ref, []string{"echo", "ready", "now"}},             // a probe's command with more
		{other, []string{"true"}},                           // a probe of another container
		{stranger, []string{"true"}},                        // a pod the replica does not hold
	} {
		res := exec(subj.ProbeExec(part), c.ref, c.cmd...)
		if !strings.Contains(res.Error, "probe exec refused") || res.ExitCode != -1 {
			t.Errorf("probe exec %q in %s/%s: %+v, want it refused", c.cmd, c.ref.PodUID, c.ref.Container, res)
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the refused command ran: %v", err)
	}
	if got := testutil.ToFloat64(r.metrics.probeExecRefused); got != before+4 {
		t.Errorf("refusals counted %v, want %v", got, before+4)
	}
	// the kubelet API's exec runs what the API server authorised.
	if res := exec(subj.Exec(part), ref, "sh", "-c", "echo ran > "+marker); res.Error != "" || res.ExitCode != 0 {
		t.Errorf("exec on runtime.exec: %+v", res)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("runtime.exec's command did not run: %v", err)
	}
}
