package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// checkIdentities: every stage container mounts its own identity directory
// and no other, and the API server sees nodehb, podconfig and statussync as
// the node and podworkers and prober as their roles.
func (s *stack) checkIdentities(t *testing.T) {
	t.Helper()
	ids := filepath.Join(s.env["SPLITLET_STATE_DIR"], "identities")
	for _, stage := range bus.Stages {
		for _, id := range s.containers(t, stage) {
			out, err := exec.Command("docker", "inspect", "--format", "{{range .Mounts}}{{.Source}}\n{{end}}", id).Output()
			if err != nil {
				t.Fatalf("docker inspect %s: %v", stage, err)
			}
			for _, src := range strings.Fields(string(out)) {
				if strings.HasPrefix(src, ids) && src != filepath.Join(ids, stage) {
					t.Errorf("%s mounts %s, not only its own identity", stage, src)
				}
			}
			if !strings.Contains(string(out), filepath.Join(ids, stage)) {
				t.Errorf("%s does not mount its identity: %s", stage, out)
			}
		}
		want := "splitlet:" + stage
		if stage == bus.StageNodehb || stage == bus.StagePodconfig || stage == bus.StageStatussync || stage == bus.StagePodworkers {
			want = "system:node:" + nodeName
		}
		if got := whoAmI(t, filepath.Join(ids, stage, "kubeconfig")); got != want {
			t.Errorf("%s runs as %q, want %q", stage, got, want)
		}
	}
}

// checkClosedDoors: etcd answers neither plain HTTP nor TLS without a
// client certificate, nor a client certificate of the cluster's CA (the
// node's identity), on its client or peer port; the credentials the stack
// wrote on the host are 0600, in directories 0700.
func (s *stack) checkClosedDoors(t *testing.T) {
	t.Helper()
	state := s.env["SPLITLET_STATE_DIR"]
	node, err := clientcmd.BuildConfigFromFlags("", filepath.Join(state, "identities", "node", "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	nodeCert, err := tls.X509KeyPair(node.CertData, node.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	get := func(url string, c *tls.Config) error {
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: c}, Timeout: 5 * time.Second}
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for _, port := range []int{12379, 12380} {
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if get("http://"+addr+"/health", nil) == nil {
			t.Errorf("plain HTTP reaches etcd on %s", addr)
		}
		// (the server's certificate is not what is checked here: etcd's CA
		// stays in the control plane's volume)
		if get("https://"+addr+"/health", &tls.Config{InsecureSkipVerify: true}) == nil {
			t.Errorf("TLS without a client certificate reaches etcd on %s", addr)
		}
		if get("https://"+addr+"/health", &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{nodeCert}}) == nil {
			t.Errorf("the node's client certificate (the cluster's CA) reaches etcd on %s", addr)
		}
	}
	modes := map[string]os.FileMode{state: 0o700, s.kubeconfig: 0o600, filepath.Join(state, "identities"): 0o700,
		filepath.Join(state, "nats"): 0o700, filepath.Join(state, "nats", "server.key"): 0o600}
	for _, id := range append(bus.Identities(), "node") {
		modes[filepath.Join(state, "identities", id)] = 0o700
		if id != bus.AdminIdentity {
			modes[filepath.Join(state, "identities", id, "kubeconfig")] = 0o600
		}
	}
	for path, want := range modes {
		fi, err := os.Stat(path)
		if err != nil {
			t.Error(err)
			continue
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %#o, want %#o", path, fi.Mode().Perm(), want)
		}
	}
}

// whoAmI is the user the API server sees behind a kubeconfig.
func whoAmI(t *testing.T, kubeconfig string) string {
	t.Helper()
	user, _, err := testenv.WhoAmI(context.Background(), kubeconfig)
	if err != nil {
		t.Fatalf("%s: %v", kubeconfig, err)
	}
	return user
}

// restartAPIServer restarts the kube-apiserver container: the clients made
// before (the test's admin kubeconfig, the stages') are served again.
func (s *stack) restartAPIServer(t *testing.T) {
	t.Helper()
	ids := s.containers(t, "apiserver")
	if len(ids) != 1 {
		t.Fatalf("apiserver containers: %v", ids)
	}
	if out, err := exec.Command("docker", "restart", ids[0]).CombinedOutput(); err != nil {
		t.Fatalf("docker restart apiserver: %v: %s", err, out)
	}
	testenv.Eventually(t, 2*time.Minute, "kube-apiserver back, with the credentials of before", func() (bool, string) {
		err := s.cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(context.Background()).Error()
		return err == nil, fmt.Sprint(err)
	})
	s.waitNodeReady(t)
}
