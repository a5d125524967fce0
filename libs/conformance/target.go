package conformance

import (
	"time"

	"github.com/nats-io/nats.go"

	"k8s.io/client-go/rest"

	"github.com/splitlet/splitlet/libs/bus"
)

// Target describes the running stage under test.
type Target struct {
	// NATSURL is the NATS server the stage is connected to.
	NATSURL string
	// NATSOptions are added to the kit's connection: the identity and TLS
	// of a server with identities (the compose stack's admin nkey and CA:
	// nats.NkeyOptionFromSeed, nats.RootCAs).
	NATSOptions []nats.Option
	// Node is the node name the stage serves (its --node-name).
	Node string
	// Partitions is the stage's partition count (default bus.DefaultPartitions).
	Partitions int
	// Config reaches the API server the stage uses. Required by the stages
	// that read or write API objects (statussync, nodehb, podconfig).
	Config *rest.Config
	// Namespace for the pods the kit creates in the API server (default "default").
	Namespace string
	// ProbeHost is the address the kit's probe targets listen on and the pod
	// IP it reports for its pods (default 127.0.0.1). A prober in a container
	// needs an address of the test's host that it can reach.
	ProbeHost string
	// Timeout bounds each expectation (default 20 s).
	Timeout time.Duration
	// DevicePluginsDir is where the node heartbeat stage serves the device
	// plugin registration socket (nodehb.device-plugins-dir); empty: NodeHB
	// skips its device case (a node without device plugins).
	DevicePluginsDir string
	// JSONOnly: the stage reads only the JSON form of the bus (one in a
	// language without Kubernetes' protobuf types), so the kit writes JSON,
	// as the other stages of its node must (bus-encoding json). By default
	// the kit writes protobuf, the publishers' default.
	JSONOnly bool
}

// publisherOptions are the options of the kit's publishers.
func (t Target) publisherOptions() []bus.PublisherOption {
	if t.JSONOnly {
		return []bus.PublisherOption{bus.WithEncoding(bus.EncodingJSON)}
	}
	return []bus.PublisherOption{bus.WithEncoding(bus.EncodingProtobuf)}
}

func (t Target) withDefaults() Target {
	if t.Partitions == 0 {
		t.Partitions = bus.DefaultPartitions
	}
	if t.Namespace == "" {
		t.Namespace = "default"
	}
	if t.ProbeHost == "" {
		t.ProbeHost = "127.0.0.1"
	}
	if t.Timeout == 0 {
		t.Timeout = 20 * time.Second
	}
	return t
}

// Option changes which cases a suite runs.
type Option func(*options)

type options struct {
	skip map[string]bool
}

// Skip leaves out the named cases (the subtest names, such as
// "httpGet/status500"); use it for what an implementation documents it does
// not do. A skipped case is reported as skipped, never as passed.
func Skip(cases ...string) Option {
	return func(o *options) {
		for _, c := range cases {
			o.skip[c] = true
		}
	}
}

// TCPOnly runs only the prober cases of tcpSocket probes (and the cases
// every prober must pass whatever its handlers).
func TCPOnly() Option {
	return Skip(proberNonTCPCases...)
}

func collect(opts []Option) *options {
	o := &options{skip: map[string]bool{}}
	for _, f := range opts {
		f(o)
	}
	return o
}
