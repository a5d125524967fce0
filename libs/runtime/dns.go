package runtime

// DNSConfig is a pod's resolver configuration, the lines of its
// containers' /etc/resolv.conf (CRI's DNSConfig): nameservers, search
// paths and options ("ndots:5").
type DNSConfig struct {
	Servers  []string
	Searches []string
	Options  []string
}

// HostDNS is a runtime whose containers read the host's own
// /etc/resolv.conf, whatever the pod's DNS configuration (process: its
// containers share the host's filesystem, with no mount namespace to give
// them another file). It never calls StartOptions.DNS; the pod workers
// tell the pod when its configuration differs from what it gets.
type HostDNS interface {
	HostDNS()
}
