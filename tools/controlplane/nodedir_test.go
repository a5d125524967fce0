package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
)

// TestSignedBy: the node's pair is kept only when the current CA signed it
// for client use (a stack brought up again with a new CA joins anew).
func TestSignedBy(t *testing.T) {
	caPEM, caCert, caKey := testCA(t, "ca")
	otherPEM, _, _ := testCA(t, "other")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(usage x509.ExtKeyUsage) []byte {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "system:node:n", Organization: []string{"system:nodes"}},
			NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, _ := x509.MarshalECPrivateKey(key)
		// as the certificate manager writes the pair: certificate, then key
		return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
	}
	client := leaf(x509.ExtKeyUsageClientAuth)
	for _, c := range []struct {
		name     string
		pair, ca []byte
		want     bool
	}{
		{"the CA's client certificate", client, caPEM, true},
		{"another CA", client, otherPEM, false},
		{"a serving certificate", leaf(x509.ExtKeyUsageServerAuth), caPEM, false},
		{"no certificate", []byte("junk"), caPEM, false},
	} {
		if got := signedBy(c.pair, c.ca); got != c.want {
			t.Errorf("%s: signedBy %v, want %v", c.name, got, c.want)
		}
	}
}

func testCA(t *testing.T, cn string) ([]byte, *x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert, key
}
