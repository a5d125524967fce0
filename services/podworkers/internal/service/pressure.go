package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/gc"
	"github.com/splitlet/splitlet/services/podworkers/internal/controller"
	"github.com/splitlet/splitlet/services/podworkers/internal/statuspub"
	"github.com/splitlet/splitlet/services/podworkers/internal/volumes"
)

// pressureView holds the node's pressure conditions as nodehb last
// published them; none until it has.
type pressureView struct {
	mu    sync.Mutex
	conds []corev1.NodeConditionType
}

// Conditions are the node's pressure conditions now.
func (v *pressureView) Conditions() []corev1.NodeConditionType {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.conds)
}

func (v *pressureView) set(c []corev1.NodeConditionType) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.conds = c
}

// watchPressure follows state.pressure (every replica reads every value)
// for admission.
func (r *Runner) watchPressure(ctx context.Context) (func(), error) {
	stream := bus.StreamName(r.common.NodeName, bus.StreamState)
	cons, err := r.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{r.subjects.NodePressure()},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		NamePrefix:     bus.OrderedName("podworkers-pressure"),
	})
	if err != nil {
		return nil, fmt.Errorf("state.pressure consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		e, err := bus.Decode(m.Data())
		var np *bus.NodePressure
		if err == nil {
			np, err = bus.DecodeNodePressure(e)
		}
		if err != nil {
			r.log.Warn("dropping malformed NodePressure", zap.String(logging.FieldSubject, m.Subject()), zap.Error(err))
			return
		}
		if !slices.Equal(np.Conditions, r.pressure.Conditions()) {
			r.log.Info("node pressure conditions", zap.Any("conditions", np.Conditions))
		}
		r.pressure.set(np.Conditions)
	})
	if err != nil {
		return nil, err
	}
	return cc.Stop, nil
}

// serveEvict answers an EvictRequest of the eviction manager (nodehb):
// the pod's Failed status is stored on the stream before the answer, the
// kill goes on after it.
func (r *Runner) serveEvict(ctx context.Context, sink *statuspub.Publisher, pub *bus.Publisher, m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	e, err := bus.Decode(m.Data)
	var req *bus.EvictRequest
	if err == nil {
		req, err = bus.DecodeEvictRequest(e)
	}
	if err == nil {
		err = r.heldAs(bus.ContainerRef{PodUID: req.PodUID, Namespace: req.Namespace, Pod: req.Pod, Container: "-"})
	}
	out := &bus.EvictResult{}
	if err == nil {
		var already bool
		already, err = r.Controller().Evict(ctx, controller.Eviction{UID: req.PodUID, Reason: req.Reason, Message: req.Message,
			GracePeriod: req.GracePeriodSeconds, DisruptionTarget: req.DisruptionTarget}, sink.Store)
		if errors.Is(err, controller.ErrNotHeld) {
			// terminating, no longer desired: its worker holds it.
			already, err = true, nil
		}
		out.Already, out.Evicted = already && err == nil, !already && err == nil
	}
	if err != nil {
		out.Error = err.Error()
	}
	if err := pub.Send(m.Reply, bus.KindEvictResult, out); err != nil {
		r.log.Warn("cannot answer an eviction request", zap.Error(err))
	}
}

// podStats are a held pod's figures, with what the eviction manager ranks
// by: the pod's priority, its and each container's memory and
// ephemeral-storage requests, the disk its containers, logs and local
// volumes take, and its processes.
func (r *Runner) podStats(rt runtime.Runtime, vols *volumes.Manager, pod *corev1.Pod, cs []runtime.ContainerStats) bus.PodStats {
	ps := podStats(pod, cs)
	if vols != nil {
		ps.VolumeUsedBytes, ps.VolumeInodesUsed = r.localVolumeUsage(pod, vols)
	}
	if pp, ok := rt.(runtime.PodProcesses); ok {
		ps.ProcessCount, _ = pp.PodProcessCount(pod)
	}
	return ps
}

// podStats are the figures of a pod the runtime reports and its spec
// states.
func podStats(pod *corev1.Pod, cs []runtime.ContainerStats) bus.PodStats {
	ps := bus.PodStats{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name}
	if pod.Spec.Priority != nil {
		ps.Priority = *pod.Spec.Priority
	}
	if q, ok := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})[corev1.ResourceEphemeralStorage]; ok && !q.IsZero() {
		ps.EphemeralStorageRequest = &q
	}
	mem, disk := containerRequests(pod, corev1.ResourceMemory), containerRequests(pod, corev1.ResourceEphemeralStorage)
	for _, c := range cs {
		if ps.StartTime.IsZero() || c.StartedAt.Before(ps.StartTime.Time) {
			ps.StartTime = metav1.NewTime(c.StartedAt)
		}
		ps.Containers = append(ps.Containers, bus.ContainerStats{Name: c.Name, StartTime: metav1.NewTime(c.StartedAt),
			CPUUsageNanoCores: c.CPUUsageNanoCores, CPUUsageCoreNanoSecs: c.CPUUsageCoreNanoSecs, MemoryWorkingSetBytes: c.MemoryWorkingSetBytes,
			MemoryRequest: mem[c.Name], RootfsUsedBytes: c.RootfsUsedBytes, RootfsInodesUsed: c.RootfsInodesUsed,
			LogsUsedBytes: c.LogsUsedBytes, LogsInodesUsed: c.LogsInodesUsed, EphemeralStorageRequest: disk[c.Name]})
	}
	return ps
}

// containerRequests are the pod's containers' requests of res, by name.
func containerRequests(pod *corev1.Pod, res corev1.ResourceName) map[string]*resource.Quantity {
	out := map[string]*resource.Quantity{}
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if q, ok := list[i].Resources.Requests[res]; ok {
				out[list[i].Name] = &q
			}
		}
	}
	return out
}

// localVolumeUsage is the disk and inodes the pod's emptyDir volumes on
// the node's file system take (kubelet: the local volumes of its disk
// ranking; a volume that cannot be measured counts 0).
func (r *Runner) localVolumeUsage(pod *corev1.Pod, vols *volumes.Manager) (used, inodes uint64) {
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil || v.EmptyDir.Medium == corev1.StorageMediumMemory {
			continue
		}
		b, n, err := vols.EmptyDirFsUsage(pod.UID, v.Name)
		if err != nil {
			r.log.Debug("cannot measure an emptyDir", append(logging.Pod(pod.Namespace, pod.Name, string(pod.UID)), zap.String("volume", v.Name), zap.Error(err))...)
			continue
		}
		used, inodes = used+uint64(b), inodes+uint64(n)
	}
	return used, inodes
}

// serveReclaim answers a ReclaimRequest of the eviction manager: the node's
// garbage collection removes every dead container it may, then every unused
// image, whether or not its own period has come (kubelet:
// reclaimNodeLevelResources). Only the owner of gcPartition is asked.
func (r *Runner) serveReclaim(ctx context.Context, rt runtime.Runtime, pub *bus.Publisher, m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	out := &bus.ReclaimResult{}
	e, err := bus.Decode(m.Data)
	var req *bus.ReclaimRequest
	if err == nil {
		req, err = bus.DecodeReclaimRequest(e)
	}
	if err == nil {
		out.ImageBytesFreed, err = r.reclaim(ctx, rt, req.Signal)
	}
	if err != nil {
		out.Error = err.Error()
	}
	if err := pub.Send(m.Reply, bus.KindReclaimResult, out); err != nil {
		r.log.Warn("cannot answer a reclaim request", zap.Error(err))
	}
}

// reclaim runs both collections; a collection the runtime does not do is
// skipped, and an error only if it does neither.
func (r *Runner) reclaim(ctx context.Context, rt runtime.Runtime, signal string) (int64, error) {
	g := r.GC()
	if g == nil {
		return 0, errors.New("garbage collection is not running")
	}
	cerr := g.DeleteAllUnusedContainers(ctx)
	freed, ierr := g.DeleteUnusedImages(ctx)
	if errors.Is(cerr, gc.ErrUnsupported) && errors.Is(ierr, gc.ErrUnsupported) {
		return 0, fmt.Errorf("the %s runtime keeps nothing to reclaim", rt.Type())
	}
	err := errors.Join(skipUnsupported(cerr), skipUnsupported(ierr))
	r.log.Info("node-level reclaim", zap.String("signal", signal), zap.Int64("imageBytesFreed", freed), zap.Error(err))
	return freed, err
}

func skipUnsupported(err error) error {
	if errors.Is(err, gc.ErrUnsupported) {
		return nil
	}
	return err
}
