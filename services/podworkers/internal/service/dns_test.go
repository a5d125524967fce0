package service

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/testenv"
)

// resolvLines are a resolv.conf's nameserver, search and options lines.
func resolvLines(data string) (servers, search, options []string) {
	for _, line := range strings.Split(data, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			servers = append(servers, f[1])
		case "search":
			search = f[1:]
		case "options":
			options = append(options, f[1:]...)
		}
	}
	return servers, search, options
}

// On containerd, the /etc/resolv.conf inside a container is the one the
// kubelet's DNS configurer makes from the node's keys: the cluster DNS
// server, the cluster's search paths before the host's and ndots:5 for
// ClusterFirst (on the pod network) and ClusterFirstWithHostNet, the
// resolv-conf file for Default; a pod with a subdomain is named in the
// cluster domain in its /etc/hosts.
func TestCRIPodDNS(t *testing.T) {
	e, _ := criEnv(t, "pw-dns-cri")
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 192.0.2.53\nsearch corp.example\noptions timeout:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.startReplica(t, config.RuntimeCRI, func(c *Config) {
		c.RootDir = testenv.DataDir(t)
		c.DNS = config.DNS{ClusterDNS: []net.IP{net.ParseIP("10.96.0.10")}, ClusterDomain: "cluster.test", ResolvConf: resolv}
	})
	out := t.TempDir()
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	pod := func(name string, policy corev1.DNSPolicy, hostNetwork bool) *corev1.Pod {
		return newPod(t, e.cs, name, func(p *corev1.Pod) {
			p.Spec.NodeName = e.node
			p.Spec.DNSPolicy, p.Spec.HostNetwork = policy, hostNetwork
			p.Spec.Hostname, p.Spec.Subdomain = "web", "sub"
			p.Spec.Volumes = []corev1.Volume{{Name: "out", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: filepath.Join(out, name), Type: &dirOrCreate}}}}
			c := &p.Spec.Containers[0]
			c.ImagePullPolicy = corev1.PullIfNotPresent
			c.VolumeMounts = []corev1.VolumeMount{{Name: "out", MountPath: "/out"}}
			c.Command = []string{"sh", "-c", "cat /etc/hosts > /out/hosts.tmp && mv /out/hosts.tmp /out/hosts && " +
				"cat /etc/resolv.conf > /out/resolv.tmp && mv /out/resolv.tmp /out/resolv.conf && sleep 3600"}
		})
	}
	cluster := pod("dns-cluster", corev1.DNSClusterFirst, false)
	hostNet := pod("dns-hostnet", corev1.DNSClusterFirstWithHostNet, true)
	def := pod("dns-default", corev1.DNSDefault, false)
	e.track(cluster, hostNet, def)
	e.send(bus.OpAdd, cluster, hostNet, def)

	read := func(p *corev1.Pod, file string) string {
		data, _ := os.ReadFile(filepath.Join(out, p.Name, file))
		return string(data)
	}
	for _, p := range []*corev1.Pod{cluster, hostNet, def} {
		eventually(t, 2*time.Minute, p.Name+" writing its /etc/resolv.conf", func() bool { return read(p, "resolv.conf") != "" })
	}
	clusterSearch := []string{"default.svc.cluster.test", "svc.cluster.test", "cluster.test", "corp.example"}
	for _, c := range []struct {
		pod                      *corev1.Pod
		servers, search, options []string
	}{
		{cluster, []string{"10.96.0.10"}, clusterSearch, []string{"ndots:5"}},
		{hostNet, []string{"10.96.0.10"}, clusterSearch, []string{"ndots:5"}},
		{def, []string{"192.0.2.53"}, []string{"corp.example"}, []string{"timeout:2"}},
	} {
		got := read(c.pod, "resolv.conf")
		servers, search, options := resolvLines(got)
		if !slices.Equal(servers, c.servers) || !slices.Equal(search, c.search) || !slices.Equal(options, c.options) {
			t.Errorf("%s (%s): /etc/resolv.conf\n%s\nwant nameservers %v, search %v, options %v", c.pod.Name, c.pod.Spec.DNSPolicy, got, c.servers, c.search, c.options)
		}
	}
	if hosts := read(cluster, "hosts"); !strings.Contains(hosts, "\tweb.sub.default.svc.cluster.test\tweb\n") {
		t.Errorf("/etc/hosts of a pod with a subdomain does not name it in the cluster domain:\n%s", hosts)
	}
}

// The process runtime's containers read the host's /etc/resolv.conf: a
// ClusterFirst pod on a node with cluster DNS runs, and is told with a
// Warning Event that its DNS configuration is not applied.
func TestProcessPodDNSNotApplied(t *testing.T) {
	e := newEnv(t, "pw-dns-proc")
	e.startReplica(t, config.RuntimeProcess, func(c *Config) {
		c.DNS = config.DNS{ClusterDNS: []net.IP{net.ParseIP("10.96.0.10")}, ClusterDomain: "cluster.local", ResolvConf: config.DefaultResolvConf}
	})
	p := newPod(t, e.cs, "dns-proc", func(p *corev1.Pod) { p.Spec.NodeName = e.node })
	e.track(p)
	e.send(bus.OpAdd, p)
	eventually(t, time.Minute, "the pod running", func() bool { st, _ := e.get(p.UID); return containerRunning(st) })
	want := `DNS configuration not applied: the process runtime's containers read the host's /etc/resolv.conf, without dnsPolicy "ClusterFirst" with the cluster's nameservers (cluster-dns)`
	eventually(t, 30*time.Second, "the DNSConfigForming Warning", func() bool {
		evs, err := e.cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(p.UID)).String()})
		if err != nil {
			return false
		}
		return slices.ContainsFunc(evs.Items, func(ev corev1.Event) bool {
			return ev.Type == corev1.EventTypeWarning && ev.Reason == "DNSConfigForming" && ev.Message == want
		})
	})
}
