package tcpprober_test

import (
	"strings"
	"testing"

	"github.com/splitlet/splitlet/examples/tcpprober"
	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/bus/bustest"
	"github.com/splitlet/splitlet/libs/conformance"
)

// TestConformance: tcpprober, run as its binary runs it (the common flags,
// its own NATS connection), passes the prober conformance kit's cases for
// tcpSocket probes. httpGet (checked as a TCP connect, so an HTTP 500 is a
// Success) and exec (reported Unknown) are skipped, as documented. It runs
// as the prober's bus identity, and stays within it.
func TestConformance(t *testing.T) {
	const node = "tcpprober-node"
	nats := bustest.Start(t, node)
	apptest.Start(t, "tcpprober", []string{"--nats-url=" + nats.URL, "--nats-nkey=" + nats.Seed(bus.StageProber), "--node-name=" + node, "--partitions=4"}, tcpprober.Service())
	conformance.Prober(t, conformance.Target{NATSURL: nats.URL, NATSOptions: nats.Options(t, bus.AdminIdentity), Node: node, Partitions: 4}, conformance.TCPOnly())
	if v := nats.Violations.All(); len(v) > 0 {
		t.Errorf("permission violations:\n%s", strings.Join(v, "\n"))
	}
}
