package statusmanager

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
)

// APIView is the informer transform of the API pods statussync caches, and
// what it keeps of the pod a status patch returns (Manager.written): a new
// pod with only the fields statussync reads, a fraction of a pod's weight at
// scale. The API copy is read in four ways, and each decides what stays.
//
// statussync reads:
//   - metadata: namespace and name (the informer's key, apiCopy, the patch
//     and delete requests, log lines), uid (indexUID, apiCopy, freshest, the
//     patch's and the delete's UID precondition), resourceVersion
//     (freshest picks the newer of the informer's copy and the patch's
//     answer; the object reference of an Event), generation (a generated
//     status's observedGeneration when the API copy stands in for the spec,
//     and Merge's terminal readiness conditions), creationTimestamp (the
//     pod start histograms), deletionTimestamp (canBeDeleted, onAPIPod,
//     start tracking, a container's restart count when it vanished), and of
//     the annotations only kubernetes.io/config.mirror (busUID, indexMirror,
//     canBeDeleted) and kubernetes.io/config.source (isStatic);
//   - status, whole: it is what the patch is computed against
//     (StatusPatch's two-way merge from the API status: a field missing here
//     would be cleared on the server), what Merge keeps (foreign conditions,
//     resource claim statuses), what Generate starts from (old status, IPs,
//     phase, reason, QoS class, probe results of running instances), what
//     syncBatch and onAPIPod compare, what a restarted stage rebuilds its
//     runtime status from (seedFromAPI), and what the start histograms
//     watch;
//   - spec, when the bus has not brought the pod's spec and the API copy
//     stands in for it (specOf), and for checks on the API copy itself:
//     restartPolicy (Phase, CheckTransition), readinessGates (podReady,
//     onAPIPod), pod-level resources (QOSClass), and of the init, regular
//     and ephemeral containers their name (statuses are matched by name;
//     Normalize counts them and orders init statuses as the spec does), image
//     (the image of a container the runtime has not reported), resource
//     requests and limits (QOSClass), restartPolicy (sidecars) and whether a
//     startup or readiness probe is set (only whether: applyProbes asks
//     nothing more of a probe, so an empty probe marks it); of ephemeral
//     containers, which take no part in phase, QoS or probes, only the
//     name and image;
//   - spec.volumes, only to tell a stateful pod from a stateless one (the
//     pod start SLI): the volumes of the stateless kinds (secret, configMap,
//     downwardAPI, emptyDir, projected, among them the service account
//     token) are dropped, the others kept, so that the answer is the same.
//
// Everything else (labels, owner references, managed fields, other
// annotations, env, commands, mounts, the stateless volumes, tolerations,
// affinity, security contexts...) is dropped. The view is built anew and
// never written back, so it is safe to share the decoded status with it; it
// is idempotent, as client-go requires of a transform. Objects other than
// pods (a tombstone) pass unchanged.
func APIView(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return apiView(p), nil
}

// apiView is APIView of a pod.
func apiView(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion, Generation: p.Generation,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec:   specView(&p.Spec),
		Status: p.Status,
	}
	out.Spec.Volumes = statefulVolumes(p.Spec.Volumes)
	keepAnnotations(out, p, AnnotationMirror, AnnotationSource)
	return out
}

// DecodeBusPod is the bus.PodDecoder of statussync's pod updates: the
// metadata and the spec whole, and of the status only the QoS class, the
// one status field busView keeps.
var DecodeBusPod = bus.PodSpecAndStatus(bus.PodStatusQOSClass)

// busView is what the manager keeps of a pod a PodUpdate brings
// (entry.spec): a new pod with only the fields statussync reads of it. The
// bus copy is the spec a status is generated from (specOf: regenerate,
// updateStatus, sync, syncBatch), and statussync reads of it:
//   - metadata: namespace and name (the API copy the status goes to, the
//     cached status's name, log lines), uid (the entry's key already; kept
//     so that the view names its pod), generation (a generated status's
//     observedGeneration: the bus copy may be newer than the informer's),
//     deletionTimestamp (a container that vanished while the pod is being
//     deleted keeps its restart count), and of the annotations only
//     kubernetes.io/config.source (isStatic, should a message name no
//     source) and kubernetes.io/config.seen (when the node first saw the
//     pod: the pod start SLI);
//   - spec: as APIView keeps it (restart policy, readiness gates, pod-level
//     resources, and of the containers what phase, QoS, probes and status
//     order read), but without the volumes: the start SLI asks the API copy
//     alone whether a pod is stateful;
//   - status: only the QoS class, which a generated status takes from the
//     bus copy when the API copy shows none (qosOf). The status to patch
//     against and to keep is always the API copy's.
//
// Nothing else of the bus copy is read: a PodUpdate's deletionTimestamp is
// read from the decoded pod before the view is taken, deletion and Events
// go by the API copy (its own view), and a pod's trace is remembered by the
// service before the manager sees the pod. The view shares the decoded
// message's parts it keeps (resource lists, the deletion time): the
// message is this manager's alone and nothing writes to it.
func busView(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, Generation: p.Generation, DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec:   specView(&p.Spec),
		Status: corev1.PodStatus{QOSClass: p.Status.QOSClass},
	}
	keepAnnotations(out, p, AnnotationSource, bus.AnnotationSeen)
	return out
}

// specView is the part of a pod spec both views keep (see APIView): the
// restart policy, readiness gates, pod-level resources, and of the init,
// regular and ephemeral containers what viewContainers keeps (of the
// ephemeral ones only the name and image).
func specView(s *corev1.PodSpec) corev1.PodSpec {
	out := corev1.PodSpec{
		RestartPolicy:  s.RestartPolicy,
		ReadinessGates: s.ReadinessGates,
		Resources:      s.Resources,
		InitContainers: viewContainers(s.InitContainers),
		Containers:     viewContainers(s.Containers),
	}
	if n := len(s.EphemeralContainers); n > 0 {
		out.EphemeralContainers = make([]corev1.EphemeralContainer, n)
		for i := range s.EphemeralContainers {
			c := &s.EphemeralContainers[i]
			out.EphemeralContainers[i].Name, out.EphemeralContainers[i].Image = c.Name, c.Image
		}
	}
	return out
}

// keepAnnotations copies the annotations keys of from that it has to out.
func keepAnnotations(out, from *corev1.Pod, keys ...string) {
	for _, k := range keys {
		if v, ok := from.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
}

// viewContainers keeps what statussync reads of containers: name, image,
// requests and limits, restart policy, and whether a startup or readiness
// probe is set.
func viewContainers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i := range cs {
		c := &cs[i]
		out[i] = corev1.Container{Name: c.Name, Image: c.Image, RestartPolicy: c.RestartPolicy,
			Resources: corev1.ResourceRequirements{Requests: c.Resources.Requests, Limits: c.Resources.Limits}}
		if c.StartupProbe != nil {
			out[i].StartupProbe = &corev1.Probe{}
		}
		if c.ReadinessProbe != nil {
			out[i].ReadinessProbe = &corev1.Probe{}
		}
	}
	return out
}

// statefulVolumes drops the volumes of the kinds the start SLI counts as
// stateless (see stateful), keeping the others as they are.
func statefulVolumes(vs []corev1.Volume) []corev1.Volume {
	var out []corev1.Volume
	for i := range vs {
		if !stateless(&vs[i]) {
			out = append(out, vs[i])
		}
	}
	return out
}
