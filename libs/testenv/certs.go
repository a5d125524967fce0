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
	caPEM, err := os.ReadFile(p.caFile)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(caPEM)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM certificate", p.caFile)
	}
	if p.caCert, err = x509.ParseCertificate(block.Bytes); err != nil {
		return nil, fmt.Errorf("%s: %w", p.caFile, err)
	}
	keyPEM, err := os.ReadFile(p.caKeyFile)
	if err != nil {
		return nil, err
	}
	if block, _ = pem.Decode(keyPEM); block == nil {
		return nil, fmt.Errorf("%s: no PEM key", p.caKeyFile)
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.caKeyFile, err)
	}
	p.caPEM, p.caKey = caPEM, key
	return p, nil
}

// certificate is a leaf certificate's subject and use.
type certificate struct {
	cn    string
	orgs  []string
	usage x509.ExtKeyUsage
	// also is a second use (0: none).
	also   x509.ExtKeyUsage
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
	usage := []x509.ExtKeyUsage{c.usage}
	if c.also != 0 {
		usage = append(usage, c.also)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: c.cn, Organization: c.orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usage,
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

func newPKI(dir string) (*pki, error) {
	ca, err := newCA("splitlet-testenv-ca")
	if err != nil {
		return nil, err
	}
	p := pkiFiles(dir)
	p.caCert, p.caKey, p.caPEM = ca.caCert, ca.caKey, ca.caPEM
	caDER := ca.caCert.Raw
	caKeyDER, err := x509.MarshalECPrivateKey(ca.caKey.(*ecdsa.PrivateKey))
	if err != nil {
		return nil, err
	}
	der, keyDER, err := p.sign(certificate{
		cn: "kube-apiserver", usage: x509.ExtKeyUsageServerAuth, serial: 2,
		ips: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	})
	if err != nil {
		return nil, err
	}
	clientDER, clientKeyDER, err := p.sign(certificate{
		cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}, usage: x509.ExtKeyUsageClientAuth, serial: 3,
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
