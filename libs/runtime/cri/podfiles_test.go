package cri

import (
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
	got, err := hostsContent(p, "10.89.0.7")
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
	got, _ = hostsContent(p, "10.89.0.7")
	if want := "10.89.0.7\tweb\n"; string(got[len(got)-len(want):]) != want {
		t.Errorf("without a subdomain the last line is %q", got)
	}
}
