package testenv

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the control plane's CA, the serving certificate for 127.0.0.1
// signed by it, the service-account keys and the client certificate
// kube-apiserver shows kubelets. The CA key stays at hand so that client
// identities can be signed later (ClientConfig).
type pki struct {
	caPEM     []byte
	caCert    *x509.Certificate
	caKey     crypto.Signer
	certFile  string
	keyFile   string
	caFile    string
	caKeyFile string
	saKey     string
	saPub     string
	// kubeletClientCert and kubeletClientKey are what kube-apiserver shows
	// a kubelet (nodehb) when it proxies logs and exec: CN
	// kube-apiserver-kubelet-client in system:masters, signed by the CA.
	kubeletClientCert string
	kubeletClientKey  string
}

func pkiFiles(dir string) *pki {
	return &pki{
		certFile:          filepath.Join(dir, "apiserver.crt"),
		keyFile:           filepath.Join(dir, "apiserver.key"),
		caFile:            filepath.Join(dir, "ca.crt"),
		caKeyFile:         filepath.Join(dir, "ca.key"),
		saKey:             filepath.Join(dir, "sa.key"),
		saPub:             filepath.Join(dir, "sa.pub"),
		kubeletClientCert: filepath.Join(dir, "kubelet-client.crt"),
		kubeletClientKey:  filepath.Join(dir, "kubelet-client.key"),
	}
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}

// loadOrNewPKI reads the certificates a previous start left in dir, when
// every file is there, so that clients keep trusting the server and keep
// their credentials across restarts; otherwise it makes new ones.
func loadOrNewPKI(dir string) (*pki, error) {
	p := pkiFiles(dir)
	all := true
	for _, f := range []string{p.certFile, p.keyFile, p.caFile, p.caKeyFile, p.saKey, p.saPub, p.kubeletClientCert, p.kubeletClientKey} {
		if _, err := os.Stat(f); err != nil {
			all = false
			break
		}
	}
	if !all {
		return newPKI(dir)
	}
	if err := p.loadCA(p.caFile, p.caKeyFile); err != nil {
		return nil, err
	}
	return p, nil
}

// certificate is a leaf certificate's subject and use.
type certificate struct {
	cn     string
	orgs   []string
	usages []x509.ExtKeyUsage
	ips    []net.IP
	dns    []string
	serial int64
}

// sign makes a key and a certificate for c signed by the CA, both DER.
func (p *pki) sign(c certificate) (certDER, keyDER []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial := big.NewInt(c.serial)
	if c.serial == 0 {
		if serial, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62)); err != nil {
			return nil, nil, err
		}
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: c.cn, Organization: c.orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  c.usages,
		IPAddresses:  c.ips,
		DNSNames:     c.dns,
	}
	if certDER, err = x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey); err != nil {
		return nil, nil, err
	}
	if keyDER, err = x509.MarshalECPrivateKey(key); err != nil {
		return nil, nil, err
	}
	return certDER, keyDER, nil
}

// signPEM is sign with PEM output.
func (p *pki) signPEM(c certificate) (certPEM, keyPEM []byte, err error) {
	certDER, keyDER, err := p.sign(c)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// The extended key uses of the leaf certificates.
var (
	serverUse = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	clientUse = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
)

// newCA makes a self-signed CA: its certificate and key, DER.
func newCA(cn string) (caDER, caKeyDER []byte, err error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if caDER, err = x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey); err != nil {
		return nil, nil, err
	}
	if caKeyDER, err = x509.MarshalECPrivateKey(caKey); err != nil {
		return nil, nil, err
	}
	return caDER, caKeyDER, nil
}

// useCA makes p sign with the CA (DER certificate and EC key).
func (p *pki) useCA(caDER, caKeyDER []byte) error {
	var err error
	if p.caCert, err = x509.ParseCertificate(caDER); err != nil {
		return err
	}
	if p.caKey, err = x509.ParseECPrivateKey(caKeyDER); err != nil {
		return err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return nil
}

// loadCA makes p sign with the CA of the PEM files certFile and keyFile.
func (p *pki) loadCA(certFile, keyFile string) error {
	var der [2][]byte
	for i, f := range []string{certFile, keyFile} {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		block, _ := pem.Decode(data)
		if block == nil {
			return fmt.Errorf("%s: no PEM block", f)
		}
		der[i] = block.Bytes
	}
	if err := p.useCA(der[0], der[1]); err != nil {
		return fmt.Errorf("%s, %s: %w", certFile, keyFile, err)
	}
	return nil
}

func newPKI(dir string) (*pki, error) {
	caDER, caKeyDER, err := newCA("splitlet-testenv-ca")
	if err != nil {
		return nil, err
	}
	p := pkiFiles(dir)
	if err := p.useCA(caDER, caKeyDER); err != nil {
		return nil, err
	}
	der, keyDER, err := p.sign(certificate{
		cn: "kube-apiserver", usages: serverUse, serial: 2,
		ips: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	})
	if err != nil {
		return nil, err
	}
	clientDER, clientKeyDER, err := p.sign(certificate{
		cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}, usages: clientUse, serial: 3,
	})
	if err != nil {
		return nil, err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	// The CA key is written last: loadOrNewPKI takes a directory with all
	// files as complete.
	for _, w := range []struct {
		path, kind string
		der        []byte
	}{
		{p.certFile, "CERTIFICATE", der},
		{p.keyFile, "EC PRIVATE KEY", keyDER},
		{p.caFile, "CERTIFICATE", caDER},
		{p.saKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)},
		{p.saPub, "PUBLIC KEY", saPubDER},
		{p.kubeletClientCert, "CERTIFICATE", clientDER},
		{p.kubeletClientKey, "EC PRIVATE KEY", clientKeyDER},
		{p.caKeyFile, "EC PRIVATE KEY", caKeyDER},
	} {
		if err := writePEM(w.path, w.kind, w.der); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// errNoCA is returned when a certificate is asked of a control plane that
// did not make its CA.
var errNoCA = errors.New("testenv: the control plane has no CA key")
