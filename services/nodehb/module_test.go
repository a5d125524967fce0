package nodehb_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/nodehb"
)

// TestServiceRunsAlone: the fx module refuses a bad label naming the key;
// with good keys it registers the Node, reports ready, and on stop leaves
// the Node in place and stops renewing the Lease.
func TestServiceRunsAlone(t *testing.T) {
	var stderr bytes.Buffer
	code := app.Run(context.Background(), "nodehb", []string{"--nodehb.labels=bad key=x", "--kubeconfig=/nonexistent"}, &stderr, nodehb.Service())
	if code == 0 || !strings.Contains(stderr.String(), "nodehb.labels") {
		t.Fatalf("a bad label was accepted (code %d): %s", code, stderr.String())
	}

	cp := testenv.ControlPlaneForTest(t)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	kport, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	stderr.Reset()
	go func() {
		done <- app.Run(ctx, "nodehb", []string{"--kubeconfig=" + cp.Kubeconfig, "--node-name=module-node",
			"--data-dir=" + t.TempDir(), "--http-addr=" + addr, "--log-level=warn",
			fmt.Sprintf("--nodehb.port=%d", kport), "--nodehb.lease-renew-interval=200ms"}, &stderr, nodehb.Service())
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready in 30 s (last error %v): %s", err, stderr.String())
		}
		select {
		case code := <-done:
			t.Fatalf("exited early with %d: %s", code, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	cs := cp.Clientset()
	node, err := cs.CoreV1().Nodes().Get(context.Background(), "module-node", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node not registered: %v", err)
	}
	// Wait for the Lease so that the check after stop means something.
	deadline = time.Now().Add(20 * time.Second)
	for {
		if _, err := cs.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), "module-node", metav1.GetOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no lease in 20 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit code %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("did not stop in 30 s")
	}
	after, err := cs.CoreV1().Nodes().Get(context.Background(), "module-node", metav1.GetOptions{})
	if err != nil || after.UID != node.UID {
		t.Fatalf("node not left in place after stop: %v", err)
	}
	l1, err := cs.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), "module-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Ten renew intervals later the Lease is unchanged: renewals stopped.
	time.Sleep(2 * time.Second)
	l2, err := cs.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), "module-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l2.ResourceVersion != l1.ResourceVersion {
		t.Fatalf("lease still renewed after stop: %v -> %v", l1.Spec.RenewTime, l2.Spec.RenewTime)
	}
}
