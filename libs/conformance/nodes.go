package conformance

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/splitlet/splitlet/libs/bus"
)

// NodeHB checks a node heartbeat stage against the API server of
// Target.Config. What it must do (docs/bus.md, agreement 6): register the
// Node, renew its Lease in kube-node-lease, and hold the Node's Ready
// condition to the pod workers' AgentReadiness on state.agent.
//
// Cases (run in order: the kit is the one pod workers of the node):
//   - registers-node-and-lease: the Node exists with an InternalIP address;
//     Lease kube-node-lease/<node> is held by the node.
//   - ready-follows-agent: AgentReadiness ready → Ready True; not ready →
//     Ready False (once the stage's not-ready grace has passed: run it with
//     a grace well below the kit's timeout); ready again → Ready True.
//   - pressure-published: a NodePressure on state.pressure that decodes
//     (the eviction manager's conditions), and the Node's MemoryPressure,
//     DiskPressure and PIDPressure agree with it, each with the kubelet's
//     reason (KubeletHasSufficientMemory, KubeletHasNoDiskPressure,
//     KubeletHasSufficientPID when false).
//   - devices-allocate: with Target.DevicePluginsDir, a device plugin the kit
//     registers is stated in the Node and allocates through
//     devices.allocate (devicesAllocate).
func NodeHB(t *testing.T, tg Target, opts ...Option) {
	h := newHarness(t, tg, opts)
	if h.tg.Config == nil {
		t.Fatal("conformance: NodeHB needs Target.Config (the stage's API server)")
	}
	cs, err := kubernetes.NewForConfig(h.tg.Config)
	if err != nil {
		t.Fatal(err)
	}
	agent := func(t *testing.T, ready bool) {
		a := &bus.AgentReadiness{Ready: ready, Partitions: h.tg.Partitions, Replicas: []string{SourcePodWorkers}}
		if !ready {
			a.Reason, a.Message = "PartitionsUnowned", "conformance: 1 partition has no live pod worker"
			a.Unowned = []int{0}
		}
		h.publish(t, h.workers, h.subjects.AgentReady(), bus.KindAgentReadiness, "", a)
	}
	h.run(t, "registers-node-and-lease", false, func(t *testing.T) {
		agent(t, true)
		h.waitObject(t, "Node "+h.tg.Node+" with an InternalIP", func(ctx context.Context) (any, bool, error) {
			n, err := cs.CoreV1().Nodes().Get(ctx, h.tg.Node, metav1.GetOptions{})
			if err != nil {
				return nil, false, err
			}
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP && a.Address != "" {
					return n.Status, true, nil
				}
			}
			return n.Status, false, nil
		})
		h.waitObject(t, "Lease kube-node-lease/"+h.tg.Node+" held by the node", func(ctx context.Context) (any, bool, error) {
			l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, h.tg.Node, metav1.GetOptions{})
			if err != nil {
				return nil, false, err
			}
			return l.Spec, holder(l) == h.tg.Node && l.Spec.RenewTime != nil, nil
		})
	})
	nodeReady := func(want corev1.ConditionStatus) func(ctx context.Context) (any, bool, error) {
		return func(ctx context.Context) (any, bool, error) {
			n, err := cs.CoreV1().Nodes().Get(ctx, h.tg.Node, metav1.GetOptions{})
			if err != nil {
				return nil, false, err
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c, c.Status == want, nil
				}
			}
			return n.Status.Conditions, false, nil
		}
	}
	h.run(t, "ready-follows-agent", false, func(t *testing.T) {
		agent(t, true)
		h.waitObject(t, "Node Ready True after a ready AgentReadiness", nodeReady(corev1.ConditionTrue))
		agent(t, false)
		h.waitObject(t, "Node Ready False after a not-ready AgentReadiness", nodeReady(corev1.ConditionFalse))
		agent(t, true)
		h.waitObject(t, "Node Ready True again", nodeReady(corev1.ConditionTrue))
	})
	h.run(t, "pressure-published", false, func(t *testing.T) { h.pressurePublished(t, cs) })
	h.run(t, "devices-allocate", false, func(t *testing.T) { h.devicesAllocate(t, cs) })
}

// pressurePublished: the last NodePressure and the Node's pressure
// conditions agree.
func (h *harness) pressurePublished(t *testing.T, cs kubernetes.Interface) {
	stream, err := h.js.Stream(context.Background(), bus.StreamName(h.tg.Node, bus.StreamState))
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[corev1.NodeConditionType][2]string{
		corev1.NodeMemoryPressure: {"KubeletHasSufficientMemory", "KubeletHasInsufficientMemory"},
		corev1.NodeDiskPressure:   {"KubeletHasNoDiskPressure", "KubeletHasDiskPressure"},
		corev1.NodePIDPressure:    {"KubeletHasSufficientPID", "KubeletHasInsufficientPID"},
	}
	h.waitObject(t, "a NodePressure the Node agrees with", func(ctx context.Context) (any, bool, error) {
		msg, err := stream.GetLastMsgForSubject(ctx, h.subjects.NodePressure())
		if err != nil {
			return nil, false, err
		}
		e, err := bus.DecodeMsg(msg.Header, msg.Data)
		if err != nil {
			t.Fatalf("NodePressure does not decode: %v", err)
		}
		np, err := bus.DecodeNodePressure(e)
		if err != nil {
			t.Fatalf("NodePressure does not decode: %v", err)
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, h.tg.Node, metav1.GetOptions{})
		if err != nil {
			return nil, false, err
		}
		for typ, r := range reasons {
			want, reason := corev1.ConditionFalse, r[0]
			if slices.Contains(np.Conditions, typ) {
				want, reason = corev1.ConditionTrue, r[1]
			}
			found := false
			for _, c := range node.Status.Conditions {
				if c.Type == typ {
					found = c.Status == want && c.Reason == reason
				}
			}
			if !found {
				return map[string]any{"nodePressure": np, "conditions": node.Status.Conditions}, false, nil
			}
		}
		return nil, true, nil
	})
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// waitObject polls get until it reports done, failing at the timeout with
// the last value seen.
func (h *harness) waitObject(t *testing.T, what string, get func(context.Context) (any, bool, error)) {
	t.Helper()
	deadline := time.Now().Add(h.tg.Timeout)
	var last string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, done, err := get(ctx)
		cancel()
		if err == nil && done {
			return
		}
		if err != nil {
			last = err.Error()
		} else {
			b, _ := json.Marshal(v)
			last = string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s; last: %s", h.tg.Timeout, what, last)
		}
		<-time.After(100 * time.Millisecond)
	}
}

// staticPods waits for a StaticPods on state.static and checks it: every
// entry names a UID, namespace and name; a stage whose sources are api
// alone lists none.
func (h *harness) staticPods(t *testing.T, ctx context.Context) {
	t.Helper()
	stream, err := h.js.Stream(ctx, bus.StreamName(h.tg.Node, bus.StreamState))
	if err != nil {
		t.Fatal(err)
	}
	last := func(subject string) (*bus.Envelope, error) {
		msg, err := stream.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			return nil, err
		}
		return bus.DecodeMsg(msg.Header, msg.Data)
	}
	var sp *bus.StaticPods
	h.waitObject(t, "StaticPods on "+h.subjects.StaticPods(), func(context.Context) (any, bool, error) {
		e, err := last(h.subjects.StaticPods())
		if err != nil {
			return nil, false, err
		}
		if sp, err = bus.DecodeStaticPods(e); err != nil {
			t.Fatalf("StaticPods does not decode: %v", err)
		}
		return sp, true, nil
	})
	e, err := last(h.subjects.SourcesReady())
	if err != nil {
		t.Fatal(err)
	}
	sr, err := bus.DecodeSourcesReady(e)
	if err != nil {
		t.Fatal(err)
	}
	if len(sr.Sources) == 1 && sr.Sources[0] == SourceAPI && len(sp.Pods) > 0 {
		t.Errorf("StaticPods of a stage with the api source alone: %+v, want none", sp.Pods)
	}
}

// PodConfig checks a pod config stage against the API server of
// Target.Config. What it must do (docs/bus.md, agreement 2): publish the
// node's API pods as PodUpdate messages (source api) on
// podupdates.<partition(uid)>, a RECONCILE on
// podupdates.reconcile.<partition(uid)> instead, and SourcesReady on
// state.sources.
//
// Cases:
//   - api-pod-added: a pod created for the node arrives (ADD, or a SET that
//     lists it) on its partition; a pod of another node never does.
//   - sources-ready: the last SourcesReady lists api as ready.
//   - static-pods: the last StaticPods on state.static decodes, and is
//     empty when SourcesReady names the api source alone; a pod whose
//     author set kubernetes.io/config.mirror to another pod's UID is never
//     published (a pod created after it is).
//   - status-change: a change of the pod's status alone, then of its
//     labels: the label change arrives (UPDATE or SET), and no RECONCILE
//     came on podupdates.<partition(uid)> before it (a RECONCILE, if the
//     stage sends one, goes to podupdates.reconcile.<partition(uid)>).
//   - graceful-delete: a pod deleted with a grace period arrives again with
//     its deletionTimestamp (DELETE, UPDATE or SET).
//   - removed: once the pod is gone from the API server, a REMOVE (or a SET
//     of its partition without it) follows.
func PodConfig(t *testing.T, tg Target, opts ...Option) {
	h := newHarness(t, tg, opts)
	if h.tg.Config == nil {
		t.Fatal("conformance: PodConfig needs Target.Config (the stage's API server)")
	}
	cs, err := kubernetes.NewForConfig(h.tg.Config)
	if err != nil {
		t.Fatal(err)
	}
	// Pods live through several cases, so they go when the suite ends.
	s := &podConfigSuite{h: h, cs: cs, suite: t, ctx: context.Background(), updates: h.watch(t, h.subjects.PodUpdatesAll())}
	h.run(t, "api-pod-added", false, s.apiPodAdded)
	h.run(t, "sources-ready", false, s.sourcesReady)
	h.run(t, "static-pods", false, s.staticPods)
	if s.pod == nil {
		return
	}
	h.run(t, "status-change", false, s.statusChange)
	h.run(t, "graceful-delete", false, s.gracefulDelete)
	h.run(t, "removed", false, s.removed)
}

// podConfigSuite is the state PodConfig's cases share: the pod of the
// node they follow through its life, and the pod updates seen.
type podConfigSuite struct {
	h       *harness
	cs      kubernetes.Interface
	suite   *testing.T
	ctx     context.Context
	updates *watcher
	pod     *corev1.Pod
}

// create makes a pod bound to node, deleted when the suite ends.
func (s *podConfigSuite) create(t *testing.T, p *corev1.Pod, node string) *corev1.Pod {
	p.UID, p.ResourceVersion, p.CreationTimestamp = "", "", metav1.Time{}
	p.Spec.NodeName = node
	got, err := s.cs.CoreV1().Pods(p.Namespace).Create(s.ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.suite.Cleanup(func() {
		_ = s.cs.CoreV1().Pods(got.Namespace).Delete(context.Background(), got.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	})
	return got
}

// lists matches an API pod update on pod's partition, with one of ops,
// that lists pod in a state ok accepts.
func (s *podConfigSuite) lists(pod *corev1.Pod, ops []bus.Op, ok func(*corev1.Pod) bool) func(received) bool {
	return func(r received) bool {
		u, err := bus.DecodePodUpdate(r.env)
		if err != nil || r.env.Source != SourceAPI || r.subject != s.h.subjects.PodUpdates(s.h.partition(string(pod.UID))) {
			return false
		}
		if !slices.Contains(ops, r.env.Op) {
			return false
		}
		for i := range u.Pods {
			if u.Pods[i].UID == pod.UID {
				return ok(&u.Pods[i])
			}
		}
		return false
	}
}

// published tells whether any pod update seen so far lists a pod match
// accepts.
func (s *podConfigSuite) published(match func(*corev1.Pod) bool) bool {
	i, _ := s.updates.find(0, func(r received) bool {
		u, err := bus.DecodePodUpdate(r.env)
		if err != nil {
			return false
		}
		return slices.ContainsFunc(u.Pods, func(p corev1.Pod) bool { return match(&p) })
	})
	return i >= 0
}

func anyPod(*corev1.Pod) bool { return true }

func (s *podConfigSuite) apiPodAdded(t *testing.T) {
	other := s.create(t, s.h.newPod("elsewhere", sleeper()), s.h.tg.Node+"-other")
	s.pod = s.create(t, s.h.newPod("mine", sleeper()), s.h.tg.Node)
	s.updates.waitFor(t, 0, "the node's new pod (ADD or SET)", s.lists(s.pod, []bus.Op{bus.OpAdd, bus.OpSet}, anyPod))
	if s.published(func(p *corev1.Pod) bool { return p.UID == other.UID }) {
		t.Errorf("a pod bound to another node was published")
	}
}

func (s *podConfigSuite) sourcesReady(t *testing.T) {
	h := s.h
	stream, err := h.js.Stream(s.ctx, bus.StreamName(h.tg.Node, bus.StreamState))
	if err != nil {
		t.Fatal(err)
	}
	h.waitObject(t, "SourcesReady with api ready on "+h.subjects.SourcesReady(), func(ctx context.Context) (any, bool, error) {
		msg, err := stream.GetLastMsgForSubject(ctx, h.subjects.SourcesReady())
		if err != nil {
			return nil, false, err
		}
		e, err := bus.DecodeMsg(msg.Header, msg.Data)
		if err != nil {
			t.Fatalf("SourcesReady does not decode: %v", err)
		}
		sr, err := bus.DecodeSourcesReady(e)
		if err != nil {
			t.Fatalf("SourcesReady does not decode: %v", err)
		}
		return sr, slices.Contains(sr.Ready, SourceAPI), nil
	})
}

// staticPods runs the static pod cases, then checks that a pod whose
// kubernetes.io/config.mirror names the node's pod is never published.
func (s *podConfigSuite) staticPods(t *testing.T) {
	s.h.staticPods(t, s.ctx)
	if s.pod == nil {
		t.Skip("no pod of the node to forge a mirror annotation for")
	}
	forged := s.h.newPod("forged-mirror", sleeper())
	forged.Annotations = map[string]string{"kubernetes.io/config.mirror": string(s.pod.UID)}
	got := s.create(t, forged, s.h.tg.Node)
	after := s.create(t, s.h.newPod("after-forged", sleeper()), s.h.tg.Node)
	s.updates.waitFor(t, 0, "the pod created after the forged one (ADD or SET)", s.lists(after, []bus.Op{bus.OpAdd, bus.OpSet}, anyPod))
	if s.published(func(p *corev1.Pod) bool { return p.UID == got.UID || p.Name == got.Name }) {
		t.Errorf("a pod with a forged kubernetes.io/config.mirror was published")
	}
}

// change writes the pod (its status when status) with mod applied,
// retrying conflicts.
func (s *podConfigSuite) change(t *testing.T, what string, status bool, mod func(*corev1.Pod)) {
	t.Helper()
	pods := s.cs.CoreV1().Pods(s.pod.Namespace)
	for try := 0; ; try++ {
		cur, err := pods.Get(s.ctx, s.pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mod(cur)
		if status {
			_, err = pods.UpdateStatus(s.ctx, cur, metav1.UpdateOptions{})
		} else {
			_, err = pods.Update(s.ctx, cur, metav1.UpdateOptions{})
		}
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || try == 10 {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

func (s *podConfigSuite) statusChange(t *testing.T) {
	from := s.updates.count()
	s.change(t, "status", true, func(p *corev1.Pod) { p.Status.Message = "conformance: a status-only change" })
	s.change(t, "labels", false, func(p *corev1.Pod) {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels["conformance"] = "status-change"
	})
	s.updates.waitFor(t, from, "the label change after the status change (UPDATE or SET)",
		s.lists(s.pod, []bus.Op{bus.OpUpdate, bus.OpSet}, func(p *corev1.Pod) bool { return p.Labels["conformance"] == "status-change" }))
	var on string
	if i, _ := s.updates.find(from, func(r received) bool { on = r.subject; return r.env.Op == bus.OpReconcile }); i >= 0 {
		t.Errorf("a RECONCILE on %s: a RECONCILE goes to podupdates.reconcile.<partition> (%s for this pod)",
			on, s.h.subjects.PodReconciles(s.h.partition(string(s.pod.UID))))
	}
}

func (s *podConfigSuite) gracefulDelete(t *testing.T) {
	from := s.updates.count()
	if err := s.cs.CoreV1().Pods(s.pod.Namespace).Delete(s.ctx, s.pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(30))}); err != nil {
		t.Fatal(err)
	}
	s.updates.waitFor(t, from, "the pod with its deletionTimestamp (DELETE, UPDATE or SET)",
		s.lists(s.pod, []bus.Op{bus.OpDelete, bus.OpUpdate, bus.OpSet}, func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil }))
}

func (s *podConfigSuite) removed(t *testing.T) {
	from := s.updates.count()
	err := s.cs.CoreV1().Pods(s.pod.Namespace).Delete(s.ctx, s.pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	part := s.h.subjects.PodUpdates(s.h.partition(string(s.pod.UID)))
	s.updates.waitFor(t, from, "REMOVE of the pod, or a SET of its partition without it", func(r received) bool {
		if r.subject != part || r.env.Source != SourceAPI {
			return false
		}
		switch r.env.Op {
		case bus.OpRemove:
			return s.lists(s.pod, []bus.Op{bus.OpRemove}, anyPod)(r)
		case bus.OpSet:
			return !s.lists(s.pod, []bus.Op{bus.OpSet}, anyPod)(r)
		}
		return false
	})
}
