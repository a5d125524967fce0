package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
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
// staticPodPath; cgroupRoot, when not empty, its cgroupRoot.
func newKubelet(cp *testenv.ControlPlane, state, node, nodeIP string, port int, criEndpoint, staticPodDir, cgroupRoot string) (*testenv.Kubelet, error) {
	return testenv.NewKubelet(cp, testenv.KubeletOptions{
		Dir: filepath.Join(state, "kubelet"), Node: node, NodeIP: nodeIP, Port: port,
		CRIEndpoint: criEndpoint, StaticPodDir: staticPodDir, Args: []string{"--v=2"},
		CgroupRoot: cgroupRoot,
	})
}

// runCgroupRoot is a run's cgroup root of its own for a state directory
// (/localup-<dir's name>-<hash of its path>), not the host's root: the
// kubelet's housekeeping kills, every 2 seconds, the processes of each pod
// cgroup under its kubepods it does not know, so a kubelet with the
// host's root kills the pods of any other node agent on the host that
// uses /kubepods (a Splitlet run beside it, another kubelet run).
func runCgroupRoot(state string) (string, error) {
	abs, err := filepath.Abs(state)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(abs))
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, filepath.Base(abs))
	return "/localup-" + name + "-" + hex.EncodeToString(sum[:4]), nil
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
