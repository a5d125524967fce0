// Package statussync is the statussync stage of Splitlet: it is the status manager: it builds API pod statuses, patches them to the API server, and deletes finished pods.
//
// Service is the only thing binaries import: cmd/statussync runs it alone, and
// cmd/splitlet runs it beside the other stages.
package statussync

import (
	"go.uber.org/fx"

	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/services/statussync/internal/service"
)

// Name is the service's name in --services.
const Name = "statussync"

// Service returns the statussync stage, ready for app.Run.
func Service() app.Service {
	cfg := &service.Config{}
	return app.Service{
		Name:  Name,
		Flags: cfg.RegisterFlags,
		Module: func() fx.Option {
			// The keys are loaded by now: a bad value stops the process
			// before anything starts, naming the key.
			if err := cfg.Validate(); err != nil {
				return fx.Error(err)
			}
			return fx.Module(Name, fx.Supply(cfg), app.RunService(Name, service.New))
		},
	}
}
