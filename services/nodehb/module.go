// Package nodehb is the nodehb stage of Splitlet: it registers the Node, renews its Lease, reports NodeStatus, holds Ready until the agent is ready, and serves the kubelet HTTP API.
//
// Service is the only thing binaries import: cmd/nodehb runs it alone, and
// cmd/splitlet runs it beside the other stages.
package nodehb

import (
	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/services/nodehb/internal/service"
)

// Name is the service's name in --services.
const Name = "nodehb"

// Service returns the nodehb stage, ready for app.Run. Its process keeps
// the node's credentials (TLS bootstrap, client certificate rotation).
func Service() app.Service {
	s := app.NewService(Name, &service.Config{}, service.New)
	s.NodeCredentials = true
	return s
}
