package service

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/runtime/sim"
)

// kubelet (GetBackoffKey): a crash-looping container whose image is changed
// through the API starts at once with the new image instead of waiting out
// the old one's back-off; the pod's unchanged crash-looping container goes
// on waiting with the same CrashLoopBackOff message.
func TestChangedImageSkipsCrashLoopBackOff(t *testing.T) {
	e := newEnv(t, "pw-backoff-image")
	e.startReplica(t, config.RuntimeSim, func(c *Config) { c.ContainerBackOff, c.ContainerBackOffMax = time.Minute, 5*time.Minute })
	p := newPod(t, e.cs, "crash-fixed", func(p *corev1.Pod) {
		p.Spec.NodeName = e.node
		p.Spec.Containers = []corev1.Container{{Name: "fixed", Image: "busybox:1"}, {Name: "same", Image: "busybox:1"}}
		p.Annotations = map[string]string{}
		for _, n := range []string{"fixed", "same"} {
			p.Annotations[sim.AnnotationExitCode+"."+n] = "3"
			p.Annotations[sim.AnnotationExitAfter+"."+n] = "20ms"
		}
	})
	e.send(bus.OpAdd, p)
	status := func(name string) corev1.ContainerStatus {
		st, _ := e.get(p.UID)
		if st != nil {
			for _, c := range st.ContainerStatuses {
				if c.Name == name {
					return c
				}
			}
		}
		return corev1.ContainerStatus{}
	}
	crashLooping := func(name string) bool {
		c := status(name)
		return c.RestartCount == 1 && c.State.Waiting != nil && c.State.Waiting.Reason == "CrashLoopBackOff"
	}
	eventually(t, 60*time.Second, "both containers in their one-minute back-off", func() bool { return crashLooping("fixed") && crashLooping("same") })
	wantSame := "back-off 1m0s restarting failed container=same pod=crash-fixed_default(" + string(p.UID) + ")"
	if got := status("same").State.Waiting.Message; got != wantSame {
		t.Fatalf("CrashLoopBackOff message %q, want %q", got, wantSame)
	}

	// the fix: a new image, which runs.
	fixed, err := e.cs.CoreV1().Pods(p.Namespace).Get(t.Context(), p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fixed.Spec.Containers[0].Image = "busybox:2"
	delete(fixed.Annotations, sim.AnnotationExitCode+".fixed")
	delete(fixed.Annotations, sim.AnnotationExitAfter+".fixed")
	if fixed, err = e.cs.CoreV1().Pods(p.Namespace).Update(t.Context(), fixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.send(bus.OpUpdate, fixed)
	// well within the minute the old definition would wait.
	eventually(t, 20*time.Second, "the fixed container running its new image", func() bool {
		c := status("fixed")
		return c.State.Running != nil && c.RestartCount == 2 && c.Image == "busybox:2"
	})
	c := status("same")
	if c.RestartCount != 1 || c.State.Waiting == nil || c.State.Waiting.Reason != "CrashLoopBackOff" || c.State.Waiting.Message != wantSame {
		t.Fatalf("unchanged container after the update: restarts %d, state %+v; want it still waiting %q", c.RestartCount, c.State, wantSame)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
}
