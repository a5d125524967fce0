package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
)

// Containerd defaults: the socket of the host's containerd and the
// namespace its CRI plugin keeps pods and images in.
const (
	DefaultContainerdAddress = "/run/containerd/containerd.sock"
	ContainerdNamespace      = "k8s.io"
)

// ContainerdAddressEnv names a containerd socket to use instead of
// DefaultContainerdAddress.
const ContainerdAddressEnv = "SPLITLET_CONTAINERD_ADDRESS"

// PodCNIConfig is the CNI network a started containerd gives pods without
// hostNetwork: a bridge with no address on the host (no gateway, no
// masquerading), so a pod has an eth0 and an IP but reaches nothing beyond
// the other pods on the bridge, and no traffic leaves the host. (A network
// with only the loopback plugin would be closer still, but containerd 1.6
// refuses a sandbox whose network gives no eth0 address: "failed to find
// network info for sandbox"; its CRI plugin sets up lo by itself.) The
// portmap plugin is in the chain, so that a sandbox's host ports are
// mapped, but the host reaches no pod here: a test of host ports uses
// GatewayCNIConfig.
const PodCNIConfig = `{
  "cniVersion": "0.4.0",
  "name": "splitlet-pods",
  "plugins": [{
    "type": "bridge",
    "bridge": "splitlet0",
    "isGateway": false,
    "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.89.0.0/16"}]]}
  }, {
    "type": "portmap",
    "capabilities": {"portMappings": true}
  }]
}
`

// GatewayCNIConfig is a CNI network list whose bridge is the pods' gateway
// on the host, so that the host reaches pod IPs. No masquerading: the pods
// still reach nothing beyond the host. The firewall plugin lets each pod's
// traffic through the host's FORWARD chain: with dockerd running its policy
// is DROP, and bridged frames pass through it (bridge-nf-call-iptables),
// which would cut pod from pod. The portmap plugin maps the sandboxes'
// host ports (hostPort, hostIP 127.0.0.1 included: it masquerades what
// comes from the host's loopback).
func GatewayCNIConfig(name, bridge, subnet string) string {
	return gatewayCNIConfig(name, bridge, subnet, "")
}

// ServicesCNIConfig is GatewayCNIConfig with one route more in each pod:
// ServiceCIDR through the gateway, where kube-proxy's rules take it
// (StartClusterNetwork). Still no default route: a pod reaches the other
// pods, the host's bridge address and the Services, nothing else.
func ServicesCNIConfig(name, bridge, subnet string) string {
	return gatewayCNIConfig(name, bridge, subnet, fmt.Sprintf(`, "routes": [{"dst": %q}]`, ServiceCIDR))
}

// gatewayCNIConfig is GatewayCNIConfig with routes (JSON: `, "routes":
// [...]` or empty) in its IPAM configuration.
func gatewayCNIConfig(name, bridge, subnet, routes string) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": %q,
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": true,
    "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]]%s}
  }, {
    "type": "firewall"
  }, {
    "type": "portmap",
    "capabilities": {"portMappings": true},
    "snat": true
  }]
}
`, name, bridge, subnet, routes)
}

// ContainerdOptions tune EnsureContainerd.
type ContainerdOptions struct {
	// Address of a containerd to use when it answers (default
	// $SPLITLET_CONTAINERD_ADDRESS, else DefaultContainerdAddress).
	Address string
	// Dir holds the configuration, data, socket and log of a containerd
	// started here; a new temporary directory when empty (removed by Stop).
	Dir string
	// NoImages skips building and importing the busybox and sandbox images.
	NoImages bool
	// NoStart: use only a containerd that answers; none is an error.
	NoStart bool
	// CNIConfig is the CNI network list of a started containerd
	// (PodCNIConfig when empty).
	CNIConfig string
	// RuntimeHandlers are CRI runtime handlers a started containerd has
	// beside runc, each runc again under another name (the node e2e suite
	// runs pods with RuntimeClass handler "test-handler").
	RuntimeHandlers []string
	// RegistryConfigPath is the CRI plugin's registry config_path of a
	// started containerd: a directory of <host>/hosts.toml files (mirrors,
	// headers) it reads at each pull; empty: none.
	RegistryConfigPath string
}

// Containerd is a containerd with its CRI plugin that answers: the host's,
// or one started by EnsureContainerd.
type Containerd struct {
	// Address is the socket path; Endpoint the CRI endpoint
	// ("unix://" + Address).
	Address  string
	Endpoint string
	// SandboxImage is the pause image the CRI plugin runs (its config's
	// sandbox_image).
	SandboxImage string
	// Started: this process started it, and Stop stops it.
	Started bool
	// Dir of a started containerd (log: containerd.log).
	Dir string

	proc      *process
	ownDir    bool
	cniConfig string
	handlers  []string
	regConfig string
}

// EnsureContainerd returns the containerd that answers at opts.Address or,
// when none does, starts one (this needs root) with the CRI plugin on and
// PodCNIConfig as its CNI network, its socket in opts.Dir. Unless
// opts.NoImages, it then builds the busybox and sandbox images
// (BuildCRIImages) and imports them into the k8s.io namespace (nothing is
// pulled). Stop undoes what it started.
func EnsureContainerd(ctx context.Context, opts ContainerdOptions) (c *Containerd, err error) {
	addr := opts.Address
	if addr == "" {
		addr = os.Getenv(ContainerdAddressEnv)
	}
	if addr == "" {
		addr = DefaultContainerdAddress
	}
	c = &Containerd{Address: addr, Endpoint: "unix://" + addr, Dir: opts.Dir, cniConfig: opts.CNIConfig, handlers: opts.RuntimeHandlers, regConfig: opts.RegistryConfigPath}
	if info, err := criInfo(ctx, c.Endpoint, 3*time.Second); err == nil {
		c.SandboxImage = info
	} else {
		if opts.NoStart {
			return nil, fmt.Errorf("no containerd with its CRI plugin answers at %s: %w", addr, err)
		}
		if err := c.start(ctx, err); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if err := c.checkHandlers(ctx, opts.RuntimeHandlers); err != nil {
		return nil, err
	}
	if c.SandboxImage == "" {
		c.SandboxImage = PauseImage
	}
	if opts.NoImages {
		return c, nil
	}
	imgDir := filepath.Join(c.Dir, "images")
	if c.Dir == "" {
		if imgDir, err = os.MkdirTemp("", "splitlet-images-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(imgDir)
	}
	paths, err := BuildCRIImages(imgDir, c.SandboxImage)
	if err != nil {
		return nil, err
	}
	if err := c.ImportImages(ctx, paths...); err != nil {
		return nil, err
	}
	if err := c.WaitImages(ctx, BusyboxImage, c.SandboxImage); err != nil {
		return nil, err
	}
	return c, nil
}

// criInfo connects to the CRI endpoint and returns the sandbox image of the
// runtime's configuration ("" when it does not say).
func criInfo(ctx context.Context, endpoint string, timeout time.Duration) (string, error) {
	cfg, err := criConfig(ctx, endpoint, timeout)
	return cfg.SandboxImage, err
}

// criRuntimeConfig is the part of the CRI plugin's configuration (its
// verbose status's "config") read here.
type criRuntimeConfig struct {
	SandboxImage string `json:"sandboxImage"`
	Containerd   struct {
		Runtimes map[string]json.RawMessage `json:"runtimes"`
	} `json:"containerd"`
}

// criConfig connects to the CRI endpoint and returns what its verbose
// status says of its configuration (empty when it does not say).
func criConfig(ctx context.Context, endpoint string, timeout time.Duration) (criRuntimeConfig, error) {
	var cfg criRuntimeConfig
	rs, err := remote.NewRemoteRuntimeService(ctx, endpoint, timeout, nil, false)
	if err != nil {
		return cfg, err
	}
	defer rs.Close(context.Background())
	st, err := rs.Status(ctx, true)
	if err != nil {
		return cfg, err
	}
	if raw, ok := st.GetInfo()["config"]; ok {
		_ = json.Unmarshal([]byte(raw), &cfg)
	}
	return cfg, nil
}

// checkHandlers fails when a containerd not started here lacks one of the
// runtime handlers asked for (its configuration is not this package's).
func (c *Containerd) checkHandlers(ctx context.Context, handlers []string) error {
	if c.Started || len(handlers) == 0 {
		return nil
	}
	cfg, err := criConfig(ctx, c.Endpoint, 10*time.Second)
	if err != nil {
		return err
	}
	for _, h := range handlers {
		if _, ok := cfg.Containerd.Runtimes[h]; !ok {
			return fmt.Errorf("testenv: the containerd at %s has no runtime handler %q (its config.toml needs [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.%s])", c.Address, h, h)
		}
	}
	return nil
}

// start runs a containerd of its own; why says why the one at c.Address
// did not do.
func (c *Containerd) start(ctx context.Context, why error) error {
	bin, err := exec.LookPath("containerd")
	if err != nil {
		return fmt.Errorf("testenv: no containerd answers at %s (%v) and none is installed: install Debian's containerd (docker.io brings it) and containernetworking-plugins", c.Address, why)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("testenv: no containerd answers at %s (%v), and starting one needs root (running as uid %d)", c.Address, why, os.Geteuid())
	}
	if c.Dir == "" {
		if c.Dir, err = os.MkdirTemp("", "splitlet-containerd-"); err != nil {
			return err
		}
		c.ownDir = true
	}
	if c.Dir, err = filepath.Abs(c.Dir); err != nil {
		return err
	}
	cniConf := filepath.Join(c.Dir, "cni")
	if err := os.MkdirAll(cniConf, 0o755); err != nil {
		return err
	}
	cniConfig := c.cniConfig
	if cniConfig == "" {
		cniConfig = PodCNIConfig
	}
	if err := os.WriteFile(filepath.Join(cniConf, "10-splitlet-pods.conflist"), []byte(cniConfig), 0o644); err != nil {
		return err
	}
	cniBin := "/usr/lib/cni"
	if _, err := os.Stat(filepath.Join(cniBin, "loopback")); err != nil {
		cniBin = "/opt/cni/bin"
	}
	c.Address = filepath.Join(c.Dir, "containerd.sock")
	c.Endpoint = "unix://" + c.Address
	c.SandboxImage = PauseImage
	config := containerdConfig(c.Dir, c.Address, c.SandboxImage, cniBin, cniConf, c.handlers, c.regConfig)
	// restrict_oom_score_adj: where this process may not lower its OOM
	// score (as in some VMs and containers), runc would fail every
	// sandbox, whose score the CRI plugin sets to -998.
	cfgPath := filepath.Join(c.Dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		return err
	}
	_ = os.Remove(c.Address)
	p, err := startProcess("containerd", filepath.Join(c.Dir, "containerd.log"), bin, "--config", cfgPath)
	if err != nil {
		return err
	}
	c.proc, c.Started = p, true
	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := p.waitFor(waitCtx, "its CRI plugin answering at "+c.Address, func() error {
		_, err := criInfo(waitCtx, c.Endpoint, 2*time.Second)
		return err
	}); err != nil {
		c.Stop()
		return fmt.Errorf("testenv: %w", err)
	}
	return nil
}

// containerdConfig is a started containerd's config.toml: its state under
// dir, its CRI plugin with the sandbox image and the CNI network, runc as
// the default runtime, each of handlers as runc under that name, and the
// registry host configuration directory regConfig (none when empty).
func containerdConfig(dir, address, sandboxImage, cniBin, cniConf string, handlers []string, regConfig string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `version = 2
root = %q
state = %q

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %q
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = %q
      conf_dir = %q
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), address, address+".ttrpc", sandboxImage, cniBin, cniConf)
	for _, h := range append([]string{"runc"}, handlers...) {
		fmt.Fprintf(&b, `      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.%q]
        runtime_type = "io.containerd.runc.v2"
`, h)
	}
	if regConfig != "" {
		fmt.Fprintf(&b, `    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = %q
`, regConfig)
	}
	return b.String()
}

// ImportImages imports docker or OCI archives into the k8s.io namespace
// (`ctr images import`).
func (c *Containerd) ImportImages(ctx context.Context, paths ...string) error {
	for _, p := range paths {
		out, err := exec.CommandContext(ctx, "ctr", "--address", c.Address, "--namespace", ContainerdNamespace, "images", "import", p).CombinedOutput()
		if err != nil {
			return fmt.Errorf("testenv: ctr images import %s: %w\n%s", p, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// WaitImages waits until the CRI plugin knows the named images (it learns
// of imported images a moment after the import).
func (c *Containerd) WaitImages(ctx context.Context, names ...string) error {
	is, err := remote.NewRemoteImageService(ctx, c.Endpoint, 30*time.Second, nil, false)
	if err != nil {
		return err
	}
	defer is.Close(context.Background())
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, name := range names {
		for {
			st, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: name}, false)
			if err == nil && st.GetImage() != nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("testenv: image %s not known to the CRI plugin at %s after the import (last error: %v)", name, c.Endpoint, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// Stop stops a containerd this process started, after removing every pod
// sandbox (and so every container) it runs, so that no container shim
// outlives it; for the host's containerd it does nothing.
func (c *Containerd) Stop() {
	if c == nil || c.proc == nil {
		return
	}
	if !c.proc.exited() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if err := RemoveAllSandboxes(ctx, c.Endpoint, PodLogRoot); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: containerd: %v\n", err)
		}
		cancel()
	}
	c.proc.stop(10 * time.Second)
	if c.ownDir {
		_ = os.RemoveAll(c.Dir)
	}
}

// PodLogRoot is where the kubelet, and the CRI runtime by default, keep pod
// logs.
const PodLogRoot = "/var/log/pods"

// RemoveAllSandboxes stops and removes every pod sandbox of the CRI runtime
// at endpoint, with their containers and their pods' log directories
// <logRoot>/<namespace>_<name>_<uid> (none when logRoot is empty). Only for
// a runtime the caller owns alone: on a shared one, RemoveSandboxes with
// the caller's own labels.
func RemoveAllSandboxes(ctx context.Context, endpoint, logRoot string) error {
	return RemoveSandboxes(ctx, endpoint, logRoot, nil)
}

// RemoveSandboxes is RemoveAllSandboxes for the sandboxes that carry every
// label of selector (all of them when it is empty), so that a test on a
// runtime shared with others (CI's one containerd) removes only its own.
func RemoveSandboxes(ctx context.Context, endpoint, logRoot string, selector map[string]string) error {
	rs, err := remote.NewRemoteRuntimeService(ctx, endpoint, 30*time.Second, nil, false)
	if err != nil {
		return err
	}
	defer rs.Close(context.Background())
	sbs, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: selector})
	if err != nil {
		return err
	}
	var errs []error
	for _, sb := range sbs {
		if err := rs.StopPodSandbox(ctx, sb.Id); err != nil {
			errs = append(errs, err)
		}
		if err := rs.RemovePodSandbox(ctx, sb.Id); err != nil {
			errs = append(errs, err)
			continue
		}
		if m := sb.GetMetadata(); logRoot != "" && m.GetUid() != "" && !strings.ContainsAny(m.GetNamespace()+m.GetName()+m.GetUid(), "/\x00") {
			_ = os.RemoveAll(filepath.Join(logRoot, m.GetNamespace()+"_"+m.GetName()+"_"+m.GetUid()))
		}
	}
	return errors.Join(errs...)
}

// PID is the process id of a containerd this process started; 0 for one
// it did not start (the host's).
func (c *Containerd) PID() int {
	if c == nil || c.proc == nil || c.proc.cmd.Process == nil {
		return 0
	}
	return c.proc.cmd.Process.Pid
}
