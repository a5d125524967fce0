package service

import (
	"context"

	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/gc"
)

// gcPartition is the partition whose owner collects the node's garbage:
// garbage collection is node-wide, and the replicas of a node share one
// runtime, so exactly one of them (the owner of partition 0, which some
// live replica always holds) runs it.
const gcPartition = 0

// containerPolicy is the dead container policy of the GC keys.
func (c *Config) containerPolicy() gc.ContainerPolicy {
	return gc.ContainerPolicy{MinAge: c.GC.MinContainerTTL, MaxPerPodContainer: c.GC.MaxDeadPerContainer}
}

// gcConfig is the garbage collection of the GC keys, while this replica
// owns gcPartition.
func (r *Runner) gcConfig() gc.Config {
	k := r.cfg.GC
	if k.ImageGCHigh >= 100 && k.ImageMaxAge == 0 {
		// kubelet: a high threshold of 100 turns image GC off.
		k.ImagePeriod = 0
	}
	return gc.Config{
		Containers:      r.cfg.containerPolicy(),
		ContainerPeriod: k.ContainerPeriod,
		Images: gc.ImagePolicy{HighThresholdPercent: k.ImageGCHigh, LowThresholdPercent: k.ImageGCLow,
			MinAge: k.ImageMinAge, MaxAge: k.ImageMaxAge},
		ImagePeriod: k.ImagePeriod,
		Logs:        gc.LogPolicy{MaxSize: k.ContainerLogMaxSize, MaxFiles: k.ContainerLogMaxFiles, Workers: k.ContainerLogMaxWorkers},
		LogPeriod:   k.ContainerLogMonitorInterval,
		Active:      func() bool { return r.isActive(gcPartition) },
		Log:         r.log.Named("gc"),
	}
}

// runGC starts the node's garbage collection on rt until ctx ends; the
// channel closes once it has stopped.
func (r *Runner) runGC(ctx context.Context, rt runtime.Runtime) <-chan struct{} {
	m := gc.New(rt, r.gcConfig())
	r.mu.Lock()
	r.gc = m
	r.mu.Unlock()
	r.log.Info("garbage collection while this replica owns partition 0", append(gcParts(rt), zap.String("runtime", rt.Type()))...)
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	return done
}

// gcParts says which collections the runtime does (the sim runtime does
// none: it keeps no images, log files nor dead containers beyond the
// previous instance of each).
func gcParts(rt runtime.Runtime) []zap.Field {
	_, containers := rt.(gc.ContainerRuntime)
	_, images := rt.(gc.ImageRuntime)
	_, logs := rt.(gc.LogRotator)
	return []zap.Field{zap.Bool("containers", containers), zap.Bool("images", images), zap.Bool("logRotation", logs)}
}

// GC is the node's garbage collection, for node-level reclaim (eviction)
// to call before it evicts pods: it acts whether or not this replica owns
// partition 0. Nil until the stage runs.
func (r *Runner) GC() gc.Collector {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gc == nil {
		return nil
	}
	return r.gc
}
