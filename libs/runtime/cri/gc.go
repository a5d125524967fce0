package cri

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/gc"
)

var _ gc.ContainerRuntime = (*Runtime)(nil)

// DefaultContainerPolicy keeps one dead instance of each container besides
// its newest, whatever its age (the kubelet's defaults).
var DefaultContainerPolicy = gc.ContainerPolicy{MaxPerPodContainer: 1}

// WithContainerPolicy sets the dead container policy a start applies to
// the instances of the container it replaces (default
// DefaultContainerPolicy).
func WithContainerPolicy(p gc.ContainerPolicy) Option {
	return func(o *options) { o.containerGC = p }
}

// evictable lists, of one container's instances oldest first, the dead
// ones p lets go: never the newest instance (it is the container's state:
// without it a finished container would run again), not those created
// less than MinAge ago, and of the others all but the newest
// MaxPerPodContainer (all of them with all).
func evictable(list []*instance, p gc.ContainerPolicy, all bool, now time.Time) []*instance {
	if len(list) < 2 {
		return nil
	}
	var dead []*instance
	for _, in := range list[:len(list)-1] {
		if in.status.State != runtime.StateExited {
			continue
		}
		if !in.status.CreatedAt.IsZero() && now.Sub(in.status.CreatedAt) < p.MinAge {
			continue
		}
		dead = append(dead, in)
	}
	keep := p.MaxPerPodContainer
	switch {
	case all:
		keep = 0
	case keep < 0:
		return nil
	}
	if len(dead) <= keep {
		return nil
	}
	return dead[:len(dead)-keep]
}

// instancesByName groups a pod's cached instances by container name, each
// oldest first. The caller holds r.mu.
func instancesByName(pd *pod) map[string][]*instance {
	out := map[string][]*instance{}
	for _, in := range pd.instances {
		out[in.status.Name] = append(out[in.status.Name], in)
	}
	for _, list := range out {
		sortInstances(list)
	}
	return out
}

// CollectContainers implements gc.ContainerRuntime: the dead instances of
// every pod's containers beyond p, then dead sandboxes no container is in
// but the newest of each pod.
func (r *Runtime) CollectContainers(ctx context.Context, p gc.ContainerPolicy, all bool) error {
	if err := r.Relist(ctx); err != nil {
		return err
	}
	now := time.Now()
	type drop struct {
		uid types.UID
		in  []*instance
	}
	var drops []drop
	r.mu.Lock()
	for uid, pd := range r.pods {
		for _, list := range instancesByName(pd) {
			if ev := evictable(list, p, all, now); len(ev) > 0 {
				drops = append(drops, drop{uid, ev})
			}
		}
	}
	r.mu.Unlock()
	var errs []error
	for _, d := range drops {
		if err := r.removeInstances(ctx, d.uid, d.in); err != nil {
			errs = append(errs, err)
		}
	}
	if err := r.collectSandboxes(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := r.sweepImageVolumes(ctx); err != nil {
		errs = append(errs, fmt.Errorf("image volumes: %w", err))
	}
	return errors.Join(errs...)
}

// removeInstances removes dead instances of one pod with their log files
// (rotated ones too) and log links.
func (r *Runtime) removeInstances(ctx context.Context, uid types.UID, list []*instance) error {
	r.mu.Lock()
	var namespace, podName string
	if pd := r.pods[uid]; pd != nil {
		namespace, podName = pd.namespace, pd.name
	}
	r.mu.Unlock()
	var errs []error
	for _, in := range list {
		if err := r.rs.RemoveContainer(ctx, in.id); err != nil && !isNotFound(err) {
			errs = append(errs, err)
			continue
		}
		removeLogFiles(in.status.LogPath)
		r.unlinkLog(namespace, podName, in.status.Name, in.id)
		r.forget(uid, in.id)
		r.log.Debug("removed dead container", zap.String("uid", string(uid)), zap.String("container", in.status.Name),
			zap.String("id", in.id), zap.Int("attempt", in.status.Attempt))
	}
	return errors.Join(errs...)
}

// removeLogFiles removes a container's log and its rotated files.
func removeLogFiles(path string) {
	if path == "" {
		return
	}
	_ = os.Remove(path)
	rotated, _ := filepath.Glob(globEscape(path) + ".*")
	for _, f := range rotated {
		_ = os.Remove(f)
	}
}

// collectSandboxes removes the node's sandboxes that are not ready, hold no
// container and are not the newest of their pod (kubelet: the sandbox GC
// of a pod that still exists keeps its newest sandbox).
func (r *Runtime) collectSandboxes(ctx context.Context) error {
	sbs, cs, err := r.listNode(ctx)
	if err != nil {
		return err
	}
	holds := map[string]bool{}
	for _, c := range cs {
		holds[c.GetPodSandboxId()] = true
	}
	byPod := map[string][]*runtimeapi.PodSandbox{}
	for _, sb := range sbs {
		uid := sb.GetMetadata().GetUid()
		byPod[uid] = append(byPod[uid], sb)
	}
	var errs []error
	for _, list := range byPod {
		sort.Slice(list, func(i, j int) bool { return list[i].GetCreatedAt() < list[j].GetCreatedAt() })
		for _, sb := range list[:len(list)-1] {
			if sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY || holds[sb.GetId()] {
				continue
			}
			if err := r.rs.RemovePodSandbox(ctx, sb.GetId()); err != nil && !isNotFound(err) {
				errs = append(errs, err)
				continue
			}
			r.mu.Lock()
			delete(r.sandboxIPs, sb.GetId())
			r.mu.Unlock()
			r.log.Debug("removed dead sandbox", zap.String("uid", sb.GetMetadata().GetUid()), zap.String("sandbox", sb.GetId()))
		}
	}
	return errors.Join(errs...)
}
