package app

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/splitlet/splitlet/libs/bus"
)

// TestBusMetricsOncePerProcess: the stages of one process (cmd/splitlet
// runs several) are handed one set of bus metrics, registered once on the
// registry the process serves, with every bus metric on it.
func TestBusMetricsOncePerProcess(t *testing.T) {
	var got []*bus.Metrics
	var reg *prometheus.Registry
	stage := func(name string) fx.Option {
		return fx.Module(name, fx.Invoke(func(m *bus.Metrics) { got = append(got, m) }))
	}
	a := fx.New(fx.NopLogger, processMetrics, stage("podconfig"), stage("podworkers"), stage("statussync"),
		fx.Populate(&reg))
	if err := a.Err(); err != nil {
		t.Fatalf("assemble: %v", err)
	}
	if len(got) != 3 || got[0] != got[1] || got[1] != got[2] {
		t.Fatalf("stages got %v: want one set, the same for each", got)
	}
	m := got[0]
	m.HandlerPanics.WithLabelValues("c").Inc()
	m.HandlerTerminations.WithLabelValues("c").Inc()
	m.ObserveStage(bus.StagePodworkers, time.Millisecond)
	m.BusDelivery.WithLabelValues("podupdates").Observe(0.001)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	for _, want := range []string{"splitlet_bus_delivery_seconds", "splitlet_bus_handler_panics_total",
		"splitlet_bus_handler_terminated_total", "splitlet_pod_stage_duration_seconds"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s not on the process's registry (%v)", want, names)
		}
	}
}
