package podsync

import (
	"context"
	"errors"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/services/podworkers/internal/fakeruntime"
	"github.com/splitlet/splitlet/services/podworkers/internal/podworker"
)

// failingStarts fails the starts of chosen containers before any instance
// exists, as a CRI runtime fails a start whose image it cannot pull.
type failingStarts struct {
	*fakeruntime.Runtime
	mu   sync.Mutex
	fail map[string][2]string // container name: reason, message
}

func (f *failingStarts) set(name, reason, message string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if reason == "" {
		delete(f.fail, name)
		return
	}
	f.fail[name] = [2]string{reason, message}
}

func (f *failingStarts) StartContainer(ctx context.Context, p *corev1.Pod, c *corev1.Container, attempt int, opts runtime.StartOptions) (runtime.ContainerStatus, error) {
	f.mu.Lock()
	why, ok := f.fail[c.Name]
	f.mu.Unlock()
	if ok {
		return runtime.ContainerStatus{PodUID: p.UID, Name: c.Name, Attempt: attempt, State: runtime.StateExited, Reason: why[0], Message: why[1]},
			errors.New(why[0])
	}
	return f.Runtime.StartContainer(ctx, p, c, attempt, opts)
}

// A start that fails before the container exists shows the runtime's
// reason and message as the container's waiting state (ErrImagePull, then
// ImagePullBackOff), until a start succeeds.
func TestStartFailureIsTheWaitingReason(t *testing.T) {
	rt := &failingStarts{Runtime: fakeruntime.New(), fail: map[string][2]string{}}
	sk := &sink{last: map[types.UID]*bus.PodRuntimeStatus{}}
	sy := New(rt, sk)
	p := pod("sf", corev1.RestartPolicyAlways, "app")
	ctx := t.Context()
	waiting := func() *corev1.ContainerStateWaiting {
		c, _ := containerState(sk.get("sf"), "app")
		return c.State.Waiting
	}
	for _, want := range []struct{ reason, message string }{
		{"ErrImagePull", "pull failed: no registry"},
		{"ImagePullBackOff", `Back-off pulling image "img"`},
	} {
		rt.set("app", want.reason, want.message)
		if _, err := sy.SyncPod(ctx, podworker.UpdateSync, p); err == nil {
			t.Fatalf("%s: the sync reported no error", want.reason)
		}
		if w := waiting(); w == nil || w.Reason != want.reason || w.Message != want.message {
			t.Fatalf("waiting %+v, want %s: %s", w, want.reason, want.message)
		}
	}
	rt.set("app", "", "")
	if _, err := sy.SyncPod(ctx, podworker.UpdateSync, p); err != nil {
		t.Fatal(err)
	}
	if !running(sk.get("sf"), "app") {
		t.Fatalf("after a good start: %+v", sk.get("sf"))
	}
	sy.Forget(p.UID)
}
