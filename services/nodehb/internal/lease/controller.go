// Package lease renews the Node's Lease in kube-node-lease, the node
// heartbeat the control plane watches (kubelet: the lease controller of
// component-helpers).
//
// Every renew interval (10 s) the controller sets renewTime on the Lease it
// last wrote (no GET on the happy path). A conflict or a missing Lease makes
// it read or create the Lease again. A failed renewal is retried with
// back-off from 200 ms doubling to 7 s until it succeeds, so renewals go on
// through a brief API server outage and resume when it is back. On shutdown
// it simply stops: the Lease is left to expire, as the kubelet does.
package lease

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Namespace holds node leases.
const Namespace = corev1.NamespaceNodeLease

// Back-off of failed renewals (kubelet lease controller figures).
const (
	BackoffStart = 200 * time.Millisecond
	BackoffMax   = 7 * time.Second
)

// Controller renews one node's Lease.
type Controller struct {
	cs       kubernetes.Interface
	node     string
	duration time.Duration
	interval time.Duration
	nodeUID  func() types.UID
	log      *zap.Logger
	now      func() time.Time

	latest *coordinationv1.Lease
}

// Option tunes a Controller.
type Option func(*Controller)

// WithDuration sets leaseDurationSeconds (40 s).
func WithDuration(d time.Duration) Option { return func(c *Controller) { c.duration = d } }

// WithRenewInterval sets how often the Lease is renewed (10 s).
func WithRenewInterval(d time.Duration) Option { return func(c *Controller) { c.interval = d } }

// WithLogger sets the logger.
func WithLogger(l *zap.Logger) Option { return func(c *Controller) { c.log = l } }

// New returns a controller for the node's Lease; nodeUID gives the Node's
// UID for the owner reference (empty while unknown).
func New(cs kubernetes.Interface, node string, nodeUID func() types.UID, opts ...Option) *Controller {
	c := &Controller{cs: cs, node: node, nodeUID: nodeUID, duration: 40 * time.Second,
		interval: 10 * time.Second, log: zap.NewNop(), now: time.Now}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Run renews the Lease until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	backoff := BackoffStart
	failing := false
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		err := c.Renew(ctx)
		switch {
		case err == nil:
			if failing {
				c.log.Info("lease renewal recovered")
			}
			failing, backoff = false, BackoffStart
			timer.Reset(c.interval)
		case ctx.Err() != nil:
			return
		default:
			c.log.Warn("lease renewal failed, retrying", zap.Duration("backoff", backoff), zap.Error(err))
			failing = true
			timer.Reset(backoff)
			backoff = nextBackoff(backoff)
		}
	}
}

// nextBackoff doubles the wait up to BackoffMax.
func nextBackoff(d time.Duration) time.Duration { return min(d*2, BackoffMax) }

// Renew sets renewTime once, creating the Lease if it is missing.
func (c *Controller) Renew(ctx context.Context) error {
	leases := c.cs.CoordinationV1().Leases(Namespace)
	if c.latest == nil {
		cur, err := leases.Get(ctx, c.node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			created, err := leases.Create(ctx, c.build(nil), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create lease %s/%s: %w", Namespace, c.node, err)
			}
			c.latest = created
			return nil
		case err != nil:
			return fmt.Errorf("get lease %s/%s: %w", Namespace, c.node, err)
		}
		c.latest = cur
	}
	updated, err := leases.Update(ctx, c.build(c.latest), metav1.UpdateOptions{})
	if err != nil {
		// Conflict, deleted, or unreachable: read it afresh next time.
		c.latest = nil
		return fmt.Errorf("renew lease %s/%s: %w", Namespace, c.node, err)
	}
	c.latest = updated
	return nil
}

// build returns base (or a new Lease) with a fresh renewTime, holder,
// duration and owner reference to the Node.
func (c *Controller) build(base *coordinationv1.Lease) *coordinationv1.Lease {
	var l *coordinationv1.Lease
	if base == nil {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: c.node, Namespace: Namespace}}
	} else {
		l = base.DeepCopy()
	}
	l.Spec.HolderIdentity = ptr.To(c.node)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(c.duration / time.Second))
	l.Spec.RenewTime = &metav1.MicroTime{Time: c.now()}
	if uid := c.nodeUID(); uid != "" {
		// kubelet: the Lease is owned by the Node, so it goes with it; a
		// re-registered Node gets the reference moved to its new UID.
		ref := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: c.node, UID: uid}
		if len(l.OwnerReferences) != 1 || l.OwnerReferences[0] != ref {
			l.OwnerReferences = []metav1.OwnerReference{ref}
		}
	}
	return l
}
