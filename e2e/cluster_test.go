package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/testenv"
)

// clusterNetLock is the host's cluster network lock, which the
// cluster-network container holds (a bind mount of the file).
const clusterNetLock = "/tmp/splitlet-clusternet.lock"

// TestComposeCRICluster: the CRI stack with the cluster network
// (compose.cluster.yaml: CoreDNS, kube-proxy, the endpointslice
// controllers), its pods on a containerd of the test's own whose network
// is the one `criimages --serve --services-cni` gives. README.md's
// "Cluster DNS and Services" lines run as written: the client pod reaches
// the web pod through the Service's name (CoreDNS answers the search path,
// kube-proxy rewrites the ClusterIP) and CoreDNS at 10.0.0.10 names the
// Service's ClusterIP.
func TestComposeCRICluster(t *testing.T) {
	ctx := t.Context()
	f, err := os.OpenFile(clusterNetLock, os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	cd, err := testenv.EnsureContainerd(ctx, testenv.ContainerdOptions{
		Address:   filepath.Join(t.TempDir(), "none.sock"),
		CNIConfig: testenv.ServicesCNIConfig(testenv.StackClusterNetwork, testenv.StackClusterBridge, testenv.StackClusterSubnet),
	})
	if err != nil {
		t.Fatalf("the cluster network needs a containerd of its own: %v", err)
	}
	t.Cleanup(cd.Stop)
	s := upStack(t, map[string]string{testenv.ContainerdAddressEnv: cd.Address}, "compose.yaml", "compose.cri.yaml", "compose.cluster.yaml")
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = testenv.RemoveAllSandboxes(cctx, cd.Endpoint, "/var/log/pods")
	})
	s.waitNodeReady(t)
	for _, line := range readmeKubectlLines(t, "### Cluster DNS and Services") {
		var want *regexp.Regexp
		once, within := false, 90*time.Second
		switch {
		case strings.HasPrefix(line, "kubectl run web"):
			want, once = regexp.MustCompile(`pod/web created`), true
		case strings.HasPrefix(line, "kubectl expose pod web"):
			want, once = regexp.MustCompile(`service/web exposed`), true
		case strings.HasPrefix(line, "kubectl run client"):
			want, once = regexp.MustCompile(`pod/client created`), true
		case strings.HasPrefix(line, "kubectl logs client"):
			want, within = regexp.MustCompile(`(?s)hello from web.*Server:\s+10\.0\.0\.10.*Name:\s+web\.default\.svc\.cluster\.local\s+Address:\s+10\.0\.0\.\d+`), 3*time.Minute
		case strings.HasPrefix(line, "kubectl delete pod web client"):
			want = regexp.MustCompile(`pod "client" deleted`)
		case strings.HasPrefix(line, "kubectl delete service web"):
			want = regexp.MustCompile(`service "web" deleted`)
		default:
			t.Fatalf("README cluster line %q is not walked by this test: add it", line)
		}
		out := runReadmeLine(t, s, line, want, once, within)
		if strings.HasPrefix(line, "kubectl logs client") {
			svc, err := s.cs.CoreV1().Services(namespace).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(`Address:\s+` + regexp.QuoteMeta(svc.Spec.ClusterIP) + `\s`).MatchString(out + "\n") {
				t.Errorf("CoreDNS named another address than web's ClusterIP %s:\n%s", svc.Spec.ClusterIP, out)
			}
		}
	}
}
