package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/nodehb/internal/eviction"
)

type noPods struct{}

func (noPods) Stats(context.Context) ([]bus.PodStats, int) { return nil, 0 }
func (noPods) ImageFs(context.Context) *bus.FsStats        { return nil }
func (noPods) Evict(context.Context, int, *bus.EvictRequest) (*bus.EvictResult, error) {
	return &bus.EvictResult{}, nil
}

// TestEvictionCostExported: the rounds of the eviction manager and their
// CPU and wall time are on /metrics under the names make bench reads.
func TestEvictionCostExported(t *testing.T) {
	l := eviction.NewLoop(eviction.Config{Interval: 10 * time.Millisecond, Partitions: 1},
		func(eviction.Observations) error { return nil }, noPods{}, nil,
		func(context.Context, []corev1.NodeConditionType) error { return nil }, record.NewFakeRecorder(10), zap.NewNop())
	reg := prometheus.NewRegistry()
	if err := registerEvictionCost(reg, l); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 10*time.Second, "two rounds counted", func() (bool, string) {
		n, err := testutil.GatherAndCount(reg, "splitlet_nodehb_eviction_rounds_total", "splitlet_nodehb_eviction_round_cpu_seconds_total",
			"splitlet_nodehb_eviction_round_seconds_total")
		mfs, _ := reg.Gather()
		var rounds float64
		for _, mf := range mfs {
			if mf.GetName() == "splitlet_nodehb_eviction_rounds_total" {
				rounds = mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		return err == nil && n == 3 && rounds >= 2, fmt.Sprintf("%d series (%v), %g rounds", n, err, rounds)
	})
}
