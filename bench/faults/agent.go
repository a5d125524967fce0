package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/splitlet/splitlet/libs/testenv"
)

// proc is one process of the agent under test, restartable with the same
// command line (a stage killed and started again, nats-server back on its
// port and store).
type proc struct {
	name string
	path string
	args []string
	log  string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	killed  bool // by the fault, not a crash
	crashes int
}

func (p *proc) start() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited, p.killed = cmd, exited, false
	p.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		f.Close()
		p.mu.Lock()
		if !p.killed {
			p.crashes++
		}
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// kill is SIGKILL, as the fault; it returns once the process is gone.
func (p *proc) kill() { p.end(syscall.SIGKILL) }

// stop is SIGTERM, then SIGKILL after 15 s (the end of a case).
func (p *proc) stop() { p.end(syscall.SIGTERM) }

func (p *proc) end(sig syscall.Signal) {
	p.mu.Lock()
	p.killed = true
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
}

func (p *proc) crashCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.crashes
}

// agent is nats-server and the five stages as separate processes, as the
// compose stack runs them.
type agent struct {
	node    string
	dir     string
	natsURL string
	procs   map[string]*proc
	order   []string
}

type agentOptions struct {
	runtime     string
	replicas    int
	criEndpoint string
	// natsServers > 1 runs a NATS cluster of that many servers, the
	// streams and the lease bucket at as many replicas.
	natsServers int
	// pods, when set, is the node's pod capacity.
	pods int
}

// startAgent starts nats-server and the stages for node, with Splitlet's
// defaults; only the sim runtime's start latency and concurrency stand
// for what a real container start costs (200 ms, 20 at a time per
// replica, as the reference measurement).
func startAgent(env *faultEnv, node string, o agentOptions) (*agent, error) {
	dir := filepath.Join(env.work, node)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	a := &agent{node: node, dir: dir, procs: map[string]*proc{}}
	if o.runtime == "cri" {
		env.criNodes = append(env.criNodes, node)
	}
	natsPorts, err := a.addNATS(env, o.natsServers)
	if err != nil {
		return nil, err
	}
	stages := []string{"podconfig", "statussync", "prober", "nodehb"}
	for i := 0; i < max(o.replicas, 1); i++ {
		stages = append(stages, fmt.Sprintf("podworkers-%d", i))
	}
	for _, name := range stages {
		bin := name
		if len(name) > 10 && name[:10] == "podworkers" {
			bin = "podworkers"
		}
		args := []string{
			"--kubeconfig=" + env.kubeconfig, "--node-name=" + node, "--runtime=" + o.runtime,
			"--data-dir=" + filepath.Join(dir, name), "--http-addr=127.0.0.1:0", "--nats-url=" + a.natsURL, "--log-level=info",
		}
		if o.natsServers > 1 {
			args = append(args, fmt.Sprintf("--nats-replicas=%d", o.natsServers))
		}
		switch bin {
		case "nodehb":
			port, err := testenv.FreePort()
			if err != nil {
				return nil, err
			}
			args = append(args, fmt.Sprintf("--nodehb.port=%d", port), "--nodehb.client-ca-file="+env.caFile)
		case "podworkers":
			args = append(args, "--podworkers.replica-id="+name)
			if o.natsServers > 1 {
				// docs/nats-cluster.md: the lease outlasts a Raft election.
				args = append(args, "--podworkers.lease-ttl=15s")
			}
			if o.runtime == "sim" {
				args = append(args, "--podworkers.sim-start-latency=200ms", "--podworkers.sim-max-concurrent-starts=20")
			}
			if o.criEndpoint != "" {
				args = append(args, "--cri-endpoint="+o.criEndpoint)
			}
		}
		if o.runtime != "sim" {
			args = append(args, hostDiskNeutral(bin)...)
		}
		if bin == "nodehb" && o.pods > 0 {
			// the node's pod capacity (the kubelet's --max-pods): 110 by
			// default on process and CRI, fewer than the CRI case's burst.
			args = append(args, fmt.Sprintf("--nodehb.pods=%d", o.pods))
		}
		a.add(name, filepath.Join(env.binDir, bin), args...)
	}
	for _, name := range a.order {
		if err := a.procs[name].start(); err != nil {
			a.stop()
			return nil, err
		}
		if port, ok := natsPorts[name]; ok {
			if err := waitPort(port, 10*time.Second); err != nil {
				a.stop()
				return nil, err
			}
		}
	}
	return a, nil
}

// addNATS adds one nats-server ("nats-server"), or a cluster of n
// ("nats-server-0".."nats-server-<n-1>", routes to each other), and sets
// the agent's URL (all client URLs of a cluster); it returns each server's
// client port.
func (a *agent) addNATS(env *faultEnv, n int) (map[string]int, error) {
	bin := filepath.Join(env.binDir, "nats-server")
	if n <= 1 {
		port, err := testenv.FreePort()
		if err != nil {
			return nil, err
		}
		a.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
		a.add("nats-server", bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(a.dir, "nats"))
		return map[string]int{"nats-server": port}, nil
	}
	ports := map[string]int{}
	var urls, routes []string
	clusterPorts := make([]int, n)
	for i := range n {
		port, err := testenv.FreePort()
		if err != nil {
			return nil, err
		}
		if clusterPorts[i], err = testenv.FreePort(); err != nil {
			return nil, err
		}
		ports[fmt.Sprintf("nats-server-%d", i)] = port
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", port))
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", clusterPorts[i]))
	}
	a.natsURL = strings.Join(urls, ",")
	for i := range n {
		name := fmt.Sprintf("nats-server-%d", i)
		a.add(name, bin, "-n", name, "-a", "127.0.0.1", "-p", strconv.Itoa(ports[name]), "-js", "-sd", filepath.Join(a.dir, name),
			"--cluster_name", "splitlet", "--cluster", routes[i], "--routes", strings.Join(routes, ","))
	}
	return ports, nil
}

func (a *agent) add(name, path string, args ...string) {
	a.procs[name] = &proc{name: name, path: path, args: args, log: filepath.Join(a.dir, name+".log")}
	a.order = append(a.order, name)
}

// stop ends the stages, then nats-server.
func (a *agent) stop() {
	for i := len(a.order) - 1; i >= 0; i-- {
		a.procs[a.order[i]].stop()
	}
}

// crashes counts the exits no fault caused.
func (a *agent) crashes() map[string]int {
	out := map[string]int{}
	for name, p := range a.procs {
		if n := p.crashCount(); n > 0 {
			out[name] = n
		}
	}
	return out
}

// hostDiskNeutral are a stage's settings that keep the host's own disk and
// memory out of a case on real containers, as the conformance harness sets
// them for both agents: eviction thresholds near zero and no image garbage
// collection. A host disk past the kubelet's default thresholds would
// otherwise refuse the burst with DiskPressure, a condition of the machine
// and not of the fault measured.
func hostDiskNeutral(stage string) []string {
	switch stage {
	case "nodehb":
		return []string{"--nodehb.eviction-hard=memory.available<50Mi,nodefs.available<1%,nodefs.inodesFree<1%,imagefs.available<1%"}
	case "podworkers":
		return []string{"--image-gc-high-threshold=100", "--image-gc-low-threshold=99"}
	}
	return nil
}
