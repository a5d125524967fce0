package podsync

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/services/podworkers/internal/fakeruntime"
	"github.com/splitlet/splitlet/services/podworkers/internal/podworker"
)

// syncOnce runs one SyncPod of p on sy.
func syncOnce(t *testing.T, sy *Syncer, p *corev1.Pod) {
	t.Helper()
	if _, err := sy.SyncPod(t.Context(), podworker.UpdateSync, p); err != nil {
		t.Fatal(err)
	}
}

// drainBackOffs returns the BackOff Events recorded so far.
func drainBackOffs(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			if strings.Contains(e, " "+EventBackOff+" ") {
				out = append(out, e)
			}
		default:
			return out
		}
	}
}

// crashLoopMessage is the waiting message of a container in CrashLoopBackOff
// in status st, or "" when it does not wait so.
func crashLoopMessage(st *bus.PodRuntimeStatus, name string) string {
	c, ok := containerState(st, name)
	if !ok || c.State.Waiting == nil || c.State.Waiting.Reason != ReasonCrashLoopBackOff {
		return ""
	}
	return c.State.Waiting.Message
}

// kubelet (GetBackoffKey): the crash-loop back-off belongs to one definition
// of a container; a crash-looping container whose image changes starts at
// once, one left unchanged still waits out its back-off with the same
// BackOff Event and CrashLoopBackOff message.
func TestChangedContainerSkipsCrashLoopBackOff(t *testing.T) {
	rt := fakeruntime.New()
	rec := record.NewFakeRecorder(1000)
	sy := New(rt, &sink{last: map[types.UID]*bus.PodRuntimeStatus{}}, WithBackOff(time.Hour, time.Hour), WithRecorder(rec))
	rt.ExitOnStart["fixed"], rt.ExitOnStart["same"] = 1, 1
	p := pod("bo1", corev1.RestartPolicyAlways, "fixed", "same")
	syncOnce(t, sy, p) // first starts, both exit
	syncOnce(t, sy, p) // the first restart is immediate
	syncOnce(t, sy, p) // both wait out the hour
	for _, name := range []string{"fixed", "same"} {
		if n := rt.StartsOf(name); n != 2 {
			t.Fatalf("%s: %d starts before the image change, want 2", name, n)
		}
		want := fmt.Sprintf("back-off 1h0m0s restarting failed container=%s pod=pbo1_ns(bo1)", name)
		if got := crashLoopMessage(sy.CurrentStatus(p), name); got != want {
			t.Fatalf("%s: CrashLoopBackOff message %q, want %q", name, got, want)
		}
	}
	if evs := drainBackOffs(rec); len(evs) != 2 {
		t.Fatalf("BackOff events while both wait: %q, want one each", evs)
	}

	// the fix: a new image that runs.
	q := p.DeepCopy()
	q.Spec.Containers[0].Image = "img:fixed"
	delete(rt.ExitOnStart, "fixed")
	syncOnce(t, sy, q)
	if n := rt.StartsOf("fixed"); n != 3 {
		t.Fatalf("fixed: %d starts after its image changed, want 3 (started at once)", n)
	}
	if n := rt.StartsOf("same"); n != 2 {
		t.Fatalf("same: %d starts, want 2 (still in back-off)", n)
	}
	st := sy.CurrentStatus(q)
	if !running(st, "fixed") {
		c, _ := containerState(st, "fixed")
		t.Fatalf("fixed after its image changed: %+v, want running", c.State)
	}
	if got, want := crashLoopMessage(st, "same"), "back-off 1h0m0s restarting failed container=same pod=pbo1_ns(bo1)"; got != want {
		t.Fatalf("same: CrashLoopBackOff message %q, want %q", got, want)
	}
	evs := drainBackOffs(rec)
	wantEv := "Warning BackOff Back-off restarting failed container same in pod pbo1_ns(bo1)"
	if len(evs) != 1 || evs[0] != wantEv {
		t.Fatalf("events %q, want only %q", evs, wantEv)
	}
}

// A replica that restarts (kill -9 of the pod worker) rebuilds the back-off
// of the definition that crashed: a container whose spec changed while no
// replica ran starts at once, an unchanged one waits.
func TestAdoptedBackOffFollowsTheDefinition(t *testing.T) {
	rt := fakeruntime.New()
	rt.ExitOnStart["fixed"], rt.ExitOnStart["same"] = 1, 1
	p := pod("bo2", corev1.RestartPolicyAlways, "fixed", "same")
	sy1 := New(rt, &sink{last: map[types.UID]*bus.PodRuntimeStatus{}}, WithBackOff(time.Hour, time.Hour))
	syncOnce(t, sy1, p)
	syncOnce(t, sy1, p) // attempt 1 of each, exited

	q := p.DeepCopy()
	q.Spec.Containers[0].Image = "img:fixed"
	delete(rt.ExitOnStart, "fixed")
	sy2 := New(rt, &sink{last: map[types.UID]*bus.PodRuntimeStatus{}}, WithBackOff(time.Hour, time.Hour))
	syncOnce(t, sy2, q)
	if n := rt.StartsOf("fixed"); n != 3 {
		t.Fatalf("fixed: %d starts, want 3 (changed while no replica ran: started at once)", n)
	}
	if n := rt.StartsOf("same"); n != 2 {
		t.Fatalf("same: %d starts, want 2 (its rebuilt back-off holds it)", n)
	}
	if got := sy2.backOff.Get(specBackOffKey(q, &q.Spec.Containers[1])); got != time.Hour {
		t.Fatalf("rebuilt back-off of same %v, want 1h", got)
	}
}

// GC drops the back-off of a definition replaced (and of a pod gone) once
// it has not been touched for twice the cap, as the kubelet's housekeeping.
func TestBackOffGCDropsReplacedDefinitions(t *testing.T) {
	rt := fakeruntime.New()
	rt.ExitOnStart["app"] = 1
	sy := New(rt, &sink{last: map[types.UID]*bus.PodRuntimeStatus{}}, WithBackOff(time.Millisecond, 20*time.Millisecond))
	p := pod("bo3", corev1.RestartPolicyAlways, "app")
	syncOnce(t, sy, p)
	syncOnce(t, sy, p)
	old := specBackOffKey(p, &p.Spec.Containers[0])
	q := p.DeepCopy()
	q.Spec.Containers[0].Image = "img:fixed"
	if specBackOffKey(q, &q.Spec.Containers[0]) == old {
		t.Fatal("a new image keeps the back-off key")
	}
	if sy.backOff.Get(old) == 0 {
		t.Fatal("no back-off recorded for the crashing definition")
	}
	sy.GC()
	if sy.backOff.Get(old) == 0 {
		t.Fatal("GC dropped a back-off touched just now")
	}
	eventually(t, "the old definition's back-off collected", func() bool {
		sy.GC()
		return sy.backOff.Get(old) == 0
	})
}

// A pod whose sandbox cannot be made gets the kubelet's Warning on the pod,
// FailedCreatePodSandBox "Failed to create pod sandbox: <error>", not a
// container's Failed Event (no container was made), and stays waiting.
func TestSandboxFailureEvent(t *testing.T) {
	rt := fakeruntime.New()
	rec := record.NewFakeRecorder(100)
	sy := New(rt, &sink{last: map[types.UID]*bus.PodRuntimeStatus{}}, WithRecorder(rec))
	p := pod("sb1", corev1.RestartPolicyAlways, "main")
	rt.SandboxFails = map[types.UID]string{p.UID: "failed to construct FQDN from pod hostname and cluster domain"}
	if _, err := sy.SyncPod(t.Context(), podworker.UpdateSync, p); err == nil {
		t.Fatal("a sync whose sandbox failed reported no error (the pod worker would not retry)")
	}
	var events []string
	for len(rec.Events) > 0 {
		events = append(events, <-rec.Events)
	}
	want := "Warning FailedCreatePodSandBox Failed to create pod sandbox: failed to construct FQDN from pod hostname and cluster domain"
	if !slices.Contains(events, want) || slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, "Warning "+EventFailed+" ") }) {
		t.Errorf("events %q, want %q and no %s", events, want, EventFailed)
	}
	if c, ok := containerState(sy.CurrentStatus(p), "main"); !ok || c.State.Waiting == nil || c.State.Waiting.Reason != ReasonContainerCreating {
		t.Errorf("main: %+v, want waiting %s", c.State, ReasonContainerCreating)
	}
}
