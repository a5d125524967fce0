package kubeletapi

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http/httptest"
	"testing"
	"time"
)

func newCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func clientCert(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "alice", Organization: []string{"team"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestClientCertAuthenticator: a client certificate counts only when it
// chains to the client CA and is meant for client auth.
func TestClientCertAuthenticator(t *testing.T) {
	ca, caKey := newCA(t, "trusted")
	other, otherKey := newCA(t, "other")
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	a := &ClientCertAuthenticator{Roots: pool}
	req := func(c *x509.Certificate) (User, bool, error) {
		r := httptest.NewRequest("GET", "/pods", nil)
		r.TLS = &tls.ConnectionState{}
		if c != nil {
			r.TLS.PeerCertificates = []*x509.Certificate{c}
		}
		return a.Authenticate(r)
	}
	u, ok, err := req(clientCert(t, ca, caKey, x509.ExtKeyUsageClientAuth))
	if !ok || err != nil || u.Name != "alice" || len(u.Groups) != 1 || u.Groups[0] != "team" {
		t.Fatalf("trusted client cert: %+v %v %v", u, ok, err)
	}
	if _, ok, err := req(clientCert(t, other, otherKey, x509.ExtKeyUsageClientAuth)); ok || err == nil {
		t.Fatalf("cert of another CA accepted: %v %v", ok, err)
	}
	if _, ok, err := req(clientCert(t, ca, caKey, x509.ExtKeyUsageServerAuth)); ok || err == nil {
		t.Fatalf("server cert accepted as a client: %v %v", ok, err)
	}
	if _, ok, err := req(nil); ok || err != nil {
		t.Fatalf("no cert: %v %v", ok, err)
	}
}
