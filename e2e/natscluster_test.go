package e2e

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// natsClusterPorts are the ports compose.natscluster.yaml adds.
var natsClusterPorts = []int{14223, 14224, 16222, 16223, 16224}

// TestComposeNATSCluster: the stack on a three-server NATS cluster
// (compose.natscluster.yaml, nats-replicas=3). Its routes refuse a server
// without the route credentials and take one with them, and no server has
// a monitoring port. One NATS server is killed while pods run: the running
// pods keep their containers, the Node stays Ready, and a pod created
// afterwards becomes Ready.
func TestComposeNATSCluster(t *testing.T) {
	for _, port := range natsClusterPorts {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatalf("port %d of the NATS cluster stack is taken: %v", port, err)
		}
		ln.Close()
	}
	s := upStack(t, nil, "compose.yaml", "compose.natscluster.yaml")
	s.waitNodeReady(t)
	s.checkRoutes(t)
	// the stages made the streams and the lease bucket at three replicas.
	nc, err := s.natsConnect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range []string{bus.StreamName(nodeName, bus.StreamPodUpdates), bus.StreamName(nodeName, bus.StreamPodStatus),
		bus.StreamName(nodeName, bus.StreamProbes), bus.StreamName(nodeName, bus.StreamState), "KV_" + bus.LeaseBucket(nodeName)} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if r := st.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("stream %s has %d replicas, want 3", name, r)
		}
	}
	before := []string{"nc-web-1", "nc-web-2"}
	for i, name := range before {
		s.create(t, webPod(name, int32(29081+i)))
	}
	ready := s.waitAllReady(t, "pods Ready on the NATS cluster", before, 3*time.Minute, nil)
	ids := map[string]string{}
	for _, name := range before {
		ids[name] = containerID(ready[name])
	}

	victim := s.containers(t, "nats2")
	if len(victim) != 1 {
		t.Fatalf("nats2 containers: %v", victim)
	}
	if out, err := exec.Command("docker", "kill", victim[0]).CombinedOutput(); err != nil {
		t.Fatalf("docker kill nats2: %v: %s", err, out)
	}
	killed := time.Now()
	t.Log("killed nats2")
	s.create(t, webPod("nc-web-3", 29083))
	after := s.waitAllReady(t, "a new pod Ready with a NATS server gone", append(before, "nc-web-3"), 3*time.Minute, nil)
	for _, name := range before {
		p := after[name]
		if containerID(p) != ids[name] || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s: container %s restarts %d after the NATS server loss, was %s with 0",
				name, containerID(p), p.Status.ContainerStatuses[0].RestartCount, ids[name])
		}
	}
	n, err := s.cs.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		// Ready throughout: True, and no transition since the kill.
		if c.Type == corev1.NodeReady && (c.Status != corev1.ConditionTrue || c.LastTransitionTime.After(killed)) {
			t.Errorf("Node Ready=%s since %s after the NATS server loss at %s: %s", c.Status, c.LastTransitionTime, killed.Format(time.RFC3339), c.Message)
		}
	}
}

// checkRoutes: a server that connects to a route port without the route
// credentials (the control plane's, in the state directory) is refused,
// one with them joins; the monitoring ports of before are closed.
func (s *stack) checkRoutes(t *testing.T) {
	t.Helper()
	creds, err := testenv.EnsureNATSRoutes(filepath.Join(s.env["SPLITLET_STATE_DIR"], "nats"))
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := creds.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	refused := testenv.RoutedServerForTest(t, &url.URL{Scheme: "nats-route", Host: "127.0.0.1:16222"}, nil)
	joined := testenv.RoutedServerForTest(t, creds.URL("127.0.0.1:16222"), tlsConfig)
	deadline := time.Now().Add(30 * time.Second)
	for joined.NumRoutes() == 0 {
		if time.Now().After(deadline) {
			t.Error("a server with the route credentials did not join within 30 s")
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the server's route count
	}
	if n := refused.NumRoutes(); n != 0 {
		t.Errorf("a route without credentials joined the cluster (%d routes)", n)
	}
	// leave the cluster as the stack made it.
	joined.Shutdown()
	for _, port := range []int{18222, 18223, 18224} {
		if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
			c.Close()
			t.Errorf("port %d (nats-server monitoring) answers", port)
		}
	}
}
