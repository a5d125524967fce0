// Package nodehb is the nodehb stage of Splitlet: it registers the Node, renews its Lease, reports NodeStatus, holds Ready until the agent is ready, and serves the kubelet HTTP API.
//
// Service is the only thing binaries import: cmd/nodehb runs it alone, and
// cmd/splitlet runs it beside the other stages.
package nodehb

import (
	"go.uber.org/fx"

	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/services/nodehb/internal/service"
)

// Name is the service's name in --services.
const Name = "nodehb"

// Service returns the nodehb stage, ready for app.Run.
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
