// Command localup is `make run`: it starts a local control plane (etcd,
// kube-apiserver and kube-controller-manager's CSR controllers from bin/),
// runs bin/splitlet with every service against it and with what a control
// plane gives a kubelet (a bootstrap token, with which it gets the node's
// identity, system:node:<name> in system:nodes, as a client certificate of
// the control plane's CA under the Node authorizer and NodeRestriction; the CA
// that verifies the API server's client certificate, so that logs and exec
// work), applies a demo pod bound to the node, prints the kubectl commands
// to try (with the admin kubeconfig), and on Ctrl-C stops everything it
// started and exits 0. With --node-agent=kubelet the node is the real
// kubelet (bin/kubelet) on the cri runtime instead.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/splitlet/splitlet/libs/testenv"
)

type options struct {
	stateDir    string
	node        string
	runtime     string
	kubeletPort int
	once        bool
	out         io.Writer
	// controllers runs kube-controller-manager and kube-scheduler with the
	// API server, ServiceAccount admission on (make conformance).
	controllers bool
	// noDemo: no demo pod.
	noDemo bool
	// containerd tunes the containerd of the cri runtime (its Dir defaults
	// to <state>/containerd).
	containerd testenv.ContainerdOptions
	// nodeAgent is what runs as the node: splitlet (agentSplitlet, also
	// when empty) or the real kubelet (agentKubelet, cri runtime only).
	nodeAgent string
	// nodeIP is the node's address (its InternalIP); empty: splitlet's
	// default (127.0.0.1), the host's address for the kubelet.
	nodeIP string
	// staticPodDir is the node agent's directory of static pod manifests
	// (made when missing); empty: none.
	staticPodDir string
	// splitletArgs are added to splitlet's command line.
	splitletArgs []string
	// cgroupRoot, when not empty, is the cgroup the node agent makes its
	// kubepods cgroup under (splitlet's --cgroup-root, the kubelet's
	// cgroupRoot); empty: the agent's default, the host's root.
	cgroupRoot string
	// up, when set, runs once everything is up and the hints are printed,
	// with the kubeconfig's path (a test walks the hints there).
	up func(ctx context.Context, kubeconfig string) error
	// audit has kube-apiserver write its audit log to
	// <state>/controlplane/audit.log (a test reads who did what).
	audit bool
}

func main() {
	var o options
	flag.StringVar(&o.stateDir, "state-dir", ".splitlet", "where the kubeconfig, logs and data go")
	flag.StringVar(&o.node, "node-name", "splitlet-node", "the node's name")
	flag.StringVar(&o.runtime, "runtime", "process", "pod runtime: sim, process or cri (containerd; started when none answers)")
	flag.IntVar(&o.kubeletPort, "kubelet-port", 10250, "port of the node's kubelet API (kube-apiserver reaches it there for logs and exec)")
	flag.BoolVar(&o.once, "once", false, "stop as soon as everything is up (a smoke test)")
	flag.StringVar(&o.nodeAgent, "node-agent", agentSplitlet, "what runs as the node: splitlet, or kubelet (the real kubelet, bin/kubelet, on the cri runtime: the peer of --conformance)")
	var c conformanceOptions
	flag.BoolVar(&c.enabled, "conformance", false, "make conformance: run Kubernetes' e2e node conformance tests (bin/e2e.test) against a control plane with kube-controller-manager and kube-scheduler and this node on the cri runtime, then stop; flags after -- go to e2e.test")
	flag.StringVar(&c.suite, "suite", suiteE2E, "with --conformance: which suite runs: e2e (bin/e2e.test's node conformance specs, make conformance) or node (bin/e2e_node.test, the Node Conformance Test, make node-conformance)")
	flag.StringVar(&c.reportDir, "report-dir", "conformance/out", "with --conformance: where the JUnit report, the test binary's output and the summary go")
	flag.DurationVar(&c.timeout, "e2e-timeout", 3*time.Hour, "with --conformance: timeout of the whole e2e.test run (its --ginkgo.timeout)")
	flag.IntVar(&c.procs, "procs", 4, "with --conformance: how many specs run at once (Ginkgo processes, through bin/ginkgo; Serial specs still run alone); 1 runs bin/e2e.test by itself")
	flag.StringVar(&c.criAddress, "cri-address", "", "with --conformance: a containerd socket to use (its CNI network must let the host reach pod IPs); empty: a containerd of its own under <state-dir>/containerd")
	flag.StringVar(&c.cniBridge, "cni-bridge", "", "with --conformance: the CNI bridge of the containerd it starts; empty: "+defaultCNIBridge+" ("+kubeletCNIBridge+" with --node-agent=kubelet, so that both runs can go at once)")
	flag.StringVar(&c.cniSubnet, "cni-subnet", "", "with --conformance: the pods' subnet on that bridge; empty: "+defaultCNISubnet+" ("+kubeletCNISubnet+" with --node-agent=kubelet)")
	flag.BoolVar(&c.ownCgroupRoot, "own-cgroup-root", false, "with --conformance --suite=node: the node agent's pods under a cgroup root of the run's own, as make conformance always does, so that a Splitlet run and a kubelet run may go at once (the suite's cgroup specs, which look for /kubepods at the host's root, then fail on both)")
	flag.BoolVar(&c.serial, "serial", false, "with --conformance --suite=node: the [Serial] NodeConformance specs too (they run last, one at a time), but those that use something the whole host shares or cannot work in this harness: the skip list names each with its cause")
	var table bool
	var tableOut string
	flag.BoolVar(&table, "conformance-table", false, "make conformance-table: read the report directories given as arguments (their summary.json) and rewrite the conformance-table block of --out from them, then stop")
	flag.StringVar(&tableOut, "out", "docs/conformance.md", "with --conformance-table: the Markdown file whose block between <!-- conformance-table:begin --> and <!-- conformance-table:end --> is rewritten; - prints the block")
	flag.Parse()
	if table {
		os.Exit(tableMain(tableOut, flag.Args(), os.Stdout))
	}
	if c.suite != suiteE2E && c.suite != suiteNodeE2E {
		fmt.Fprintf(os.Stderr, "localup: --suite=%s: want %s or %s\n", c.suite, suiteE2E, suiteNodeE2E)
		os.Exit(2)
	}
	if c.serial && c.suite != suiteNodeE2E {
		fmt.Fprintf(os.Stderr, "localup: --serial is for --suite=%s (make conformance's selection has the Serial specs)\n", suiteNodeE2E)
		os.Exit(2)
	}
	if o.nodeAgent != agentSplitlet && o.nodeAgent != agentKubelet {
		fmt.Fprintf(os.Stderr, "localup: --node-agent=%s: want %s or %s\n", o.nodeAgent, agentSplitlet, agentKubelet)
		os.Exit(2)
	}
	// The kubelet's node has a name of its own unless one is given, so that
	// a report does not show a kubelet as splitlet-node.
	if o.nodeAgent == agentKubelet && !flagSet("node-name") {
		o.node = "kubelet-node"
	}
	o.out = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.enabled {
		c.e2eArgs = flag.Args()
		os.Exit(conformanceMain(ctx, o, c))
	}
	err := run(ctx, o)
	switch {
	case ctx.Err() != nil:
		// Ctrl-C is how make run is meant to end: not an error, even when
		// it came before everything was up.
		fmt.Fprintf(o.out, "stopped: the control plane and %s are down\n", o.agentName())
	case err != nil:
		fmt.Fprintf(os.Stderr, "localup: %v\n", err)
		os.Exit(1)
	}
}

// flagSet tells whether the flag was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// agentName is the node agent's name in messages and its log's name.
func (o options) agentName() string {
	if o.nodeAgent == agentKubelet {
		return agentKubelet
	}
	return agentSplitlet
}

// run brings up the control plane and the node agent, prints the hints,
// and waits for ctx to end or the agent to exit; its deferred steps take
// everything down again, last started first stopped.
func run(ctx context.Context, o options) error {
	if o.kubeletPort == 0 {
		o.kubeletPort = 10250
	}
	state, splitletBin, err := o.prepare()
	if err != nil {
		return err
	}
	kubelet := o.nodeAgent == agentKubelet
	cp, err := o.startControlPlane(ctx, state)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(o.out, "stopping the control plane ...")
		cp.Stop()
	}()
	kubeconfig := filepath.Join(state, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig, testenv.AdminUser); err != nil {
		return err
	}

	// Port 0: splitlet picks a free port and writes it to
	// <data-dir>/splitlet.http-addr, so no other process can take it between
	// a choice made here and splitlet's bind.
	dataDir := filepath.Join(state, "data")
	addrFile := filepath.Join(dataDir, "splitlet.http-addr")
	_ = os.Remove(addrFile)
	logPath := filepath.Join(state, o.agentName()+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	// After containerd is down (deferred calls run last first): the
	// agent's root directory, bind-mounted onto itself, and what it mounted
	// for its pods' volumes.
	root := filepath.Join(dataDir, "kubelet")
	if kubelet {
		root = testenv.KubeletRoot(filepath.Join(state, "kubelet"))
	}
	defer func() { _ = testenv.UnmountUnder(root) }()
	criEndpoint, stopCRI, err := criRuntime(ctx, o.runtime, state, o.containerd, o.out)
	if err != nil {
		return err
	}
	defer stopCRI()
	if o.staticPodDir != "" {
		if err := os.MkdirAll(o.staticPodDir, 0o755); err != nil {
			return err
		}
	}
	var cmd *exec.Cmd
	var kl *testenv.Kubelet
	if kubelet {
		if cmd, kl, err = o.kubeletCommand(cp, state, criEndpoint); err != nil {
			return err
		}
		// After the kubelet is down: the kernel settings it changed.
		defer testenv.SaveSysctls(testenv.KubeletSysctls)()
	} else if cmd, err = o.splitletCommand(ctx, cp, state, dataDir, criEndpoint, splitletBin); err != nil {
		return err
	}
	agent, err := startAgent(cmd, logFile)
	if err != nil {
		return err
	}
	defer agent.stop(o)
	healthAddr, err := agent.waitUp(ctx, kl, addrFile, logPath)
	if err != nil {
		return err
	}
	return o.serveUp(ctx, cp, agent, healthAddr, logPath, kubeconfig)
}

// prepare makes the state directory, clearing the control plane's, and
// finds splitlet's binary unless the kubelet is the node agent.
func (o options) prepare() (state, splitletBin string, err error) {
	if state, err = filepath.Abs(o.stateDir); err != nil {
		return "", "", err
	}
	if o.nodeAgent == agentKubelet {
		if o.runtime != "cri" {
			return "", "", errors.New("--node-agent=kubelet needs --runtime=cri (the kubelet runs pods only through a CRI runtime)")
		}
	} else if splitletBin, err = testenv.Binary("splitlet"); err != nil {
		return "", "", fmt.Errorf("%w (run `make build`)", err)
	}
	if err := os.RemoveAll(filepath.Join(state, "controlplane")); err != nil {
		return "", "", err
	}
	// (the state directory is not made 0700 with the control plane's: pods
	// of the process runtime run as another user under <state>/data)
	if err := os.MkdirAll(state, 0o755); err != nil {
		return "", "", err
	}
	return state, splitletBin, nil
}

// startControlPlane starts etcd, kube-apiserver and kube-controller-manager
// (all its controllers and kube-scheduler with --controllers, else those of
// CSRs alone). Splitlet joins as a kubelet does, with a bootstrap token:
// the API server takes bootstrap tokens, and kube-controller-manager
// approves and signs the node's client certificate.
func (o options) startControlPlane(ctx context.Context, state string) (*testenv.ControlPlane, error) {
	if o.controllers {
		fmt.Fprintln(o.out, "starting etcd, kube-apiserver, kube-controller-manager and kube-scheduler ...")
	} else {
		fmt.Fprintln(o.out, "starting etcd, kube-apiserver and kube-controller-manager (its CSR controllers) ...")
	}
	kubelet := o.nodeAgent == agentKubelet
	return testenv.StartControlPlane(ctx, testenv.ControlPlaneOptions{Dir: filepath.Join(state, "controlplane"), ServiceAccountAdmission: o.controllers,
		Controllers: o.controllers, CSRControllers: !o.controllers && !kubelet, BootstrapTokens: !kubelet, Audit: o.audit})
}

// kubeletCommand is the real kubelet's command, on the node's address (the
// host's unless --node-ip says).
func (o options) kubeletCommand(cp *testenv.ControlPlane, state, criEndpoint string) (*exec.Cmd, *testenv.Kubelet, error) {
	nodeIP := o.nodeIP
	if nodeIP == "" {
		nodeIP = hostAddress()
	}
	if nodeIP == "" {
		nodeIP = "127.0.0.1"
	}
	kl, err := newKubelet(cp, state, o.node, nodeIP, o.kubeletPort, criEndpoint, o.staticPodDir, o.cgroupRoot)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(o.out, "starting the kubelet (%s, %s runtime) as node %s ...\n", kl.Cmd.Path, o.runtime, o.node)
	return kl.Cmd, kl, nil
}

// splitletCommand is splitlet's command: every service, joining with a
// bootstrap token.
func (o options) splitletCommand(ctx context.Context, cp *testenv.ControlPlane, state, dataDir, criEndpoint, splitletBin string) (*exec.Cmd, error) {
	join, err := newJoin(ctx, cp, state)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.out, "starting splitlet (all services, embedded NATS, %s runtime) as node %s, joining with a bootstrap token ...\n", o.runtime, o.node)
	cmd := exec.Command(splitletBin,
		"--services=all",
		"--bootstrap-kubeconfig="+join.bootstrapKubeconfig,
		"--kubeconfig="+join.kubeconfig,
		"--cert-dir="+join.certDir,
		"--rotate-certificates",
		"--node-name="+o.node,
		"--runtime="+o.runtime,
		"--data-dir="+dataDir,
		"--http-addr=127.0.0.1:0",
		"--log-format=console",
		// What a control plane gives its kubelets: the kubelet API's port
		// and the CA of the client certificate kube-apiserver presents
		// when it proxies logs, exec and port-forward to the node.
		fmt.Sprintf("--nodehb.port=%d", o.kubeletPort),
		"--nodehb.client-ca-file="+cp.CAFile,
	)
	if criEndpoint != "" {
		cmd.Args = append(cmd.Args, "--cri-endpoint="+criEndpoint)
	}
	if o.nodeIP != "" {
		cmd.Args = append(cmd.Args, "--nodehb.address="+o.nodeIP, "--podworkers.host-ip="+o.nodeIP)
	}
	if o.staticPodDir != "" {
		cmd.Args = append(cmd.Args, "--podconfig.static-pod-path="+o.staticPodDir)
	}
	if o.cgroupRoot != "" {
		cmd.Args = append(cmd.Args, "--cgroup-root="+o.cgroupRoot)
	}
	cmd.Args = append(cmd.Args, o.splitletArgs...)
	return cmd, nil
}

// agentProc is the running node agent. exited is closed when it has
// exited, with its error in err: every waiter sees it, however many there
// are.
type agentProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// startAgent starts the node agent, its output to log, in a process group
// of its own that dies with this process.
func startAgent(cmd *exec.Cmd, log *os.File) (*agentProc, error) {
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &agentProc{cmd: cmd, exited: make(chan struct{})}
	go func() { a.err = cmd.Wait(); close(a.exited) }()
	return a, nil
}

// stop ends a running agent: SIGTERM, then after 15 s SIGKILL to its
// process group.
func (a *agentProc) stop(o options) {
	select {
	case <-a.exited:
		return
	default:
	}
	fmt.Fprintf(o.out, "stopping %s ...\n", o.agentName())
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.exited
	}
}

// waitUp waits for the agent to answer healthy (the kubelet's healthz,
// splitlet's readyz) and returns the address it answers on.
func (a *agentProc) waitUp(ctx context.Context, kl *testenv.Kubelet, addrFile, logPath string) (string, error) {
	if kl != nil {
		if err := waitKubeletHealthy(ctx, kl.Healthz, a.exited, &a.err, logPath); err != nil {
			return "", err
		}
		return strings.TrimPrefix(kl.Healthz, "http://"), nil
	}
	return waitReady(ctx, addrFile, a.exited, &a.err, logPath)
}

// serveUp applies the demo pod, prints the hints and waits for ctx to end
// or the agent to exit (returns at once with --once).
func (o options) serveUp(ctx context.Context, cp *testenv.ControlPlane, agent *agentProc, healthAddr, logPath, kubeconfig string) error {
	if !o.noDemo {
		cs := kubernetes.NewForConfigOrDie(cp.Config)
		if err := applyDemoPod(ctx, cs, o.node); err != nil {
			return err
		}
	}
	o.printUp(cp, healthAddr, logPath, kubeconfig)
	if o.up != nil {
		if err := o.up(ctx, kubeconfig); err != nil {
			return err
		}
	}
	if o.once {
		return nil
	}
	select {
	case <-ctx.Done():
		fmt.Fprintln(o.out)
		return nil
	case <-agent.exited:
		return fmt.Errorf("%s exited: %v (see %s)", o.agentName(), agent.err, logPath)
	}
}

// printUp prints where everything is and the kubectl commands to try.
func (o options) printUp(cp *testenv.ControlPlane, healthAddr, logPath, kubeconfig string) {
	upName := "Splitlet"
	if o.nodeAgent == agentKubelet {
		upName = "The kubelet"
	}
	if o.noDemo {
		fmt.Fprintf(o.out, `
%[7]s is up: node %[1]s, API server %[2]s, %[8]s health on http://%[3]s
Logs: %[4]s (control plane: %[6]s)

Look on:
  export KUBECONFIG=%[5]s
  kubectl get nodes
  kubectl get pods -A -o wide

Ctrl-C stops everything.
`, o.node, cp.URL, healthAddr, logPath, kubeconfig, cp.Dir, upName, o.agentName())
		return
	}
	fmt.Fprintf(o.out, `
%[6]s is up: node %[1]s, API server %[2]s, %[7]s health on http://%[3]s
Logs: %[4]s

Try:
  export KUBECONFIG=%[5]s
  kubectl get nodes
  kubectl get pods -o wide
  kubectl describe pod demo
  kubectl logs demo
  kubectl logs -f demo
  kubectl exec demo -- sh -c 'echo hello from exec'
  kubectl delete pod demo

Ctrl-C stops everything.
`, o.node, cp.URL, healthAddr, logPath, kubeconfig, upName, o.agentName())
}

// join is how the node joins: a bootstrap token in a bootstrap kubeconfig,
// and where splitlet keeps the node's certificate and kubeconfig.
type join struct {
	bootstrapKubeconfig, kubeconfig, certDir string
}

// newJoin makes a bootstrap token (an hour; kube-controller-manager's
// tokencleaner removes it then) and writes <state>/node/bootstrap-kubeconfig
// (directory 0700, file 0600), as a cluster admin hands a node to join.
// splitlet asks with it for the node's client certificate,
// system:node:<node> in system:nodes, which kube-controller-manager
// approves and signs, and writes <state>/node/kubeconfig to use it. The
// Node authorizer keeps the node to its own Node, Lease and pods and their
// Secrets, ConfigMaps and tokens; NodeRestriction to its own writes. A
// previous run's certificate (of another CA) is removed.
func newJoin(ctx context.Context, cp *testenv.ControlPlane, state string) (join, error) {
	dir := filepath.Join(state, "node")
	if err := os.RemoveAll(dir); err != nil {
		return join{}, err
	}
	if err := testenv.PrivateDir(dir); err != nil {
		return join{}, err
	}
	token, err := testenv.NewBootstrapToken(ctx, kubernetes.NewForConfigOrDie(cp.Config), time.Hour)
	if err != nil {
		return join{}, err
	}
	j := join{bootstrapKubeconfig: filepath.Join(dir, "bootstrap-kubeconfig"), kubeconfig: filepath.Join(dir, "kubeconfig"), certDir: filepath.Join(dir, "pki")}
	return j, cp.WriteBootstrapKubeconfig(j.bootstrapKubeconfig, token)
}

// waitReady waits until splitlet has written its health address and its
// /readyz answers 200, and returns the address.
func waitReady(ctx context.Context, addrFile string, exited <-chan struct{}, exitErr *error, logPath string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		if data, err := os.ReadFile(addrFile); err == nil {
			addr := strings.TrimSpace(string(data))
			resp, err := client.Get("http://" + addr + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return addr, nil
				}
			}
		}
		select {
		case <-exited:
			return "", fmt.Errorf("splitlet exited before it was ready: %v (see %s)", *exitErr, logPath)
		case <-ctx.Done():
			return "", fmt.Errorf("splitlet not ready: %w (see %s)", ctx.Err(), logPath)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// applyDemoPod creates (or replaces) a pod bound to the node that prints a
// line every five seconds.
func applyDemoPod(ctx context.Context, cs kubernetes.Interface, node string) error {
	pods := cs.CoreV1().Pods(metav1.NamespaceDefault)
	grace := int64(0)
	if err := pods.Delete(ctx, "demo", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Labels: map[string]string{"app": "demo"}},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{
				Name:    "hello",
				Image:   "busybox",
				Command: []string{"sh", "-c", `i=0; while true; do echo "hello from splitlet $i"; i=$((i+1)); sleep 5; done`},

				// no registry is reachable here: the imported image (cri).
				ImagePullPolicy: corev1.PullIfNotPresent,
			}},
		},
	}
	for {
		_, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("demo pod: %w", err)
		}
		select {
		case <-ctx.Done():
			return errors.New("demo pod: the old one is still being deleted")
		case <-time.After(200 * time.Millisecond):
		}
	}
}
