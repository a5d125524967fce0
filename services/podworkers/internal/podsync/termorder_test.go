package podsync

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/services/podworkers/internal/fakeruntime"
	"github.com/splitlet/splitlet/services/podworkers/internal/podworker"
)

// seqRuntime records hooks run and containers stopped in one sequence. A
// hook lasts until every hook of the pod (hooks of them) has begun, or 2 s.
type seqRuntime struct {
	*fakeruntime.Runtime
	hooks   int
	allIn   chan struct{}
	mu      sync.Mutex
	seq     []string
	started int
}

func (r *seqRuntime) Exec(ctx context.Context, uid types.UID, container string, cmd []string, stdin io.Reader, timeout time.Duration) (runtime.ExecResult, error) {
	r.mu.Lock()
	r.seq = append(r.seq, "hook "+container)
	if r.started++; r.started == r.hooks {
		close(r.allIn)
	}
	r.mu.Unlock()
	select {
	case <-r.allIn:
	case <-time.After(2 * time.Second):
	}
	return r.Runtime.Exec(ctx, uid, container, cmd, stdin, timeout)
}

func (r *seqRuntime) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	name := ""
	for _, list := range [][]runtime.ContainerStatus{r.PodContainers("12")} {
		for _, c := range list {
			if c.ID == id {
				name = c.Name
			}
		}
	}
	r.mu.Lock()
	r.seq = append(r.seq, "stop "+name)
	r.mu.Unlock()
	return r.Runtime.StopContainer(ctx, id, grace)
}

func (r *seqRuntime) sequence() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seq...)
}

// A terminating pod's containers all run their preStop hooks at once, the
// sidecars' included (kubelet: every container is killed concurrently);
// the sidecars are stopped only after the app container, the later
// declared first.
func TestSidecarPreStopHooksRunAtOnce(t *testing.T) {
	rt := &seqRuntime{Runtime: fakeruntime.New(), hooks: 3, allIn: make(chan struct{})}
	sk := &sink{last: map[types.UID]*bus.PodRuntimeStatus{}}
	w := podworker.New(New(rt, sk), podworker.WithBackOffPeriod(20*time.Millisecond))
	go w.Run()
	t.Cleanup(w.Stop)
	always := corev1.ContainerRestartPolicyAlways
	hook := func(name string) *corev1.Lifecycle {
		return &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"hook", name}}}}
	}
	p := pod("12", corev1.RestartPolicyAlways, "app")
	p.Spec.Containers[0].Lifecycle = hook("app")
	p.Spec.InitContainers = []corev1.Container{{Name: "a-proxy", RestartPolicy: &always, Lifecycle: hook("a-proxy")},
		{Name: "b-log", RestartPolicy: &always, Lifecycle: hook("b-log")}}
	w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: p})
	eventually(t, "all running", func() bool {
		st := sk.get("12")
		return running(st, "a-proxy") && running(st, "b-log") && running(st, "app")
	})
	w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateKill, Pod: p})
	eventually(t, "terminated", func() bool { st := sk.get("12"); return st != nil && st.Terminated })
	seq := rt.sequence()
	if len(seq) != 6 {
		t.Fatalf("sequence %q: want three hooks and three stops", seq)
	}
	for _, step := range seq[:3] {
		if !strings.HasPrefix(step, "hook ") {
			t.Fatalf("sequence %q: a container stopped before every preStop hook had begun", seq)
		}
	}
	if got := strings.Join(seq[3:], ","); got != "stop app,stop b-log,stop a-proxy" {
		t.Errorf("stops %s, want the app, then the sidecars last declared first", got)
	}
}

// A sidecar still left when the pod's grace is spent (here by the app's
// preStop hook) is stopped with the minimum grace, 2 s, not less (kubelet:
// minimumGracePeriodInSeconds), so that one ending on SIGTERM exits 0.
func TestSidecarGetsTheMinimumGrace(t *testing.T) {
	rt := &seqRuntime{Runtime: fakeruntime.New(), hooks: -1, allIn: make(chan struct{})}
	sk := &sink{last: map[types.UID]*bus.PodRuntimeStatus{}}
	w := podworker.New(New(rt, sk), podworker.WithBackOffPeriod(20*time.Millisecond))
	go w.Run()
	t.Cleanup(w.Stop)
	always := corev1.ContainerRestartPolicyAlways
	p := pod("12", corev1.RestartPolicyAlways, "app")
	one := int64(1)
	p.Spec.TerminationGracePeriodSeconds = &one
	// the app's hook outlasts the pod's grace (2 s against 1 s).
	p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"hook"}}}}
	p.Spec.InitContainers = []corev1.Container{{Name: "proxy", RestartPolicy: &always}}
	w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: p})
	eventually(t, "all running", func() bool { st := sk.get("12"); return running(st, "proxy") && running(st, "app") })
	st := sk.get("12")
	proxy, _ := containerState(st, "proxy")
	w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateKill, Pod: p})
	eventually(t, "terminated", func() bool { st := sk.get("12"); return st != nil && st.Terminated })
	if g := rt.Graces[proxy.ContainerID]; g < minPreStopGrace {
		t.Errorf("the sidecar was stopped with %s of grace, want at least %s", g, minPreStopGrace)
	}
}
