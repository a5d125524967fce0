package cri

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/splitlet/splitlet/libs/runtime"
)

// The sandbox's host name is the one its /etc/hosts names (kubelet:
// GeneratePodHostNameAndDomain): cut to 63 characters without a trailing
// '-', the override when there is one; a host-network pod has the node's.
func TestSandboxHostname(t *testing.T) {
	r := &Runtime{}
	long := strings.Repeat("a", 62) + "-b"
	override := "custom.name"
	for _, c := range []struct {
		spec corev1.PodSpec
		want string
	}{
		{corev1.PodSpec{}, "web"},
		{corev1.PodSpec{Hostname: "h", Subdomain: "sub"}, "h"},
		{corev1.PodSpec{Hostname: long}, strings.Repeat("a", 62)},
		{corev1.PodSpec{Hostname: "h", HostnameOverride: &override}, "custom.name"},
		{corev1.PodSpec{Hostname: "h", HostNetwork: true}, ""},
		// setHostnameAsFQDN: the FQDN, with a subdomain only.
		{corev1.PodSpec{Hostname: "h", Subdomain: "sub", SetHostnameAsFQDN: ptr.To(true)}, "h.sub.ns.svc.cluster.local"},
		{corev1.PodSpec{Hostname: "h", SetHostnameAsFQDN: ptr.To(true)}, "h"},
		{corev1.PodSpec{Hostname: "h", Subdomain: "sub", SetHostnameAsFQDN: ptr.To(false)}, "h"},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, Spec: c.spec}
		if got := r.sandboxConfig(p, 0).Hostname; got != c.want {
			t.Errorf("hostname %q, hostNetwork %v: sandbox hostname %q, want %q", c.spec.Hostname, c.spec.HostNetwork, got, c.want)
		}
	}
}

// setHostnameAsFQDN with an FQDN longer than the kernel's 64 characters
// is refused with the kubelet's message; 64 are taken.
func TestKernelHostnameFQDNLimit(t *testing.T) {
	// <host>.t.ns.svc.cluster.local: 23 characters after the host.
	for _, c := range []struct {
		host string
		ok   bool
	}{{strings.Repeat("a", 41), true}, {strings.Repeat("a", 42), false}} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
			Spec: corev1.PodSpec{Hostname: c.host, Subdomain: "t", SetHostnameAsFQDN: ptr.To(true)}}
		got, err := kernelHostname(p, "cluster.local")
		fqdn := c.host + ".t.ns.svc.cluster.local"
		switch {
		case c.ok && (err != nil || got != fqdn):
			t.Errorf("%d characters: %q, %v", len(fqdn), got, err)
		case !c.ok && (err == nil || err.Error() != "failed to construct FQDN from pod hostname and cluster domain, FQDN "+fqdn+" is too long (64 characters is the max, 65 characters requested)"):
			t.Errorf("%d characters: %q, %v", len(fqdn), got, err)
		}
	}
}

// A new sandbox's DNS configuration is what the pod workers computed; an
// error computing it fails the sandbox; without the pod workers' function
// it is the pod's own dnsConfig, or none (the host's file).
func TestSandboxDNS(t *testing.T) {
	ndots := "2"
	p := &corev1.Pod{Spec: corev1.PodSpec{DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"a.example"},
		Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: &ndots}, {Name: "edns0"}}}}}
	computed := func() (*runtime.DNSConfig, error) {
		return &runtime.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: []string{"ns.svc.cluster.local"}, Options: []string{"ndots:5"}}, nil
	}
	got, err := sandboxDNS(p, computed)
	if err != nil || !slices.Equal(got.Servers, []string{"10.96.0.10"}) || !slices.Equal(got.Searches, []string{"ns.svc.cluster.local"}) ||
		!slices.Equal(got.Options, []string{"ndots:5"}) {
		t.Errorf("computed: %+v, %v", got, err)
	}
	boom := errors.New("open /etc/resolv.conf: no such file or directory")
	if _, err := sandboxDNS(p, func() (*runtime.DNSConfig, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("an error computing it: %v", err)
	}
	got, err = sandboxDNS(p, nil)
	if err != nil || !slices.Equal(got.Servers, []string{"1.1.1.1"}) || !slices.Equal(got.Options, []string{"ndots:2", "edns0"}) {
		t.Errorf("the pod's own: %+v, %v", got, err)
	}
	if got, err := sandboxDNS(&corev1.Pod{}, nil); got != nil || err != nil {
		t.Errorf("none: %+v, %v", got, err)
	}
}

// The sandbox maps the ports of the regular containers (kubelet:
// MakePortMappings): protocol TCP unless set, the host IP as given, a port
// named twice in one container once; an init container's ports are not
// mapped.
func TestSandboxPortMappings(t *testing.T) {
	r := &Runtime{}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Ports: []corev1.ContainerPort{{ContainerPort: 1, HostPort: 1}}}},
			Containers: []corev1.Container{{Name: "a", Ports: []corev1.ContainerPort{
				{Name: "http", ContainerPort: 80, HostPort: 8080, HostIP: "127.0.0.1"},
				{Name: "http", ContainerPort: 81, HostPort: 8081},
				{ContainerPort: 53, HostPort: 5353, Protocol: corev1.ProtocolUDP},
				{ContainerPort: 53, HostPort: 5353, Protocol: corev1.ProtocolUDP},
				{ContainerPort: 9000},
			}}, {Name: "b", Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8082, Protocol: corev1.ProtocolSCTP, HostIP: "::1"}}}},
		},
	}
	var got []string
	for _, m := range r.sandboxConfig(p, 0).PortMappings {
		got = append(got, fmt.Sprintf("%s %s:%d->%d", m.Protocol, m.HostIp, m.HostPort, m.ContainerPort))
	}
	want := []string{"TCP 127.0.0.1:8080->80", "UDP :5353->53", "TCP :0->9000", "SCTP ::1:8082->80"}
	if !slices.Equal(got, want) {
		t.Errorf("port mappings %q, want %q", got, want)
	}
	if m := r.sandboxConfig(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a"}}}}, 0).PortMappings; m != nil {
		t.Errorf("a pod without ports: mappings %v, want none", m)
	}
}

// A port-forward to a pod without a ready sandbox is refused with the
// kubelet's message, before the runtime is asked.
func TestPortForwardWithoutSandbox(t *testing.T) {
	r := &Runtime{}
	if _, err := r.PortForwardURL(t.Context(), "uid-1", []int32{80}); err == nil || err.Error() != "failed to find sandboxID for pod _(uid-1)" {
		t.Errorf("port-forward without a sandbox: %v", err)
	}
}
