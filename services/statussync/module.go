// Package statussync is the statussync stage of Splitlet: it is the status manager: it builds API pod statuses, patches them to the API server, and deletes finished pods.
//
// Service is the only thing binaries import: cmd/statussync runs it alone, and
// cmd/splitlet runs it beside the other stages.
package statussync

import (
	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/services/statussync/internal/service"
)

// Name is the service's name in --services.
const Name = "statussync"

// Service returns the statussync stage, ready for app.Run.
func Service() app.Service {
	s := app.NewService(Name, &service.Config{}, service.New)
	// --shadow: beside the live statussync, its writes published under its
	// shadow prefix instead of sent (docs/bus.md, "Shadow stages").
	s.Shadow = true
	// memory-limit auto's budget for a pod, with the collector's headroom
	// (measured: docs/bench.md, "Memory"): the API view, the bus view and the versioned status of each pod.
	s.MemoryPerPod = 32 << 10
	return s
}
