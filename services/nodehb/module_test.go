package nodehb_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/nodehb"
)

// TestServiceRunsAlone: the fx module refuses a bad label naming the key;
// with good keys it registers the Node, reports ready, and on stop leaves
// the Node in place and stops renewing the Lease.
func TestServiceRunsAlone(t *testing.T) {
	code, out := apptest.RunBad("nodehb", []string{"--nodehb.labels=bad key=x", "--kubeconfig=/nonexistent"}, nodehb.Service())
	if code == 0 || !strings.Contains(out, "nodehb.labels") {
		t.Fatalf("a bad label was accepted (code %d): %s", code, out)
	}
	cp := testenv.ControlPlaneForTest(t)
	kport, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := apptest.Start(t, "nodehb", []string{"--kubeconfig=" + cp.Kubeconfig, "--node-name=module-node",
		fmt.Sprintf("--nodehb.port=%d", kport), "--nodehb.lease-renew-interval=200ms"}, nodehb.Service())
	cs := cp.Clientset()
	node, err := cs.CoreV1().Nodes().Get(t.Context(), "module-node", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node not registered: %v", err)
	}
	// Wait for the Lease so that the check after stop means something.
	testenv.EventuallyNoError(t, 20*time.Second, "the node's Lease", func() error {
		_, err := cs.CoordinationV1().Leases("kube-node-lease").Get(t.Context(), "module-node", metav1.GetOptions{})
		return err
	})
	s.Stop(t)
	after, err := cs.CoreV1().Nodes().Get(t.Context(), "module-node", metav1.GetOptions{})
	if err != nil || after.UID != node.UID {
		t.Fatalf("node not left in place after stop: %v", err)
	}
	l1, err := cs.CoordinationV1().Leases("kube-node-lease").Get(t.Context(), "module-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Ten renew intervals later the Lease is unchanged: renewals stopped.
	time.Sleep(2 * time.Second)
	l2, err := cs.CoordinationV1().Leases("kube-node-lease").Get(t.Context(), "module-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l2.ResourceVersion != l1.ResourceVersion {
		t.Fatalf("lease still renewed after stop: %v -> %v", l1.Spec.RenewTime, l2.Spec.RenewTime)
	}
}
