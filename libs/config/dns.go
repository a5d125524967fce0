package config

import (
	"fmt"
	"net"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The cluster DNS keys' defaults: the domain every cluster tool assumes
// (kubeadm, kind, k3s; the kubelet's own clusterDomain has none) and the
// kubelet's resolvConf.
const (
	DefaultClusterDomain = "cluster.local"
	DefaultResolvConf    = "/etc/resolv.conf"
)

// DNS holds the node's cluster DNS keys, the kubelet's clusterDNS,
// clusterDomain and resolvConf: what the pod workers give a pod as its
// resolv.conf and /etc/hosts. They are node-wide keys without a stage's
// prefix; the stages that use them register them (podworkers).
type DNS struct {
	// ClusterDNS are the cluster DNS servers of ClusterFirst pods; none:
	// such pods fall back to Default.
	ClusterDNS []net.IP
	// ClusterDomain is the cluster's DNS domain; empty: no cluster search
	// paths.
	ClusterDomain string
	// ResolvConf is the host's resolver file, the base of every pod's
	// resolv.conf but a None pod's; empty: none (nameserver 127.0.0.1).
	ResolvConf string
}

// RegisterFlags adds cluster-dns, cluster-domain and resolv-conf to fs.
func (d *DNS) RegisterFlags(fs *pflag.FlagSet) {
	fs.Var(&ipList{target: &d.ClusterDNS}, "cluster-dns", "IP addresses of the cluster DNS servers, comma separated (the kubelet's --cluster-dns): the nameservers of pods with dnsPolicy ClusterFirst (and ClusterFirstWithHostNet); empty: such pods fall back to Default, with a MissingClusterDNS Event")
	fs.StringVar(&d.ClusterDomain, "cluster-domain", DefaultClusterDomain, "the cluster's DNS domain (the kubelet's --cluster-domain): ClusterFirst pods search <namespace>.svc.<domain>, svc.<domain> and <domain> before the host's search paths, and a pod with a subdomain is <hostname>.<subdomain>.<namespace>.svc.<domain> in its /etc/hosts; empty: no cluster search paths")
	fs.StringVar(&d.ResolvConf, "resolv-conf", DefaultResolvConf, "the host's resolver file pods' resolv.conf is made from (the kubelet's --resolv-conf): all of it for dnsPolicy Default, its search paths after the cluster's for ClusterFirst; empty: none, pods resolve through 127.0.0.1")
}

// Validate checks cluster-domain (the IPs were checked as they were set).
func (d *DNS) Validate() error {
	if d.ClusterDomain != "" {
		if errs := validation.IsDNS1123Subdomain(d.ClusterDomain); len(errs) > 0 {
			return fmt.Errorf("invalid value %q for cluster-domain: %s", d.ClusterDomain, strings.Join(errs, "; "))
		}
	}
	return nil
}

// ipList is a comma-separated list of IP addresses, checked as it is set:
// from a flag, the environment or a YAML list alike.
type ipList struct {
	target *[]net.IP
	set    bool
}

func (l *ipList) Type() string { return "ips" }

func (l *ipList) String() string { return strings.Join(l.GetSlice(), ",") }

// Set parses a comma-separated list; a repeated flag adds to the list.
func (l *ipList) Set(v string) error {
	var parts []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			parts = append(parts, p)
		}
	}
	if l.set {
		parts = append(l.GetSlice(), parts...)
	}
	if err := l.Replace(parts); err != nil {
		return err
	}
	l.set = true
	return nil
}

// Replace sets the list (pflag.SliceValue: a YAML list).
func (l *ipList) Replace(vals []string) error {
	out := make([]net.IP, 0, len(vals))
	for _, v := range vals {
		ip := net.ParseIP(strings.TrimSpace(v))
		if ip == nil {
			return fmt.Errorf("%q is not an IP address", v)
		}
		out = append(out, ip)
	}
	*l.target = out
	return nil
}

// Append adds one address (pflag.SliceValue).
func (l *ipList) Append(v string) error {
	return l.Replace(append(l.GetSlice(), v))
}

// GetSlice is the list as strings (pflag.SliceValue).
func (l *ipList) GetSlice() []string {
	s := make([]string, len(*l.target))
	for i, ip := range *l.target {
		s[i] = ip.String()
	}
	return s
}
