package cri

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/runtime"
)

// defaultClusterDomain is the cluster domain of pods' FQDNs unless
// WithClusterDomain says otherwise.
const defaultClusterDomain = "cluster.local"

// maxHostname is the longest host name the kernel takes.
const maxHostname = 63

// maxFQDN is the longest FQDN a pod may have as its host name (kubelet:
// GetNodenameForKernel; the kernel's nodename field, 64 characters and the
// terminating NUL).
const maxFQDN = 64

// WithClusterDomain sets the cluster's DNS domain, of the FQDN of a pod
// with a subdomain in its /etc/hosts (default cluster.local; empty: none,
// as a kubelet without a clusterDomain writes it).
func WithClusterDomain(domain string) Option {
	return func(o *options) { o.clusterDomain = &domain }
}

// domain is the cluster domain WithClusterDomain set, or the default.
func (o *options) domain() string {
	if o.clusterDomain == nil {
		return defaultClusterDomain
	}
	return *o.clusterDomain
}

// podHostname is the pod's host name and domain (kubelet:
// GeneratePodHostNameAndDomain): its hostnameOverride, else spec.hostname
// or its name, cut to 63 characters without a trailing '-' or '.'; the
// domain, with a subdomain (and no override), is
// <subdomain>.<namespace>.svc.<cluster domain>.
func podHostname(p *corev1.Pod, clusterDomain string) (host, domain string) {
	if o := p.Spec.HostnameOverride; o != nil {
		return truncateHostname(*o), ""
	}
	host = p.Name
	if p.Spec.Hostname != "" {
		host = p.Spec.Hostname
	}
	if p.Spec.Subdomain != "" {
		domain = fmt.Sprintf("%s.%s.svc.%s", p.Spec.Subdomain, p.Namespace, clusterDomain)
	}
	return truncateHostname(host), domain
}

// kernelHostname is the host name of the pod's UTS namespace (kubelet:
// GetNodenameForKernel): with setHostnameAsFQDN and a domain, the FQDN
// <host>.<domain>, refused when longer than the kernel takes (the
// kubelet's message, which its FailedCreatePodSandBox Event carries);
// otherwise the host name.
func kernelHostname(p *corev1.Pod, clusterDomain string) (string, error) {
	host, domain := podHostname(p, clusterDomain)
	if domain == "" || p.Spec.SetHostnameAsFQDN == nil || !*p.Spec.SetHostnameAsFQDN {
		return host, nil
	}
	fqdn := host + "." + domain
	if len(fqdn) > maxFQDN {
		return "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (%d characters is the max, %d characters requested)", fqdn, maxFQDN, len(fqdn))
	}
	return fqdn, nil
}

func truncateHostname(h string) string {
	if len(h) <= maxHostname {
		return h
	}
	return strings.TrimRight(h[:maxHostname], "-.")
}

// portMappings are the sandbox's host port mappings (kubelet:
// generatePodSandboxConfig with MakePortMappings): one per port of a
// regular container, hostPort 0 included (the runtime maps none for it);
// a port whose name, or without one whose address family, protocol, host
// IP and ports, repeats within its container is given once. The runtime's
// CNI chain makes them (the portmap plugin); the node's conflicts were
// refused at admission.
func portMappings(p *corev1.Pod) []*runtimeapi.PortMapping {
	var out []*runtimeapi.PortMapping
	for _, c := range p.Spec.Containers {
		seen := make(map[string]bool, len(c.Ports))
		for _, port := range c.Ports {
			key := port.Name
			if key == "" {
				key = fmt.Sprintf("%s-%s-%s:%d:%d", ipFamily(port.HostIP), port.Protocol, port.HostIP, port.ContainerPort, port.HostPort)
			}
			if seen[key] {
				continue
			}
			seen[key] = true
			out = append(out, &runtimeapi.PortMapping{
				Protocol:      runtimeProtocol(port.Protocol),
				ContainerPort: port.ContainerPort,
				HostPort:      port.HostPort,
				HostIp:        port.HostIP,
			})
		}
	}
	return out
}

// ipFamily is the address family a port's host IP names: any without one.
func ipFamily(hostIP string) string {
	switch {
	case hostIP == "":
		return "any"
	case strings.Contains(hostIP, ":"):
		return "v6"
	}
	return "v4"
}

// runtimeProtocol is the CRI protocol of a port's; TCP when unset or unknown.
func runtimeProtocol(p corev1.Protocol) runtimeapi.Protocol {
	switch p {
	case corev1.ProtocolUDP:
		return runtimeapi.Protocol_UDP
	case corev1.ProtocolSCTP:
		return runtimeapi.Protocol_SCTP
	}
	return runtimeapi.Protocol_TCP
}

// sandboxDNS is the sandbox's resolver configuration: what the pod
// workers' DNS configurer computes for the pod, or without one the pod's
// own dnsConfig (nil: the CRI runtime gives the host's resolv.conf).
func sandboxDNS(p *corev1.Pod, dns func() (*runtime.DNSConfig, error)) (*runtimeapi.DNSConfig, error) {
	if dns != nil {
		d, err := dns()
		if err != nil || d == nil {
			return nil, err
		}
		return &runtimeapi.DNSConfig{Servers: d.Servers, Searches: d.Searches, Options: d.Options}, nil
	}
	d := p.Spec.DNSConfig
	if d == nil {
		return nil, nil
	}
	out := &runtimeapi.DNSConfig{Servers: d.Nameservers, Searches: d.Searches}
	for _, o := range d.Options {
		opt := o.Name
		if o.Value != nil {
			opt += ":" + *o.Value
		}
		out.Options = append(out.Options, opt)
	}
	return out, nil
}
