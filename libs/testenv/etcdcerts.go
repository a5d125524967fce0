package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// EtcdCerts are the TLS files of etcd in one directory: a CA of etcd's own,
// apart from the cluster's (which signs every stage's client certificate:
// one of those must not open etcd), etcd's certificate for 127.0.0.1 (its
// client and peer URLs) and the client certificate of kube-apiserver and of
// the health checks. etcd refuses clients without a certificate of its CA.
type EtcdCerts struct {
	// Dir holds the files (mode 0700; keys 0600).
	Dir string
	// CAFile verifies etcd's certificate and its clients' and peers'.
	CAFile string
	// ServerCertFile and ServerKeyFile are etcd's, for its client and peer
	// URLs (server and client use: a peer is both).
	ServerCertFile, ServerKeyFile string
	// ClientCertFile and ClientKeyFile are kube-apiserver's and the health
	// checks'.
	ClientCertFile, ClientKeyFile string
	caKeyFile                     string
}

// EtcdCertFiles names the files of etcd's certificates in dir (ca.crt,
// ca.key, server.crt, server.key, client.crt, client.key), made or not.
func EtcdCertFiles(dir string) *EtcdCerts {
	return &EtcdCerts{
		Dir:            dir,
		CAFile:         filepath.Join(dir, "ca.crt"),
		caKeyFile:      filepath.Join(dir, "ca.key"),
		ServerCertFile: filepath.Join(dir, "server.crt"),
		ServerKeyFile:  filepath.Join(dir, "server.key"),
		ClientCertFile: filepath.Join(dir, "client.crt"),
		ClientKeyFile:  filepath.Join(dir, "client.key"),
	}
}

// files lists every file, the CA key last (written last: a directory that
// has it is complete).
func (c *EtcdCerts) files() []string {
	return []string{c.CAFile, c.ServerCertFile, c.ServerKeyFile, c.ClientCertFile, c.ClientKeyFile, c.caKeyFile}
}

// LoadEtcdCerts returns the certificates an earlier EnsureEtcdCerts left in
// dir, and an error when one of the files is missing.
func LoadEtcdCerts(dir string) (*EtcdCerts, error) {
	c := EtcdCertFiles(dir)
	for _, f := range c.files() {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("etcd certificates: %w", err)
		}
	}
	return c, nil
}

// EnsureEtcdCerts returns the certificates in dir, made (with dir, mode
// 0700) when not all are there; those of an earlier start are kept, so
// that etcd and its clients go on trusting each other across restarts.
func EnsureEtcdCerts(dir string) (*EtcdCerts, error) {
	if c, err := LoadEtcdCerts(dir); err == nil {
		return c, nil
	}
	return newEtcdCerts(dir)
}

// newEtcdCerts makes a new CA and certificates in dir.
func newEtcdCerts(dir string) (*EtcdCerts, error) {
	if err := PrivateDir(dir); err != nil {
		return nil, err
	}
	c := EtcdCertFiles(dir)
	caDER, caKeyDER, err := newCA("splitlet-etcd-ca")
	if err != nil {
		return nil, err
	}
	ca := &pki{}
	if err := ca.useCA(caDER, caKeyDER); err != nil {
		return nil, err
	}
	serverDER, serverKeyDER, err := ca.sign(certificate{
		cn: "etcd", usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		ips: []net.IP{net.ParseIP("127.0.0.1")}, dns: []string{"localhost"},
	})
	if err != nil {
		return nil, err
	}
	clientDER, clientKeyDER, err := ca.sign(certificate{cn: "kube-apiserver-etcd-client", usages: clientUse})
	if err != nil {
		return nil, err
	}
	for _, w := range []struct {
		path, kind string
		der        []byte
	}{
		{c.CAFile, "CERTIFICATE", caDER},
		{c.ServerCertFile, "CERTIFICATE", serverDER},
		{c.ServerKeyFile, "EC PRIVATE KEY", serverKeyDER},
		{c.ClientCertFile, "CERTIFICATE", clientDER},
		{c.ClientKeyFile, "EC PRIVATE KEY", clientKeyDER},
		{c.caKeyFile, "EC PRIVATE KEY", caKeyDER},
	} {
		if err := writePEM(w.path, w.kind, w.der); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// ServerArgs are etcd's flags for its certificate on the client and peer
// URLs, each of which takes only clients with a certificate of etcd's CA.
func (c *EtcdCerts) ServerArgs() []string {
	return []string{
		"--client-cert-auth",
		"--trusted-ca-file=" + c.CAFile,
		"--cert-file=" + c.ServerCertFile,
		"--key-file=" + c.ServerKeyFile,
		"--peer-client-cert-auth",
		"--peer-trusted-ca-file=" + c.CAFile,
		"--peer-cert-file=" + c.ServerCertFile,
		"--peer-key-file=" + c.ServerKeyFile,
	}
}

// APIServerArgs are kube-apiserver's flags to reach etcd with the client
// certificate.
func (c *EtcdCerts) APIServerArgs() []string {
	return []string{
		"--etcd-cafile=" + c.CAFile,
		"--etcd-certfile=" + c.ClientCertFile,
		"--etcd-keyfile=" + c.ClientKeyFile,
	}
}

// ClientTLS is a TLS client configuration that trusts etcd's CA and shows
// the client certificate (health checks).
func (c *EtcdCerts) ClientTLS() (*tls.Config, error) {
	caPEM, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s: no certificate", c.CAFile)
	}
	cert, err := tls.LoadX509KeyPair(c.ClientCertFile, c.ClientKeyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// PrivateDir makes dir with mode 0700, and sets that mode when it exists:
// it holds keys or credentials.
func PrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// errNoEtcdCerts is returned for an etcd URL given without the certificates
// to reach it.
var errNoEtcdCerts = errors.New("testenv: EtcdURL needs EtcdCerts: etcd takes only clients with a certificate of its CA")
