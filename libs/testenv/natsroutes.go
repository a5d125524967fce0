package testenv

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSRouteUser is the user every route of a Splitlet NATS cluster
// authenticates as.
const NATSRouteUser = "route"

// NATSRoutes are the credentials of a NATS cluster's routes: a CA of
// their own, which signs nothing but the routes' certificate (so no other
// certificate of the stack, a stage's API client certificate say, opens a
// route), one certificate for every server (server and client
// authentication, 127.0.0.1), and a password. A route must show both: a
// connection to a route port without them is refused, since a route is
// trusted with every message and bypasses every client permission.
type NATSRoutes struct {
	CAFile, CertFile, KeyFile string
	Password                  string
}

// EnsureNATSRoutes reads the route credentials in dir, or makes them (the
// files mode 0600) when any is missing. They are kept across restarts: a
// server that runs holds what it read when it started, and a server that
// restarts must still route to it.
func EnsureNATSRoutes(dir string) (*NATSRoutes, error) {
	r := &NATSRoutes{
		CAFile:   filepath.Join(dir, "route-ca.crt"),
		CertFile: filepath.Join(dir, "route.crt"),
		KeyFile:  filepath.Join(dir, "route.key"),
	}
	passFile := filepath.Join(dir, "route.password")
	complete := true
	for _, f := range []string{r.CAFile, r.CertFile, r.KeyFile, passFile} {
		if _, err := os.Stat(f); err != nil {
			complete = false
		}
	}
	if !complete {
		if err := r.make(dir, passFile); err != nil {
			return nil, err
		}
	}
	pass, err := os.ReadFile(passFile)
	if err != nil {
		return nil, err
	}
	r.Password = strings.TrimSpace(string(pass))
	return r, nil
}

// make writes a new route CA, certificate and key, and password; the
// password file last, as it marks the set complete.
func (r *NATSRoutes) make(dir, passFile string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caDER, caKeyDER, err := newCA("splitlet-nats-routes-ca")
	if err != nil {
		return err
	}
	ca := &pki{}
	if err := ca.useCA(caDER, caKeyDER); err != nil {
		return err
	}
	certPEM, keyPEM, err := ca.signPEM(certificate{cn: "splitlet-nats-route",
		usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		ips:    []net.IP{net.ParseIP("127.0.0.1")}, dns: []string{"localhost"}})
	if err != nil {
		return err
	}
	secret := make([]byte, 24)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{r.CAFile, ca.caPEM}, {r.CertFile, certPEM}, {r.KeyFile, keyPEM}, {passFile, []byte(hex.EncodeToString(secret) + "\n")}} {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// URL is a route URL to the route port at hostport, with the credentials.
func (r *NATSRoutes) URL(hostport string) *url.URL {
	return &url.URL{Scheme: "nats-route", User: url.UserPassword(NATSRouteUser, r.Password), Host: hostport}
}

// TLSConfig is the routes' TLS: their certificate, and the peer's
// verified against the route CA both ways.
// A server is both ends of its routes, so the CA verifies either peer (as
// nats-server sets a cluster's tls block from a configuration file).
func (r *NATSRoutes) TLSConfig() (*tls.Config, error) {
	c, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: r.CertFile, KeyFile: r.KeyFile, CaFile: r.CAFile, Verify: true})
	if err != nil {
		return nil, err
	}
	c.ClientAuth, c.RootCAs = tls.RequireAndVerifyClientCert, c.ClientCAs
	return c, nil
}

// ClusterConfig is the part of nats-server's cluster block that holds the
// route password: its authorization, and the routes to the route ports at
// hostports with the credentials (the TLS files are named by the
// configuration that includes it).
func (r *NATSRoutes) ClusterConfig(hostports []string) string {
	var b strings.Builder
	b.WriteString("# Routes of the Splitlet NATS cluster: a route presents the route CA's\n# certificate (tls block) and this password, or is refused.\n")
	fmt.Fprintf(&b, "authorization {\n  user: %q\n  password: %q\n  timeout: 2\n}\nroutes: [\n", NATSRouteUser, r.Password)
	for _, hp := range hostports {
		fmt.Fprintf(&b, "  %q\n", r.URL(hp).String())
	}
	b.WriteString("]\n")
	return b.String()
}
