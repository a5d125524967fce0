package shadowrt

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/testenv"
)

func status(pod *corev1.Pod, id string, running bool) *bus.PodRuntimeStatus {
	cs := corev1.ContainerStatus{Name: "app", ContainerID: id, Image: "busybox"}
	if running {
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Now()}
	} else {
		cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}
	}
	return &bus.PodRuntimeStatus{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, PodIP: "10.0.0.1", ContainerStatuses: []corev1.ContainerStatus{cs}}
}

// TestDecisionsWaitForTheLiveRuntime: a start the shadow decides returns
// the container the live pod workers then report, a stop returns once they
// report it exited (announced on Events), and neither changes anything:
// the shadow's view is the live statuses alone. A decision the live side
// does not carry out fails after the wait.
func TestDecisionsWaitForTheLiveRuntime(t *testing.T) {
	rt := New("sim", 2*time.Second, zap.NewNop())
	defer rt.Close()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "d", UID: "u1"}}
	c := &corev1.Container{Name: "app", Image: "busybox"}
	type started struct {
		st  runtime.ContainerStatus
		err error
	}
	done := make(chan started, 1)
	go func() {
		st, err := rt.StartContainer(t.Context(), pod, c, 0, runtime.StartOptions{})
		done <- started{st, err}
	}()
	waitDecided(t, rt, Start, 1)
	rt.Observe(status(pod, "sim://1", true))
	res := <-done
	got, err := res.st, res.err
	if err != nil || got.ID != "sim://1" || got.State != runtime.StateRunning {
		t.Fatalf("start: %+v, %v; want the live container sim://1 running", got, err)
	}
	if rt.PodIP(pod) != "10.0.0.1" || len(rt.PodContainers(pod.UID)) != 1 {
		t.Errorf("view: IP %q, containers %+v", rt.PodIP(pod), rt.PodContainers(pod.UID))
	}
	stopped := make(chan error, 1)
	go func() { stopped <- rt.StopContainer(t.Context(), "sim://1", time.Second) }()
	waitDecided(t, rt, Stop, 1)
	rt.Observe(status(pod, "sim://1", false))
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	select {
	case ev := <-rt.Events():
		if ev.ContainerID != "sim://1" || ev.State != runtime.StateExited {
			t.Errorf("event %+v", ev)
		}
	case <-time.After(time.Second):
		t.Error("no exit event")
	}
	if err := rt.RemovePod(t.Context(), pod.UID); err != nil || len(rt.PodContainers(pod.UID)) != 0 {
		t.Errorf("remove: %v, containers %+v", err, rt.PodContainers(pod.UID))
	}
	// a start the live side never makes.
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "d", UID: "u2"}}
	if _, err := rt.StartContainer(t.Context(), other, c, 0, runtime.StartOptions{}); err == nil {
		t.Error("a start the live pod workers never made succeeded")
	}
	if d := rt.Decisions(); d[Start] != 2 || d[Stop] != 1 || d[Remove] != 1 {
		t.Errorf("decisions %v", d)
	}
	if _, err := rt.Exec(t.Context(), pod.UID, "app", []string{"true"}, nil, time.Second); !errors.Is(err, ErrRefused) {
		t.Errorf("exec: %v, want refused", err)
	}
}

// waitDecided waits until rt recorded n decisions of verb.
func waitDecided(t *testing.T, rt *Runtime, verb string, n int) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, fmt.Sprintf("%d %s decisions", n, verb), func() (bool, string) {
		got := rt.Decisions()[verb]
		return got >= n, fmt.Sprintf("%d", got)
	})
}
