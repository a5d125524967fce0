// Package nodestatus registers the agent's Node and keeps its status, as the
// kubelet's node status manager does.
//
// The controller is a small state machine:
//
//	unregistered --(create, or adopt an existing Node)--> registered
//	registered   --(GET finds no Node: deleted by hand)--> unregistered
//
// While registered, every update period (10 s) it reads the CURRENT Node
// from the API server (a fresh GET, never a cached copy), computes the status
// the agent reports, and writes it with a strategic merge patch computed
// against that copy when anything but heartbeat times changed, or when the
// report period (5 min) has passed since the last write. A change of the
// agent's readiness triggers a sync at once.
//
// Invariants: the patch carries the Node's UID as a precondition, so a Node
// deleted and re-created in between is never patched from the old copy;
// LastTransitionTime of a condition moves only when its status changes;
// LastHeartbeatTime moves on every write. On shutdown nothing is written:
// the Node stays as it is.
package nodestatus

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/kube"
)

// Readiness tells whether the agent behind the Node is ready.
type Readiness interface {
	// AgentReady reports readiness and, when not ready, a reason and message.
	AgentReady() (ready bool, reason, message string)
	// Changed is signalled when AgentReady's answer may have changed.
	Changed() <-chan struct{}
}

// RuntimeVersioner is a Readiness that also knows the container runtime
// behind the agent; its answer, when not empty, is the Node's
// nodeInfo.containerRuntimeVersion (signalled through Changed).
type RuntimeVersioner interface {
	RuntimeVersion() string
}

// Pressure tells which pressure conditions (MemoryPressure, DiskPressure,
// PIDPressure) hold: the eviction manager's.
type Pressure interface {
	Conditions() []corev1.NodeConditionType
	// Changed is signalled when Conditions' answer changed.
	Changed() <-chan struct{}
}

// Controller registers the Node and reports its status.
type Controller struct {
	cs        kubernetes.Interface
	desired   *Desired
	ready     Readiness
	pressure  Pressure
	extended  ExtendedResources
	log       *zap.Logger
	recorder  record.EventRecorder
	update    time.Duration
	report    time.Duration
	now       func() time.Time
	retryWait time.Duration

	mu         sync.Mutex
	uid        types.UID
	lastReport time.Time
	registered chan struct{}
	regOnce    sync.Once
}

// Option tunes a Controller.
type Option func(*Controller)

// WithUpdateFrequency sets how often the status is computed (kubelet:
// nodeStatusUpdateFrequency, 10 s).
func WithUpdateFrequency(d time.Duration) Option { return func(c *Controller) { c.update = d } }

// WithReportFrequency sets how often an unchanged status is written anyway
// (kubelet: nodeStatusReportFrequency, 5 min).
func WithReportFrequency(d time.Duration) Option { return func(c *Controller) { c.report = d } }

// WithRecorder records Node events (NodeReady, NodeNotReady, ...).
func WithRecorder(r record.EventRecorder) Option { return func(c *Controller) { c.recorder = r } }

// WithPressure reports the eviction manager's pressure conditions (without
// it, none holds).
func WithPressure(p Pressure) Option { return func(c *Controller) { c.pressure = p } }

// WithLogger sets the logger.
func WithLogger(l *zap.Logger) Option { return func(c *Controller) { c.log = l } }

// New builds a controller for the desired Node.
func New(cs kubernetes.Interface, desired *Desired, ready Readiness, opts ...Option) *Controller {
	c := &Controller{
		cs: cs, desired: desired, ready: ready,
		log:        zap.NewNop(),
		update:     10 * time.Second,
		report:     5 * time.Minute,
		now:        time.Now,
		retryWait:  time.Second,
		registered: make(chan struct{}),
	}
	for _, o := range opts {
		o(c)
	}
	c.retryWait = min(c.retryWait, c.update)
	return c
}

// NodeUID is the UID of the Node as last seen, empty before registration.
func (c *Controller) NodeUID() types.UID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.uid
}

// Registered is closed once the Node has been registered the first time.
func (c *Controller) Registered() <-chan struct{} { return c.registered }

// Run registers the Node and keeps its status until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	c.event(corev1.EventTypeNormal, "Starting", "Starting kubelet (splitlet nodehb).")
	timer := time.NewTimer(0)
	defer timer.Stop()
	var pressureChanged <-chan struct{}
	if c.pressure != nil {
		pressureChanged = c.pressure.Changed()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-pressureChanged:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-c.ready.Changed():
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		wait := c.update
		if err := c.Sync(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("node status sync failed, retrying", zap.Error(err))
			wait = c.retryWait
		}
		timer.Reset(wait)
	}
}

// Sync runs one round: registers the Node when it is missing, otherwise
// reports the status if it changed or the report period has passed.
func (c *Controller) Sync(ctx context.Context) error {
	node, err := c.cs.CoreV1().Nodes().Get(ctx, c.desired.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return c.register(ctx)
	}
	if err != nil {
		return fmt.Errorf("get node %s: %w", c.desired.Name, err)
	}
	if c.NodeUID() != node.UID {
		// First sight of this Node in this process: adopt it.
		if node, err = c.adopt(ctx, node); err != nil {
			return err
		}
	}
	c.setUID(node.UID)
	c.markRegistered()
	now := c.now()
	updated := node.DeepCopy()
	c.setStatus(updated, now)
	changed := statusChanged(&node.Status, &updated.Status)
	c.mu.Lock()
	due := now.Sub(c.lastReport) >= c.report
	c.mu.Unlock()
	if !changed && !due {
		return nil
	}
	if err := c.patchStatus(ctx, node, updated); err != nil {
		return err
	}
	c.mu.Lock()
	c.lastReport = now
	c.mu.Unlock()
	c.recordTransitions(&node.Status, &updated.Status)
	return nil
}

func (c *Controller) setUID(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uid = uid
}

func (c *Controller) markRegistered() {
	c.regOnce.Do(func() { close(c.registered) })
}

// register creates the Node, or adopts an existing one of that name
// (kubelet: registerWithAPIServer / tryRegisterWithAPIServer).
func (c *Controller) register(ctx context.Context) error {
	now := c.now()
	node := c.desired.NewNode()
	c.setStatus(node, now)
	created, err := c.cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err == nil {
		c.setUID(created.UID)
		c.mu.Lock()
		c.lastReport = now
		c.mu.Unlock()
		c.markRegistered()
		c.log.Info("node registered", zap.String("uid", string(created.UID)))
		c.recordTransitions(&corev1.NodeStatus{}, &created.Status)
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register node %s: %w", c.desired.Name, err)
	}
	// Adopted by the next sync, from a fresh read.
	return c.Sync(ctx)
}

// adopt brings an existing Node's labels in line with the
// configuration (kubelet: the reconcile steps of tryRegisterWithAPIServer).
func (c *Controller) adopt(ctx context.Context, existing *corev1.Node) (*corev1.Node, error) {
	adopted := existing.DeepCopy()
	if c.desired.ReconcileExisting(adopted) {
		var err error
		if adopted, err = c.cs.CoreV1().Nodes().Update(ctx, adopted, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("adopt node %s: update labels: %w", c.desired.Name, err)
		}
	}
	c.log.Info("existing node adopted", zap.String("uid", string(adopted.UID)))
	return adopted, nil
}

// patchStatus writes updated's status with a strategic merge patch against
// the copy just read; the UID in the patch is a precondition.
func (c *Controller) patchStatus(ctx context.Context, cur, updated *corev1.Node) error {
	old := cur.DeepCopy()
	// kubelet: the patch carries metadata.uid so that a re-created Node
	// fails it instead of being patched from an old copy.
	old.UID = ""
	oldJSON, err := json.Marshal(old)
	if err != nil {
		return err
	}
	newJSON, err := json.Marshal(updated)
	if err != nil {
		return err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, corev1.Node{})
	if err != nil {
		return fmt.Errorf("node status patch: %w", err)
	}
	if _, err := c.cs.CoreV1().Nodes().Patch(ctx, cur.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patch node %s status: %w", cur.Name, err)
	}
	return nil
}

// setStatus fills the parts of the status the agent owns (kubelet: the
// nodestatus setters).
func (c *Controller) setStatus(n *corev1.Node, now time.Time) {
	d := c.desired
	prevCapacity := n.Status.Capacity
	n.Status.Capacity = d.Capacity.DeepCopy()
	n.Status.Allocatable = d.Allocatable.DeepCopy()
	c.setExtended(n, prevCapacity)
	n.Status.Addresses = append([]corev1.NodeAddress(nil), d.Addresses...)
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = d.Port
	n.Status.NodeInfo = d.NodeInfo
	if rv, ok := c.ready.(RuntimeVersioner); ok {
		// kubelet: containerRuntimeVersion is what the runtime itself
		// reports; here the pod workers name it in their readiness.
		if v := rv.RuntimeVersion(); v != "" {
			n.Status.NodeInfo.ContainerRuntimeVersion = v
		}
	}
	n.Status.Phase = ""

	ready, reason, message := c.ready.AgentReady()
	readyCond := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		Reason: "KubeletReady", Message: "kubelet is posting ready status"}
	if !ready {
		readyCond = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse,
			Reason: reason, Message: message}
		if readyCond.Reason == "" {
			readyCond.Reason = "KubeletNotReady"
		}
	}
	want := append(c.pressureConditions(), readyCond)
	for _, w := range want {
		setCondition(n, w, now)
	}
}

// pressureConditions are the kubelet's MemoryPressure, DiskPressure and
// PIDPressure conditions, true as the eviction manager says.
func (c *Controller) pressureConditions() []corev1.NodeCondition {
	var on []corev1.NodeConditionType
	if c.pressure != nil {
		on = c.pressure.Conditions()
	}
	out := make([]corev1.NodeCondition, 0, 3)
	for _, p := range []struct {
		typ                  corev1.NodeConditionType
		okReason, okMessage  string
		badReason, badMesage string
	}{
		{corev1.NodeMemoryPressure, "KubeletHasSufficientMemory", "kubelet has sufficient memory available",
			"KubeletHasInsufficientMemory", "kubelet has insufficient memory available"},
		{corev1.NodeDiskPressure, "KubeletHasNoDiskPressure", "kubelet has no disk pressure",
			"KubeletHasDiskPressure", "kubelet has disk pressure"},
		{corev1.NodePIDPressure, "KubeletHasSufficientPID", "kubelet has sufficient PID available",
			"KubeletHasInsufficientPID", "kubelet has insufficient PID available"},
	} {
		cond := corev1.NodeCondition{Type: p.typ, Status: corev1.ConditionFalse, Reason: p.okReason, Message: p.okMessage}
		if slices.Contains(on, p.typ) {
			cond = corev1.NodeCondition{Type: p.typ, Status: corev1.ConditionTrue, Reason: p.badReason, Message: p.badMesage}
		}
		out = append(out, cond)
	}
	return out
}

// setCondition updates or adds one condition: the heartbeat moves every
// time, the transition time only when the status changes (kubelet rule).
func setCondition(n *corev1.Node, w corev1.NodeCondition, now time.Time) {
	t := metav1.NewTime(now)
	for i := range n.Status.Conditions {
		cur := &n.Status.Conditions[i]
		if cur.Type != w.Type {
			continue
		}
		if cur.Status != w.Status || cur.LastTransitionTime.IsZero() {
			cur.LastTransitionTime = t
		}
		cur.Status, cur.Reason, cur.Message = w.Status, w.Reason, w.Message
		cur.LastHeartbeatTime = t
		return
	}
	w.LastHeartbeatTime, w.LastTransitionTime = t, t
	n.Status.Conditions = append(n.Status.Conditions, w)
}

// statusChanged compares two statuses ignoring the heartbeat times (kubelet:
// nodeStatusHasChanged).
func statusChanged(a, b *corev1.NodeStatus) bool {
	if len(a.Conditions) != len(b.Conditions) {
		return true
	}
	strip := func(s *corev1.NodeStatus) *corev1.NodeStatus {
		c := s.DeepCopy()
		for i := range c.Conditions {
			c.Conditions[i].LastHeartbeatTime = metav1.Time{}
		}
		return c
	}
	return !equality.Semantic.DeepEqual(strip(a), strip(b))
}

func condition(s *corev1.NodeStatus, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			return &s.Conditions[i]
		}
	}
	return nil
}

// recordTransitions records the kubelet's Node events for conditions whose
// status changed in a write.
func (c *Controller) recordTransitions(before, after *corev1.NodeStatus) {
	events := map[corev1.NodeConditionType][2]string{
		corev1.NodeMemoryPressure: {"NodeHasSufficientMemory", "NodeHasInsufficientMemory"},
		corev1.NodeDiskPressure:   {"NodeHasNoDiskPressure", "NodeHasDiskPressure"},
		corev1.NodePIDPressure:    {"NodeHasSufficientPID", "NodeHasInsufficientPID"},
	}
	for _, cond := range after.Conditions {
		prev := condition(before, cond.Type)
		if prev != nil && prev.Status == cond.Status {
			continue
		}
		if cond.Type == corev1.NodeReady {
			if cond.Status == corev1.ConditionTrue {
				c.log.Info("node ready")
				c.event(corev1.EventTypeNormal, "NodeReady", "Node %s status is now: NodeReady", c.desired.Name)
			} else {
				c.log.Info("node not ready", zap.String("reason", cond.Reason), zap.String("message", cond.Message))
				c.event(corev1.EventTypeNormal, "NodeNotReady", "Node %s status is now: NodeNotReady", c.desired.Name)
			}
			continue
		}
		if e, ok := events[cond.Type]; ok {
			name := e[0]
			if cond.Status == corev1.ConditionTrue {
				name = e[1]
			}
			c.event(corev1.EventTypeNormal, name, "Node %s status is now: %s", c.desired.Name, name)
		}
	}
}

func (c *Controller) event(kind, reason, format string, args ...any) {
	if c.recorder != nil {
		c.recorder.Eventf(kube.NodeRef(c.desired.Name), kind, reason, format, args...)
	}
}
