package service

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/testenv"
)

// TestConfigzThroughAPIServer: /configz answers the node's real settings
// as a KubeletConfiguration, through the API server's node proxy (as the
// e2e framework reads it); a user without nodes/proxy is refused by the API
// server, and one without nodes/configz and nodes/proxy by nodehb itself.
func TestConfigzThroughAPIServer(t *testing.T) {
	testenv.SkipShort(t, "etcd and kube-apiserver")
	addr := globalLoopbackAddress(t)
	s := startStack(t, "configz-node", "--nodehb.address="+addr, "--nodehb.node-status-report-frequency=3m",
		"--nodehb.lease-duration=25s", "--nodehb.eviction-hard=memory.available<200Mi", "--nodehb.kube-reserved=cpu=100m",
		"--cluster-dns=10.96.0.10", "--cluster-domain=corp.example", "--cgroup-root=/configz-test", "--pod-pids-limit=4096")
	var raw []byte
	eventually(t, 20*time.Second, "/configz through the API server's node proxy", func() error {
		var err error
		raw, err = s.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", s.node, "proxy", "configz").DoRaw(t.Context())
		if err != nil {
			return fmt.Errorf("%w: %s", err, raw)
		}
		return nil
	})
	var got struct {
		KC kubeletv1beta1.KubeletConfiguration `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	kc := got.KC
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"kind", kc.Kind, "KubeletConfiguration"},
		{"apiVersion", kc.APIVersion, "kubelet.config.k8s.io/v1beta1"},
		{"port", kc.Port, int32(s.port)},
		{"address", kc.Address, addr},
		{"readOnlyPort", kc.ReadOnlyPort, int32(0)},
		{"authorization.mode", kc.Authorization.Mode, kubeletv1beta1.KubeletAuthorizationModeWebhook},
		{"authentication.webhook.enabled", fmt.Sprint(kc.Authentication.Webhook.Enabled != nil && *kc.Authentication.Webhook.Enabled), "true"},
		{"authentication.x509.clientCAFile", kc.Authentication.X509.ClientCAFile, cp.CAFile},
		{"nodeStatusUpdateFrequency", kc.NodeStatusUpdateFrequency.Duration, 200 * time.Millisecond},
		{"nodeStatusReportFrequency", kc.NodeStatusReportFrequency.Duration, 3 * time.Minute},
		{"nodeLeaseDurationSeconds", kc.NodeLeaseDurationSeconds, int32(25)},
		{"cgroupsPerQOS", fmt.Sprint(kc.CgroupsPerQOS != nil && *kc.CgroupsPerQOS), "true"},
		{"cgroupDriver", kc.CgroupDriver, "cgroupfs"},
		{"cgroupRoot", kc.CgroupRoot, "/configz-test"},
		{"podPidsLimit", fmt.Sprint(kc.PodPidsLimit != nil && *kc.PodPidsLimit == 4096), "true"},
		{"enforceNodeAllocatable", fmt.Sprint(kc.EnforceNodeAllocatable), "[pods]"},
		{"maxPods", kc.MaxPods, int32((&config.Common{Runtime: config.RuntimeSim}).PodCapacity())},
		{"evictionHard", fmt.Sprint(kc.EvictionHard), "map[memory.available:200Mi]"},
		{"kubeReserved", fmt.Sprint(kc.KubeReserved), "map[cpu:100m]"},
		{"clusterDNS", fmt.Sprint(kc.ClusterDNS), "[10.96.0.10]"},
		{"clusterDomain", kc.ClusterDomain, "corp.example"},
		{"resolvConf", fmt.Sprint(kc.ResolverConfig != nil && *kc.ResolverConfig == "/etc/resolv.conf"), "true"},
		{"staticPodPath (podconfig announced none here)", kc.StaticPodPath, ""},
	} {
		if fmt.Sprint(c.got) != fmt.Sprint(c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}

	// podconfig's static pod path, once it announces it, as the kubelet's
	// staticPodPath (the node suite writes its static pods there).
	if err := s.podconfig.Publish(t.Context(), bus.For(s.node).StaticPods(), bus.KindStaticPods, "", &bus.StaticPods{Path: "/etc/splitlet/manifests"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "/configz states podconfig's static pod path", func() error {
		raw, err := s.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", s.node, "proxy", "configz").DoRaw(t.Context())
		if err != nil {
			return err
		}
		got.KC = kubeletv1beta1.KubeletConfiguration{}
		if err := json.Unmarshal(raw, &got); err != nil || got.KC.StaticPodPath != "/etc/splitlet/manifests" {
			return fmt.Errorf("staticPodPath %q (%v)", got.KC.StaticPodPath, err)
		}
		return nil
	})

	nobody, err := kubernetes.NewForConfig(cp.ConfigFor(testenv.NobodyUser))
	if err != nil {
		t.Fatal(err)
	}
	_, err = nobody.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", s.node, "proxy", "configz").DoRaw(t.Context())
	if !apierrors.IsForbidden(err) {
		t.Errorf("nobody through the node proxy: %v, want forbidden", err)
	}
	base := "https://" + net.JoinHostPort(addr, fmt.Sprint(s.port))
	if code, body := get(t, apiClient(t, nil), base+"/configz", cp.Tokens[testenv.NobodyUser]); code != http.StatusForbidden {
		t.Errorf("nobody /configz on the kubelet API: %d %s, want 403", code, body)
	}
}

// globalLoopbackAddress puts a random unique local IPv6 address on the
// loopback interface for the test: the API server proxies to a node only
// at a global unicast address (never 127.0.0.1), and traffic to an address
// of lo stays on the host. Needs root.
func globalLoopbackAddress(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the node proxy needs a global unicast address on lo, which only root can add")
	}
	b := make([]byte, 7)
	_, _ = rand.Read(b)
	ip := net.IP(append([]byte{0xfd}, append(b, 0, 0, 0, 0, 0, 0, 0, 1)...)).String()
	if out, err := exec.Command("ip", "-6", "addr", "add", ip+"/128", "dev", "lo", "nodad").CombinedOutput(); err != nil {
		t.Fatalf("ip addr add %s dev lo: %v: %s", ip, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "-6", "addr", "del", ip+"/128", "dev", "lo").CombinedOutput(); err != nil {
			t.Errorf("ip addr del %s dev lo: %v: %s", ip, err, out)
		}
	})
	return ip
}
