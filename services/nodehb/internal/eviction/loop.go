package eviction

import (
	"context"
	goruntime "runtime"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
)

// NodeReclaimer frees node-level resources (unused images, dead
// containers) before any pod is evicted for the signal ("nodefs.available",
// "imagefs.available", ...; kubelet: the image and container garbage
// collectors the eviction manager calls for the disk signals). The loop
// observes again after it and evicts only if the threshold is still met.
// The signal is a plain string so that an implementation outside nodehb
// needs nothing of this package.
type NodeReclaimer interface {
	Reclaim(ctx context.Context, signal string) error
}

// NopReclaimer frees nothing.
type NopReclaimer struct{}

// Reclaim implements NodeReclaimer.
func (NopReclaimer) Reclaim(context.Context, string) error { return nil }

// Pods are what the loop needs of the pod workers: the figures of every
// pod (and how many partitions did not answer), and the eviction of one.
type Pods interface {
	Stats(ctx context.Context) (pods []bus.PodStats, failed int)
	// ImageFs is the runtime's image file system (nil: none).
	ImageFs(ctx context.Context) *bus.FsStats
	Evict(ctx context.Context, p int, req *bus.EvictRequest) (*bus.EvictResult, error)
}

// Config tunes the loop.
type Config struct {
	Thresholds []Threshold
	// Interval is the monitoring period (kubelet: 10 s).
	Interval time.Duration
	// Transition is eviction-pressure-transition-period (5 m).
	Transition time.Duration
	// MaxPodGrace is eviction-max-pod-grace-period, for soft thresholds.
	MaxPodGrace int64
	// CleanupWait is how long an evicted pod is waited for before the
	// next pod may be evicted (kubelet: 30 s).
	CleanupWait time.Duration
	Partitions  int
	Node        string
	// NodeFsDevice is the device of the node's file system (st_dev of the
	// data dir; 0: not known): an image file system on another device is
	// the runtime's own, and the disk signals rank pods by what lies on
	// each.
	NodeFsDevice uint64
}

// Loop runs the eviction manager: a round every Interval.
type Loop struct {
	cfg       Config
	state     *State
	observe   func(Observations) error
	pods      Pods
	reclaimer NodeReclaimer
	publish   func(ctx context.Context, conds []corev1.NodeConditionType) error
	recorder  record.EventRecorder
	log       *zap.Logger
	now       func() time.Time
	// watchesImageFs: a threshold is on an imagefs signal.
	watchesImageFs bool
	// onRound, when set, gets each round's cost.
	onRound func(RoundCost)
	// imageFsDevice is the image file system's device as last reported
	// (0: none or not known); read and written by the rounds only.
	imageFsDevice uint64

	mu      sync.Mutex
	conds   []corev1.NodeConditionType
	changed chan struct{}
	// evicting: the pod last evicted and when, waited for (CleanupWait)
	// while it still shows in the figures.
	evicting   types.UID
	evictingAt time.Time
}

// NewLoop builds the loop. observe reads the host's signals; publish
// sends the conditions on the bus (NodePressure).
func NewLoop(cfg Config, observe func(Observations) error, pods Pods, reclaimer NodeReclaimer,
	publish func(context.Context, []corev1.NodeConditionType) error, recorder record.EventRecorder, log *zap.Logger) *Loop {
	if reclaimer == nil {
		reclaimer = NopReclaimer{}
	}
	if cfg.CleanupWait == 0 {
		cfg.CleanupWait = 30 * time.Second
	}
	l := &Loop{cfg: cfg, state: NewState(cfg.Thresholds, cfg.Transition), observe: observe, pods: pods,
		reclaimer: reclaimer, publish: publish, recorder: recorder, log: log, now: time.Now,
		changed: make(chan struct{}, 1)}
	for _, t := range cfg.Thresholds {
		l.watchesImageFs = l.watchesImageFs || t.Signal == ImageFsAvailable || t.Signal == ImageFsInodesFree
	}
	return l
}

// Observe reads the node's signals now (nil for a node without real
// resources, the sim runtime's).
func (l *Loop) Observe(obs Observations) error { return l.observe(obs) }

// SetReclaimer sets the node-level reclaim (before Run).
func (l *Loop) SetReclaimer(nr NodeReclaimer) {
	if nr == nil {
		nr = NopReclaimer{}
	}
	l.reclaimer = nr
}

// Conditions are the pressure conditions of the last round.
func (l *Loop) Conditions() []corev1.NodeConditionType {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.conds)
}

// Changed is signalled when Conditions changed.
func (l *Loop) Changed() <-chan struct{} { return l.changed }

// RoundCost is what one round cost: the CPU time of the round's own
// goroutine (its thread's, CLOCK_THREAD_CPUTIME_ID; not the bus client's
// decoding of the replies it waits for) and its wall time.
type RoundCost struct {
	CPU, Wall time.Duration
}

// SetRoundObserver has fn called with each round's cost (before Run).
func (l *Loop) SetRoundObserver(fn func(RoundCost)) { l.onRound = fn }

// Run runs a round at once and then every Interval until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	wait.NonSlidingUntilWithContext(ctx, l.measuredRound, l.cfg.Interval)
}

// measuredRound runs a round on a thread of its own, so that the thread's
// CPU clock counts the round alone.
func (l *Loop) measuredRound(ctx context.Context) {
	if l.onRound == nil {
		l.Round(ctx)
		return
	}
	goruntime.LockOSThread()
	defer goruntime.UnlockOSThread()
	cpu0, start := threadCPU(), time.Now()
	l.Round(ctx)
	l.onRound(RoundCost{CPU: threadCPU() - cpu0, Wall: time.Since(start)})
}

// threadCPU is the calling thread's CPU time (0 if unreadable).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// Round observes, reports the conditions, and evicts at most one pod.
func (l *Loop) Round(ctx context.Context) {
	obs := l.observeAll(ctx)
	round := l.state.Observe(obs, l.now())
	l.setConditions(ctx, round.Conditions)
	th, ok := round.Reclaim()
	if !ok {
		return
	}
	res := th.Signal.Resource()
	l.log.Info("eviction threshold met, reclaiming", zap.String("signal", string(th.Signal)), zap.String("resource", string(res)))
	l.recorder.Eventf(kube.NodeRef(l.cfg.Node), corev1.EventTypeWarning, "EvictionThresholdMet", "Attempting to reclaim %s", res)
	if l.reclaimNodeLevel(ctx, th) {
		return
	}
	pods, _ := l.pods.Stats(ctx)
	if l.waiting(pods) {
		return
	}
	if len(pods) == 0 {
		l.log.Warn("eviction thresholds met, but no pods are active to evict")
		return
	}
	Rank(th.Signal, l.dedicatedImageFs(), pods)
	for i := range pods {
		if l.evict(ctx, th, obs, &pods[i]) {
			return
		}
	}
	l.log.Warn("unable to evict any pod from the node")
}

// reclaimNodeLevel asks the node-level reclaimer first; true when the
// threshold (with its minimum reclaim) is no longer met after it.
func (l *Loop) reclaimNodeLevel(ctx context.Context, th Threshold) bool {
	if _, nop := l.reclaimer.(NopReclaimer); nop || th.Signal.Condition() != corev1.NodeDiskPressure {
		return false // kubelet: only the disk signals have node-level reclaim
	}
	if err := l.reclaimer.Reclaim(ctx, string(th.Signal)); err != nil {
		l.log.Warn("node-level reclaim failed", zap.String("signal", string(th.Signal)), zap.Error(err))
		return false
	}
	obs := l.observeAll(ctx)
	if !isMet(th, obs, true) {
		l.log.Info("node-level reclaim relieved the pressure without evicting pods", zap.String("signal", string(th.Signal)))
		return true
	}
	return false
}

// observeAll reads the signals: the host's, and the image file system the
// runtime reports (asked for only when a threshold watches it).
func (l *Loop) observeAll(ctx context.Context) Observations {
	obs := Observations{}
	if err := l.observe(obs); err != nil {
		l.log.Debug("eviction signals incomplete", zap.Error(err))
	}
	if !l.watchesImageFs {
		return obs
	}
	if imageFs := l.pods.ImageFs(ctx); imageFs != nil && imageFs.CapacityBytes > 0 {
		l.imageFsDevice = imageFs.Device
		obs[ImageFsAvailable] = Observation{Available: int64(imageFs.AvailableBytes), Capacity: int64(imageFs.CapacityBytes)}
		if imageFs.Inodes > 0 {
			obs[ImageFsInodesFree] = Observation{Available: int64(imageFs.InodesFree), Capacity: int64(imageFs.Inodes)}
		}
	}
	return obs
}

// dedicatedImageFs: the runtime's image file system is known to be on
// another device than the node's (kubelet: an imagefs of its own).
func (l *Loop) dedicatedImageFs() bool {
	return l.imageFsDevice != 0 && l.cfg.NodeFsDevice != 0 && l.imageFsDevice != l.cfg.NodeFsDevice
}

// waiting: the pod evicted last still shows and CleanupWait has not passed.
func (l *Loop) waiting(pods []bus.PodStats) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.evicting == "" || l.now().Sub(l.evictingAt) >= l.cfg.CleanupWait {
		l.evicting = ""
		return false
	}
	for _, p := range pods {
		if p.UID == l.evicting {
			return true
		}
	}
	l.evicting = ""
	return false
}

// evict asks the pod's owner to evict it; true when the pod is now evicted
// (by this request or before it).
func (l *Loop) evict(ctx context.Context, th Threshold, obs Observations, p *bus.PodStats) bool {
	req := &bus.EvictRequest{PodUID: p.UID, Namespace: p.Namespace, Pod: p.Name, Reason: Reason,
		Message: Message(th, obs, p), GracePeriodSeconds: GracePeriod(th, l.cfg.MaxPodGrace), DisruptionTarget: true}
	log := l.log.With(logging.Pod(p.Namespace, p.Name, string(p.UID))...)
	res, err := l.pods.Evict(ctx, bus.Partition(string(p.UID), l.cfg.Partitions), req)
	if err == nil && res.Error != "" {
		log.Warn("pod not evicted", zap.String("error", res.Error))
		return false
	}
	if err != nil {
		log.Warn("eviction request failed", zap.Error(err))
		return false
	}
	if res.Already {
		log.Info("pod already evicted or terminating; waiting for it")
	} else {
		log.Info("pod evicted", zap.String("message", req.Message))
	}
	l.mu.Lock()
	l.evicting, l.evictingAt = p.UID, l.now()
	l.mu.Unlock()
	return true
}

func (l *Loop) setConditions(ctx context.Context, conds []corev1.NodeConditionType) {
	l.mu.Lock()
	same := slices.Equal(conds, l.conds)
	l.conds = conds
	l.mu.Unlock()
	if !same {
		l.log.Info("node pressure conditions", zap.Any("conditions", conds))
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}
	// re-sent every round: the state stream keeps the last value, and a
	// publish lost to a restart of NATS is made good at the next round.
	if err := l.publish(ctx, conds); err != nil && ctx.Err() == nil {
		l.log.Warn("cannot publish the node's pressure conditions", zap.Error(err))
	}
}
