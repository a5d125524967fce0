package testenv

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestClusterNetwork: while a cluster network runs, the Service range is a
// blackhole on the host, the bridge has the gateway address, CoreDNS
// answers on it for the kubernetes Service from the API server, kube-proxy
// has a chain for kube-dns; after Stop the route, the bridge and
// kube-proxy's chains are gone.
func TestClusterNetwork(t *testing.T) {
	SkipShort(t, "root, etcd, kube-apiserver, CoreDNS and kube-proxy")
	ctx := t.Context()
	cp := ControlPlaneForTest(t)
	const bridge, node = "splitlet-tcn0", "clusternet"
	// kube-proxy waits for its Node and its addresses (a node's agent
	// reports them).
	nodes := cp.Clientset().CoreV1().Nodes()
	created, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.96.0.1"}}
	if _, err := nodes.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n, err := StartClusterNetwork(ctx, cp, ClusterNetworkOptions{Bridge: bridge, Subnet: "10.96.0.0/16", Node: node})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			n.Stop()
		}
	}()
	if n.Gateway != netip.MustParseAddr("10.96.0.1") || n.DNS != netip.MustParseAddr(DNSServiceIP) {
		t.Errorf("gateway %s, DNS %s", n.Gateway, n.DNS)
	}
	if typ := routeType(t); typ != unix.RTN_BLACKHOLE {
		t.Errorf("route for %s: type %d, want blackhole (%d)", ServiceCIDR, typ, unix.RTN_BLACKHOLE)
	}
	// What no rule of kube-proxy takes is dropped on the host.
	if _, err := netlink.RouteGet(net.ParseIP("10.0.0.200")); err == nil {
		t.Error("a route to 10.0.0.200 off the host")
	}
	if _, err := cp.Clientset().CoreV1().Services(metav1.NamespaceSystem).Get(ctx, KubeDNSService, metav1.GetOptions{}); err != nil {
		t.Errorf("kube-dns Service: %v", err)
	}
	addrs, err := lookup(ctx, n.Gateway, "kubernetes.default.svc."+ClusterDomain)
	if err != nil || !slices.Equal(addrs, []string{"10.0.0.1"}) {
		t.Errorf("CoreDNS on %s: kubernetes.default is %v, %v; want 10.0.0.1", n.Gateway, addrs, err)
	}
	var rules []byte
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		rules, err = exec.CommandContext(ctx, "iptables-save", "-t", "nat").CombinedOutput()
		return err == nil && hasServiceRule(string(rules), "kube-system/kube-dns:dns"), nil
	}); err != nil {
		t.Errorf("no kube-proxy chain for kube-dns: %v\n%s", err, rules)
	}

	n.Stop()
	stopped = true
	if typ := routeType(t); typ == unix.RTN_BLACKHOLE {
		t.Error("the blackhole route outlives Stop")
	}
	if _, err := netlink.LinkByName(bridge); err == nil {
		t.Errorf("bridge %s outlives Stop", bridge)
	}
	if err := exec.CommandContext(ctx, "iptables", "-t", "nat", "-S", "KUBE-SERVICES").Run(); err == nil {
		t.Error("kube-proxy's KUBE-SERVICES chain outlives Stop")
	}
}

// routeType is the type (unix.RTN_*) of the host's route for ServiceCIDR
// in the main table, 0 when there is none.
func routeType(t *testing.T) int {
	t.Helper()
	dst := netip.MustParsePrefix(ServiceCIDR)
	filter := &netlink.Route{Dst: &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), 32)}, Table: unix.RT_TABLE_MAIN}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, filter, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) == 0 {
		return 0
	}
	return routes[0].Type
}

// lookup asks the DNS server at server:53 for name's IPv4 addresses.
func lookup(ctx context.Context, server netip.Addr, name string) ([]string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, netip.AddrPortFrom(server, 53).String())
	}}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ips, err := r.LookupNetIP(ctx, "ip4", name)
	var out []string
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out, err
}

// hasServiceRule: kube-proxy's nat table sends the Service port named
// (namespace/name:port) to its chain.
func hasServiceRule(iptablesSave, port string) bool {
	for line := range strings.Lines(iptablesSave) {
		if strings.HasPrefix(line, "-A KUBE-SERVICES ") && strings.Contains(line, port) && strings.Contains(line, "-j KUBE-SVC-") {
			return true
		}
	}
	return false
}
