package service

import (
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/config"
)

// Garbage collection runs in the replica that owns partition 0 only, and
// takes its policies from the GC keys.
func TestGCOwnerAndPolicies(t *testing.T) {
	cfg := &Config{GC: config.GC{MaxDeadPerContainer: 2, ContainerLogMaxSize: 1 << 20, ContainerLogMaxFiles: 4, ContainerLogMaxWorkers: 3,
		ImageGCHigh: 70, ImageGCLow: 60}}
	r := &Runner{cfg: cfg, log: zap.NewNop(), active: map[int]bool{}, adopted: map[int]bool{}}
	g := r.gcConfig()
	if g.Active() {
		t.Error("active without partition 0")
	}
	r.setActive(1, true)
	if g.Active() {
		t.Error("active with partition 1 only")
	}
	r.setActive(gcPartition, true)
	if !g.Active() {
		t.Error("not active with partition 0")
	}
	if g.Containers.MaxPerPodContainer != 2 || g.Logs.MaxSize != 1<<20 || g.Logs.MaxFiles != 4 || g.Logs.Workers != 3 ||
		g.Images.HighThresholdPercent != 70 || g.Images.LowThresholdPercent != 60 {
		t.Errorf("policies %+v", g)
	}
	cfg.GC.ImageGCHigh, cfg.GC.ImagePeriod = 100, time.Minute
	if p := r.gcConfig().ImagePeriod; p != 0 {
		t.Errorf("image GC every %v with image-gc-high-threshold 100, want off", p)
	}
}
