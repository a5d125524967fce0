package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// TestComposeNATSConfigs runs deploy/compose's nats.conf and
// nats-cluster.conf through the real nats-server with what run writes
// (--nats-dir, --nats-routes): the single server and a cluster of three
// come up with TLS and the bus identities, answer check-nats (the compose
// health check) with no monitoring port, and a route connection without
// the route credentials is refused while one with them joins.
func TestComposeNATSConfigs(t *testing.T) {
	testenv.SkipShort(t, "etcd, kube-apiserver and nats-server")
	h := newStackHost(t)
	etcdURL := startEtcd(t, h)
	binDir, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	routes := freePorts(t, 3)
	state, out := t.TempDir(), t.TempDir()
	kubeconfig := filepath.Join(state, "kubeconfig")
	ids, natsDir := filepath.Join(out, "identities"), filepath.Join(out, "nats")
	r := startRun(t, kubeconfig, "--state-dir="+state, fmt.Sprintf("--port=%d", port), "--etcd-url="+etcdURL, "--etcd-certs="+h.paths["/etcd-pki"], "--bin-dir="+binDir,
		"--identities-dir="+ids, "--nats-dir="+natsDir, "--node-name=conf-node", "--node-dir="+filepath.Join(out, "node"),
		"--nats-routes="+hostports(routes))
	r.stop(t)
	admin := natsAdmin(t, ids)
	if err := checkNATS(t.Context(), []string{etcdURL}); err == nil {
		t.Errorf("check-nats passed on etcd's port %s", etcdURL)
	}

	// one server (compose.yaml).
	single := freePorts(t, 1)[0]
	logs := startNATSConf(t, "nats.conf", natsDir, nil, map[string]string{"127.0.0.1:14222": fmt.Sprintf("127.0.0.1:%d", single)})
	checkNATSServer(t, single, natsDir, admin, logs)

	// three (compose.natscluster.yaml), routed with the credentials run wrote.
	clients := freePorts(t, 3)
	composePorts := map[string]string{}
	for i, p := range routes {
		composePorts[fmt.Sprintf("127.0.0.1:%d", 16222+i)] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	var servers []*apptest.Buffer
	for i := range 3 {
		servers = append(servers, startNATSConf(t, "nats-cluster.conf", natsDir, []string{
			fmt.Sprintf("SPLITLET_NATS_NAME=nats%d", i+1),
			fmt.Sprintf("SPLITLET_NATS_LISTEN=127.0.0.1:%d", clients[i]),
			fmt.Sprintf("SPLITLET_NATS_CLUSTER=127.0.0.1:%d", routes[i]),
		}, composePorts))
	}
	for i, c := range clients {
		checkNATSServer(t, c, natsDir, admin, servers[i])
	}
	creds, err := testenv.EnsureNATSRoutes(natsDir)
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := creds.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	route := fmt.Sprintf("127.0.0.1:%d", routes[0])
	refused := testenv.RoutedServerForTest(t, &url.URL{Scheme: "nats-route", Host: route}, nil)
	joined := testenv.RoutedServerForTest(t, creds.URL(route), tlsConfig)
	testenv.EventuallyTrue(t, 30*time.Second, "a server with the route credentials joined the compose cluster", func() bool { return joined.NumRoutes() > 0 })
	if n := refused.NumRoutes(); n != 0 {
		t.Errorf("a route without credentials joined the compose cluster (%d routes)", n)
	}
}

// startNATSConf runs bin/nats-server with deploy/compose's configuration
// file name, as the compose stack mounts it (/etc/nats/<name>, the nats
// dir at /etc/nats/auth, the store at /data): in a directory of the test,
// with those paths and the replacements in the text, and env added.
func startNATSConf(t *testing.T, name, natsDir string, env []string, replace map[string]string) *apptest.Buffer {
	t.Helper()
	bin, err := testenv.Binary("nats-server")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join("..", "..", "deploy", "compose", name))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	etc := filepath.Join(root, "etc", "nats")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(natsDir, filepath.Join(etc, "auth")); err != nil {
		t.Fatal(err)
	}
	conf := strings.ReplaceAll(string(text), "/etc/nats/", etc+"/")
	conf = strings.ReplaceAll(conf, "store_dir: /data", "store_dir: "+filepath.Join(root, "data"))
	for from, to := range replace {
		conf = strings.ReplaceAll(conf, from, to)
	}
	path := filepath.Join(etc, name)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", path)
	cmd.Env = append(os.Environ(), env...)
	logs := &apptest.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("nats-server %s:\n%s", name, logs.String())
		}
	})
	return logs
}

// checkNATSServer: the server at port answers check-nats (TLS verified
// with the nats dir's CA), the admin identity reaches JetStream through
// it, and it started no monitoring port.
func checkNATSServer(t *testing.T, port int, natsDir string, admin []nats.Option, logs *apptest.Buffer) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	testenv.EventuallyNoError(t, 60*time.Second, "check-nats "+addr, func() error {
		return checkNATS(t.Context(), []string{"--ca=" + filepath.Join(natsDir, "ca.crt"), addr})
	})
	nc, err := nats.Connect("tls://"+addr, admin...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// (polling for the JetStream leader)
	testenv.EventuallyNoError(t, 60*time.Second, "JetStream through "+addr+" as admin", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err
	})
	if strings.Contains(logs.String(), "monitor") {
		t.Errorf("nats-server %s started a monitoring port:\n%s", addr, logs.String())
	}
}

// natsAdmin are the client options of the admin identity run wrote.
func natsAdmin(t *testing.T, ids string) []nats.Option {
	t.Helper()
	nkey, err := nats.NkeyOptionFromSeed(filepath.Join(ids, bus.AdminIdentity, "nats.nk"))
	if err != nil {
		t.Fatal(err)
	}
	return []nats.Option{nkey, nats.RootCAs(filepath.Join(ids, bus.AdminIdentity, "ca.crt"))}
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	out := make([]int, n)
	for i := range out {
		p, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = p
	}
	return out
}

func hostports(ports []int) string {
	hp := make([]string, len(ports))
	for i, p := range ports {
		hp[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	return strings.Join(hp, ",")
}
