package podconfig_test

import (
	"testing"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/podconfig"
)

// TestServiceRunsAlone: the fx module starts with an embedded NATS against
// a real API server, reports ready once the API source synced, and stops
// cleanly; a bad key value stops it at once with exit code 2.
func TestServiceRunsAlone(t *testing.T) {
	if code, out := apptest.RunBad("podconfig", []string{"--podconfig.notification-mode=bogus"}, podconfig.Service()); code != 2 {
		t.Fatalf("a bad notification mode was accepted (code %d): %s", code, out)
	}
	cp := testenv.ControlPlaneForTest(t)
	s := apptest.Start(t, "podconfig", []string{"--kubeconfig=" + cp.Kubeconfig, "--node-name=module-node",
		"--podconfig.static-pod-path=" + t.TempDir(), "--podconfig.snapshot-period=1s"}, podconfig.Service())
	s.Stop(t)
}
