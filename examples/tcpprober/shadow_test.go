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

// TestShadowConformance: tcpprober with --shadow, as the prober's shadow
// identity, passes the kit's shadow cases (results under the shadow
// prefix, nothing live, its own consumers) within that identity.
func TestShadowConformance(t *testing.T) {
	const node = "tcpprober-shadow"
	nats := bustest.Start(t, node)
	apptest.Start(t, "tcpprober", []string{"--nats-url=" + nats.URL, "--nats-nkey=" + nats.Seed(bus.ShadowIdentity(bus.StageProber)),
		"--node-name=" + node, "--partitions=4", "--shadow"}, tcpprober.Service())
	conformance.ProberShadow(t, conformance.Target{NATSURL: nats.URL, NATSOptions: nats.Options(t, bus.AdminIdentity), Node: node, Partitions: 4})
	if v := nats.Violations.All(); len(v) > 0 {
		t.Errorf("permission violations:\n%s", strings.Join(v, "\n"))
	}
}
