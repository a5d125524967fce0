package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// The suites localup --conformance runs (--suite).
const (
	// suiteE2E: e2e.test's node conformance specs (make conformance).
	suiteE2E = "e2e"
	// suiteNodeE2E: e2e_node.test, Kubernetes' Node Conformance Test, against
	// the node agent started here (make node-conformance).
	suiteNodeE2E = "node"
)

// runtimeClassHandler is the CRI runtime handler the suites' RuntimeClass
// specs name (e2e/framework/node/runtimeclass.PreconfiguredRuntimeClassHandler):
// the containerd of a run has it, runc under that name.
const runtimeClassHandler = "test-handler"

// suiteEnv is what a suite's command line is made of: the run's admin
// kubeconfig, report directory, CRI endpoint and state directory.
type suiteEnv struct {
	kubeconfig, reportDir, criEndpoint, state string
	// agent is the run's node agent, whose skips apply ("": every skip).
	agent string
}

// conformanceSuite tells the suites apart: the test binary, the state
// directory and pods' network of a run (so that runs of either suite and
// either node agent may go at the same time), the skip list and the
// command line.
type conformanceSuite struct {
	name, title, binary, stateDir string
	bridge, subnet                string
	kubeletBridge, kubeletSubnet  string
	skips                         []conformanceSkip
	// ownCgroupRoot gives the run's node agent a cgroup root of its own
	// (runCgroupRoot), so that runs of either agent may go at once; the
	// node suite checks the kubelet's layout at the host's root
	// (/kubepods/...) instead, and its runs take the kubepods lock.
	ownCgroupRoot bool
	// args is the test binary's command line and the secrets in it (shown
	// redacted).
	args func(env suiteEnv, c conformanceOptions) (args, secrets []string, err error)
}

// suiteOf is the suite of that name (suiteE2E when empty).
func suiteOf(name string) conformanceSuite {
	if name == suiteNodeE2E {
		return conformanceSuite{
			name: suiteNodeE2E, title: "make node-conformance", binary: "e2e_node.test", stateDir: "node-conformance",
			bridge: "splitlet-node0", subnet: "10.92.0.0/16", kubeletBridge: "kubelet-node0", kubeletSubnet: "10.93.0.0/16",
			skips: nodeConformanceSkips,
			args:  nodeSuiteArgs,
		}
	}
	return conformanceSuite{
		name: suiteE2E, title: "make conformance", binary: "e2e.test", stateDir: "conformance",
		bridge: defaultCNIBridge, subnet: defaultCNISubnet, kubeletBridge: kubeletCNIBridge, kubeletSubnet: kubeletCNISubnet,
		skips: conformanceSkips, ownCgroupRoot: true,
		args: func(env suiteEnv, c conformanceOptions) ([]string, []string, error) {
			return e2eArgs(env.kubeconfig, env.reportDir, env.criEndpoint, env.agent, c.timeout, c.e2eArgs), nil, nil
		},
	}
}

// nodeConformanceLabels selects the node suite's specs by default: the
// NodeConformance ones that may run beside others and leave the node
// agent alone (Serial specs restart it as a systemd unit, Disruptive ones
// break the node).
const nodeConformanceLabels = `NodeConformance && !Serial && !Disruptive`

// nodeSerialLabels selects the node suite's specs with --serial: the
// Serial ones too (Ginkgo runs them last, one at a time); the Disruptive
// ones are all Serial and named in nodeSerialSkips.
const nodeSerialLabels = `NodeConformance && !Disruptive`

// nodeSerialSkips are the Serial NodeConformance specs that --serial
// leaves out, each with its cause: they use something the whole host
// shares (so they cannot go beside another run), or cannot work in this
// harness whatever the node agent and would cost minutes to fail. The
// Serial specs that only fail here (they restart the kubelet through
// systemd, dial the kubelet's fixed ports) run, so that each agent's
// report shows it.
var nodeSerialSkips = []conformanceSkip{
	{`Container Runtime blackbox test when running a container with a new image`,
		"each spec's registry is agnhost's fake-registry-server in a hostNetwork pod on host port 5000 (test/e2e/framework/registry/registry.go:126,136, from test/e2e/common/node/runtime.go:268): one port for the whole host, so two runs at once take it from each other; run them with one run on the host (make conformance runs them too)", ""},
	{`MirrorPod when recreating a static pod it should launch successfully even if it temporarily failed termination due to volume failing to unmount`,
		"runs a kernel NFS server in a privileged pod of e2e-test-images/volume/nfs, which this harness does not build (test/e2e_node/mirror_pod_test.go:211), for a static pod to mount with the host's NFS client, and looks for the pod's volumes under /var/lib/kubelet/pods (mirror_pod_test.go:486), where neither agent keeps them here (each run has a root directory of its own)", ""},
	{`Device Plugin \[Serial\]`,
		"[Disruptive]: its sample device plugin registers at the host's one /var/lib/kubelet/device-plugins, it waits for the pod resources socket /var/lib/kubelet/pod-resources/kubelet.sock (test/e2e_node/device_plugin_test.go:152, util.go:84), which neither agent has there, and it restarts the kubelet after each spec with sudo systemctl (device_plugin_test.go:209, util.go:402)", ""},
	{`MirrorPodWithGracePeriod .*container runtime is temporarily down`,
		"[Disruptive]: stops and starts the systemd unit of the host's one process named containerd over D-Bus (test/e2e_node/mirror_pod_grace_period_test.go:207,255, util.go:336,374), every run's containerd; first it reads the kubelet's metrics on the read-only port localhost:10255 (cpu_manager_metrics_test.go:514), closed on both agents here", ""},
	{`should be able to pull from private registry with credential provider`,
		"[Disruptive]: restarts the kubelet with sudo systemctl (test/e2e_node/runtime_conformance_test.go:99, util.go:402), writes /var/lib/kubelet/config.json (runtime_conformance_test.go:96) and runs its registry on host port 5000 (:71)", ""},
}

// nodeSkips are the node suite's skips: with the Serial specs (--serial),
// nodeSerialSkips too.
func nodeSkips(serial bool) []conformanceSkip {
	if !serial {
		return nodeConformanceSkips
	}
	return append(append([]conformanceSkip(nil), nodeConformanceSkips...), nodeSerialSkips...)
}

// nodeConformanceSkips are the node suite's groups that this harness (one
// node, the test images built FROM scratch) cannot give, whatever the node
// agent: the e2e suite's list (the node suite runs test/e2e/common too).
var nodeConformanceSkips = append([]conformanceSkip(nil), conformanceSkips...)

// nodeSystemSpec is the system spec the node suite validates the host
// against before its specs (--system-spec-file): Linux, any kernel release
// and no kernel configuration checks (the kernel is the machine's, not the
// node agent's), the cgroup controllers a node needs (as the default spec).
const nodeSystemSpec = `os: Linux
kernelSpec:
  versions: ['.*']
cgroups: [cpu, cpuacct, cpuset, devices, freezer, memory, pids]
cgroupsOptional: [hugetlb, blkio]
cgroupsV2: [cpu, cpuset, devices, freezer, memory, pids]
cgroupsV2Optional: [hugetlb, io]
`

// nodeSuiteArgs is e2e_node.test's command line against the node agent
// started here: the suite starts nothing (--start-services=false), talks to
// the API server as the run's admin (node e2e has no --kubeconfig: the
// host and a bearer token, the secret), pulls nothing beforehand, finds the
// node's CRI runtime and validates the host against nodeSystemSpec. The
// NodeConformance specs that may run in parallel by default; a label
// filter in extra replaces that one.
func nodeSuiteArgs(env suiteEnv, c conformanceOptions) ([]string, []string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", env.kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	if cfg.BearerToken == "" {
		return nil, nil, fmt.Errorf("%s: no bearer token (the node suite authenticates with one)", env.kubeconfig)
	}
	specFile := filepath.Join(env.state, "system-spec.yaml")
	if err := os.WriteFile(specFile, []byte(nodeSystemSpec), 0o644); err != nil {
		return nil, nil, err
	}
	return nodeE2EArgs(cfg.Host, cfg.BearerToken, specFile, env, c.timeout, c.serial, c.e2eArgs), []string{cfg.BearerToken}, nil
}

// nodeE2EArgs is nodeSuiteArgs's command line; serial selects the Serial
// specs too (nodeSerialLabels, nodeSerialSkips).
func nodeE2EArgs(host, token, specFile string, env suiteEnv, timeout time.Duration, serial bool, extra []string) []string {
	args := []string{
		"--start-services=false",
		"--host=" + host,
		"--bearer-token=" + token,
		"--prepull-images=false",
		"--container-runtime-endpoint=" + env.criEndpoint,
		"--system-spec-file=" + specFile,
		"--report-dir=" + env.reportDir,
		// The cluster domain both node agents run with (the pods' FQDNs in
		// /etc/hosts end in it); the suite's default is none, where the
		// hostname specs expect <pod>.<subdomain>.<namespace>.svc.<domain>.
		"--dns-domain=" + nodeClusterDomain,
		"--ginkgo.timeout=" + timeout.String(),
		"--ginkgo.no-color",
	}
	if !hasFlag(extra, "ginkgo.label-filter") {
		labels := nodeConformanceLabels
		if serial {
			labels = nodeSerialLabels
		}
		args = append(args, "--ginkgo.label-filter="+labels)
	}
	for _, s := range skipsFor(nodeSkips(serial), env.agent) {
		args = append(args, "--ginkgo.skip="+s.pattern)
	}
	return append(args, extra...)
}

// nodeClusterDomain is the nodes' cluster domain: Splitlet's default
// (libs/config DefaultClusterDomain) and the kubelet's clusterDomain in
// libs/testenv.
const nodeClusterDomain = "cluster.local"

// hasFlag tells whether args set the flag (-name, --name, =value or not).
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// redact replaces each secret in args by <redacted>.
func redact(args, secrets []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		for _, s := range secrets {
			if s != "" {
				a = strings.ReplaceAll(a, s, "<redacted>")
			}
		}
		out[i] = a
	}
	return out
}
