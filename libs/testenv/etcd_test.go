package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// etcdListenURL is the URL etcd was told to listen on with flag (the
// client's or the peer's), from its command line.
func etcdListenURL(t *testing.T, cp *ControlPlane, flag string) *url.URL {
	t.Helper()
	for _, a := range cp.etcd.cmd.Args {
		if v, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
			u, err := url.Parse(v)
			if err != nil {
				t.Fatal(err)
			}
			return u
		}
	}
	t.Fatalf("etcd has no --%s: %q", flag, cp.etcd.cmd.Args)
	return nil
}

// reaches tells whether a GET of the URL gets any HTTP answer.
func reaches(u string, tlsConfig *tls.Config) bool {
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}, Timeout: 5 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// TestEtcdTakesOnlyItsClientCertificates: the control plane's etcd answers
// neither plain HTTP nor TLS without a client certificate, nor a client
// certificate of the cluster's CA (the stages' identities), on its client
// URL or its peer URL; its own client certificate gets /health, and
// kube-apiserver works through it. The control plane's directory (keys,
// tokens) is 0700, the etcd certificates' too, and its kubeconfig 0600.
func TestEtcdTakesOnlyItsClientCertificates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cp")
	cp := ControlPlaneForTest(t, ControlPlaneOptions{Dir: dir})
	wantMode(t, dir, 0o700)
	wantMode(t, filepath.Join(dir, "etcd-pki"), 0o700)
	wantMode(t, cp.Kubeconfig, 0o600)
	caPEM, err := os.ReadFile(filepath.Join(cp.Dir, "etcd-pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	etcdCA := x509.NewCertPool()
	etcdCA.AppendCertsFromPEM(caPEM)
	node, err := cp.ClientConfig("system:node:n", "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	nodeCert, err := tls.X509KeyPair(node.CertData, node.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"listen-client-urls", "listen-peer-urls"} {
		u := etcdListenURL(t, cp, flag)
		plain := "http://" + u.Host + "/health"
		if reaches(plain, nil) {
			t.Errorf("%s: plain HTTP reaches etcd at %s", flag, plain)
		}
		secure := "https://" + u.Host + "/health"
		if reaches(secure, &tls.Config{RootCAs: etcdCA}) {
			t.Errorf("%s: TLS without a client certificate reaches etcd at %s", flag, secure)
		}
		if reaches(secure, &tls.Config{RootCAs: etcdCA, Certificates: []tls.Certificate{nodeCert}}) {
			t.Errorf("%s: a client certificate of the cluster's CA reaches etcd at %s", flag, secure)
		}
	}
	if cp.EtcdCerts == nil {
		t.Fatal("no etcd certificates")
	}
	own, err := cp.EtcdCerts.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	if err := httpOK(&http.Client{Transport: &http.Transport{TLSClientConfig: own}, Timeout: 5 * time.Second}, cp.EtcdURL+"/health", ""); err != nil {
		t.Errorf("etcd's own client certificate: %v", err)
	}
	if _, err := cp.Clientset().Discovery().ServerVersion(); err != nil {
		t.Errorf("kube-apiserver through etcd: %v", err)
	}
}

// TestKubeconfigIsPrivate: a kubeconfig is written 0600, in a directory
// made 0700, also over a file that others could read.
func TestKubeconfigIsPrivate(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:6443", BearerToken: "secret"}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteKubeconfigFor(path, AdminUser, cfg); err != nil {
		t.Fatal(err)
	}
	wantMode(t, path, 0o600)
	if data, err := os.ReadFile(path); err != nil || !strings.Contains(string(data), "secret") {
		t.Errorf("kubeconfig: %v %q", err, data)
	}
	fresh := filepath.Join(t.TempDir(), "new", "kubeconfig")
	if err := WriteKubeconfigFor(fresh, "u", cfg); err != nil {
		t.Fatal(err)
	}
	wantMode(t, filepath.Dir(fresh), 0o700)
	wantMode(t, fresh, 0o600)
}

func wantMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s: mode %#o, want %#o", path, got, want)
	}
}

// TestEnsureEtcdCertsKeeps: etcd's certificates are made once, private, and
// kept by a later EnsureEtcdCerts (a restarted etcd and its clients go on
// trusting each other); LoadEtcdCerts refuses a directory without them.
func TestEnsureEtcdCertsKeeps(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "etcd-pki")
	if _, err := LoadEtcdCerts(dir); err == nil {
		t.Fatal("LoadEtcdCerts found certificates in an empty directory")
	}
	c, err := EnsureEtcdCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	wantMode(t, dir, 0o700)
	before := map[string][]byte{}
	for _, f := range c.files() {
		wantMode(t, f, 0o600)
		before[f], _ = os.ReadFile(f)
	}
	again, err := EnsureEtcdCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range again.files() {
		if now, _ := os.ReadFile(f); string(now) != string(before[f]) {
			t.Errorf("%s changed on a second EnsureEtcdCerts", f)
		}
	}
	if _, err := again.ClientTLS(); err != nil {
		t.Error(err)
	}
}
