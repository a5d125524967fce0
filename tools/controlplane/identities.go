package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// The identity directories the stack's containers mount, one per identity
// under --identities-dir: <id>/kubeconfig (API server identity), <id>/nats.nk
// (bus identity seed), <id>/ca.crt (verifies kube-apiserver and
// nats-server). "node" is the node identity alone, for the all-in-one
// binary (embedded NATS); "admin" has the bus admin seed for bus init.
const nodeIdentity = "node"

// apiIdentity is the API server user and groups of an identity: nodehb,
// podconfig, podworkers and statussync run as the node (Node authorizer, as
// a kubelet does; podworkers reads the Secrets and ConfigMaps of its pods'
// volumes and requests their tokens, which only the Node authorizer limits
// to this node's pods); prober with its role of deploy/rbac, which gives it
// less than the node's. With traced, statussync is in
// system:monitoring too: kube-apiserver continues an incoming trace context
// only for system:masters and system:monitoring (a node's request starts a
// trace of its own, linked), and statussync's patches are where the API
// server's spans join a pod's trace. The group adds read access to
// /metrics and the health endpoints, nothing else.
func apiIdentity(id, node string, traced bool) (user string, groups []string) {
	switch id {
	case bus.StageStatussync:
		if traced {
			return testenv.NodeUser(node), []string{testenv.NodesGroup, "system:monitoring"}
		}
		return testenv.NodeUser(node), []string{testenv.NodesGroup}
	case bus.StageNodehb, bus.StagePodconfig, bus.StagePodworkers, nodeIdentity:
		return testenv.NodeUser(node), []string{testenv.NodesGroup}
	default:
		return "splitlet:" + id, nil
	}
}

// writeIdentities writes every identity's directory (0700; kubeconfig and
// seed 0600) under dir and, in natsDir (0700), nats-server's auth.conf (the
// bus identities' public keys and permissions), its TLS certificate and key
// for 127.0.0.1, and with routes a cluster's route credentials
// (writeRoutes). Seeds are kept across starts; kubeconfigs are signed anew
// by the kept CA, so that old and new ones both work.
func writeIdentities(cp *testenv.ControlPlane, dir, natsDir, node string, partitions int, routes []string, traced bool) error {
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
		user, groups := apiIdentity(id, node, traced)
		if err := cp.WriteClientKubeconfig(filepath.Join(d, "kubeconfig"), user, groups...); err != nil {
			return err
		}
	}
	conf, err := bus.WriteIdentities(node, partitions, func(id string) string { return filepath.Join(dir, id, "nats.nk") })
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
