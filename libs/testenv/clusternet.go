package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The Service range of every test control plane (kube-apiserver's and
// kube-controller-manager's --service-cluster-ip-range), and the ClusterIP
// of the kube-dns Service StartClusterNetwork makes in it: the address a
// node's --cluster-dns names, as in a kubeadm cluster.
const (
	ServiceCIDR  = "10.0.0.0/24"
	DNSServiceIP = "10.0.0.10"
)

// The pods' bridge and subnet of the compose stack's cluster network
// (deploy/compose/compose.cluster.yaml): a containerd whose CNI network is
// ServicesCNIConfig(StackClusterNetwork, StackClusterBridge,
// StackClusterSubnet) runs its pods there (`criimages --serve
// --services-cni`).
const (
	StackClusterNetwork = "splitlet-cluster"
	StackClusterBridge  = "splitlet-svc0"
	StackClusterSubnet  = "10.97.0.0/16"
)

// ClusterDomain is the DNS domain CoreDNS serves the cluster's Services
// and pods under (a node's --cluster-domain).
const ClusterDomain = "cluster.local"

// Identities of the cluster network's components, each with a client
// certificate of its own: the API server's bootstrap RBAC binds
// system:kube-proxy to the system:node-proxier role; CoreDNS gets the
// role kubeadm gives it (coreDNSRBAC).
const (
	KubeProxyUser = "system:kube-proxy"
	CoreDNSUser   = "system:coredns"
)

// ClusterNetworkOptions say where the cluster network lives.
type ClusterNetworkOptions struct {
	// Bridge is the pods' CNI bridge (a containerd started with
	// GatewayCNIConfig(name, Bridge, Subnet)): made here with the
	// gateway address when it does not exist, so that CoreDNS can listen
	// on it before the first pod.
	Bridge string
	// Subnet of the pods on Bridge ("10.95.0.0/16"); its first address is
	// the gateway, the host's address on the bridge, where CoreDNS listens.
	Subnet string
	// Node is the node's name: kube-proxy runs as its proxy
	// (--hostname-override).
	Node string
	// Dir holds the Corefile, kubeconfigs and logs (coredns.log,
	// kube-proxy.log); a new temporary directory when empty (removed by
	// Stop).
	Dir string
}

// ClusterNetwork is CoreDNS and kube-proxy running beside a control plane
// for the pods of one CNI bridge: a kube-dns Service at DNSServiceIP whose
// endpoint is CoreDNS on the bridge's gateway address, kube-proxy's
// iptables rules for every Service, and a blackhole route for ServiceCIDR,
// so that a packet to a Service without a rule is dropped on the host
// rather than routed off it.
type ClusterNetwork struct {
	// Gateway is the host's address on the bridge, where CoreDNS listens.
	Gateway netip.Addr
	// DNS is the kube-dns Service's ClusterIP (DNSServiceIP).
	DNS netip.Addr
	// Dir holds the logs (coredns.log, kube-proxy.log).
	Dir string

	opts             ClusterNetworkOptions
	subnet           netip.Prefix
	coredns, proxy   *process
	kubeProxyBin     string
	ownDir           bool
	madeBridge, held bool
	hostLock         *os.File
}

// StartClusterNetwork makes the bridge (when missing) and the blackhole
// route for ServiceCIDR, the kube-dns Service and its EndpointSlice, and
// starts CoreDNS (kubernetes plugin against cp, listening on the
// gateway address, health and readiness on loopback) and kube-proxy
// (iptables mode, its node ports on the gateway address alone, healthz and
// metrics on loopback, no host sysctl changed), and waits until both are
// ready (kube-proxy once the Node has an address, or after 30 s). It
// needs root. A Service's endpoints come from
// kube-controller-manager's endpointslice controller
// (ControlPlaneOptions.ServiceControllers). One cluster network runs on
// a host at a time (a file lock; a second waits). Stop undoes all of it.
func StartClusterNetwork(ctx context.Context, cp *ControlPlane, opts ClusterNetworkOptions) (n *ClusterNetwork, err error) {
	subnet, err := netip.ParsePrefix(opts.Subnet)
	if err != nil || !subnet.Addr().Is4() {
		return nil, fmt.Errorf("testenv: cluster network subnet %q: want an IPv4 CIDR (%v)", opts.Subnet, err)
	}
	if opts.Bridge == "" || opts.Node == "" {
		return nil, errors.New("testenv: cluster network needs a bridge and a node name")
	}
	corednsBin, err := Binary("coredns")
	if err != nil {
		return nil, err
	}
	proxyBin, err := Binary("kube-proxy")
	if err != nil {
		return nil, err
	}
	if err := checkBridgeNetfilter(); err != nil {
		return nil, err
	}
	subnet = subnet.Masked()
	n = &ClusterNetwork{Gateway: subnet.Addr().Next(), DNS: netip.MustParseAddr(DNSServiceIP), Dir: opts.Dir,
		opts: opts, subnet: subnet, kubeProxyBin: proxyBin}
	if n.Dir == "" {
		if n.Dir, err = os.MkdirTemp("", "splitlet-clusternet-"); err != nil {
			return nil, err
		}
		n.ownDir = true
	}
	// On an error, undo what was done (by then the result n is nil).
	started := n
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()
	if err = PrivateDir(n.Dir); err != nil {
		return nil, err
	}
	// One cluster network on the host at a time (tests of two packages
	// run at once): the route and kube-proxy's chains are host-wide.
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if n.hostLock, err = lockHost(waitCtx); err != nil {
		return nil, err
	}
	if err = n.setUpHost(); err != nil {
		return nil, err
	}
	if err = n.makeObjects(waitCtx, cp); err != nil {
		return nil, err
	}
	if err = n.startCoreDNS(waitCtx, cp, corednsBin); err != nil {
		return nil, err
	}
	if err = n.startKubeProxy(waitCtx, cp); err != nil {
		return nil, err
	}
	return n, nil
}

// ClusterNetworkForTest starts a cluster network for t (StartClusterNetwork)
// and stops it when t ends; under -short it skips t.
func ClusterNetworkForTest(t testing.TB, cp *ControlPlane, opts ClusterNetworkOptions) *ClusterNetwork {
	t.Helper()
	SkipShort(t, "root, CoreDNS and kube-proxy")
	n, err := StartClusterNetwork(t.Context(), cp, opts)
	if err != nil {
		t.Fatalf("test cluster network: %v", err)
	}
	t.Cleanup(n.Stop)
	return n
}

// bridgeNFCallIPTables is on when frames crossing a bridge go through
// iptables (br_netfilter).
const bridgeNFCallIPTables = "/proc/sys/net/bridge/bridge-nf-call-iptables"

// checkBridgeNetfilter: a pod's packet to a Service whose endpoint is on
// the same bridge comes back bridged, from pod to pod; only with
// br_netfilter on does it meet the connection's DNAT entry and look as
// if it came from the ClusterIP, as kube-proxy requires. (A Docker engine
// turns it on; it is checked, not changed, here.)
func checkBridgeNetfilter() error {
	data, err := os.ReadFile(bridgeNFCallIPTables)
	if err != nil || strings.TrimSpace(string(data)) != "1" {
		return fmt.Errorf("testenv: kube-proxy needs bridged traffic through iptables (%s is %q, %v): modprobe br_netfilter; sysctl -w net.bridge.bridge-nf-call-iptables=1",
			bridgeNFCallIPTables, strings.TrimSpace(string(data)), err)
	}
	return nil
}

// setUpHost makes the bridge with the gateway address (when missing) and
// the blackhole route for ServiceCIDR, before any Service exists.
func (n *ClusterNetwork) setUpHost() error {
	made, err := ensureBridge(n.opts.Bridge, netip.PrefixFrom(n.Gateway, n.subnet.Bits()))
	n.madeBridge = made
	if err != nil {
		return fmt.Errorf("testenv: bridge %s: %w", n.opts.Bridge, err)
	}
	if err := addBlackhole(netip.MustParsePrefix(ServiceCIDR)); err != nil {
		return fmt.Errorf("testenv: blackhole route for %s: %w", ServiceCIDR, err)
	}
	n.held = true
	return nil
}

// startCoreDNS writes the Corefile and a kubeconfig of CoreDNSUser, runs
// CoreDNS and waits for its readiness (the kubernetes plugin has synced).
func (n *ClusterNetwork) startCoreDNS(ctx context.Context, cp *ControlPlane, bin string) error {
	kubeconfig := filepath.Join(n.Dir, "coredns.kubeconfig")
	if err := cp.WriteClientKubeconfig(kubeconfig, CoreDNSUser); err != nil {
		return err
	}
	healthPort, err := FreePort()
	if err != nil {
		return err
	}
	readyPort, err := FreePort()
	if err != nil {
		return err
	}
	corefile := filepath.Join(n.Dir, "Corefile")
	if err := os.WriteFile(corefile, []byte(corefileFor(n.Gateway, kubeconfig, healthPort, readyPort)), 0o600); err != nil {
		return err
	}
	if n.coredns, err = startProcess("coredns", filepath.Join(n.Dir, "coredns.log"), bin, "-conf", corefile); err != nil {
		return err
	}
	client := &http.Client{Timeout: 5 * time.Second}
	return n.coredns.waitFor(ctx, "/ready", func() error { return httpOK(client, fmt.Sprintf("http://127.0.0.1:%d/ready", readyPort), "") })
}

// corefileFor serves ClusterDomain and the reverse zones from the API
// server on gateway:53, and nothing else: no forward plugin, so a name
// outside the cluster is refused and no query leaves the machine.
func corefileFor(gateway netip.Addr, kubeconfig string, healthPort, readyPort int) string {
	return fmt.Sprintf(`.:53 {
    bind %s
    errors
    log
    health 127.0.0.1:%d
    ready 127.0.0.1:%d
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig %s splitlet
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
}
`, gateway, healthPort, readyPort, ClusterDomain, kubeconfig)
}

// startKubeProxy runs kube-proxy as KubeProxyUser for the node and waits
// until its rules are synced. kube-proxy first waits up to 30 s for the
// Node to have an address: start the cluster network after the node's
// agent reported its status.
func (n *ClusterNetwork) startKubeProxy(ctx context.Context, cp *ControlPlane) error {
	kubeconfig := filepath.Join(n.Dir, "kube-proxy.kubeconfig")
	if err := cp.WriteClientKubeconfig(kubeconfig, KubeProxyUser); err != nil {
		return err
	}
	healthPort, err := FreePort()
	if err != nil {
		return err
	}
	metricsPort, err := FreePort()
	if err != nil {
		return err
	}
	gw := n.Gateway.String()
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--hostname-override=" + n.opts.Node,
		"--proxy-mode=iptables",
		"--bind-address=" + gw,
		"--cluster-cidr=" + n.subnet.String(),
		"--nodeport-addresses=" + gw + "/32",
		"--healthz-bind-address=127.0.0.1:" + itoa(healthPort),
		"--metrics-bind-address=127.0.0.1:" + itoa(metricsPort),
		// No host-wide setting changes: no route_localnet for node ports
		// on loopback, conntrack's limits and timeouts left as they are.
		"--iptables-localhost-nodeports=false",
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		"--oom-score-adj=0",
		"--iptables-min-sync-period=100ms",
		"--v=2",
	}
	// The rules of a kube-proxy killed before its Stop go first.
	n.cleanUpRules()
	if n.proxy, err = startProcess("kube-proxy", filepath.Join(n.Dir, "kube-proxy.log"), n.kubeProxyBin, args...); err != nil {
		return err
	}
	// /livez: the rules are synced (/healthz also wants the Node).
	client := &http.Client{Timeout: 5 * time.Second}
	return n.proxy.waitFor(ctx, "/livez", func() error { return httpOK(client, fmt.Sprintf("http://127.0.0.1:%d/livez", healthPort), "") })
}

// Stop stops kube-proxy (and removes its rules: kube-proxy --cleanup) and
// CoreDNS, then removes the blackhole route and the bridge if it made
// them. The kube-dns Service stays with the control plane.
func (n *ClusterNetwork) Stop() {
	if n.proxy != nil {
		n.proxy.stop(10 * time.Second)
		n.cleanUpRules()
	}
	if n.coredns != nil {
		n.coredns.stop(10 * time.Second)
	}
	if n.held {
		_ = delBlackhole(netip.MustParsePrefix(ServiceCIDR))
		n.held = false
	}
	if n.madeBridge {
		_ = delBridge(n.opts.Bridge)
		n.madeBridge = false
	}
	if n.ownDir {
		_ = os.RemoveAll(n.Dir)
	}
	if n.hostLock != nil {
		n.hostLock.Close()
		n.hostLock = nil
	}
}

// cleanUpRules runs kube-proxy --cleanup: its chains leave the host's
// iptables (logged to kube-proxy-cleanup.log).
func (n *ClusterNetwork) cleanUpRules() {
	p, err := startProcess("kube-proxy --cleanup", filepath.Join(n.Dir, "kube-proxy-cleanup.log"), n.kubeProxyBin, "--cleanup", "--v=0")
	if err != nil {
		return
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.stop(time.Second)
	}
}

// Running reports whether CoreDNS and kube-proxy are still up.
func (n *ClusterNetwork) Running() bool {
	return n.coredns != nil && !n.coredns.exited() && n.proxy != nil && !n.proxy.exited()
}
