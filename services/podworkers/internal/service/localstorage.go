package service

import (
	"context"
	"fmt"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/periodic"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/services/podworkers/internal/admission"
	"github.com/splitlet/splitlet/services/podworkers/internal/controller"
	"github.com/splitlet/splitlet/services/podworkers/internal/statuspub"
	"github.com/splitlet/splitlet/services/podworkers/internal/volumes"
)

// The kubelet's messages of a pod evicted for its local storage: an emptyDir
// over its sizeLimit, the pod over the sum of its containers'
// ephemeral-storage limits, a container over its own.
const (
	emptyDirMessageFmt  = "Usage of EmptyDir volume %q exceeds the limit %q. "
	podStorageFmt       = "Pod ephemeral local storage usage exceeds the total limit of containers %s. "
	containerStorageFmt = "Container %s exceeded its local ephemeral storage limit %q. "
)

// localStorageGrace is the kubelet's grace period of a local storage
// eviction (immediate).
const localStorageGrace = 1

// localStorageLoop evicts, every LocalStorageInterval, the pods of the
// partitions this replica holds that use more local storage than they may:
// an emptyDir volume over its sizeLimit, the pod over its containers'
// ephemeral-storage limits, a container over its own (kubelet: the
// eviction manager's localStorageEviction, in that order). The pod workers
// do it themselves: it concerns one pod at a time, whose volumes and
// containers are theirs, and needs no ranking across the node.
func (r *Runner) localStorageLoop(ctx context.Context, ctrl *controller.Controller, sink *statuspub.Publisher, vols *volumes.Manager, rt runtime.Runtime) {
	periodic.Run(ctx, r.cfg.LocalStorageInterval, func(ctx context.Context) {
		for p := 0; p < r.common.Partitions; p++ {
			if !r.isAdopted(p) {
				continue
			}
			for _, pod := range ctrl.PodsOf(p) {
				if ctx.Err() != nil {
					return
				}
				if msg := r.overLocalStorage(pod, vols, rt); msg != "" {
					r.evictForStorage(ctx, ctrl, sink, pod, msg)
				}
			}
		}
	})
}

// overLocalStorage is the kubelet's message for a running pod that uses
// more local storage than it may, "" for one that does not.
func (r *Runner) overLocalStorage(pod *corev1.Pod, vols *volumes.Manager, rt runtime.Runtime) string {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded || !storageLimited(pod) {
		return ""
	}
	dirs, msg := r.emptyDirs(pod, vols)
	if msg != "" {
		return msg
	}
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	podLimit, limited := limits[corev1.ResourceEphemeralStorage]
	if !limited {
		return ""
	}
	stats := rt.Stats(pod.UID)
	used := dirs
	for _, c := range stats {
		used += int64(c.RootfsUsedBytes + c.LogsUsedBytes)
	}
	if used > podLimit.Value() {
		return fmt.Sprintf(podStorageFmt, podLimit.String())
	}
	own := map[string]resource.Quantity{} // the regular containers' limits
	for _, c := range pod.Spec.Containers {
		if q, ok := c.Resources.Limits[corev1.ResourceEphemeralStorage]; ok && !q.IsZero() {
			own[c.Name] = q
		}
	}
	for _, c := range stats {
		if q, ok := own[c.Name]; ok && int64(c.RootfsUsedBytes+c.LogsUsedBytes) > q.Value() {
			return fmt.Sprintf(containerStorageFmt, c.Name, q.String())
		}
	}
	return ""
}

// emptyDirs is the disk the pod's emptyDir volumes use (those on disk, not
// in memory), or the message for one over its sizeLimit.
func (r *Runner) emptyDirs(pod *corev1.Pod, vols *volumes.Manager) (int64, string) {
	var total int64
	for _, v := range pod.Spec.Volumes {
		ed := v.EmptyDir
		if ed == nil || ed.Medium == corev1.StorageMediumMemory {
			continue
		}
		used, err := vols.EmptyDirUsage(pod.UID, v.Name)
		if err != nil {
			r.log.Debug("cannot measure an emptyDir", append(logging.Pod(pod.Namespace, pod.Name, string(pod.UID)), zap.String("volume", v.Name), zap.Error(err))...)
			continue
		}
		if limitedEmptyDir(ed) && used > ed.SizeLimit.Value() {
			return 0, fmt.Sprintf(emptyDirMessageFmt, v.Name, ed.SizeLimit.String())
		}
		total += used
	}
	return total, ""
}

// storageLimited says whether the pod sets a local storage limit: an
// emptyDir on disk with a sizeLimit, or an ephemeral-storage limit of the
// pod or of a container (the pod's overhead only adds to a limit set
// otherwise). A pod without one is never over it, and is not measured.
func storageLimited(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if ed := v.EmptyDir; ed != nil && ed.Medium != corev1.StorageMediumMemory && limitedEmptyDir(ed) {
			return true
		}
	}
	limited := func(rl corev1.ResourceList) bool {
		_, ok := rl[corev1.ResourceEphemeralStorage]
		return ok
	}
	if pod.Spec.Resources != nil && limited(pod.Spec.Resources.Limits) {
		return true
	}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if limited(list[i].Resources.Limits) {
				return true
			}
		}
	}
	return false
}

// limitedEmptyDir says whether an emptyDir sets a size limit.
func limitedEmptyDir(ed *corev1.EmptyDirVolumeSource) bool {
	return ed.SizeLimit != nil && ed.SizeLimit.Sign() > 0
}

// evictForStorage evicts the pod at once, with msg.
func (r *Runner) evictForStorage(ctx context.Context, ctrl *controller.Controller, sink *statuspub.Publisher, pod *corev1.Pod, msg string) {
	_, err := ctrl.Evict(ctx, controller.Eviction{UID: pod.UID, Reason: admission.ReasonEvicted, Message: msg, GracePeriod: localStorageGrace}, sink.Store)
	if err != nil {
		r.log.Warn("cannot evict a pod over its local storage limits", append(logging.Pod(pod.Namespace, pod.Name, string(pod.UID)), zap.String("message", msg), zap.Error(err))...)
	}
}
