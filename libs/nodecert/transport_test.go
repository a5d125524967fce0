package nodecert

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/rest"
)

// testCA signs client certificates for the tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// pairPEM is a client certificate of cn and its key, in one PEM file's
// content, as the certificate store writes them.
func (ca *testCA) pairPEM(t *testing.T, cn string, serial int64) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Minute),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
}

// A client of a kubeconfig that names its certificate by file presents the
// renewed pair on its next request once the file changed, while a request
// under way on the old pair's connection finishes; a file missing or torn
// (a rotation under way) keeps the pair in use.
func TestFollowerPresentsRenewedPair(t *testing.T) {
	ca := newTestCA(t)
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-release
		}
		_, _ = io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.pool}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	defer close(release)

	file := filepath.Join(t.TempDir(), "kubelet-client-current.pem")
	if err := os.WriteFile(file, ca.pairPEM(t, "system:node:old", 2), 0o600); err != nil {
		t.Fatal(err)
	}
	serverCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: serverCA, CertFile: file, KeyFile: file}}
	cfg, f, err := FollowCertFiles(cfg, zap.NewNop(), time.Hour)
	if err != nil || f == nil {
		t.Fatalf("FollowCertFiles: %v %v", f, err)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		if path == "/slow" {
			return resp, ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	if _, who := get("/"); who != "system:node:old" {
		t.Fatalf("presented %q, want the old pair", who)
	}
	slow, _ := get("/slow") // under way on the old pair's connection

	if err := os.WriteFile(file, ca.pairPEM(t, "system:node:new", 3), 0o600); err != nil {
		t.Fatal(err)
	}
	f.Reload()
	if _, who := get("/"); who != "system:node:new" {
		t.Fatalf("after the file changed, presented %q, want the renewed pair", who)
	}
	release <- struct{}{}
	body, err := io.ReadAll(slow.Body)
	slow.Body.Close()
	if err != nil || string(body) != "system:node:old" {
		t.Errorf("the request under way on the old pair: %q %v", body, err)
	}

	// Torn and missing files keep the pair in use.
	if err := os.WriteFile(file, []byte("-----BEGIN CERT"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.Reload()
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	f.Reload()
	if _, who := get("/"); who != "system:node:new" {
		t.Fatalf("with the file torn then gone, presented %q, want the pair in use", who)
	}
}

// A kubeconfig with inline credentials or a token is left as it is.
func TestFollowerOnlyForFiles(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1", BearerToken: "x"}
	out, f, err := FollowCertFiles(cfg, zap.NewNop(), time.Hour)
	if err != nil || f != nil || out != cfg {
		t.Fatalf("FollowCertFiles of a token config: %v %v %v", out, f, err)
	}
}
