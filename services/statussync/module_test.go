package statussync_test

import (
	"strings"
	"testing"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/statussync"
)

// TestServiceRunsAlone: the fx module starts with an embedded NATS against a
// real API server, reports ready, and stops cleanly; a bad key value stops
// it at once with a message that names the key.
func TestServiceRunsAlone(t *testing.T) {
	code, out := apptest.RunBad("statussync", []string{"--statussync.workers=0", "--kubeconfig=/nonexistent"}, statussync.Service())
	if code == 0 || !strings.Contains(out, "statussync.workers") {
		t.Fatalf("a bad worker count was accepted (code %d): %s", code, out)
	}
	cp := testenv.ControlPlaneForTest(t)
	s := apptest.Start(t, "statussync", []string{"--kubeconfig=" + cp.Kubeconfig, "--node-name=module-node",
		"--statussync.batch-period=1s"}, statussync.Service())
	s.Stop(t)
}
