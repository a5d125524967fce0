// Package podworkers is the podworkers stage of Splitlet: it runs the kubelet's pod worker state machine, one serialized worker per pod UID, over a container runtime.
//
// Service is the only thing binaries import: cmd/podworkers runs it alone, and
// cmd/splitlet runs it beside the other stages.
package podworkers

import (
	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/services/podworkers/internal/service"
)

// Name is the service's name in --services.
const Name = "podworkers"

// Service returns the podworkers stage, ready for app.Run.
func Service() app.Service { return app.NewService(Name, &service.Config{}, service.New) }
