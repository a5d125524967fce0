package tcpprober_test

import (
	"testing"

	"github.com/splitlet/splitlet/examples/tcpprober"
	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/conformance"
	"github.com/splitlet/splitlet/libs/testenv"
)

// TestConformance: tcpprober, run as its binary runs it (the common flags,
// its own NATS connection), passes the prober conformance kit's cases for
// tcpSocket probes. httpGet (checked as a TCP connect, so an HTTP 500 is a
// Success) and exec (reported Unknown) are skipped, as documented.
func TestConformance(t *testing.T) {
	nats := testenv.NATSForTest(t)
	const node = "tcpprober-node"
	apptest.Start(t, "tcpprober", []string{"--nats-url=" + nats.URL, "--node-name=" + node, "--partitions=4"}, tcpprober.Service())
	conformance.Prober(t, conformance.Target{NATSURL: nats.URL, Node: node, Partitions: 4}, conformance.TCPOnly())
}
