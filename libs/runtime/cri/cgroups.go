package cri

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/cgroups"
	"github.com/splitlet/splitlet/libs/kube"
)

// The sandbox annotations the QoS cgroups are sized from: the pod's QoS
// class and CPU request in millicores, read back from the runtime by
// whichever pod worker sizes the burstable cgroup.
const (
	annotationQOS        = "io.splitlet.pod.qos"
	annotationCPURequest = "io.splitlet.pod.cpu-request"
)

// WithCgroups lays out the pods' cgroups on n as the kubelet does: the
// QoS cgroups made (and sized) before a pod's sandbox, the pod's cgroup
// with its values, the parent of the sandbox (CgroupParent), removed with
// the pod (default: none, the CRI runtime's default parent).
func WithCgroups(n *cgroups.Node) Option { return func(o *options) { o.cgroups = n } }

// Cgroups is the layout the runtime writes (nil: none).
func (r *Runtime) Cgroups() *cgroups.Node { return r.opts.cgroups }

// cgroupParent is the CgroupParent of the pod's sandbox.
func (r *Runtime) cgroupParent(p *corev1.Pod) string {
	if r.opts.cgroups == nil {
		return ""
	}
	return r.opts.cgroups.Parent(p)
}

// sandboxAnnotations are the pod's annotations and, with cgroups, its QoS
// class and CPU request.
func (r *Runtime) sandboxAnnotations(p *corev1.Pod) map[string]string {
	if r.opts.cgroups == nil {
		return p.Annotations
	}
	out := make(map[string]string, len(p.Annotations)+2)
	for k, v := range p.Annotations {
		out[k] = v
	}
	out[annotationQOS] = string(kube.QOSClass(p))
	out[annotationCPURequest] = strconv.FormatInt(cgroups.CPURequestMilli(p), 10)
	return out
}

// ensurePodCgroup makes the pod's cgroup ready for a sandbox or container
// of it: the QoS cgroups where missing and sized (a new sandbox only;
// failures there are logged, the pod still starts), then the pod's own
// cgroup with its current values (a failure fails the start). Only a
// burstable pod changes a QoS cgroup's size, so the sandboxes are listed
// to size them for a burstable pod or for QoS cgroups that are missing;
// ReconcileCgroups sizes them again after pods are gone.
func (r *Runtime) ensurePodCgroup(ctx context.Context, p *corev1.Pod, newSandbox bool) error {
	n := r.opts.cgroups
	if n == nil {
		return nil
	}
	if newSandbox && (kube.QOSClass(p) == corev1.PodQOSBurstable || !n.QoSExists()) {
		if err := r.ensureQoS(ctx, p); err != nil {
			r.log.Warn("cannot update the QoS cgroups", append(podFields(p), zap.Error(err))...)
		}
	}
	if err := n.EnsurePod(p); err != nil {
		return fmt.Errorf("create the pod's cgroup: %w", err)
	}
	return nil
}

// ensureQoS creates and sizes the QoS cgroups, counting the ready
// sandboxes of the node and the pod about to get one (kubelet: the QoS
// container manager's UpdateCgroups before a pod's cgroup is made).
func (r *Runtime) ensureQoS(ctx context.Context, starting *corev1.Pod) error {
	milli, err := r.burstableMilli(ctx, starting)
	if err != nil {
		return err
	}
	return r.opts.cgroups.EnsureQoS(milli)
}

// burstableMilli sums the CPU requests of the node's burstable pods with
// a ready sandbox, and starting's when it is burstable and has none.
func (r *Runtime) burstableMilli(ctx context.Context, starting *corev1.Pod) (int64, error) {
	sbs, err := r.rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
		LabelSelector: r.nodeLabels(map[string]string{}),
	})
	if err != nil {
		return 0, err
	}
	var milli int64
	counted := map[string]bool{}
	for _, sb := range sbs {
		uid := sb.GetMetadata().GetUid()
		if counted[uid] || sb.GetAnnotations()[annotationQOS] != string(corev1.PodQOSBurstable) {
			continue
		}
		counted[uid] = true
		v, _ := strconv.ParseInt(sb.GetAnnotations()[annotationCPURequest], 10, 64)
		milli += v
	}
	if starting != nil && !counted[string(starting.UID)] && kube.QOSClass(starting) == corev1.PodQOSBurstable {
		milli += cgroups.CPURequestMilli(starting)
	}
	return milli, nil
}

// removePodCgroup removes a pod's cgroup once its sandboxes are gone; a
// cgroup that cannot go yet is left to ReconcileCgroups.
func (r *Runtime) removePodCgroup(uid types.UID) {
	if r.opts.cgroups == nil {
		return
	}
	if err := r.opts.cgroups.RemovePod(uid); err != nil {
		r.log.Info("cannot remove the pod's cgroup yet", zap.String("uid", string(uid)), zap.Error(err))
	}
}

// ReconcileCgroups is the node-wide cgroup housekeeping (kubelet: the
// periodic QoS update and the cleanup of orphaned pod cgroups): the QoS
// cgroups made again where missing and sized from the node's sandboxes,
// and the pod cgroups of pods that have no sandbox in the runtime and no
// start under way here removed, once two reconciles in a row found them
// so (another pod worker may be between making a pod's cgroup and its
// sandbox). One pod worker of the node runs it.
func (r *Runtime) ReconcileCgroups(ctx context.Context) error {
	if r.opts.cgroups == nil {
		return nil
	}
	errs := []error{r.ensureQoS(ctx, nil)}
	pods, err := r.opts.cgroups.PodCgroups()
	if err != nil {
		errs = append(errs, err)
	}
	if len(pods) == 0 {
		return errors.Join(errs...)
	}
	// any sandbox of the UID, whichever node made it: a cgroup root shared
	// by nodes on one runtime loses no pod's cgroup.
	sbs, err := r.rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	live := map[types.UID]bool{}
	for _, sb := range sbs {
		live[types.UID(sb.GetMetadata().GetUid())] = true
	}
	// a start under way here may be between the pod's cgroup and its
	// sandbox.
	r.mu.Lock()
	for uid, pd := range r.pods {
		if pd.busy > 0 {
			live[uid] = true
		}
	}
	r.mu.Unlock()
	r.orphanMu.Lock()
	defer r.orphanMu.Unlock()
	suspects := map[types.UID]bool{}
	for uid := range pods {
		switch {
		case live[uid]:
		case r.orphanCgroups[uid]:
			if err := r.opts.cgroups.RemovePod(uid); err != nil {
				errs = append(errs, err)
				suspects[uid] = true
				continue
			}
			r.log.Info("removed the cgroup of a pod without a sandbox", zap.String("uid", string(uid)))
		default:
			suspects[uid] = true
		}
	}
	r.orphanCgroups = suspects
	return errors.Join(errs...)
}

// resizePodCgroup makes room in the pod's cgroup for container raw's new
// resources (kubelet: the pod's cgroup is resized with its containers),
// writing the looser of the pod's old and new values now; the returned
// func writes the new values once the container has changed. Without
// the pod's spec (no start since the pod workers restarted) the pod's
// cgroup is left; the next start of a container of the pod updates it.
func (r *Runtime) resizePodCgroup(raw string, res corev1.ResourceRequirements) func() error {
	none := func() error { return nil }
	n := r.opts.cgroups
	if n == nil {
		return none
	}
	r.mu.Lock()
	var old *corev1.Pod
	var pd *pod
	name := ""
	if in := r.byID[raw]; in != nil {
		name = in.status.Name
		if pd = r.pods[in.status.PodUID]; pd != nil {
			old = pd.spec
		}
	}
	r.mu.Unlock()
	if old == nil {
		return none
	}
	next := old.DeepCopy()
	for _, list := range [][]corev1.Container{next.Spec.InitContainers, next.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				list[i].Resources = res
			}
		}
	}
	limit := n.Config().PodPidsLimit
	want := cgroups.PodResources(next, limit)
	if err := n.ResizePod(next, cgroups.Looser(cgroups.PodResources(old, limit), want)); err != nil {
		r.log.Warn("cannot make room in the pod's cgroup", append(podFields(next), zap.Error(err))...)
	}
	return func() error {
		r.mu.Lock()
		pd.spec = next
		r.mu.Unlock()
		return n.ResizePod(next, want)
	}
}
