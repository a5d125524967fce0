package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/splitlet/splitlet/libs/testenv"
)

// conformanceOptions are make conformance's (localup --conformance).
type conformanceOptions struct {
	enabled    bool
	reportDir  string
	timeout    time.Duration
	criAddress string
	// cniBridge and cniSubnet are the pods' network of the containerd
	// started for the run (empty: the node agent's defaults).
	cniBridge, cniSubnet string
	// procs is how many Ginkgo processes run the specs at once (the ginkgo
	// CLI, bin/ginkgo); 1 runs e2e.test alone, one spec after the other.
	procs int
	// e2eArgs are passed to the test binary after the defaults
	// (CONFORMANCEFLAGS).
	e2eArgs []string
	// suite is which of Kubernetes' suites runs: suiteE2E (e2e.test's node
	// conformance specs, also when empty) or suiteNodeE2E (e2e_node.test, the
	// Node Conformance Test).
	suite string
	// ownCgroupRoot gives the node agent a cgroup root of the run's own in
	// any suite (the e2e suite always has one), so that a kubelet run beside
	// it kills none of its pods; the node suite's cgroup specs, which look
	// for /kubepods at the host's root, then fail on either agent.
	ownCgroupRoot bool
	// serial runs the node suite's Serial specs too, but those in
	// nodeSerialSkips (--serial).
	serial bool
}

// The pods' network of make conformance: a bridge and its subnet. A run
// with the kubelet as the node has another, so that it can go at the same
// time as a Splitlet run on the same host (two containerds on one bridge
// would hand out the same addresses).
const (
	defaultCNIBridge = "splitlet-e2e0"
	defaultCNISubnet = "10.90.0.0/16"
	kubeletCNIBridge = "kubelet-e2e0"
	kubeletCNISubnet = "10.91.0.0/16"
)

// conformanceCNIConfig is the pods' network of the containerd started for
// make conformance: testenv.GatewayCNIConfig, so that the prober and the
// tests' host-side checks reach pod IPs (the kubelet dials httpGet and
// tcpSocket probes from the host). The network's name, which names
// host-local's store of addresses (/var/lib/cni/networks/<name>), follows
// the bridge's.
func conformanceCNIConfig(bridge, subnet string) string {
	name := "splitlet-conformance"
	if bridge != defaultCNIBridge {
		name += "-" + bridge
	}
	return testenv.GatewayCNIConfig(name, bridge, subnet)
}

// The tests are Kubernetes' node conformance suite: the specs labelled
// NodeConformance or Conformance ([NodeConformance], [Conformance] in
// their names) of test/e2e/common/{node,storage,network}, test/e2e/node
// and test/e2e/storage (a focus file matches a spec's code location).
const (
	conformanceFiles  = `test/e2e/common/(node|storage|network)/|test/e2e/(node|storage)/`
	conformanceLabels = `NodeConformance || Conformance`
)

// conformanceSkip is a group of specs that this harness (one node, the test
// images built here, the run's registry) cannot give whatever the node
// agent, with the cause (docs/conformance.md lists them); never one that
// fails for what the node agent lacks.
type conformanceSkip struct {
	pattern string // a --ginkgo.skip regular expression on the spec's name
	cause   string
	// agent, if set, is the one node agent the skip is for (the other
	// passes the specs on this harness).
	agent string
}

// skipsFor are the skips that apply to a run of agent ("": every skip).
func skipsFor(skips []conformanceSkip, agent string) []conformanceSkip {
	var out []conformanceSkip
	for _, s := range skips {
		if s.agent == "" || agent == "" || s.agent == agent {
			out = append(out, s)
		}
	}
	return out
}

var conformanceSkips = []conformanceSkip{
	{`ImageVolume should succeed with pod and pull policy of Always`,
		"the kubelet's runs only: mounts registry.k8s.io/e2e-test-images/kitten as an image volume; the pull from the run's registry works, but this machine's containerd (1.6) has no image volume mounts (its CRI answers CreateContainer with \"failed to mkdir \"\"\", so the kubelet fails this spec here); Splitlet mounts the image itself and runs it",
		agentKubelet},
}

// userFiltered tells whether e2e.test's extra arguments narrow the specs
// (a focus, a focus file or a label filter of their own).
func userFiltered(args []string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		for _, f := range []string{"ginkgo.focus", "ginkgo.label-filter"} {
			if strings.HasPrefix(a, f) {
				return true
			}
		}
	}
	return false
}

// shellJoin joins a command line as a shell reads it back: the words with
// characters special to the shell in single quotes.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`|&;()<>*?[]{}!#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// junitSkips are the skip patterns, compiled, for the summary.
func junitSkips(skips []conformanceSkip) []junitSkip {
	out := make([]junitSkip, 0, len(skips))
	for _, s := range skips {
		out = append(out, junitSkip{re: regexp.MustCompile(s.pattern), cause: s.cause})
	}
	return out
}

// e2eImagesNeeded are images the framework names that must be there for
// the suite to make sense; without them the run stops before the tests.
var e2eImagesNeeded = []string{"agnhost", "busybox", "pause"}

// conformanceMain runs make conformance and returns the exit status: 0
// when every spec that ran passed, 1 when some failed or the harness
// failed, 130 on Ctrl-C.
func conformanceMain(ctx context.Context, o options, c conformanceOptions) int {
	s, err := runConformance(ctx, o, c)
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(o.out, "%s: interrupted; the control plane, %s and containerd are down\n", suiteOf(c.suite).title, o.agentName())
		return 130
	case err != nil:
		fmt.Fprintf(os.Stderr, "%s: %v\n", suiteOf(c.suite).title, err)
		return 1
	case len(s.Failed) > 0 || len(s.SuiteFailures) > 0:
		return 1
	}
	return 0
}

// runConformance brings up a node as run does (cri runtime, every
// controller, the host's address), and runs the suite's e2e binary against
// it once it is up.
func runConformance(ctx context.Context, o options, c conformanceOptions) (*summary, error) {
	start := time.Now()
	st := suiteOf(c.suite)
	if c.serial {
		st.skips = nodeSkips(true)
	}
	e2eBin, bins, err := e2eBinaries(st)
	if err != nil {
		return nil, err
	}
	reportDir, err := prepareReportDir(c.reportDir)
	if err != nil {
		return nil, err
	}
	names, err := listE2EImages(ctx, e2eBin)
	if err != nil {
		return nil, err
	}
	o, state, err := conformanceNode(o, c, st)
	if err != nil {
		return nil, err
	}
	if o.cgroupRoot == "" {
		unlock, err := lockKubepods(ctx, kubepodsLockPath, o.nodeAgent == agentKubelet, o.out)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	var result *summary
	var reg *testenv.Registry
	defer func() { reg.Stop() }()
	o.up = func(ctx context.Context, kubeconfig string) error {
		cd := &testenv.Containerd{Address: o.containerd.Address, Endpoint: "unix://" + o.containerd.Address}
		images, err := importE2EImages(ctx, cd, filepath.Join(state, "e2e-images"), names, bins, o.out)
		if err != nil {
			return err
		}
		if o.containerd.RegistryConfigPath != "" {
			if reg, err = startMirror(ctx, filepath.Join(state, "registry"), o.containerd.RegistryConfigPath, images, o.out); err != nil {
				return err
			}
		}
		if err := waitClusterReady(ctx, kubeconfig, o.node); err != nil {
			return err
		}
		run := suiteRun{bin: e2eBin, dir: state, reportDir: reportDir, skips: skipsFor(st.skips, o.agentName()), title: st.title, suite: st.name, agent: o.agentName()}
		env := suiteEnv{kubeconfig: kubeconfig, reportDir: reportDir, criEndpoint: cd.Endpoint, state: state, agent: o.agentName()}
		if run.args, run.secrets, err = st.args(env, c); err != nil {
			return err
		}
		result, err = runE2E(ctx, run, c, o.out)
		return err
	}
	if err := run(ctx, o); err != nil {
		return nil, err
	}
	if result == nil {
		return nil, errors.New("the e2e run did not happen")
	}
	fmt.Fprintf(o.out, "\n%[1]s: %[2]s\n%[1]s: the whole run took %[3]s; report: %[4]s\n",
		st.title, result.headline(), time.Since(start).Round(time.Second), filepath.Join(reportDir, "summary.txt"))
	return result, nil
}

// e2eBinaries finds the suite's e2e binary and the test binaries its
// images need (agnhost; nnp and agnhost-tls when built).
func e2eBinaries(st conformanceSuite) (string, testenv.E2EBinaries, error) {
	bins := testenv.E2EBinaries{}
	e2eBin, err := testenv.Binary(st.binary)
	if err != nil {
		return "", bins, fmt.Errorf("%w (make conformance builds it: hack/conformance/build.sh bin)", err)
	}
	if bins.Agnhost, err = testenv.Binary("agnhost"); err != nil {
		return "", bins, fmt.Errorf("%w (make conformance builds it: hack/conformance/build.sh bin)", err)
	}
	if p, err := testenv.Binary("nnp"); err == nil {
		bins.Nonewprivs = p
	}
	if p, err := testenv.Binary("agnhost-tls"); err == nil {
		bins.AgnhostTLS = p
	}
	return e2eBin, bins, nil
}

// prepareReportDir makes the report directory and clears what a run writes
// there, and only that: the directory may be the user's.
func prepareReportDir(dir string) (string, error) {
	reportDir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(reportDir, 0o755); err != nil {
		return "", err
	}
	old, _ := filepath.Glob(filepath.Join(reportDir, "junit_*.xml"))
	for _, f := range append(old, filepath.Join(reportDir, "e2e.log"), filepath.Join(reportDir, "summary.txt"), filepath.Join(reportDir, "summary.json")) {
		_ = os.Remove(f)
	}
	return reportDir, nil
}

// conformanceNode sets the node's options for the suite: a state directory
// of its own, the cri runtime with a containerd and CNI network of the
// suite's, every controller, the host's address, a static pod directory;
// it returns them with the state directory's absolute path.
func conformanceNode(o options, c conformanceOptions, st conformanceSuite) (options, string, error) {
	// The kubelet's run has a state directory of its own, so that it can go
	// at the same time as a Splitlet run with the same --state-dir; so has
	// each suite.
	sub := st.stateDir
	if o.nodeAgent == agentKubelet {
		sub += "-kubelet"
	}
	o.stateDir = filepath.Join(o.stateDir, sub)
	state, err := filepath.Abs(o.stateDir)
	if err != nil {
		return o, "", err
	}
	o.runtime, o.controllers, o.noDemo, o.once = "cri", true, true, true
	if o.kubeletPort, err = testenv.FreePort(); err != nil {
		return o, "", err
	}
	bridge, subnet := st.bridge, st.subnet
	if o.nodeAgent == agentKubelet {
		bridge, subnet = st.kubeletBridge, st.kubeletSubnet
	}
	if c.cniBridge != "" {
		bridge = c.cniBridge
	}
	if c.cniSubnet != "" {
		subnet = c.cniSubnet
	}
	if st.ownCgroupRoot || c.ownCgroupRoot {
		if o.cgroupRoot, err = runCgroupRoot(state); err != nil {
			return o, "", err
		}
	}
	o.containerd = testenv.ContainerdOptions{Address: c.criAddress, Dir: filepath.Join(state, "containerd"), CNIConfig: conformanceCNIConfig(bridge, subnet),
		// The handler the suites' RuntimeClass specs name.
		RuntimeHandlers: []string{runtimeClassHandler}}
	if c.criAddress == "" {
		// A containerd of its own (not the host's): the pods' network must
		// let the host reach them; its pulls of the test images go to the
		// run's registry (startMirror).
		o.containerd.Address = filepath.Join(state, "containerd", "containerd.sock")
		o.containerd.RegistryConfigPath = filepath.Join(state, "containerd", "certs.d")
	} else {
		o.containerd.NoStart = true
	}
	// The node's address: the host's, not 127.0.0.1, which kube-apiserver
	// refuses to proxy to (nodes/proxy: "address not allowed") and which a
	// hostNetwork pod's IP would not equal.
	o.nodeIP = hostAddress()
	// Static pods (the node suite's mirror pod specs write manifests where
	// the node's /configz says staticPodPath is).
	o.staticPodDir = filepath.Join(state, "manifests")
	// The kubelet's settings of the same run (kubeletConfig): no image
	// garbage collection and eviction thresholds near zero.
	o.splitletArgs = append(o.splitletArgs, "--image-gc-high-threshold=100", "--image-gc-low-threshold=99",
		"--nodehb.eviction-hard=memory.available<50Mi,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%")
	return o, state, nil
}

// hostAddress is the host's IPv4 address on its default route (the source
// address the kernel picks for a non-local destination; nothing is sent),
// or "" when there is none.
func hostAddress() string { return testenv.HostAddress() }

// listE2EImages asks e2e.test which images its tests use.
func listE2EImages(ctx context.Context, e2eBin string) ([]string, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, e2eBin, "--list-images")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-images: %w\n%s", e2eBin, err, stderr.String())
	}
	return strings.Fields(string(out)), nil
}

// importE2EImages builds the e2e test images that can be made here FROM
// scratch, under the names the framework uses, and imports them into
// containerd's k8s.io namespace; it says which are left out.
func importE2EImages(ctx context.Context, cd *testenv.Containerd, dir string, names []string, bins testenv.E2EBinaries, out io.Writer) ([]testenv.E2EImage, error) {
	fmt.Fprintln(out, "building the e2e test images FROM scratch and importing them into containerd ...")
	images, leftOut, err := testenv.PrepareE2EImages(dir, names, bins)
	if err != nil {
		return nil, err
	}
	archives, built, err := testenv.WriteE2EArchives(dir, images)
	if err != nil {
		return nil, err
	}
	for _, kind := range e2eImagesNeeded {
		found := false
		for _, n := range built {
			found = found || strings.Contains(n, "/"+kind+":")
		}
		if !found {
			return nil, fmt.Errorf("e2e images: no %s image was built from the names e2e.test lists (%v)", kind, names)
		}
	}
	if err := cd.ImportImages(ctx, archives...); err != nil {
		return nil, err
	}
	if err := cd.WaitImages(ctx, built...); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "imported %d images: %s\n", len(built), strings.Join(built, " "))
	left := make([]string, 0, len(leftOut))
	for n := range leftOut {
		left = append(left, n)
	}
	sort.Strings(left)
	fmt.Fprintf(out, "left out (%d; tests that need them fail with ErrImagePull unless skipped): %s\n", len(left), strings.Join(left, " "))
	return images, nil
}

// mirrorUpstream is the registry whose images the specs that pull with
// pullPolicy Always name (agnhost, kitten): the run's registry mirrors it.
const mirrorUpstream = "registry.k8s.io"

// fakeRegistryHost is where the private registry specs run agnhost's
// fake-registry-server (host network): plain HTTP on loopback.
const fakeRegistryHost = "localhost:5000"

// startMirror starts the run's registry (the CNCF distribution registry,
// htpasswd auth) with its files under dir, pushes the test images named
// under mirrorUpstream to it, and writes containerd's host configuration
// into configPath: mirrorUpstream's pulls go to the registry, with its
// account; fakeRegistryHost's go over plain HTTP.
func startMirror(ctx context.Context, dir, configPath string, images []testenv.E2EImage, out io.Writer) (*testenv.Registry, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	reg, err := testenv.StartRegistry(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("the run's registry: %w (make testenv builds bin/registry)", err)
	}
	pushed, err := reg.PushMirror(ctx, mirrorUpstream, images)
	if err == nil {
		err = reg.WriteMirrorConfig(configPath, mirrorUpstream)
	}
	if err == nil {
		err = writeHostsTOML(configPath, fakeRegistryHost, "server = \"http://"+fakeRegistryHost+"\"\n")
	}
	if err != nil {
		reg.Stop()
		return nil, err
	}
	fmt.Fprintf(out, "registry at %s mirrors %s (%d images pushed)\n", reg.Host, mirrorUpstream, len(pushed))
	return reg, nil
}

// writeHostsTOML writes containerd's <configPath>/<host>/hosts.toml.
func writeHostsTOML(configPath, host, content string) error {
	dir := filepath.Join(configPath, host)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(content), 0o600)
}

// waitClusterReady waits until the node is Ready and kube-controller-manager
// has done its part for a namespace (the default service account and the
// kube-root-ca.crt ConfigMap), as the e2e framework expects of a cluster.
func waitClusterReady(ctx context.Context, kubeconfig, node string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	check := func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("node %s: %w", node, err)
		}
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
		}
		if !ready {
			return fmt.Errorf("node %s is not Ready", node)
		}
		if _, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return fmt.Errorf("service account default/default: %w", err)
		}
		if _, err := cs.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
			return fmt.Errorf("ConfigMap default/kube-root-ca.crt: %w", err)
		}
		return nil
	}
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the cluster is not ready for the tests: %v", err)
		case <-time.After(time.Second):
		}
	}
}

// e2eArgs is e2e.test's command line: the node conformance specs of
// conformanceFiles, the skips, the report, then extra.
func e2eArgs(kubeconfig, reportDir, criEndpoint, agent string, timeout time.Duration, extra []string) []string {
	args := []string{
		"--provider=local",
		"--kubeconfig=" + kubeconfig,
		"--report-dir=" + reportDir,
		"--e2e-output-dir=" + reportDir,
		"--container-runtime-endpoint=" + criEndpoint,
		// No cluster/log-dump/log-dump.sh here (it needs a Kubernetes
		// checkout and SSH to the nodes).
		"--disable-log-dump=true",
		"--ginkgo.focus-file=" + conformanceFiles,
		"--ginkgo.label-filter=" + conformanceLabels,
		"--ginkgo.timeout=" + timeout.String(),
		"--ginkgo.no-color",
	}
	for _, s := range skipsFor(conformanceSkips, agent) {
		args = append(args, "--ginkgo.skip="+s.pattern)
	}
	return append(args, extra...)
}

// ginkgoArgs is the ginkgo CLI's command line that runs e2e.test's args in
// procs parallel processes: e2e.test's --ginkgo.X flags become the CLI's
// --X (the CLI hands them to every process), the framework's own flags go
// after "--". Specs marked Serial still run alone, at the end.
func ginkgoArgs(e2eBin string, procs int, args []string) []string {
	cli := []string{"run", fmt.Sprintf("--procs=%d", procs)}
	var rest []string
	for _, a := range args {
		if name, ok := strings.CutPrefix(a, "--ginkgo."); ok {
			cli = append(cli, "--"+name)
			continue
		}
		if name, ok := strings.CutPrefix(a, "-ginkgo."); ok {
			cli = append(cli, "--"+name)
			continue
		}
		rest = append(rest, a)
	}
	cli = append(cli, e2eBin, "--")
	return append(cli, rest...)
}

// suiteRun is one run of a suite's test binary.
type suiteRun struct {
	bin  string
	args []string
	// secrets are values of args shown as <redacted> in what is printed
	// and written (the node suite's bearer token).
	secrets   []string
	dir       string // the working directory
	reportDir string
	skips     []conformanceSkip
	title     string // make conformance, make node-conformance
	suite     string // suiteE2E, suiteNodeE2E
	agent     string // agentSplitlet, agentKubelet
}

// runE2E runs the suite's test binary, its output on out and in
// <reportDir>/e2e.log, and reads its JUnit report into the summary it
// writes to summary.txt and summary.json. Failing specs are no error; a
// run without a report is.
func runE2E(ctx context.Context, r suiteRun, c conformanceOptions, out io.Writer) (*summary, error) {
	reportDir := r.reportDir
	logPath := filepath.Join(reportDir, "e2e.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	args := r.args
	bin, cmdArgs := r.bin, args
	if c.procs > 1 {
		ginkgo, err := testenv.Binary("ginkgo")
		if err != nil {
			return nil, fmt.Errorf("%w (make conformance builds it: hack/conformance/build.sh bin; --procs=1 runs without it)", err)
		}
		bin, cmdArgs = ginkgo, ginkgoArgs(r.bin, c.procs, args)
	}
	fmt.Fprintf(out, "\nrunning %s %s\n(output also in %s)\n\n", bin, shellJoin(redact(cmdArgs, r.secrets)), logPath)
	cmd := exec.CommandContext(ctx, bin, cmdArgs...)
	cmd.Dir = r.dir
	cmd.Stdout = io.MultiWriter(out, logFile)
	cmd.Stderr = cmd.Stdout
	// Its own process group, so that a Ctrl-C reaches it once, from here:
	// SIGINT lets Ginkgo end the spec that runs and write the report.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		// Ginkgo ends the running specs on the first interrupt and waits
		// for their cleanup, which a namespace deletion can drag out; a
		// second one, 30 s on, cuts that short.
		go func(p *os.Process) {
			time.Sleep(30 * time.Second)
			_ = p.Signal(os.Interrupt)
		}(cmd.Process)
		return cmd.Process.Signal(os.Interrupt)
	}
	cmd.WaitDelay = 2 * time.Minute
	// Not exec's context: the run's own timeout comes from Ginkgo, and a
	// report is read even after a Ctrl-C.
	info := runInfoOf(ctx, r, redact(args, r.secrets))
	runErr := cmd.Run()
	info.DurationSeconds = time.Since(info.Started).Round(time.Second).Seconds()
	// The ginkgo CLI may leave a spec process behind when it is
	// interrupted: whatever is left of the group goes now.
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	reports, _ := filepath.Glob(filepath.Join(reportDir, "junit_*.xml"))
	if len(reports) == 0 {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%s wrote no JUnit report in %s (exit: %v; see %s)", filepath.Base(r.bin), reportDir, runErr, logPath)
	}
	f, err := os.Open(reports[0])
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// With a focus of the user's (CONFORMANCEFLAGS), the skip list's specs
	// may lie outside it: they are not counted as skipped then.
	skips := junitSkips(r.skips)
	if userFiltered(c.e2eArgs) {
		skips = nil
	}
	// The run's label filter tells which skip-listed specs it selects; one
	// Ginkgo ran with but this reading cannot parse leaves the report to be
	// read by the conformance tags, with a warning, not lost.
	selected, err := selectorFor(info.LabelFilter)
	if err != nil {
		fmt.Fprintf(out, "%s: %v: skip-listed specs counted by their conformance tags\n", r.title, err)
	}
	s, err := parseJUnit(f, skips, selected)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", reports[0], err)
	}
	s.runInfo = info
	if err := writeSummary(r, s, redact(args, r.secrets)); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		fmt.Fprintf(out, "\n%s (interrupted): %s\n", r.title, s.headline())
		return nil, ctx.Err()
	}
	return s, nil
}

// writeSummary writes summary.txt (the headline, the command, the skip
// groups, every failed, skipped and passed spec) and summary.json.
func writeSummary(r suiteRun, s *summary, args []string) error {
	reportDir := r.reportDir
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s, %s\n\n", r.title, time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "suite %s, node agent %s, commit %s, started %s, took %s\n\n%s %s\n\n",
		s.Suite, s.Agent, orUnknown(s.Commit), s.Started.UTC().Format(time.RFC3339), time.Duration(s.DurationSeconds)*time.Second, filepath.Base(r.bin), shellJoin(args))
	fmt.Fprintln(&b, "skipped by --ginkgo.skip:")
	for _, sk := range r.skips {
		fmt.Fprintf(&b, "  %s\n      %s\n", sk.pattern, sk.cause)
	}
	fmt.Fprintln(&b)
	s.write(&b)
	if err := os.WriteFile(filepath.Join(reportDir, "summary.txt"), b.Bytes(), 0o644); err != nil {
		return err
	}
	c := s.counts()
	s.Counts = &c
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(reportDir, "summary.json"), append(data, '\n'), 0o644)
}

// runInfoOf is what a run records of itself as it starts: the suite, the
// node agent, the tree's commit, the start time, the filters of its
// command line.
func runInfoOf(ctx context.Context, r suiteRun, args []string) runInfo {
	info := runInfo{Suite: r.suite, Agent: r.agent, Commit: gitCommit(ctx, ""), Started: time.Now().UTC().Truncate(time.Second)}
	var skips []string
	info.LabelFilter, info.FocusFile, info.Focus, skips = ginkgoFilters(args)
	for _, s := range skips {
		if !slices.ContainsFunc(r.skips, func(l conformanceSkip) bool { return l.pattern == s }) {
			info.Skip = append(info.Skip, s)
		}
	}
	return info
}

// ginkgoFilters are the label filter and focus file (the last of each, as
// Ginkgo takes them), the focuses and the skips of a test binary's command
// line.
func ginkgoFilters(args []string) (labelFilter, focusFile string, focus, skip []string) {
	for i := 0; i < len(args); i++ {
		a := strings.TrimLeft(args[i], "-")
		name, value, ok := strings.Cut(a, "=")
		if !ok && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			value = args[i+1]
		}
		switch name {
		case "ginkgo.label-filter":
			labelFilter = value
		case "ginkgo.focus-file":
			focusFile = value
		case "ginkgo.focus":
			focus = append(focus, value)
		case "ginkgo.skip":
			skip = append(skip, value)
		}
	}
	return labelFilter, focusFile, focus, skip
}

// gitCommit is the commit of the git tree at dir (the working directory
// when empty): git rev-parse --short HEAD, with -dirty when tracked files
// have changes; "" when git or the tree is not there.
func gitCommit(ctx context.Context, dir string) string {
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		return strings.TrimSpace(string(out)), err
	}
	commit, err := git("rev-parse", "--short", "HEAD")
	if err != nil || commit == "" {
		return ""
	}
	status, err := git("status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return ""
	}
	if status != "" {
		commit += "-dirty"
	}
	return commit
}

// orUnknown is s, or "unknown" when empty.
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
