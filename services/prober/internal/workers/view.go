package workers

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeView is what the manager keeps of a pod a PodUpdate brings (the
// podEntry, and through its workers' container pointers): a new pod with
// only the fields the manager and its workers read, a fraction of a
// decoded pod's weight, and no pointer into the message the pod came in
// (which holds every other pod of a SET). The prober reads, of the pod:
//   - metadata: namespace, name and uid (the worker's key, its metric
//     labels, the results it sends, its Events' object reference and its
//     exec requests name the pod by them), deletionTimestamp (a pod being
//     deleted: its liveness and startup probes report Success and end);
//   - spec.restartPolicy (whether a terminated container will run again:
//     willRestart);
//   - status.phase (a pod a PodUpdate shows terminal: its workers end);
//
// and of the containers it probes (the regular containers and the sidecars,
// init containers whose restartPolicy is Always: probedContainers) that
// have a probe:
//   - name (the container's runtime status, the worker's key, results,
//     Events), restartPolicy (probedContainers picks sidecars by it;
//     willRestart);
//   - the startup, readiness and liveness probes, whole (a worker copies
//     its probe, with defaults, once: action, timings, thresholds);
//   - of the ports only name and number, and only when an httpGet or
//     tcpSocket probe names its port (kube.ResolvePort looks the name up;
//     a port given as a number reads no port);
//   - of the env only the variables with a literal value, and only when an
//     exec probe is set (its command's $(VAR) references: kube.ExpandCommandStatic).
//
// Everything else (labels, annotations, owner references, other init
// containers, containers without a probe, images, commands, mounts,
// resources, volumes, the rest of the status...) is dropped. The view
// shares the decoded pod's parts it keeps (the probes, the deletion time):
// the decoded message is this manager's alone and nothing writes to it.
func probeView(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, DeletionTimestamp: p.DeletionTimestamp},
		Spec:       corev1.PodSpec{RestartPolicy: p.Spec.RestartPolicy},
		Status:     corev1.PodStatus{Phase: p.Status.Phase},
	}
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways && probed(c) {
			out.Spec.InitContainers = append(out.Spec.InitContainers, viewContainer(c))
		}
	}
	for i := range p.Spec.Containers {
		if c := &p.Spec.Containers[i]; probed(c) {
			out.Spec.Containers = append(out.Spec.Containers, viewContainer(c))
		}
	}
	return out
}

// probed says whether a container has any probe.
func probed(c *corev1.Container) bool {
	return c.StartupProbe != nil || c.ReadinessProbe != nil || c.LivenessProbe != nil
}

// viewContainer keeps what the workers read of a probed container: name,
// restart policy, probes, the ports' names and numbers when a probe names
// its port, the literal env when an exec probe may expand it.
func viewContainer(c *corev1.Container) corev1.Container {
	out := corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy,
		StartupProbe: c.StartupProbe, ReadinessProbe: c.ReadinessProbe, LivenessProbe: c.LivenessProbe}
	namedPort, exec := false, false
	for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
		switch {
		case p == nil:
		case p.Exec != nil:
			exec = true
		case p.HTTPGet != nil:
			namedPort = namedPort || p.HTTPGet.Port.Type == intstr.String
		case p.TCPSocket != nil:
			namedPort = namedPort || p.TCPSocket.Port.Type == intstr.String
		}
	}
	if namedPort && len(c.Ports) > 0 {
		out.Ports = make([]corev1.ContainerPort, len(c.Ports))
		for i := range c.Ports {
			out.Ports[i] = corev1.ContainerPort{Name: c.Ports[i].Name, ContainerPort: c.Ports[i].ContainerPort}
		}
	}
	if exec {
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				out.Env = append(out.Env, corev1.EnvVar{Name: e.Name, Value: e.Value})
			}
		}
	}
	return out
}
