package config

import (
	"fmt"
	"net"
	"slices"
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
// resolv.conf and /etc/hosts, and what nodehb's /configz states. They are
// node-wide keys without a stage's prefix; every stage that uses them
// registers them (podworkers, nodehb), and stages of one process share
// them (RegisterFlags).
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
// When another DNS registered them in fs already (two stages in one
// process), d shares them: one definition, each value set in both.
func (d *DNS) RegisterFlags(fs *pflag.FlagSet) {
	if d.share(fs) {
		return
	}
	d.ClusterDomain, d.ResolvConf = DefaultClusterDomain, DefaultResolvConf
	fs.Var(&ipList{targets: []*[]net.IP{&d.ClusterDNS}}, "cluster-dns", "IP addresses of the cluster DNS servers, comma separated (the kubelet's --cluster-dns): the nameservers of pods with dnsPolicy ClusterFirst (and ClusterFirstWithHostNet); empty: such pods fall back to Default, with a MissingClusterDNS Event")
	fs.Var(&sharedString{targets: []*string{&d.ClusterDomain}}, "cluster-domain", "the cluster's DNS domain (the kubelet's --cluster-domain): ClusterFirst pods search <namespace>.svc.<domain>, svc.<domain> and <domain> before the host's search paths, and a pod with a subdomain is <hostname>.<subdomain>.<namespace>.svc.<domain> in its /etc/hosts; empty: no cluster search paths")
	fs.Var(&sharedString{targets: []*string{&d.ResolvConf}}, "resolv-conf", "the host's resolver file pods' resolv.conf is made from (the kubelet's --resolv-conf): all of it for dnsPolicy Default, its search paths after the cluster's for ClusterFirst; empty: none, pods resolve through 127.0.0.1")
}

// share makes d take the DNS keys already in fs, if they are, and their
// values from then on.
func (d *DNS) share(fs *pflag.FlagSet) bool {
	dnsFlag, domainFlag, resolvFlag := fs.Lookup("cluster-dns"), fs.Lookup("cluster-domain"), fs.Lookup("resolv-conf")
	if dnsFlag == nil || domainFlag == nil || resolvFlag == nil {
		return false
	}
	servers, ok1 := dnsFlag.Value.(*ipList)
	domain, ok2 := domainFlag.Value.(*sharedString)
	resolv, ok3 := resolvFlag.Value.(*sharedString)
	if !ok1 || !ok2 || !ok3 {
		return false
	}
	servers.targets = append(servers.targets, &d.ClusterDNS)
	d.ClusterDNS = slices.Clone(*servers.targets[0])
	domain.targets = append(domain.targets, &d.ClusterDomain)
	d.ClusterDomain = *domain.targets[0]
	resolv.targets = append(resolv.targets, &d.ResolvConf)
	d.ResolvConf = *resolv.targets[0]
	return true
}

// sharedString is a string key that sets every DNS that registered it.
type sharedString struct{ targets []*string }

func (s *sharedString) Type() string   { return "string" }
func (s *sharedString) String() string { return *s.targets[0] }

// Set sets the value in every target.
func (s *sharedString) Set(v string) error {
	for _, t := range s.targets {
		*t = v
	}
	return nil
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
// from a flag, the environment or a YAML list alike; every target gets
// the list.
type ipList struct {
	targets []*[]net.IP
	set     bool
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
	for _, t := range l.targets {
		*t = slices.Clone(out)
	}
	return nil
}

// Append adds one address (pflag.SliceValue).
func (l *ipList) Append(v string) error {
	return l.Replace(append(l.GetSlice(), v))
}

// GetSlice is the list as strings (pflag.SliceValue).
func (l *ipList) GetSlice() []string {
	s := make([]string, len(*l.targets[0]))
	for i, ip := range *l.targets[0] {
		s[i] = ip.String()
	}
	return s
}
