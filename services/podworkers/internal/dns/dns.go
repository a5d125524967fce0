// Package dns is the kubelet's DNS configurer: the resolver configuration
// of a pod (its /etc/resolv.conf) from its dnsPolicy and dnsConfig, the
// node's cluster DNS keys and the host's resolver file, with the kubelet's
// limits, Events and messages.
package dns

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/runtime"
)

// The API's limits on a pod's resolver configuration (the kubelet's
// MaxDNSNameservers, MaxDNSSearchPaths, MaxDNSSearchListChars), and the
// most of the host's file read.
const (
	MaxNameservers     = 3
	MaxSearchPaths     = 32
	MaxSearchListChars = 2048
	maxResolvConf      = 10 << 20
)

// The kubelet's Event reasons.
const (
	EventDNSConfigForming         = "DNSConfigForming"
	EventMissingClusterDNS        = "MissingClusterDNS"
	EventCheckLimitsForResolvConf = "CheckLimitsForResolvConf"
)

// clusterOptions are the options of a pod resolving through the cluster
// DNS.
var clusterOptions = []string{"ndots:5"}

// kind is where a pod's configuration starts from.
type kind int

const (
	kindCluster kind = iota // the cluster DNS, the cluster's search paths first
	kindHost                // the host's resolver file
	kindNone                // nothing: the pod's dnsConfig alone
)

// Options configure a Configurer.
type Options struct {
	// DNS are the node's cluster DNS keys.
	DNS config.DNS
	// NodeIPs are the node's addresses: with no resolver file a pod
	// resolves through the loopback address of each one's family.
	NodeIPs []net.IP
	// Node names the node, whose Events some are.
	Node string
	// Recorder records the Events; nil records none.
	Recorder record.EventRecorder
	Log      *zap.Logger
}

// Configurer computes pods' resolver configurations (kubelet: the DNS
// Configurer). It is safe for concurrent use.
type Configurer struct {
	servers    []string
	domain     string
	resolvConf string
	nodeIPs    []net.IP
	node       *corev1.ObjectReference
	recorder   record.EventRecorder
	log        *zap.Logger
}

// New returns a Configurer.
func New(o Options) *Configurer {
	c := &Configurer{domain: o.DNS.ClusterDomain, resolvConf: o.DNS.ResolvConf, nodeIPs: o.NodeIPs,
		node: kube.NodeRef(o.Node), recorder: o.Recorder, log: o.Log}
	for _, ip := range o.DNS.ClusterDNS {
		c.servers = append(c.servers, ip.String())
	}
	if c.log == nil {
		c.log = zap.NewNop()
	}
	return c
}

// PodDNS is the pod's resolver configuration (kubelet: GetPodDNS). The
// host's file is read first, whatever the policy; an error reading it is
// the pod's error.
func (c *Configurer) PodDNS(pod *corev1.Pod) (*runtime.DNSConfig, error) {
	cfg, err := c.hostConfig()
	if err != nil {
		return nil, err
	}
	switch c.kindOf(pod) {
	case kindNone:
		cfg = &runtime.DNSConfig{}
	case kindCluster:
		cfg = &runtime.DNSConfig{Servers: append([]string{}, c.servers...), Searches: c.clusterSearches(pod, cfg.Searches),
			Options: append([]string{}, clusterOptions...)}
	case kindHost:
		if c.resolvConf == "" {
			cfg = c.loopbackConfig()
		}
	}
	if d := pod.Spec.DNSConfig; d != nil {
		cfg = merge(cfg, d)
	}
	cfg.Servers = c.fitNameservers(pod, cfg.Servers)
	cfg.Searches = c.fitSearches(pod, cfg.Searches)
	return cfg, nil
}

// kindOf is where the pod's configuration starts from (kubelet:
// getPodDNSType): ClusterFirst on the host's network is Default, and
// ClusterFirst without cluster DNS falls back to it, with the kubelet's
// MissingClusterDNS Events. A policy the API server would have refused
// counts as ClusterFirst, as on a kubelet.
func (c *Configurer) kindOf(pod *corev1.Pod) kind {
	switch pod.Spec.DNSPolicy {
	case corev1.DNSNone:
		return kindNone
	case corev1.DNSDefault:
		return kindHost
	case corev1.DNSClusterFirst:
		if pod.Spec.HostNetwork {
			return kindHost
		}
	}
	if len(c.servers) == 0 {
		msg := fmt.Sprintf("kubelet does not have ClusterDNS IP configured and cannot create Pod using %q policy. Falling back to %q policy.",
			corev1.DNSClusterFirst, corev1.DNSDefault)
		c.event(c.node, EventMissingClusterDNS, "%s", msg)
		c.event(podRef(pod), EventMissingClusterDNS, "pod: %q. %s", podDesc(pod), msg)
		return kindHost
	}
	return kindCluster
}

// clusterSearches are the cluster's search paths, then the host's, each
// once (kubelet: generateSearchesForDNSClusterFirst).
func (c *Configurer) clusterSearches(pod *corev1.Pod, host []string) []string {
	if c.domain == "" {
		return host
	}
	return unique(append([]string{pod.Namespace + ".svc." + c.domain, "svc." + c.domain, c.domain}, host...))
}

// loopbackConfig is the configuration of a pod without a host resolver
// file: the local machine's resolver, on the loopback address of each
// node address's family, and the root as the only search path.
func (c *Configurer) loopbackConfig() *runtime.DNSConfig {
	cfg := &runtime.DNSConfig{Searches: []string{"."}}
	for _, ip := range c.nodeIPs {
		if ip.To4() == nil {
			cfg.Servers = append(cfg.Servers, "::1")
		} else {
			cfg.Servers = append(cfg.Servers, "127.0.0.1")
		}
	}
	if len(cfg.Servers) == 0 {
		cfg.Servers = []string{"127.0.0.1"}
	}
	return cfg
}

// hostConfig is the host's resolver file, parsed; empty without one
// (kubelet: getDNSConfig, with its messages).
func (c *Configurer) hostConfig() (*runtime.DNSConfig, error) {
	if c.resolvConf == "" {
		return &runtime.DNSConfig{}, nil
	}
	f, err := os.Open(c.resolvConf)
	if err != nil {
		c.log.Error("could not open the resolver file", zap.String("path", c.resolvConf), zap.Error(err))
		return nil, err
	}
	defer f.Close()
	cfg, err := Parse(f)
	if err != nil {
		err = fmt.Errorf("Encountered error while parsing resolv conf file. Error: %w", err)
		c.log.Error("could not parse the resolver file", zap.String("path", c.resolvConf), zap.Error(err))
		return nil, err
	}
	return cfg, nil
}

// Parse reads a resolv.conf (kubelet: parseResolvConf): nameserver lines
// add up, the last search line wins (trailing dots dropped, "." left
// out), options add up with a later value of an option replacing an
// earlier one.
func Parse(r io.Reader) (*runtime.DNSConfig, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxResolvConf+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxResolvConf {
		return nil, fmt.Errorf("input is too long (more than %d bytes)", maxResolvConf)
	}
	cfg := &runtime.DNSConfig{Servers: []string{}, Searches: []string{}, Options: []string{}}
	var errs []error
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch fields[0] {
		case "nameserver":
			if len(fields) < 2 {
				errs = append(errs, errors.New("nameserver list is empty "))
				continue
			}
			cfg.Servers = append(cfg.Servers, fields[1])
		case "search":
			cfg.Searches = []string{}
			for _, s := range fields[1:] {
				if s != "." {
					cfg.Searches = append(cfg.Searches, strings.TrimSuffix(s, "."))
				}
			}
		case "options":
			cfg.Options = setOptions(cfg.Options, fields[1:])
		}
	}
	return cfg, errors.Join(errs...)
}

// merge adds the pod's dnsConfig to cfg: its nameservers and search paths
// after cfg's, each once, and its options over cfg's (kubelet:
// appendDNSConfig).
func merge(cfg *runtime.DNSConfig, d *corev1.PodDNSConfig) *runtime.DNSConfig {
	out := &runtime.DNSConfig{
		Servers:  unique(append(append([]string{}, cfg.Servers...), d.Nameservers...)),
		Searches: unique(append(append([]string{}, cfg.Searches...), d.Searches...)),
	}
	opts := make([]string, 0, len(d.Options))
	for _, o := range d.Options {
		opt := o.Name
		if o.Value != nil && *o.Value != "" {
			opt += ":" + *o.Value
		}
		opts = append(opts, opt)
	}
	out.Options = setOptions(append([]string{}, cfg.Options...), opts)
	return out
}

// setOptions sets each of opts ("name" or "name:value") in list: a name
// already there takes the new value in its place, a new one goes last.
func setOptions(list, opts []string) []string {
	for _, o := range opts {
		name, _, _ := strings.Cut(o, ":")
		i := 0
		for ; i < len(list); i++ {
			if n, _, _ := strings.Cut(list[i], ":"); n == name {
				break
			}
		}
		if i < len(list) {
			list[i] = o
		} else {
			list = append(list, o)
		}
	}
	return list
}

// unique is list with each value once, in the order of first appearance.
func unique(list []string) []string {
	seen := make(map[string]bool, len(list))
	out := make([]string, 0, len(list))
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// fitNameservers keeps the first three nameservers, with the kubelet's
// Event when there were more (formDNSNameserversFitsLimits).
func (c *Configurer) fitNameservers(pod *corev1.Pod, servers []string) []string {
	if len(servers) <= MaxNameservers {
		return servers
	}
	servers = servers[:MaxNameservers]
	msg := "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: " + strings.Join(servers, " ")
	c.event(podRef(pod), EventDNSConfigForming, "%s", msg)
	c.log.Error("nameserver limits exceeded", append(logging.Pod(pod.Namespace, pod.Name, string(pod.UID)), zap.String("applied", strings.Join(servers, " ")))...)
	return servers
}

// fitSearches keeps what fits of the search paths: the first 32, none
// longer than a DNS name, then as many as fit in 2048 characters, with
// the kubelet's Event when any were left out (formDNSSearchFitsLimits).
func (c *Configurer) fitSearches(pod *corev1.Pod, searches []string) []string {
	cut := false
	if len(searches) > MaxSearchPaths {
		searches, cut = searches[:MaxSearchPaths], true
	}
	kept := make([]string, 0, len(searches))
	for _, s := range searches {
		if len(s) > validation.DNS1123SubdomainMaxLength {
			cut = true
			continue
		}
		kept = append(kept, s)
	}
	for len(kept) > 0 && len(strings.Join(kept, " ")) > MaxSearchListChars {
		kept, cut = kept[:len(kept)-1], true
	}
	if cut {
		line := strings.Join(kept, " ")
		c.event(podRef(pod), EventDNSConfigForming, "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: %s", line)
		c.log.Error("search line limits exceeded", append(logging.Pod(pod.Namespace, pod.Name, string(pod.UID)), zap.String("applied", line))...)
	}
	return kept
}

// CheckResolvConf records on the node when the host's resolver file
// cannot be read or its search line alone exceeds what a pod may have
// (kubelet: CheckLimitsForResolvConf, once as it starts).
func (c *Configurer) CheckResolvConf() {
	if c.resolvConf == "" {
		return
	}
	f, err := os.Open(c.resolvConf)
	if err != nil {
		c.event(c.node, EventCheckLimitsForResolvConf, "%s", err.Error())
		return
	}
	defer f.Close()
	cfg, err := Parse(f)
	if err != nil {
		c.event(c.node, EventCheckLimitsForResolvConf, "%s", err.Error())
		return
	}
	limit := MaxSearchPaths
	if c.domain != "" {
		limit -= 3
	}
	switch {
	case len(cfg.Searches) > limit:
		c.event(c.node, EventCheckLimitsForResolvConf, "Resolv.conf file '%s' contains search line consisting of more than %d domains!", c.resolvConf, limit)
		return
	case anyLonger(cfg.Searches, validation.DNS1123SubdomainMaxLength):
		c.event(c.node, EventCheckLimitsForResolvConf, "Resolv.conf file %q contains a search path which length is more than allowed %d chars!", c.resolvConf, validation.DNS1123SubdomainMaxLength)
		return
	case len(strings.Join(cfg.Searches, " ")) > MaxSearchListChars:
		c.event(c.node, EventCheckLimitsForResolvConf, "Resolv.conf file '%s' contains search line which length is more than allowed %d chars!", c.resolvConf, MaxSearchListChars)
	}
}

func anyLonger(list []string, n int) bool {
	for _, s := range list {
		if len(s) > n {
			return true
		}
	}
	return false
}

// HostOnly is for a runtime whose containers read the host's
// /etc/resolv.conf as it is, whatever the pod asks (runtime.HostDNS): it
// records the kubelet's MissingClusterDNS when a ClusterFirst pod falls
// back to Default, and a DNSConfigForming Warning naming what the runtime
// does not apply when the pod's configuration would differ from that
// file. It reads no file.
func (c *Configurer) HostOnly(pod *corev1.Pod, runtimeType string) {
	var missed []string
	switch c.kindOf(pod) {
	case kindCluster:
		missed = append(missed, fmt.Sprintf("dnsPolicy %q with the cluster's nameservers (cluster-dns)", policyName(pod)))
	case kindNone:
		missed = append(missed, fmt.Sprintf("dnsPolicy %q", corev1.DNSNone))
	case kindHost:
		if c.resolvConf != config.DefaultResolvConf {
			missed = append(missed, fmt.Sprintf("resolv-conf %q", c.resolvConf))
		}
	}
	if pod.Spec.DNSConfig != nil {
		missed = append(missed, "the pod's dnsConfig")
	}
	if len(missed) == 0 {
		return
	}
	c.event(podRef(pod), EventDNSConfigForming, "DNS configuration not applied: the %s runtime's containers read the host's /etc/resolv.conf, without %s",
		runtimeType, strings.Join(missed, " and "))
}

func policyName(pod *corev1.Pod) corev1.DNSPolicy {
	if pod.Spec.DNSPolicy == "" {
		return corev1.DNSClusterFirst
	}
	return pod.Spec.DNSPolicy
}

func (c *Configurer) event(ref *corev1.ObjectReference, reason, format string, args ...any) {
	if c.recorder != nil {
		c.recorder.Eventf(ref, corev1.EventTypeWarning, reason, format, args...)
	}
}

func podRef(pod *corev1.Pod) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		ResourceVersion: pod.ResourceVersion}
}

// podDesc names a pod in messages as the kubelet does: name_namespace(uid).
func podDesc(pod *corev1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}
