// Package podconfig is the podconfig stage of Splitlet: it merges the pod sources (API server, static files, HTTP) into the PodUpdate stream on the bus, and owns mirror pods.
//
// Service is the only thing binaries import: cmd/podconfig runs it alone, and
// cmd/splitlet runs it beside the other stages.
package podconfig

import (
	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/services/podconfig/internal/service"
)

// Name is the service's name in --services.
const Name = "podconfig"

// Service returns the podconfig stage, ready for app.Run.
func Service() app.Service {
	s := app.NewService(Name, &service.Config{}, service.New)
	// memory-limit auto's budget for a pod, with the collector's headroom
	// (measured: docs/bench.md, "Memory"): its informer's pods and the merged sources' copies.
	s.MemoryPerPod = 20 << 10
	return s
}
