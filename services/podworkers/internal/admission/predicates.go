package admission

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	schedcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/splitlet/splitlet/libs/kube"
)

// The predicates the kubelet checks at admission besides resources, by the
// scheduler plugin names it reports as the rejection's reason, and their
// failure descriptions (kubelet: lifecycle.generalFilter).
const (
	ReasonNodeAffinity    = "NodeAffinity"
	ReasonNodeName        = "NodeName"
	ReasonNodePorts       = "NodePorts"
	ReasonTaintToleration = "TaintToleration"

	descNodeAffinity = "node(s) didn't match Pod's node affinity/selector"
	descNodeName     = "node(s) didn't match the requested node name"
	descNodePorts    = "node(s) didn't have free ports for the requested pod ports"
	descTaint        = "node(s) had taints that the pod didn't tolerate"
)

// NodeSource returns the node the agent runs, or nil while it is unknown.
type NodeSource func() *corev1.Node

// NodePredicates rejects a pod the node cannot take, in the kubelet's order
// and with its reasons: its required node affinity or node selector does
// not match the node's labels (NodeAffinity), it names another node
// (NodeName), a host port it asks for is taken by an admitted pod
// (NodePorts), or it does not tolerate a NoExecute taint of the node
// (TaintToleration, static pods exempt). With no node known yet it admits.
func NodePredicates(node NodeSource) Handler {
	return HandlerFunc(func(a *Attributes) Result {
		n := node()
		if n == nil {
			return Result{Admit: true}
		}
		fail := func(reason, desc string) Result {
			return Result{Reason: reason, Message: fmt.Sprintf("Predicate %s failed: %s", reason, desc)}
		}
		if ok, _ := nodeaffinity.GetRequiredNodeAffinity(a.Pod).Match(n); !ok {
			return fail(ReasonNodeAffinity, descNodeAffinity)
		}
		if a.Pod.Spec.NodeName != "" && a.Pod.Spec.NodeName != n.Name {
			return fail(ReasonNodeName, descNodeName)
		}
		if portsTaken(a.Pod, a.OtherPods, a.Local) {
			return fail(ReasonNodePorts, descNodePorts)
		}
		// a static pod (file, http) is not held to the node's taints.
		if src := a.Pod.Annotations[kube.AnnotationConfigSource]; src == "" || src == kube.SourceAPI {
			// kubelet: only NoExecute taints keep a pod off a node it is bound to.
			noExecute := func(t *corev1.Taint) bool { return t.Effect == corev1.TaintEffectNoExecute }
			if _, untolerated := schedcorev1.FindMatchingUntoleratedTaint(klog.Background(), n.Spec.Taints, a.Pod.Spec.Tolerations, noExecute, false); untolerated {
				return fail(ReasonTaintToleration, descTaint)
			}
		}
		return Result{Admit: true}
	})
}

type hostPort struct {
	ip, protocol string
	port         int32
}

// portsTaken says whether a host port of pod is in use by another admitted
// pod: same protocol and port, and the same host IP or either on all
// addresses (the scheduler's NodePorts rule).
func portsTaken(pod *corev1.Pod, others []*corev1.Pod, local func() []*corev1.Pod) bool {
	want := hostPorts(pod)
	if len(want) == 0 {
		return false
	}
	if local != nil {
		others = append(others[:len(others):len(others)], local()...)
	}
	used := sets.New[hostPort]()
	for _, o := range others {
		if o.UID == pod.UID || o.Status.Phase == corev1.PodSucceeded || o.Status.Phase == corev1.PodFailed {
			continue
		}
		used.Insert(hostPorts(o)...)
	}
	for _, w := range want {
		for u := range used {
			if u.port == w.port && u.protocol == w.protocol && (u.ip == w.ip || u.ip == "0.0.0.0" || w.ip == "0.0.0.0") {
				return true
			}
		}
	}
	return false
}

func hostPorts(pod *corev1.Pod) []hostPort {
	var out []hostPort
	add := func(cs []corev1.Container) {
		for _, c := range cs {
			for _, p := range c.Ports {
				if p.HostPort <= 0 {
					continue
				}
				hp := hostPort{ip: p.HostIP, protocol: string(p.Protocol), port: p.HostPort}
				if hp.ip == "" {
					hp.ip = "0.0.0.0"
				}
				if hp.protocol == "" {
					hp.protocol = string(corev1.ProtocolTCP)
				}
				out = append(out, hp)
			}
		}
	}
	add(pod.Spec.InitContainers)
	add(pod.Spec.Containers)
	return out
}
