package bus_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/bus"
)

// newTestMetrics is a set of bus metrics on a registry of the test's own.
func newTestMetrics(t testing.TB) *bus.Metrics {
	t.Helper()
	m, err := bus.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The bus's metrics go on the registry they are built against, under
// their names and labels; a second set on the same registry is refused
// (one process, one set).
func TestNewMetricsRegistersOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := bus.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.HandlerPanics.WithLabelValues("c").Inc()
	m.HandlerTerminations.WithLabelValues("c").Inc()
	m.ObserveStage(bus.StagePodconfig, time.Millisecond)
	m.BusDelivery.WithLabelValues("podupdates").Observe(0.001)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	want := []string{"splitlet_bus_delivery_seconds", "splitlet_bus_handler_panics_total",
		"splitlet_bus_handler_terminated_total", "splitlet_pod_stage_duration_seconds"}
	if !slices.Equal(names, want) {
		t.Errorf("registered %v, want %v", names, want)
	}
	var already prometheus.AlreadyRegisteredError
	if _, err := bus.NewMetrics(reg); !errors.As(err, &already) {
		t.Errorf("a second set on one registry: %v, want an AlreadyRegisteredError", err)
	}
}

// A nil set counts nothing and does not fail the code that counts.
func TestNilMetrics(t *testing.T) {
	var m *bus.Metrics
	m.ObserveStage(bus.StagePodworkers, time.Second)
	if err := m.Recover(zap.NewNop(), "r", "s", func() { panic("x") }); err == nil {
		t.Error("a panicking handler under a nil set: no error")
	}
}

// Recover counts a request handler's panic under its name.
func TestRecoverCountsPanics(t *testing.T) {
	m := newTestMetrics(t)
	if err := m.Recover(zap.NewNop(), "requests", "subj", func() {}); err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(zap.NewNop(), "requests", "subj", func() { panic("boom") }); err == nil {
		t.Fatal("no error for a panic")
	}
	if got := testutil.ToFloat64(m.HandlerPanics.WithLabelValues("requests")); got != 1 {
		t.Errorf("panics counted %v, want 1", got)
	}
}
