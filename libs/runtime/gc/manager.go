package gc

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Config configures a Manager.
type Config struct {
	Containers      ContainerPolicy
	ContainerPeriod time.Duration
	Images          ImagePolicy
	ImagePeriod     time.Duration
	Logs            LogPolicy
	LogPeriod       time.Duration
	// Active says whether this process collects for the node now (one
	// pod worker replica of the node does); nil: always.
	Active func() bool
	Log    *zap.Logger
}

// Manager runs the node's garbage collection on a runtime: each part the
// runtime supports (ContainerRuntime, ImageRuntime, LogRotator), every
// period, while Active. It is a Collector.
type Manager struct {
	cfg        Config
	log        *zap.Logger
	containers ContainerRuntime
	images     *Images
	logs       LogRotator
	// mu serialises passes of one kind with the calls of eviction.
	containerMu, imageMu sync.Mutex
}

var _ Collector = (*Manager)(nil)

// ErrUnsupported: the runtime does not do this kind of collection.
var ErrUnsupported = errors.New("the runtime does not support this garbage collection")

// New returns a Manager of rt's collections.
func New(rt any, cfg Config) *Manager {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	m := &Manager{cfg: cfg, log: cfg.Log}
	m.containers, _ = rt.(ContainerRuntime)
	m.logs, _ = rt.(LogRotator)
	if ir, ok := rt.(ImageRuntime); ok {
		m.images = NewImages(ir, cfg.Images, cfg.Log)
	}
	return m
}

func (m *Manager) active() bool { return m.cfg.Active == nil || m.cfg.Active() }

// Run runs the loops until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	var wg sync.WaitGroup
	loop := func(period time.Duration, pass func(context.Context) error, what string) {
		if period <= 0 {
			return
		}
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				if !m.active() {
					return
				}
				if err := pass(ctx); err != nil && ctx.Err() == nil {
					m.log.Warn(what+" failed", zap.Error(err))
				}
			}, period)
		})
	}
	if m.containers != nil {
		loop(m.cfg.ContainerPeriod, m.collectContainers, "container garbage collection")
	}
	if m.images != nil {
		loop(m.cfg.ImagePeriod, m.collectImages, "image garbage collection")
	}
	if m.logs != nil {
		loop(m.cfg.LogPeriod, func(ctx context.Context) error { return m.logs.RotateLogs(ctx, m.cfg.Logs) }, "container log rotation")
	}
	wg.Wait()
}

func (m *Manager) collectContainers(ctx context.Context) error {
	m.containerMu.Lock()
	defer m.containerMu.Unlock()
	return m.containers.CollectContainers(ctx, m.cfg.Containers, false)
}

func (m *Manager) collectImages(ctx context.Context) error {
	m.imageMu.Lock()
	defer m.imageMu.Unlock()
	return m.images.GarbageCollect(ctx)
}

// CollectContainers runs one pass of container GC now.
func (m *Manager) CollectContainers(ctx context.Context) error {
	if m.containers == nil {
		return ErrUnsupported
	}
	return m.collectContainers(ctx)
}

// CollectImages runs one pass of image GC now.
func (m *Manager) CollectImages(ctx context.Context) error {
	if m.images == nil {
		return ErrUnsupported
	}
	return m.collectImages(ctx)
}

// RotateLogs runs one pass of log rotation now.
func (m *Manager) RotateLogs(ctx context.Context) error {
	if m.logs == nil {
		return ErrUnsupported
	}
	return m.logs.RotateLogs(ctx, m.cfg.Logs)
}

// DeleteUnusedImages implements Collector.
func (m *Manager) DeleteUnusedImages(ctx context.Context) (int64, error) {
	if m.images == nil {
		return 0, ErrUnsupported
	}
	m.imageMu.Lock()
	defer m.imageMu.Unlock()
	return m.images.DeleteUnusedImages(ctx)
}

// DeleteAllUnusedContainers implements Collector.
func (m *Manager) DeleteAllUnusedContainers(ctx context.Context) error {
	if m.containers == nil {
		return ErrUnsupported
	}
	m.containerMu.Lock()
	defer m.containerMu.Unlock()
	return m.containers.CollectContainers(ctx, m.cfg.Containers, true)
}
