// Package tcpprober is an alternative prober stage for Splitlet, written
// against docs/bus.md only: it runs tcpSocket probes, checks httpGet probes
// as a TCP connect to the same port, and reports exec and grpc probes as
// Unknown. It shows how a stage is replaced (docs/experiments.md) and
// passes the prober conformance kit's TCP cases (libs/conformance).
//
// It takes the place of services/prober on the bus: the same durable
// consumers (prober, prober-status), the same ProbeResult messages.
package tcpprober

import (
	"github.com/spf13/pflag"

	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/libs/bus"
)

// Name is the service's name.
const Name = "tcpprober"

// Config holds the tcpprober keys.
type Config struct {
	// Instance is the prober's source on the bus.
	Instance string
	// HTTPGet is how an httpGet probe is checked: "tcp" (a TCP connect,
	// the default) or "get" (a GET whose status must be 200 to 399, as
	// the kubelet checks it): the knob docs/experiments.md's A/B
	// walkthrough turns.
	HTTPGet string
}

// RegisterFlags adds the keys ("tcpprober.<key>") to fs.
func (c *Config) RegisterFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Instance, "tcpprober.instance", "tcpprober", "the prober's name on the bus (source of its ProbeResult messages)")
	fs.StringVar(&c.HTTPGet, "tcpprober.http-get", "tcp", "how an httpGet probe is checked: tcp (a TCP connect to its port) or get (a GET whose status must be 200 to 399)")
}

// Service returns the stage, ready for app.Run.
func Service() app.Service {
	s := app.NewService(Name, &Config{}, New)
	// it connects as the prober's bus identity.
	s.Identity = bus.StageProber
	// --shadow: beside the live prober, on live traffic (docs/experiments.md).
	s.Shadow = true
	return s
}
