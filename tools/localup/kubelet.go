package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/splitlet/splitlet/libs/testenv"
)

// The node agents localup can run as the node (--node-agent).
const (
	agentSplitlet = "splitlet"
	agentKubelet  = testenv.KubeletBinary
)

// newKubelet prepares the real kubelet (bin/kubelet, built from the pinned
// k8s.io/kubernetes) run as the node instead of splitlet: the peer of make
// conformance, for the kubelet's own figure on the same suite. Its state
// is under <state>/kubelet; it logs at --v=2, so that a conformance
// failure on it can be read. staticPodDir, when not empty, is its
// staticPodPath.
func newKubelet(cp *testenv.ControlPlane, state, node, nodeIP string, port int, criEndpoint, staticPodDir string) (*testenv.Kubelet, error) {
	return testenv.NewKubelet(cp, testenv.KubeletOptions{
		Dir: filepath.Join(state, "kubelet"), Node: node, NodeIP: nodeIP, Port: port,
		CRIEndpoint: criEndpoint, StaticPodDir: staticPodDir, Args: []string{"--v=2"},
	})
}

// waitKubeletHealthy waits until the kubelet's /healthz answers 200.
func waitKubeletHealthy(ctx context.Context, url string, exited <-chan struct{}, exitErr *error, logPath string) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("the kubelet exited before it was healthy: %v (see %s)", *exitErr, logPath)
		case <-ctx.Done():
			return fmt.Errorf("the kubelet is not healthy: %w (see %s)", ctx.Err(), logPath)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
