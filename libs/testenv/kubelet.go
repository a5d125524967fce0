package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/splitlet/splitlet/libs/cgroups"
)

// KubeletBinary is the real kubelet's name in the bin directory (built from
// the pinned k8s.io/kubernetes: TESTENV_EXTRA=kubelet hack/testenv/build.sh bin).
const KubeletBinary = "kubelet"

// KubeletOptions say how the real kubelet of a run is set up.
type KubeletOptions struct {
	// Dir holds the kubelet's kubeconfig, configuration, certificates, pod
	// logs and root directory (KubeletRoot); what a previous run left there
	// is removed first.
	Dir string
	// Node is the node's name; NodeIP its InternalIP.
	Node, NodeIP string
	// Port is the kubelet API's port; CRIEndpoint the CRI runtime's
	// (unix://...).
	Port        int
	CRIEndpoint string
	// StaticPodDir, when not empty, is its staticPodPath.
	StaticPodDir string
	// MaxPods is its maxPods; 0 keeps the kubelet's default (110).
	MaxPods int
	// CgroupRoot, when not empty, is its cgroupRoot (a cgroupfs path such
	// as /localup-x, made in every hierarchy when missing): the kubelet
	// puts its kubepods cgroup there. With the default, the root, the
	// kubelet's housekeeping kills, every 2 seconds, the processes of each
	// pod cgroup under /kubepods it does not know: the pods of any other
	// node agent on the host that uses the same layout.
	CgroupRoot string
	// Args are further command-line flags ("--v=2"); none keeps the
	// kubelet's defaults (log verbosity 0).
	Args []string
}

// Kubelet is the real kubelet's command, ready to start, for one node.
type Kubelet struct {
	Cmd *exec.Cmd
	// Healthz is the kubelet's /healthz URL (plain HTTP on 127.0.0.1).
	Healthz string
	// Dir is KubeletOptions.Dir.
	Dir string
}

// KubeletRoot is the kubelet's --root-dir under its directory.
func KubeletRoot(dir string) string { return filepath.Join(dir, "root") }

// NewKubelet prepares the real kubelet's command: a client certificate of
// the node's identity (system:node:<name> in system:nodes, which the Node
// authorizer and NodeRestriction admission expect), a serving certificate
// for the node's address signed by the control plane's CA, and a
// KubeletConfiguration (KubeletConfig) in o.Dir.
func NewKubelet(cp *ControlPlane, o KubeletOptions) (*Kubelet, error) {
	bin, err := Binary(KubeletBinary)
	if err != nil {
		return nil, fmt.Errorf("%w (build it: TESTENV_EXTRA=kubelet hack/testenv/build.sh bin)", err)
	}
	if o.CRIEndpoint == "" {
		return nil, fmt.Errorf("the kubelet needs a CRI runtime: --runtime=cri")
	}
	dir := o.Dir
	if err := resetKubeletDir(dir); err != nil {
		return nil, err
	}
	if o.CgroupRoot != "" {
		if err := ensureCgroupRoot(o.CgroupRoot); err != nil {
			return nil, err
		}
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteClientKubeconfig(kubeconfig, NodeUser(o.Node), NodesGroup); err != nil {
		return nil, err
	}
	certFile, keyFile, err := writeKubeletServingCert(cp, dir, o.Node, o.NodeIP)
	if err != nil {
		return nil, err
	}
	healthzPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	config := KubeletConfig(KubeletConfigOptions{
		Port: o.Port, HealthzPort: healthzPort, ClientCAFile: cp.CAFile,
		CertFile: certFile, KeyFile: keyFile, CRIEndpoint: o.CRIEndpoint,
		PodLogsDir: filepath.Join(dir, "pod-logs"), ResolvConf: hostResolvConf(),
		StaticPodDir: o.StaticPodDir, MaxPods: o.MaxPods, CgroupRoot: o.CgroupRoot,
	})
	configPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		return nil, err
	}
	args := []string{
		"--config=" + configPath,
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + KubeletRoot(dir),
		"--hostname-override=" + o.Node,
		"--node-ip=" + o.NodeIP,
		// cAdvisor's own containerd client (container stats) defaults to
		// /run/containerd/containerd.sock, the host's: this containerd.
		"--containerd=" + strings.TrimPrefix(o.CRIEndpoint, "unix://"),
	}
	cmd := exec.Command(bin, append(args, o.Args...)...)
	return &Kubelet{Cmd: cmd, Healthz: fmt.Sprintf("http://127.0.0.1:%d/healthz", healthzPort), Dir: dir}, nil
}

// resetKubeletDir clears what a previous run left in dir (the mounts of
// its pods' volumes first, then the whole directory) and makes the root
// and pod log directories.
func resetKubeletDir(dir string) error {
	if err := UnmountUnder(KubeletRoot(dir)); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for _, d := range []string{KubeletRoot(dir), filepath.Join(dir, "pod-logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// writeKubeletServingCert writes the kubelet API's serving certificate and
// key, for 127.0.0.1, nodeIP and the node's name, into dir.
func writeKubeletServingCert(cp *ControlPlane, dir, node, nodeIP string) (certFile, keyFile string, err error) {
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	if ip := net.ParseIP(nodeIP); ip != nil && !ip.IsLoopback() {
		ips = append(ips, ip)
	}
	certPEM, keyPEM, err := cp.ServerCertificate(ips, []string{node, "localhost"})
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "kubelet.crt"), filepath.Join(dir, "kubelet.key")
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, os.WriteFile(keyFile, keyPEM, 0o600)
}

// KubeletConfigOptions are what the KubeletConfiguration of a run holds
// beyond its fixed settings.
type KubeletConfigOptions struct {
	Port, HealthzPort int
	ClientCAFile      string
	CertFile, KeyFile string
	CRIEndpoint       string
	PodLogsDir        string
	ResolvConf        string
	StaticPodDir      string
	// MaxPods: 0 leaves the kubelet's default.
	MaxPods int
	// CgroupRoot: "" leaves the kubelet's default (the root).
	CgroupRoot string
}

// ensureCgroupRoot makes the kubelet's cgroup root in every hierarchy (the
// kubelet refuses to start without it) with the CPUs and memory nodes of
// its parent on a v1 cpuset hierarchy.
func ensureCgroupRoot(path string) error {
	fsys, err := cgroups.DetectFS()
	if err != nil {
		return err
	}
	return fsys.Ensure(path, cgroups.Resources{})
}

// KubeletConfig is the kubelet's configuration file (YAML, strings quoted
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
func KubeletConfig(o KubeletConfigOptions) string {
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
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
`, o.Port, o.HealthzPort, o.CertFile, o.KeyFile, o.ClientCAFile, o.CRIEndpoint, o.ResolvConf, o.PodLogsDir, o.StaticPodDir)
	if o.MaxPods > 0 {
		cfg += fmt.Sprintf("maxPods: %d\n", o.MaxPods)
	}
	if o.CgroupRoot != "" {
		cfg += fmt.Sprintf("cgroupRoot: %q\n", o.CgroupRoot)
	}
	return cfg
}

// hostResolvConf is the host's resolver configuration the kubelet gives
// pods without cluster DNS (dnsPolicy Default, and ClusterFirst falling
// back to it): /etc/resolv.conf, or "" (no resolver configuration) when
// the host has none.
func hostResolvConf() string {
	if _, err := os.Stat("/etc/resolv.conf"); err == nil {
		return "/etc/resolv.conf"
	}
	return ""
}

// KubeletSysctls are the kernel settings the kubelet sets to the values it
// expects when it starts (with protectKernelDefaults off, as here): see
// the kubelet's container manager. They are host-wide, so a run puts them
// back when the kubelet is down (SaveSysctls).
var KubeletSysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
}

// SaveSysctls reads the kernel settings under /proc/sys and returns what
// writes them back (a setting that could not be read is left alone).
func SaveSysctls(names []string) func() {
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
				fmt.Fprintf(os.Stderr, "testenv: restore %s=%s: %v\n", strings.ReplaceAll(n, "/", "."), v, err)
			}
		}
	}
}

// HostAddress is the host's IPv4 address on its default route (the source
// address the kernel picks for a non-local destination; nothing is sent),
// or "" when there is none: a node IP the kubelet takes (it refuses a
// loopback address).
func HostAddress() string {
	c, err := net.Dial("udp4", "203.0.113.1:9")
	if err != nil {
		return ""
	}
	defer c.Close()
	a, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok || a.IP.IsLoopback() {
		return ""
	}
	return a.IP.String()
}
