// Package prober is the prober stage of Splitlet: it runs liveness, readiness and startup probes with kubelet semantics and publishes their results.
//
// Service is the only thing binaries import: cmd/prober runs it alone, and
// cmd/splitlet runs it beside the other stages.
package prober

import (
	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/services/prober/internal/service"
)

// Name is the service's name in --services.
const Name = "prober"

// Service returns the prober stage, ready for app.Run.
func Service() app.Service {
	s := app.NewService(Name, &service.Config{}, service.New)
	// --shadow: beside the live prober, on live traffic (docs/experiments.md).
	s.Shadow = true
	// memory-limit auto's budget for a pod, with the collector's headroom
	// (measured: docs/bench.md, "Memory"): the probed containers of each pod and their workers.
	s.MemoryPerPod = 8 << 10
	return s
}
