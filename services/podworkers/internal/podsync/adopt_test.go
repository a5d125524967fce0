package podsync

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/sim"
)

// newest is the newest instance of each container name.
func newest(list []runtime.ContainerStatus) map[string]runtime.ContainerStatus {
	out := map[string]runtime.ContainerStatus{}
	for _, c := range list {
		out[c.Name] = c
	}
	return out
}

// A replica that restarts (a new syncer, a new sim runtime restored from the
// last reported status) adopts the pod: the running container is kept,
// the completed init container is not run again, the crash-looping one goes
// on with its restart count and back-off, and a finished restartPolicy Never
// pod stays finished with its exit code.
func TestAdoptFromReportedStatus(t *testing.T) {
	ctx := t.Context()
	rt1 := sim.New()
	t.Cleanup(func() { _ = rt1.Close() })
	sy1 := New(rt1, &sink{last: map[types.UID]*bus.PodRuntimeStatus{}}, WithBackOff(time.Millisecond, time.Hour))
	a := pod("a", corev1.RestartPolicyAlways, "app", "crash")
	a.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "img"}}
	a.Annotations = map[string]string{sim.AnnotationExitCode + ".init": "0", sim.AnnotationExitCode + ".crash": "3"}
	b := pod("b", corev1.RestartPolicyNever, "job")
	b.Annotations = map[string]string{sim.AnnotationExitCode: "0"}
	deadline := time.Now().Add(15 * time.Second)
	for {
		// once attempt 3 has started, no more syncs: one that came after
		// its exit and its (millisecond) back-off would start attempt 4.
		if c, ok := newest(rt1.PodContainers(a.UID))["crash"]; ok && c.Attempt == 3 {
			if c.State == runtime.StateExited {
				break
			}
		} else if _, err := sy1.SyncPod(ctx, 0, a); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("crash container never reached attempt 3: %v", rt1.PodContainers(a.UID))
		}
		time.Sleep(time.Millisecond)
	}
	for {
		res, err := sy1.SyncPod(ctx, 0, b)
		if err != nil {
			t.Fatal(err)
		}
		if res.Terminal {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job never finished: %v", rt1.PodContainers(b.UID))
		}
		time.Sleep(time.Millisecond)
	}

	// what the old replica reported, through the wire format (times in
	// whole seconds, as in the API).
	wire := func(st *bus.PodRuntimeStatus) *bus.PodRuntimeStatus {
		data, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		var out bus.PodRuntimeStatus
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatal(err)
		}
		return &out
	}
	stA, stB := wire(sy1.CurrentStatus(a)), wire(sy1.CurrentStatus(b))
	if len(stA.ContainerHashes) < 3 {
		t.Fatalf("container hashes %v", stA.ContainerHashes)
	}

	rt2 := sim.New()
	t.Cleanup(func() { _ = rt2.Close() })
	for _, x := range []struct {
		p  *corev1.Pod
		st *bus.PodRuntimeStatus
	}{{a, stA}, {b, stB}} {
		if err := rt2.Restore(x.p, Instances(x.st)); err != nil {
			t.Fatal(err)
		}
	}
	before, after := newest(rt1.PodContainers(a.UID)), newest(rt2.PodContainers(a.UID))
	for name, c := range before {
		got := after[name]
		if got.ID != c.ID || got.Attempt != c.Attempt || got.State != c.State || got.ExitCode != c.ExitCode || got.Hash != c.Hash ||
			!got.StartedAt.Equal(c.StartedAt.Truncate(time.Second)) || !got.FinishedAt.Equal(c.FinishedAt.Truncate(time.Second)) || got.Reason != c.Reason {
			t.Fatalf("restored %s\n%+v\nwant\n%+v", name, got, c)
		}
	}

	sk2 := &sink{last: map[types.UID]*bus.PodRuntimeStatus{}}
	sy2 := New(rt2, sk2, WithBackOff(time.Hour, 4*time.Hour))
	if _, err := sy2.SyncPod(ctx, 0, a); err != nil {
		t.Fatal(err)
	}
	now := newest(rt2.PodContainers(a.UID))
	if now["app"].ID != before["app"].ID || now["init"].ID != before["init"].ID || now["crash"].ID != before["crash"].ID {
		t.Fatalf("adoption replaced containers:\nbefore %v\nafter  %v", before, now)
	}
	// three restarts: the back-off has doubled twice from the base.
	if got := sy2.backOff.Get(specBackOffKey(a, &a.Spec.Containers[1])); got != 4*time.Hour {
		t.Fatalf("rebuilt back-off %v, want 4h", got)
	}
	st := sk2.get(a.UID)
	crash := st.ContainerStatuses[1]
	if crash.RestartCount != 3 || crash.State.Waiting == nil || crash.State.Waiting.Reason != ReasonCrashLoopBackOff {
		t.Fatalf("crash container after adoption: %+v", crash)
	}
	if st.InitContainerStatuses[0].State.Terminated == nil || st.InitContainerStatuses[0].State.Terminated.ExitCode != 0 {
		t.Fatalf("init container after adoption: %+v", st.InitContainerStatuses[0])
	}
	res, err := sy2.SyncPod(ctx, 0, b)
	if err != nil || !res.Terminal {
		t.Fatalf("finished Never pod: %+v, %v", res, err)
	}
	if n := len(rt2.PodContainers(b.UID)); n != 1 {
		t.Fatalf("finished Never pod has %d instances, want 1", n)
	}
	if job := sk2.get(b.UID).ContainerStatuses[0]; job.State.Terminated == nil || job.State.Terminated.ExitCode != 0 || job.ContainerID != stB.ContainerStatuses[0].ContainerID {
		t.Fatalf("finished job after adoption: %+v", job)
	}
}
