package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// checkIdentities: every stage container mounts its own identity directory
// and no other; the node joined with the bootstrap token, as a kubelet
// does: its client certificate came from a CSR of a bootstrap token's
// user, approved and signed by kube-controller-manager, and names
// system:node:<name> in system:nodes; nodehb, podconfig, podworkers and
// statussync run with it (their identity directories hold no kubeconfig of
// their own, only nodehb's the bootstrap kubeconfig), the prober as its
// role.
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
		if stage == bus.StageProber {
			if got := whoAmI(t, filepath.Join(ids, stage, "kubeconfig")); got != "splitlet:prober" {
				t.Errorf("%s runs as %q, want splitlet:prober", stage, got)
			}
			continue
		}
		if _, err := os.Stat(filepath.Join(ids, stage, "kubeconfig")); err == nil {
			t.Errorf("%s has a kubeconfig of its own: it runs with the node's certificate", stage)
		}
		_, err := os.Stat(filepath.Join(ids, stage, "bootstrap-kubeconfig"))
		if (err == nil) != (stage == bus.StageNodehb) {
			t.Errorf("%s: bootstrap kubeconfig there: %v; want it for nodehb alone", stage, err == nil)
		}
	}
	user, groups := s.nodeIdentity(t)
	if user != "system:node:"+nodeName || !slices.Contains(groups, "system:nodes") || slices.Contains(groups, "system:masters") {
		t.Errorf("the node's certificate is %q in %v, want system:node:%s in system:nodes", user, groups, nodeName)
	}
	s.checkNodeCSR(t)
}

// nodeIdentity is who the API server sees behind the node's kubeconfig,
// which nodehb wrote in the node's directory (its paths are the
// containers', /node/...).
func (s *stack) nodeIdentity(t *testing.T) (string, []string) {
	t.Helper()
	dir := filepath.Join(s.env["SPLITLET_STATE_DIR"], "node")
	data, err := os.ReadFile(filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatalf("the node's kubeconfig: %v", err)
	}
	hostPaths := filepath.Join(t.TempDir(), "kubeconfig")
	data = bytes.ReplaceAll(data, []byte(" /node/pki/kubelet-client-current.pem"), []byte(" "+s.nodePair(t)))
	if err := os.WriteFile(hostPaths, bytes.ReplaceAll(data, []byte(" /node/"), []byte(" "+dir+"/")), 0o600); err != nil {
		t.Fatal(err)
	}
	user, groups, err := testenv.WhoAmI(t.Context(), hostPaths)
	if err != nil {
		t.Fatalf("the node's kubeconfig: %v", err)
	}
	return user, groups
}

// nodePair is the host's path of the node's current client certificate
// and key (one file): kubelet-client-current.pem links to the newest pair
// by its path in the containers, /node/pki/....
func (s *stack) nodePair(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(s.env["SPLITLET_STATE_DIR"], "node")
	current := filepath.Join(dir, "pki", "kubelet-client-current.pem")
	target, err := os.Readlink(current)
	if err != nil {
		return current
	}
	if rest, ok := strings.CutPrefix(target, "/node/"); ok {
		return filepath.Join(dir, rest)
	}
	if !filepath.IsAbs(target) {
		return filepath.Join(dir, "pki", target)
	}
	return target
}

// checkNodeCSR: the node's client certificate was asked for by a
// bootstrap token's user (system:bootstrap:<id>), for system:node:<name>,
// and approved and issued.
func (s *stack) checkNodeCSR(t *testing.T) {
	t.Helper()
	csrs, err := s.cs.CertificatesV1().CertificateSigningRequests().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range csrs.Items {
		if c.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || !strings.HasPrefix(c.Spec.Username, "system:bootstrap:") ||
			len(c.Status.Certificate) == 0 {
			continue
		}
		block, _ := pem.Decode(c.Status.Certificate)
		if block == nil {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err == nil && cert.Subject.CommonName == "system:node:"+nodeName {
			t.Logf("the node's certificate: CSR %s of %s, %v", c.Name, c.Spec.Username, cert.Subject)
			return
		}
	}
	t.Errorf("no issued kube-apiserver-client-kubelet CSR of a bootstrap token for system:node:%s among %d CSRs", nodeName, len(csrs.Items))
}

// checkClosedDoors: etcd answers neither plain HTTP nor TLS without a
// client certificate, nor a client certificate of the cluster's CA (the
// node's identity), on its client or peer port; the credentials the stack
// wrote on the host are 0600, in directories 0700.
func (s *stack) checkClosedDoors(t *testing.T) {
	t.Helper()
	state := s.env["SPLITLET_STATE_DIR"]
	pair, err := os.ReadFile(s.nodePair(t))
	if err != nil {
		t.Fatal(err)
	}
	nodeCert, err := tls.X509KeyPair(pair, pair)
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
		filepath.Join(state, "nats"): 0o700, filepath.Join(state, "nats", "server.key"): 0o600,
		filepath.Join(state, "node"): 0o700, filepath.Join(state, "node", "kubeconfig"): 0o600,
		filepath.Join(state, "identities", bus.StageProber, "kubeconfig"):           0o600,
		filepath.Join(state, "identities", bus.StageNodehb, "bootstrap-kubeconfig"): 0o600,
		filepath.Join(state, "identities", "node", "bootstrap-kubeconfig"):          0o600}
	for _, id := range append(bus.Identities(), "node") {
		modes[filepath.Join(state, "identities", id)] = 0o700
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
