package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// The identity directories the stack's containers mount, one per identity
// under --identities-dir: <id>/nats.nk (bus identity seed), <id>/ca.crt
// (verifies kube-apiserver and nats-server), and the API server
// credential: <id>/kubeconfig for an identity of its own (the prober's
// role), <id>/bootstrap-kubeconfig (a bootstrap token) for the one that
// joins as the node (nodehb; "node", the all-in-one binary), nothing for
// the stages that use the node's client certificate it gets. "node" is the
// node identity alone, for the all-in-one binary (embedded NATS); "admin"
// has the bus admin seed for bus init.
const nodeIdentity = "node"

// bootstrapTokenTTL is how long the bootstrap token of each start is
// valid (kube-controller-manager's tokencleaner removes it then): the node
// needs it only while it has no valid client certificate.
const bootstrapTokenTTL = 24 * time.Hour

// apiIdentity is the API server credential of an identity. nodehb,
// podconfig, podworkers and statussync run as the node (Node authorizer,
// as a kubelet does; podworkers reads the Secrets and ConfigMaps of its
// pods' volumes and requests their tokens, which only the Node authorizer
// limits to this node's pods) with the node's client certificate: nodehb
// (or the all-in-one binary) joins with a bootstrap token, as a kubelet
// does, and asks for it by CSR; the others read it (node is true, user
// empty). The prober has its role of deploy/rbac, which gives it less than
// the node's: a certificate the control plane signs. With traced,
// statussync keeps a certificate of its own, the node's user in
// system:nodes and system:monitoring: kube-apiserver continues an incoming
// trace context only for system:masters and system:monitoring (a node's
// request starts a trace of its own, linked), and statussync's patches are
// where the API server's spans join a pod's trace. The group adds read
// access to /metrics and the health endpoints, nothing else.
func apiIdentity(id, node string, traced bool) (user string, groups []string, isNode bool) {
	switch id {
	case bus.StageStatussync:
		if traced {
			return testenv.NodeUser(node), []string{testenv.NodesGroup, "system:monitoring"}, false
		}
		return "", nil, true
	case bus.StageNodehb, bus.StagePodconfig, bus.StagePodworkers, nodeIdentity:
		return "", nil, true
	default:
		return "splitlet:" + id, nil, false
	}
}

// joins says whether the identity is the one that joins as the node: it
// gets the bootstrap kubeconfig.
func joins(id string) bool { return id == bus.StageNodehb || id == nodeIdentity }

// writeIdentities writes every identity's directory (0700; credentials
// and seed 0600) under dir and, in natsDir (0700), nats-server's auth.conf (the
// bus identities' public keys and permissions), its TLS certificate and key
// for 127.0.0.1, and with routes a cluster's route credentials
// (writeRoutes). Seeds are kept across starts; kubeconfigs are signed anew
// by the kept CA, so that old and new ones both work; each start makes a
// new bootstrap token.
func writeIdentities(ctx context.Context, cp *testenv.ControlPlane, dir, natsDir, node string, routes []string, traced bool) error {
	for _, id := range append(bus.Identities(), nodeIdentity) {
		d := filepath.Join(dir, id)
		if err := testenv.PrivateDir(d); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(d, "ca.crt"), cp.CAData, 0o644); err != nil {
			return err
		}
		if id == bus.AdminIdentity {
			continue
		}
		if err := writeAPICredential(ctx, cp, d, id, node, traced); err != nil {
			return err
		}
	}
	conf, err := bus.WriteIdentities(node, func(id string) string { return filepath.Join(dir, id, "nats.nk") })
	if err != nil {
		return fmt.Errorf("bus identities: %w", err)
	}
	if err := testenv.PrivateDir(natsDir); err != nil {
		return err
	}
	certPEM, keyPEM, err := cp.ServerCertificate([]net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{"server.crt", certPEM, 0o644},
		{"server.key", keyPEM, 0o600},
		{"ca.crt", cp.CAData, 0o644},
		{"auth.conf", []byte(conf), 0o600},
	} {
		if err := writeFile(filepath.Join(natsDir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return writeRoutes(natsDir, routes)
}

// writeRoutes writes, for a NATS cluster whose route ports are routes, the
// route credentials (kept across starts: testenv.EnsureNATSRoutes) and
// cluster.conf, which nats-server's cluster block includes: the route
// authorization and the routes with the password.
func writeRoutes(natsDir string, routes []string) error {
	if len(routes) == 0 {
		return nil
	}
	r, err := testenv.EnsureNATSRoutes(natsDir)
	if err != nil {
		return fmt.Errorf("nats routes: %w", err)
	}
	return writeFile(filepath.Join(natsDir, "cluster.conf"), []byte(r.ClusterConfig(routes)), 0o600)
}

// writeFile replaces path's content at once (a reader sees the old file or
// the new one).
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// metricsServerIdentity is the directory of metrics-server's credentials
// under --identities-dir: kubeconfig (a client certificate of
// testenv.MetricsServerUser), tls.crt and tls.key (its serving
// certificate, for 127.0.0.1 and metrics-server.kube-system.svc), ca.crt.
const metricsServerIdentity = "metrics-server"

// writeMetricsServer writes metrics-server's identity directory (0700,
// files 0600) and registers it with the API server at 127.0.0.1:port
// (testenv.RegisterMetricsServer: its RBAC, Service and APIService).
func writeMetricsServer(ctx context.Context, cp *testenv.ControlPlane, dir string, port int) error {
	if err := testenv.PrivateDir(dir); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "ca.crt"), cp.CAData, 0o644); err != nil {
		return err
	}
	return testenv.RegisterMetricsServer(ctx, cp, dir, port)
}

// writeAPICredential writes the identity's API server credential in d:
// a kubeconfig of its own, or (the node's) the bootstrap kubeconfig for
// the one that joins and none for the others. A credential of the other
// kind an earlier start left is removed.
func writeAPICredential(ctx context.Context, cp *testenv.ControlPlane, d, id, node string, traced bool) error {
	kubeconfig, bootstrap := filepath.Join(d, "kubeconfig"), filepath.Join(d, "bootstrap-kubeconfig")
	user, groups, isNode := apiIdentity(id, node, traced)
	if !isNode {
		if err := removeIfThere(bootstrap); err != nil {
			return err
		}
		return cp.WriteClientKubeconfig(kubeconfig, user, groups...)
	}
	if err := removeIfThere(kubeconfig); err != nil {
		return err
	}
	if !joins(id) {
		return removeIfThere(bootstrap)
	}
	token, err := testenv.NewBootstrapToken(ctx, cp.Clientset(), bootstrapTokenTTL)
	if err != nil {
		return err
	}
	return cp.WriteBootstrapKubeconfig(bootstrap, token)
}

func removeIfThere(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// nodeClientPair is the node's client certificate and key (one PEM file)
// in the node's directory, as nodehb's cert-dir (pki) keeps it.
const nodeClientPair = "pki/kubelet-client-current.pem"

// prepareNodeDir makes the node's credential directory (0700), where
// nodehb keeps the client certificate it gets by TLS bootstrap and the
// kubeconfig that names it, and the other node stages read them. A
// certificate there of another CA (a stack taken down with its volumes and
// brought up again: a new CA) is removed with the kubeconfig, so that the
// node joins again with the new bootstrap token.
func prepareNodeDir(cp *testenv.ControlPlane, dir string) error {
	if data, err := os.ReadFile(filepath.Join(dir, nodeClientPair)); err == nil && !signedBy(data, cp.CAData) {
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	return testenv.PrivateDir(dir)
}

// signedBy says whether the first certificate of pairPEM verifies against
// caPEM for client use.
func signedBy(pairPEM, caPEM []byte) bool {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return false
	}
	for rest := pairPEM; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return false
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return false
		}
		_, err = cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err == nil
	}
}
