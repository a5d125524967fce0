package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestComposeStack: the split stack (compose.yaml), brought up with one
// pod worker as `make up` does, first walks README.md's quick start with
// the real kubectl (kubectl top included: metrics.k8s.io answers for the
// node and the pod, through metrics-server), checks that each stage runs with its own identity and
// that etcd and the credentials on the host are closed to others,
// restarts kube-apiserver (no stage is locked out), then, scaled to three
// while pods run, passes the whole scenario of checkPodsOnStack.
func TestComposeStack(t *testing.T) {
	s := upStack(t, map[string]string{"SPLITLET_PODWORKERS": "1"}, "compose.yaml")
	walkQuickStart(t, s)
	s.checkIdentities(t)
	s.checkClosedDoors(t)
	// a restarted kube-apiserver keeps its CA and credentials: the stages
	// go on (the pods below are run after it).
	s.restartAPIServer(t)
	checkPodsOnStack(t, s, 3)
}

// TestComposeStackTCPProber: the same stack with the prober replaced by
// examples/tcpprober (compose.tcpprober.yaml), with three pod workers from
// the start, passes the same scenario.
func TestComposeStackTCPProber(t *testing.T) {
	override := filepath.Join(composeDir(t), "compose.tcpprober.yaml")
	if _, err := os.Stat(override); err != nil {
		t.Fatalf("%s: %v", override, err)
	}
	if err := exec.Command("docker", "image", "inspect", image("tcpprober")).Run(); err != nil {
		t.Fatalf("image %s missing; run `make images`", image("tcpprober"))
	}
	s := upStack(t, map[string]string{"SPLITLET_PODWORKERS": "3"}, "compose.yaml", "compose.tcpprober.yaml")
	checkPodsOnStack(t, s, 3)
}

// TestComposeAllInOne: compose.allinone.yaml (one splitlet process with
// every stage, embedded NATS) runs pods with probes, logs and deletion.
func TestComposeAllInOne(t *testing.T) {
	s := upStack(t, nil, "compose.yaml", "compose.allinone.yaml")
	checkPodsOnStack(t, s, 1)
}
