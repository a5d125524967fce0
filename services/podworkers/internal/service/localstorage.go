package service

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/services/podworkers/internal/admission"
	"github.com/splitlet/splitlet/services/podworkers/internal/controller"
	"github.com/splitlet/splitlet/services/podworkers/internal/statuspub"
	"github.com/splitlet/splitlet/services/podworkers/internal/volumes"
)

// emptyDirMessageFmt is the kubelet's message of a pod evicted for an
// emptyDir over its sizeLimit.
const emptyDirMessageFmt = "Usage of EmptyDir volume %q exceeds the limit %q. "

// localStorageGrace is the kubelet's grace period of a local storage
// eviction (immediate).
const localStorageGrace = 1

// localStorageLoop evicts, every LocalStorageInterval, the pods of the
// partitions this replica holds whose emptyDir volume uses more than its
// sizeLimit (kubelet: the eviction manager's emptyDirLimitEviction). The
// pod workers do it themselves: it concerns one pod at a time, whose
// volumes are theirs, and needs no ranking across the node.
func (r *Runner) localStorageLoop(ctx context.Context, ctrl *controller.Controller, sink *statuspub.Publisher, vols *volumes.Manager) {
	t := time.NewTicker(r.cfg.LocalStorageInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for p := 0; p < r.common.Partitions; p++ {
			if !r.isAdopted(p) {
				continue
			}
			for _, pod := range ctrl.PodsOf(p) {
				if ctx.Err() != nil {
					return
				}
				r.checkEmptyDirs(ctx, ctrl, sink, vols, pod)
			}
		}
	}
}

// checkEmptyDirs evicts the pod if one of its emptyDir volumes is over its
// sizeLimit.
func (r *Runner) checkEmptyDirs(ctx context.Context, ctrl *controller.Controller, sink *statuspub.Publisher, vols *volumes.Manager, pod *corev1.Pod) {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return
	}
	for _, v := range pod.Spec.Volumes {
		ed := v.EmptyDir
		if ed == nil || ed.SizeLimit == nil || ed.SizeLimit.Sign() <= 0 {
			continue
		}
		used, err := vols.EmptyDirUsage(pod.UID, v.Name)
		if err != nil {
			r.log.Debug("cannot measure an emptyDir", append(logging.Pod(pod.Namespace, pod.Name, string(pod.UID)), zap.String("volume", v.Name), zap.Error(err))...)
			continue
		}
		if used <= ed.SizeLimit.Value() {
			continue
		}
		msg := fmt.Sprintf(emptyDirMessageFmt, v.Name, ed.SizeLimit.String())
		_, err = ctrl.Evict(ctx, controller.Eviction{UID: pod.UID, Reason: admission.ReasonEvicted, Message: msg, GracePeriod: localStorageGrace}, sink.Store)
		if err != nil {
			r.log.Warn("cannot evict a pod over its emptyDir sizeLimit", append(logging.Pod(pod.Namespace, pod.Name, string(pod.UID)), zap.Error(err))...)
		}
		return
	}
}
