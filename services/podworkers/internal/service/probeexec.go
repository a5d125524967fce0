package service

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/services/podworkers/internal/controller"
)

// serveProbeExec answers the prober's exec (runtime.probeexec.<p>): the
// command runs only when it is one of the exec probe commands of that
// container of the pod this replica holds; anything else is refused with
// an error and counted, so that the prober's bus identity can run its
// probes and nothing more.
func (r *Runner) serveProbeExec(ctx context.Context, ctrl *controller.Controller, rt runtime.Runtime, pub *bus.Publisher, m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	req, err := decodeExec(m)
	if err == nil {
		err = r.checkProbeExec(ctrl, req)
	}
	if err == nil {
		err = r.heldAs(req.ContainerRef)
	}
	if err != nil {
		_ = pub.Send(m.Reply, bus.KindExecResult, &bus.ExecResult{ExitCode: -1, Error: err.Error()})
		return
	}
	// a probe reads nothing from stdin.
	req.Stdin = nil
	r.answerExec(ctx, rt, pub, m.Reply, req)
}

// checkProbeExec refuses (and counts) a probe exec whose command is not an
// exec probe of the named container of a pod this replica holds.
func (r *Runner) checkProbeExec(ctrl *controller.Controller, req *bus.ExecRequest) error {
	var pod *corev1.Pod
	if ctrl != nil {
		pod, _ = ctrl.Pod(req.PodUID)
	}
	if pod != nil && isProbeCommand(pod, req.Container, req.Command) {
		return nil
	}
	r.metrics.probeExecRefused.Inc()
	err := fmt.Errorf("probe exec refused: [%s] is not an exec probe command of container %q of pod %s/%s",
		strings.Join(req.Command, " "), req.Container, req.Namespace, req.Pod)
	r.log.Warn("probe exec refused", append(logging.Pod(req.Namespace, req.Pod, string(req.PodUID)),
		zap.String("container", req.Container), zap.Bool("podKnown", pod != nil))...)
	return err
}

// isProbeCommand says whether cmd is the command of one of the exec probes
// (liveness, readiness, startup) of the pod's container, as written or with
// its $(VAR) references to the container's static env expanded (as the
// kubelet runs it). Only containers and restartable init containers carry
// probes.
func isProbeCommand(pod *corev1.Pod, container string, cmd []string) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			c := &cs[i]
			if c.Name != container {
				continue
			}
			for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
				if p == nil || p.Exec == nil {
					continue
				}
				if slices.Equal(cmd, p.Exec.Command) || slices.Equal(cmd, kube.ExpandCommandStatic(p.Exec.Command, c.Env)) {
					return true
				}
			}
		}
	}
	return false
}
