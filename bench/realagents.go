package main

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/splitlet/splitlet/libs/testenv"
)

// realEnv is what the agents of the real-container case run against: one
// control plane (fresh for each case) and the run's containerd.
type realEnv struct {
	bench *benchEnv
	cp    *testenv.ControlPlane
	cd    *testenv.Containerd
	// maxPods is the node's pod capacity when a case needs more than the
	// agents' default (110); 0 keeps the default.
	maxPods int
}

// realAgent starts one node agent on containerd, for the node, with its
// state under the run's directory.
type realAgent struct {
	name  string
	start func(e *realEnv, node string) (*agentRun, error)
}

// realAgents are the real-container case's agents, each on its defaults;
// the -base ones run another build's splitlet (-base-bin), so that a change
// and what it replaced are measured in one run.
var realAgents = []realAgent{
	{"allinone", func(e *realEnv, node string) (*agentRun, error) {
		return startRealAllInOne(e, e.bench.binDir, node, "allinone")
	}},
	{"split", func(e *realEnv, node string) (*agentRun, error) {
		return startRealSplit(e, e.bench.binDir, node, "split")
	}},
	{"kubelet", startRealKubelet},
	{"allinone-base", realFromBase(startRealAllInOne, "allinone-base")},
	{"split-base", realFromBase(startRealSplit, "split-base")},
}

// realFromBase runs an agent from the binaries of -base-bin.
func realFromBase(start func(e *realEnv, binDir, node, name string) (*agentRun, error), name string) func(*realEnv, string) (*agentRun, error) {
	return func(e *realEnv, node string) (*agentRun, error) {
		if e.bench.baseBinDir == "" {
			return nil, fmt.Errorf("%s needs -base-bin: a directory with another build's splitlet", name)
		}
		return start(e, e.bench.baseBinDir, node, name)
	}
}

func findRealAgent(name string) (realAgent, bool) {
	for _, a := range realAgents {
		if a.name == name {
			return a, true
		}
	}
	return realAgent{}, false
}

// nodeKubeconfig writes a kubeconfig of the node's identity
// (system:node:<name> in system:nodes, under the Node authorizer and
// NodeRestriction), as every agent of the case runs with.
func (e *realEnv) nodeKubeconfig(dir, node string) (string, error) {
	path := filepath.Join(dir, "node-kubeconfig")
	return path, e.cp.WriteClientKubeconfig(path, testenv.NodeUser(node), testenv.NodesGroup)
}

// splitletArgs are the keys of a Splitlet process on containerd: the
// node's identity, the cri runtime, and nothing else beyond where its
// files and ports go (log level and every other key at their defaults).
func (e *realEnv) splitletArgs(r *agentRun, node, kubeconfig, proc string) ([]string, error) {
	addr, _, err := freeAddr()
	if err != nil {
		return nil, err
	}
	r.health[proc] = addr
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--node-name=" + node,
		"--runtime=cri",
		"--cri-endpoint=" + e.cd.Endpoint,
		"--data-dir=" + filepath.Join(r.dir, proc),
		"--http-addr=" + addr,
		// The kubelet's configuration's choices for this host
		// (testenv.KubeletConfig): no image garbage collection (the
		// images are imported and could not come back), eviction
		// thresholds near zero (the disk is shared with other runs).
		"--image-gc-high-threshold=100", "--image-gc-low-threshold=99",
		"--nodehb.eviction-hard=memory.available<50Mi,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%",
	}
	if e.maxPods > 0 {
		args = append(args, "--max-pods="+strconv.Itoa(e.maxPods))
	}
	if e.bench.profileDir != "" {
		args = append(args, "--debug-pprof")
	}
	return args, nil
}

// nodehbArgs are what a control plane gives its kubelets: the kubelet
// API's port and the CA of kube-apiserver's client certificate.
func (e *realEnv) nodehbArgs() ([]string, error) {
	_, port, err := freeAddr()
	if err != nil {
		return nil, err
	}
	return []string{fmt.Sprintf("--nodehb.port=%d", port), "--nodehb.client-ca-file=" + e.cp.CAFile}, nil
}

// startRealAllInOne is `splitlet --services=all` (embedded NATS).
func startRealAllInOne(e *realEnv, binDir, node, name string) (*agentRun, error) {
	r, err := newRun(e.bench, "real-"+name)
	if err != nil {
		return nil, err
	}
	kc, err := e.nodeKubeconfig(r.dir, node)
	if err != nil {
		return nil, err
	}
	args, err := e.splitletArgs(r, node, kc, "splitlet")
	if err != nil {
		return nil, err
	}
	hb, err := e.nodehbArgs()
	if err != nil {
		return nil, err
	}
	args = append(append(args, "--services=all"), hb...)
	return r, r.spawn(e.bench, "splitlet", filepath.Join(binDir, "splitlet"), args...)
}

// startRealSplit is the five stages as processes of the one splitlet
// binary (--services=<stage>, as the compose stack runs them) and a
// nats-server (JetStream, file storage).
func startRealSplit(e *realEnv, binDir, node, name string) (*agentRun, error) {
	r, err := newRun(e.bench, "real-"+name)
	if err != nil {
		return nil, err
	}
	natsURL, err := r.startNATS(e.bench)
	if err != nil {
		return r, err
	}
	kc, err := e.nodeKubeconfig(r.dir, node)
	if err != nil {
		return r, err
	}
	for _, svc := range []string{"podconfig", "statussync", "prober", "nodehb", "podworkers"} {
		args, err := e.splitletArgs(r, node, kc, svc)
		if err != nil {
			return r, err
		}
		args = append(args, "--services="+svc, "--nats-url="+natsURL)
		if svc == "nodehb" {
			hb, err := e.nodehbArgs()
			if err != nil {
				return r, err
			}
			args = append(args, hb...)
		}
		if err := r.spawn(e.bench, svc, filepath.Join(binDir, "splitlet"), args...); err != nil {
			return r, err
		}
	}
	return r, nil
}

// startNATS starts the split agent's nats-server and returns its URL.
func (r *agentRun) startNATS(env *benchEnv) (string, error) {
	_, port, err := freeAddr()
	if err != nil {
		return "", err
	}
	monAddr, monPort, err := freeAddr()
	if err != nil {
		return "", err
	}
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-m", strconv.Itoa(monPort), "-js", "-sd", filepath.Join(r.dir, "nats")}
	if err := r.spawn(env, "nats-server", filepath.Join(env.binDir, "nats-server"), args...); err != nil {
		return "", err
	}
	r.natsMonitor = monAddr
	r.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
	return r.natsURL, nil
}

// startRealKubelet is bin/kubelet on its default flags (log verbosity
// included) and the configuration the host needs (testenv.KubeletConfig:
// cgroupfs, cgroup v1, the API's authentication, no image GC).
func startRealKubelet(e *realEnv, node string) (*agentRun, error) {
	r, err := newRun(e.bench, "real-kubelet")
	if err != nil {
		return nil, err
	}
	_, port, err := freeAddr()
	if err != nil {
		return nil, err
	}
	nodeIP := testenv.HostAddress()
	if nodeIP == "" {
		return nil, fmt.Errorf("the kubelet needs a node IP that is not loopback: the host has no address on a default route")
	}
	kl, err := testenv.NewKubelet(e.cp, testenv.KubeletOptions{
		Dir: filepath.Join(r.dir, "kubelet"), Node: node, NodeIP: nodeIP, Port: port,
		CRIEndpoint: e.cd.Endpoint, MaxPods: e.maxPods,
	})
	if err != nil {
		return nil, err
	}
	// The kubelet sets kernel settings host-wide when it starts: they are
	// put back once it is stopped (its mounts go with the run's directory).
	r.cleanups = append(r.cleanups, testenv.SaveSysctls(testenv.KubeletSysctls))
	return r, r.spawn(e.bench, "kubelet", kl.Cmd.Path, kl.Cmd.Args[1:]...)
}
