package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/splitlet/splitlet/libs/testenv"
)

// The node agents localup can run as the node (--node-agent).
const (
	agentSplitlet = "splitlet"
	agentKubelet  = "kubelet"
)

// kubeletNode is the real kubelet (bin/kubelet, built from the pinned
// k8s.io/kubernetes) run as the node instead of splitlet: the peer of make
// conformance, for the kubelet's own figure on the same suite.
type kubeletNode struct {
	cmd *exec.Cmd
	// healthz is the kubelet's /healthz URL (plain HTTP on 127.0.0.1).
	healthz string
	// dir holds the kubelet's kubeconfig, configuration, certificates and
	// root directory.
	dir string
}

// kubeletRoot is the kubelet's --root-dir under its directory.
func kubeletRoot(dir string) string { return filepath.Join(dir, "root") }

// newKubelet prepares the kubelet's command: a client certificate of the
// node's identity (system:node:<name> in system:nodes, which the Node
// authorizer and NodeRestriction admission expect), a serving certificate
// for the node's address signed by the control plane's CA, and a
// KubeletConfiguration under <state>/kubelet. The kubelet talks to the CRI
// runtime at criEndpoint and registers the node with nodeIP as its
// InternalIP.
// staticPodDir, when not empty, is its staticPodPath.
func newKubelet(cp *testenv.ControlPlane, state, node, nodeIP string, port int, criEndpoint, staticPodDir string) (*kubeletNode, error) {
	bin, err := testenv.Binary(agentKubelet)
	if err != nil {
		return nil, fmt.Errorf("%w (build it: TESTENV_EXTRA=kubelet hack/testenv/build.sh bin)", err)
	}
	if criEndpoint == "" {
		return nil, fmt.Errorf("the kubelet needs a CRI runtime: --runtime=cri")
	}
	dir := filepath.Join(state, "kubelet")
	// What a previous run left: the mounts of its pods' volumes go first,
	// then the whole directory (pods, checkpoints, certificates).
	if err := unmountUnder(kubeletRoot(dir)); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	for _, d := range []string{kubeletRoot(dir), filepath.Join(dir, "pod-logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}

	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteClientKubeconfig(kubeconfig, testenv.NodeUser(node), testenv.NodesGroup); err != nil {
		return nil, err
	}
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	if ip := net.ParseIP(nodeIP); ip != nil && !ip.IsLoopback() {
		ips = append(ips, ip)
	}
	certPEM, keyPEM, err := cp.ServerCertificate(ips, []string{node, "localhost"})
	if err != nil {
		return nil, err
	}
	certFile, keyFile := filepath.Join(dir, "kubelet.crt"), filepath.Join(dir, "kubelet.key")
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}
	healthzPort, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	config := kubeletConfig(kubeletConfigOptions{
		port:         port,
		healthzPort:  healthzPort,
		clientCAFile: cp.CAFile,
		certFile:     certFile,
		keyFile:      keyFile,
		criEndpoint:  criEndpoint,
		podLogsDir:   filepath.Join(dir, "pod-logs"),
		resolvConf:   resolvConf(),
		staticPodDir: staticPodDir,
	})
	configPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--config="+configPath,
		"--kubeconfig="+kubeconfig,
		"--root-dir="+kubeletRoot(dir),
		"--hostname-override="+node,
		"--node-ip="+nodeIP,
		// cAdvisor's own containerd client (container stats) defaults to
		// /run/containerd/containerd.sock, the host's: this containerd.
		"--containerd="+strings.TrimPrefix(criEndpoint, "unix://"),
		"--v=2",
	)
	return &kubeletNode{cmd: cmd, healthz: fmt.Sprintf("http://127.0.0.1:%d/healthz", healthzPort), dir: dir}, nil
}

// kubeletConfigOptions are what the KubeletConfiguration of a run holds
// beyond its fixed settings.
type kubeletConfigOptions struct {
	port, healthzPort int
	clientCAFile      string
	certFile, keyFile string
	criEndpoint       string
	podLogsDir        string
	resolvConf        string
	staticPodDir      string
}

// kubeletConfig is the kubelet's configuration file (YAML, strings quoted
// as Go quotes them, which YAML reads back). Its choices, beyond the
// defaults:
//   - the kubelet API on every address at the given port, authenticating
//     the client certificate kube-apiserver shows (signed by the control
//     plane's CA) and bearer tokens through the API server (webhook), and
//     authorizing each request through the API server (SubjectAccessReview):
//     what kube-apiserver needs for logs, exec and port-forward, as the
//     Splitlet node's --nodehb.client-ca-file gives it; no read-only port;
//   - cgroupfs as the cgroup driver (containerd's runc default) and no
//     refusal of cgroup v1 or swap (this kind of machine has cgroup v1);
//   - no image garbage collection and eviction thresholds near zero: the
//     test images are imported, not pulled, so an image the kubelet deleted
//     could not come back, and the host's disk is shared with other runs;
//   - pod logs under the run's directory, not /var/log/pods, where the
//     kubelet would remove the log directories of pods it does not know
//     (another node agent's on the same host).
func kubeletConfig(o kubeletConfigOptions) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "0.0.0.0"
port: %d
readOnlyPort: 0
healthzBindAddress: "127.0.0.1"
healthzPort: %d
tlsCertFile: %q
tlsPrivateKeyFile: %q
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %q
authorization:
  mode: Webhook
containerRuntimeEndpoint: %q
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
resolvConf: %q
clusterDomain: "cluster.local"
podLogsDir: %q
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
staticPodPath: %q
`, o.port, o.healthzPort, o.certFile, o.keyFile, o.clientCAFile, o.criEndpoint, o.resolvConf, o.podLogsDir, o.staticPodDir)
}

// resolvConf is the host's resolver configuration the kubelet gives pods
// without cluster DNS (dnsPolicy Default, and ClusterFirst falling back to
// it): /etc/resolv.conf, or "" (no resolver configuration) when the host
// has none.
func resolvConf() string {
	if _, err := os.Stat("/etc/resolv.conf"); err == nil {
		return "/etc/resolv.conf"
	}
	return ""
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

// unmountUnder unmounts every mount point at or below dir, deepest first
// (the kubelet's bind mount of its root directory onto itself and the
// tmpfs of secret, projected and memory emptyDir volumes stay behind when
// it stops). The unmounts are lazy: a container that still uses one keeps
// it until it goes.
func unmountUnder(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// The fifth field is the mount point, with spaces and the like
		// escaped as octal.
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountinfo(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	// Deepest first; a path mounted several times is unmounted as often.
	sort.SliceStable(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL && err != syscall.ENOENT {
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return nil
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of a path
// in /proc/self/mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// kubeletSysctls are the kernel settings the kubelet sets to the values it
// expects when it starts (with protectKernelDefaults off, as here): see
// the kubelet's container manager. They are host-wide, so localup puts
// them back when the kubelet is down.
var kubeletSysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// saveSysctls reads the kernel settings under /proc/sys and returns what
// writes them back (a setting that could not be read is left alone).
func saveSysctls(names []string) func() {
	saved := map[string]string{}
	for _, n := range names {
		if data, err := os.ReadFile(filepath.Join("/proc/sys", n)); err == nil {
			saved[n] = strings.TrimSpace(string(data))
		}
	}
	return func() {
		for n, v := range saved {
			p := filepath.Join("/proc/sys", n)
			if data, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(data)) == v {
				continue
			}
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				fmt.Fprintf(os.Stderr, "localup: restore %s=%s: %v\n", strings.ReplaceAll(n, "/", "."), v, err)
			}
		}
	}
}
