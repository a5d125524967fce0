package dns

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/runtime"
)

// recorder keeps the Events recorded: "<Kind> <type> <reason>: <message>".
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) Event(obj k8sruntime.Object, eventType, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf("%s %s %s: %s", obj.(*corev1.ObjectReference).Kind, eventType, reason, message))
}

func (r *recorder) Eventf(obj k8sruntime.Object, eventType, reason, format string, args ...any) {
	r.Event(obj, eventType, reason, fmt.Sprintf(format, args...))
}

func (r *recorder) AnnotatedEventf(obj k8sruntime.Object, _ map[string]string, eventType, reason, format string, args ...any) {
	r.Eventf(obj, eventType, reason, format, args...)
}

// hostFile is a host resolver file with what the kubelet's parser must
// handle: comments, nameservers adding up, a search line with dots, two
// options lines.
const hostFile = `# the host's
nameserver 192.0.2.1
nameserver 192.0.2.2 # trailing comment
search old.example
search corp.example. lab.example .
options ndots:2 timeout:1
options ndots:3
`

func writeResolv(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func pod(policy corev1.DNSPolicy, hostNetwork bool, d *corev1.PodDNSConfig) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "u1"},
		Spec: corev1.PodSpec{DNSPolicy: policy, HostNetwork: hostNetwork, DNSConfig: d}}
}

func paths(n, length int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%02d%s", i, strings.Repeat("a", length-2))
	}
	return out
}

func ptr(s string) *string { return &s }

var (
	host        = runtime.DNSConfig{Servers: []string{"192.0.2.1", "192.0.2.2"}, Searches: []string{"corp.example", "lab.example"}, Options: []string{"ndots:3", "timeout:1"}}
	clusterSrch = []string{"shop.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example", "lab.example"}
	cluster     = runtime.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: clusterSrch, Options: []string{"ndots:5"}}
	missingMsg  = `kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.`
	missing     = []string{"Node Warning MissingClusterDNS: " + missingMsg, `Pod Warning MissingClusterDNS: pod: "web_shop(u1)". ` + missingMsg}
)

// Each dnsPolicy as the kubelet's DNS configurer computes it, the pod's
// dnsConfig merged in, the limits applied, with the kubelet's Events.
func TestPodDNS(t *testing.T) {
	resolv := writeResolv(t, hostFile)
	dnsIP := []net.IP{net.ParseIP("10.96.0.10")}
	keys := config.DNS{ClusterDNS: dnsIP, ClusterDomain: "cluster.local", ResolvConf: resolv}
	noDNS := config.DNS{ClusterDomain: "cluster.local", ResolvConf: resolv}
	cases := []struct {
		name   string
		keys   config.DNS
		nodeIP string
		pod    *corev1.Pod
		want   runtime.DNSConfig
		events []string
	}{
		{"ClusterFirst", keys, "", pod(corev1.DNSClusterFirst, false, nil), cluster, nil},
		{"no policy is ClusterFirst", keys, "", pod("", false, nil), cluster, nil},
		{"ClusterFirst on the host network is Default", keys, "", pod(corev1.DNSClusterFirst, true, nil), host, nil},
		{"ClusterFirstWithHostNet", keys, "", pod(corev1.DNSClusterFirstWithHostNet, true, nil), cluster, nil},
		{"ClusterFirstWithHostNet off the host network", keys, "", pod(corev1.DNSClusterFirstWithHostNet, false, nil), cluster, nil},
		{"Default", keys, "", pod(corev1.DNSDefault, false, nil), host, nil},
		{"None", keys, "", pod(corev1.DNSNone, false, nil), runtime.DNSConfig{}, nil},
		{"None with dnsConfig", keys, "", pod(corev1.DNSNone, false, &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"a.example"},
			Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr("1")}}}),
			runtime.DNSConfig{Servers: []string{"1.1.1.1"}, Searches: []string{"a.example"}, Options: []string{"ndots:1"}}, nil},
		{"ClusterFirst without cluster-dns falls back to Default", noDNS, "", pod(corev1.DNSClusterFirst, false, nil), host, missing},
		{"ClusterFirstWithHostNet without cluster-dns falls back", noDNS, "", pod(corev1.DNSClusterFirstWithHostNet, true, nil), host, missing},
		{"ClusterFirst without a cluster domain", config.DNS{ClusterDNS: dnsIP, ResolvConf: resolv}, "", pod(corev1.DNSClusterFirst, false, nil),
			runtime.DNSConfig{Servers: []string{"10.96.0.10"}, Searches: host.Searches, Options: []string{"ndots:5"}}, nil},
		{"ClusterFirst merged with dnsConfig", keys, "", pod(corev1.DNSClusterFirst, false, &corev1.PodDNSConfig{
			Nameservers: []string{"1.1.1.1", "10.96.0.10"}, Searches: []string{"cluster.local", "x.example"},
			Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr("2")}, {Name: "edns0"}}}),
			runtime.DNSConfig{Servers: []string{"10.96.0.10", "1.1.1.1"}, Searches: append(slices.Clone(clusterSrch), "x.example"), Options: []string{"ndots:2", "edns0"}}, nil},
		{"Default merged with dnsConfig", keys, "", pod(corev1.DNSDefault, false, &corev1.PodDNSConfig{
			Options: []corev1.PodDNSConfigOption{{Name: "timeout", Value: ptr("5")}, {Name: "rotate"}}}),
			runtime.DNSConfig{Servers: host.Servers, Searches: host.Searches, Options: []string{"ndots:3", "timeout:5", "rotate"}}, nil},
		{"no resolver file", config.DNS{}, "", pod(corev1.DNSDefault, false, nil), runtime.DNSConfig{Servers: []string{"127.0.0.1"}, Searches: []string{"."}}, nil},
		{"no resolver file on an IPv6 node", config.DNS{}, "fd00::1", pod(corev1.DNSDefault, false, nil), runtime.DNSConfig{Servers: []string{"::1"}, Searches: []string{"."}}, nil},
		{"more than 3 nameservers", keys, "", pod(corev1.DNSClusterFirst, false, &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1", "8.8.8.8", "9.9.9.9"}}),
			runtime.DNSConfig{Servers: []string{"10.96.0.10", "1.1.1.1", "8.8.8.8"}, Searches: clusterSrch, Options: []string{"ndots:5"}},
			[]string{"Pod Warning DNSConfigForming: Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 10.96.0.10 1.1.1.1 8.8.8.8"}},
		{"more than 32 search paths", keys, "", pod(corev1.DNSNone, false, &corev1.PodDNSConfig{Searches: paths(40, 4)}),
			runtime.DNSConfig{Searches: paths(32, 4)},
			[]string{"Pod Warning DNSConfigForming: Search Line limits were exceeded, some search paths have been omitted, the applied search line is: " + strings.Join(paths(32, 4), " ")}},
		{"a search path longer than a DNS name", keys, "", pod(corev1.DNSNone, false, &corev1.PodDNSConfig{Searches: []string{"a.example", strings.Repeat("b", 254), "c.example"}}),
			runtime.DNSConfig{Searches: []string{"a.example", "c.example"}},
			[]string{"Pod Warning DNSConfigForming: Search Line limits were exceeded, some search paths have been omitted, the applied search line is: a.example c.example"}},
		{"a search line over 2048 characters", keys, "", pod(corev1.DNSNone, false, &corev1.PodDNSConfig{Searches: paths(10, 250)}),
			runtime.DNSConfig{Searches: paths(8, 250)},
			[]string{"Pod Warning DNSConfigForming: Search Line limits were exceeded, some search paths have been omitted, the applied search line is: " + strings.Join(paths(8, 250), " ")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := &recorder{}
			opts := Options{DNS: c.keys, Node: "n1", Recorder: rec}
			if c.nodeIP != "" {
				opts.NodeIPs = []net.IP{net.ParseIP(c.nodeIP)}
			}
			got, err := New(opts).PodDNS(c.pod)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Servers, c.want.Servers) || !slices.Equal(got.Searches, c.want.Searches) || !slices.Equal(got.Options, c.want.Options) {
				t.Errorf("got %+v\nwant %+v", *got, c.want)
			}
			if !slices.Equal(rec.events, c.events) {
				t.Errorf("events %q\nwant %q", rec.events, c.events)
			}
		})
	}
}

// The host's file is read for every policy, as on a kubelet: a file that
// cannot be read or parsed fails the pod's configuration.
func TestPodDNSHostFileErrors(t *testing.T) {
	for _, c := range []struct {
		name, file, want string
	}{
		{"missing", filepath.Join(t.TempDir(), "none"), "no such file"},
		{"bad", writeResolv(t, "nameserver\n"), "Encountered error while parsing resolv conf file. Error: nameserver list is empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, policy := range []corev1.DNSPolicy{corev1.DNSClusterFirst, corev1.DNSDefault, corev1.DNSNone} {
				_, err := New(Options{DNS: config.DNS{ClusterDNS: []net.IP{net.ParseIP("10.96.0.10")}, ResolvConf: c.file}}).PodDNS(pod(policy, false, nil))
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: error %v, want %q", policy, err, c.want)
				}
			}
		})
	}
}

// At start the host's file is checked against what a pod may have, with
// the kubelet's node Events.
func TestCheckResolvConf(t *testing.T) {
	long := "search " + strings.Repeat("a", 254) + "\n"
	many := "search " + strings.Join(paths(30, 4), " ") + "\n"
	wide := "search " + strings.Join(paths(9, 250), " ") + "\n"
	for _, c := range []struct {
		name, body, domain, want string
	}{
		{"fits", hostFile, "cluster.local", ""},
		{"too many with a cluster domain", many, "cluster.local", "Resolv.conf file '%s' contains search line consisting of more than 29 domains!"},
		{"as many without one", many, "", ""},
		{"a path too long", long, "cluster.local", "Resolv.conf file %q contains a search path which length is more than allowed 253 chars!"},
		{"a line too long", wide, "cluster.local", "Resolv.conf file '%s' contains search line which length is more than allowed 2048 chars!"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := &recorder{}
			file := writeResolv(t, c.body)
			New(Options{DNS: config.DNS{ClusterDomain: c.domain, ResolvConf: file}, Node: "n1", Recorder: rec}).CheckResolvConf()
			var want []string
			if c.want != "" {
				want = []string{"Node Warning CheckLimitsForResolvConf: " + fmt.Sprintf(c.want, file)}
			}
			if !slices.Equal(rec.events, want) {
				t.Errorf("events %q, want %q", rec.events, want)
			}
		})
	}
	rec := &recorder{}
	New(Options{DNS: config.DNS{ResolvConf: "/nonexistent/resolv.conf"}, Recorder: rec}).CheckResolvConf()
	if len(rec.events) != 1 || !strings.Contains(rec.events[0], "CheckLimitsForResolvConf: open /nonexistent/resolv.conf") {
		t.Errorf("a missing file: events %q", rec.events)
	}
}

// A runtime whose containers read the host's /etc/resolv.conf as it is
// gets a pod-visible Warning for what it does not apply, and the kubelet's
// MissingClusterDNS where a kubelet would fall back too; a pod whose
// configuration is the host's file gets nothing.
func TestHostOnly(t *testing.T) {
	ip := []net.IP{net.ParseIP("10.96.0.10")}
	const prefix = "Pod Warning DNSConfigForming: DNS configuration not applied: the process runtime's containers read the host's /etc/resolv.conf, without "
	for _, c := range []struct {
		name string
		keys config.DNS
		pod  *corev1.Pod
		want []string
	}{
		{"Default", config.DNS{ClusterDNS: ip, ResolvConf: "/etc/resolv.conf"}, pod(corev1.DNSDefault, false, nil), nil},
		{"ClusterFirst on the host network", config.DNS{ClusterDNS: ip, ResolvConf: "/etc/resolv.conf"}, pod(corev1.DNSClusterFirst, true, nil), nil},
		{"ClusterFirst", config.DNS{ClusterDNS: ip, ResolvConf: "/etc/resolv.conf"}, pod(corev1.DNSClusterFirst, false, nil),
			[]string{prefix + `dnsPolicy "ClusterFirst" with the cluster's nameservers (cluster-dns)`}},
		{"ClusterFirst without cluster-dns", config.DNS{ResolvConf: "/etc/resolv.conf"}, pod(corev1.DNSClusterFirst, false, nil), missing},
		{"None with dnsConfig", config.DNS{ResolvConf: "/etc/resolv.conf"}, pod(corev1.DNSNone, false, &corev1.PodDNSConfig{}),
			[]string{prefix + `dnsPolicy "None" and the pod's dnsConfig`}},
		{"another resolv-conf", config.DNS{ResolvConf: "/run/resolv.conf"}, pod(corev1.DNSDefault, false, nil),
			[]string{prefix + `resolv-conf "/run/resolv.conf"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := &recorder{}
			New(Options{DNS: c.keys, Node: "n1", Recorder: rec}).HostOnly(c.pod, "process")
			if !slices.Equal(rec.events, c.want) {
				t.Errorf("events %q\nwant %q", rec.events, c.want)
			}
		})
	}
}
