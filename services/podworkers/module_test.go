package podworkers_test

import (
	"testing"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/podworkers"
)

// TestServiceRunsAlone: the fx module starts with an embedded NATS against a
// real API server, reports ready, and stops cleanly; a bad key value stops
// it at once.
func TestServiceRunsAlone(t *testing.T) {
	if code, out := apptest.RunBad("podworkers", []string{"--podworkers.lease-ttl=1s"}, podworkers.Service()); code == 0 {
		t.Fatalf("a lease TTL shorter than two refreshes was accepted: %s", out)
	}
	cp := testenv.ControlPlaneForTest(t)
	s := apptest.Start(t, "podworkers", []string{"--kubeconfig=" + cp.Kubeconfig, "--node-name=module-node", "--runtime=process"}, podworkers.Service())
	s.Stop(t)
}
