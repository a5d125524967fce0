package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/cgroups"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/periodic"
	"github.com/splitlet/splitlet/libs/runtime"
)

// DefaultCgroupReconcile is how often the node-wide cgroup housekeeping
// runs (the kubelet's periodic QoS cgroup update).
const DefaultCgroupReconcile = time.Minute

// cgroupReconcilePartition is the partition whose owner does the
// node-wide cgroup housekeeping: one replica at a time, and always one
// while the node's partitions are owned.
const cgroupReconcilePartition = 0

// cgroupReconciler is a runtime with node-wide cgroup housekeeping (cri).
type cgroupReconciler interface {
	ReconcileCgroups(ctx context.Context) error
}

// checkCgroups refuses the cgroup keys a runtime cannot apply.
func (c *Config) checkCgroups(rt string) error {
	cg := &c.Cgroups
	if err := cg.Validate(); err != nil {
		return err
	}
	on := cg.PerQOSFor(rt)
	switch {
	case rt == config.RuntimeProcess && on:
		return errors.New("invalid value true for cgroups-per-qos: the process runtime runs pods as host processes in no cgroup of their own; set it false or run --runtime=cri")
	case !on && cg.Root != config.DefaultCgroupRoot:
		return fmt.Errorf("invalid value %q for cgroup-root: it applies only with cgroups-per-qos", cg.Root)
	case !on && cg.PodPidsLimit > 0:
		return fmt.Errorf("invalid value %d for pod-pids-limit: it applies only with cgroups-per-qos", cg.PodPidsLimit)
	case cg.PerQOS == config.False && cg.EnforcePods():
		// kubelet: allocatable enforcement needs the QoS cgroups.
		return errors.New("invalid value pods for enforce-node-allocatable: it needs cgroups-per-qos (set enforce-node-allocatable=none)")
	}
	if on && cg.Driver == string(cgroups.DriverSystemd) && rt == config.RuntimeCRI {
		if _, err := os.Stat("/run/systemd/system"); err != nil {
			return errors.New("invalid value systemd for cgroup-driver: the host does not run systemd (no /run/systemd/system); use cgroupfs, as containerd's runc does without SystemdCgroup")
		}
	}
	return nil
}

// cgroupConfig is the layout the keys describe.
func (c *Config) cgroupConfig(rt string) cgroups.Config {
	return cgroups.Config{
		PerQOS:       c.Cgroups.PerQOSFor(rt),
		Driver:       cgroups.Driver(c.Cgroups.Driver),
		Root:         c.Cgroups.Root,
		PodPidsLimit: c.Cgroups.PodPidsLimit,
		EnforcePods:  c.Cgroups.EnforcePods(),
	}
}

// nodeAllocatable is the Node object's allocatable once run has its
// informer (nil before, or while the Node does not exist): kubepods'
// size; the fallback never sizes it.
type nodeAllocatable struct {
	f atomic.Pointer[func() corev1.ResourceList]
}

func (a *nodeAllocatable) get() corev1.ResourceList {
	if f := a.f.Load(); f != nil {
		return (*f)()
	}
	return nil
}

// newCgroups is the cri runtime's layout, nil without cgroups-per-qos.
func (r *Runner) newCgroups() (*cgroups.Node, error) {
	cfg := r.cfg.cgroupConfig(r.common.Runtime)
	if !cfg.PerQOS {
		return nil, nil
	}
	n, err := cgroups.NewNode(cfg, nil, r.allocatable.get)
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w (keys cgroup-driver, cgroup-root)", err)
	}
	return n, nil
}

// logSimCgroups says what the sim runtime would lay out: it writes no
// cgroup, as it runs no process.
func (r *Runner) logSimCgroups() {
	cfg := r.cfg.cgroupConfig(r.common.Runtime)
	if !cfg.PerQOS {
		return
	}
	root, err := cgroups.ParseRoot(cfg.Root, cfg.Driver)
	if err != nil {
		return
	}
	kubepods := root.Child(cgroups.KubepodsName)
	r.log.Info("cgroups: the sim runtime writes none; a cri runtime would lay them out so",
		zap.String("kubepods", kubepods.Path(cfg.Driver)),
		zap.String("burstable", kubepods.Child(cgroups.BurstableName).Path(cfg.Driver)),
		zap.String("besteffort", kubepods.Child(cgroups.BestEffortName).Path(cfg.Driver)),
		zap.String("driver", string(cfg.Driver)), zap.Int64("podPidsLimit", cfg.PodPidsLimit), zap.Bool("enforcePods", cfg.EnforcePods))
}

// cgroupLoop runs the runtime's node-wide cgroup housekeeping every
// interval while this replica owns cgroupReconcilePartition.
func (r *Runner) cgroupLoop(ctx context.Context, rt runtime.Runtime, owns func() bool) {
	rc, ok := rt.(cgroupReconciler)
	if !ok {
		return
	}
	periodic.Run(ctx, r.cfg.CgroupReconcile, func(ctx context.Context) {
		if !owns() {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, r.cfg.CgroupReconcile)
		defer cancel()
		if err := rc.ReconcileCgroups(rctx); err != nil && ctx.Err() == nil {
			r.log.Warn("cgroup housekeeping", zap.Error(err))
		}
	})
}
