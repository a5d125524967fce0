package cri

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod-network pod's /etc/hosts is the kubelet's: localhost entries, its
// IP with its FQDN when it has a subdomain, then its host aliases.
func TestHostsContent(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, Spec: corev1.PodSpec{
		Hostname: "h", Subdomain: "sub",
		HostAliases: []corev1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"foo", "bar"}}},
	}}
	got, err := hostsContent(p, "10.89.0.7", "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n" +
		"10.89.0.7\th.sub.ns.svc.cluster.local\th\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo\tbar\n"
	if string(got) != want {
		t.Errorf("hosts file:\n%s\nwant:\n%s", got, want)
	}
	p.Spec.Hostname, p.Spec.Subdomain, p.Spec.HostAliases = "", "", nil
	got, _ = hostsContent(p, "10.89.0.7", "cluster.local")
	if want := "10.89.0.7\tweb\n"; string(got[len(got)-len(want):]) != want {
		t.Errorf("without a subdomain the last line is %q", got)
	}
}

// The pod's own line follows the kubelet: the FQDN in the node's cluster
// domain, the host name cut to 63 characters without a trailing '-' or
// '.', and a hostnameOverride alone, without a domain.
func TestHostsContentPodLine(t *testing.T) {
	long := strings.Repeat("a", 62) + "-b"
	override := "custom.name"
	cases := []struct {
		name   string
		spec   corev1.PodSpec
		domain string
		want   string
	}{
		{"the node's domain", corev1.PodSpec{Hostname: "h", Subdomain: "sub"}, "corp.example", "10.89.0.7\th.sub.ns.svc.corp.example\th\n"},
		{"no domain", corev1.PodSpec{Hostname: "h", Subdomain: "sub"}, "", "10.89.0.7\th.sub.ns.svc.\th\n"},
		{"long hostname", corev1.PodSpec{Hostname: long}, "cluster.local", "10.89.0.7\t" + strings.Repeat("a", 62) + "\n"},
		{"override", corev1.PodSpec{Hostname: "h", Subdomain: "sub", HostnameOverride: &override}, "cluster.local", "10.89.0.7\tcustom.name\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, Spec: c.spec}
			got, err := hostsContent(p, "10.89.0.7", c.domain)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(string(got), "fe00::2\tip6-allrouters\n"+c.want) {
				t.Errorf("hosts file:\n%s\nwant it to end with %q", got, c.want)
			}
		})
	}
}

// A host-network pod gets the node's file under the kubelet's header, and
// its hostAliases after it.
func TestHostsContentHostNetwork(t *testing.T) {
	node := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(node, []byte("127.0.0.1\tlocalhost\n10.0.0.1\tnode1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := hostsFile
	hostsFile = node
	t.Cleanup(func() { hostsFile = old })
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, Spec: corev1.PodSpec{HostNetwork: true,
		HostAliases: []corev1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"foo"}}}}}
	got, err := hostsContent(p, "10.0.0.1", "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n10.0.0.1\tnode1\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo\n"
	if string(got) != want {
		t.Errorf("hosts file:\n%s\nwant:\n%s", got, want)
	}
}
