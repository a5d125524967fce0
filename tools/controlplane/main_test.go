package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// startEtcd runs bin/etcd on free ports for the test.
func startEtcd(t *testing.T) string {
	t.Helper()
	testenv.SkipShort(t, "etcd and kube-apiserver")
	bin, err := testenv.Binary("etcd")
	if err != nil {
		t.Fatal(err)
	}
	client, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	peer, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	cmd := exec.Command(bin, "--name=e", "--data-dir="+t.TempDir(), "--listen-client-urls="+url, "--advertise-client-urls="+url,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL, "--initial-cluster=e="+peerURL,
		"--unsafe-no-fsync=true", "--log-level=warn")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for checkURL(context.Background(), url+"/health") != nil {
		if time.Now().After(deadline) {
			t.Fatal("etcd not healthy within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return url
}

// running is one `controlplane run` of a test.
type running struct {
	cancel context.CancelFunc
	done   chan error
	logs   *apptest.Buffer
}

// startRun starts run with args and waits until check passes on the state
// directory's kubeconfig.
func startRun(t *testing.T, kubeconfig string, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1), logs: &apptest.Buffer{}}
	t.Cleanup(cancel)
	go func() { r.done <- runCmd(ctx, args, r.logs) }()
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := checkCmd(context.Background(), []string{"--kubeconfig=" + kubeconfig})
		if err == nil {
			return r
		}
		select {
		case err := <-r.done:
			t.Fatalf("run ended early: %v\n%s", err, r.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("check never passed: %v\n%s", err, r.logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stop ends the run and waits for it.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop")
	}
}

// whoAmI is the user the API server sees behind a kubeconfig's credentials.
func whoAmI(t *testing.T, kubeconfig string) (string, []string) {
	t.Helper()
	user, groups, err := testenv.WhoAmI(context.Background(), kubeconfig)
	if err != nil {
		t.Fatalf("%s: %v", kubeconfig, err)
	}
	return user, groups
}

// TestRunAgainstExternalEtcd: run starts kube-apiserver on the given port
// against an etcd that runs already, writes the kubeconfig (and its copy),
// the CA, the stages' roles and one identity per stage (API user, bus
// seed, CA; nats-server's auth.conf and certificate); check passes while it
// runs and fails once it stopped. A second run on the same state keeps the
// CA and credentials: what the first wrote still works.
func TestRunAgainstExternalEtcd(t *testing.T) {
	etcdURL := startEtcd(t)
	binDir, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	state, out := t.TempDir(), t.TempDir()
	copyPath := filepath.Join(out, "kubeconfig")
	kubeconfig := filepath.Join(state, "kubeconfig")
	if err := checkCmd(context.Background(), []string{"--kubeconfig=" + kubeconfig}); err == nil {
		t.Fatal("check passed before run")
	}
	ids, natsDir := filepath.Join(out, "identities"), filepath.Join(out, "nats")
	const node = "cp-node"
	args := []string{"--state-dir=" + state, fmt.Sprintf("--port=%d", port), "--etcd-url=" + etcdURL,
		"--kubeconfig-copy=" + copyPath, "--bin-dir=" + binDir, "--apply=../../deploy/rbac",
		"--identities-dir=" + ids, "--nats-dir=" + natsDir, "--node-name=" + node}
	r := startRun(t, kubeconfig, args...)
	for _, p := range []string{kubeconfig, copyPath} {
		cfg, err := clientcmd.BuildConfigFromFlags("", p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if !strings.HasSuffix(cfg.Host, fmt.Sprintf(":%d", port)) {
			t.Fatalf("%s: server %s, want port %d", p, cfg.Host, port)
		}
		cs := kubernetes.NewForConfigOrDie(cfg)
		if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	if data, err := os.ReadFile(filepath.Join(state, "ca.crt")); err != nil || !bytes.Contains(data, []byte("BEGIN CERTIFICATE")) {
		t.Fatalf("ca.crt: %v %q", err, data)
	}
	// the identities: the node's for nodehb, podconfig, podworkers (its
	// volumes read Secrets), statussync and the all-in-one; the role's for
	// the prober.
	want := map[string]string{"nodehb": "system:node:" + node, "podconfig": "system:node:" + node, "statussync": "system:node:" + node,
		"node": "system:node:" + node, "podworkers": "system:node:" + node, "prober": "splitlet:prober"}
	for id, user := range want {
		got, groups := whoAmI(t, filepath.Join(ids, id, "kubeconfig"))
		if got != user {
			t.Errorf("identity %s is %q, want %q", id, got, user)
		}
		if strings.HasPrefix(user, "system:node:") && !slices.Contains(groups, "system:nodes") {
			t.Errorf("identity %s: groups %v, want system:nodes", id, groups)
		}
	}
	conf, err := os.ReadFile(filepath.Join(natsDir, "auth.conf"))
	if err != nil {
		t.Fatal(err)
	}
	seeds := map[string][]byte{}
	for _, id := range bus.Identities() {
		seed := filepath.Join(ids, id, "nats.nk")
		fi, err := os.Stat(seed)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("seed of %s: %v %v", id, fi, err)
		}
		seeds[id], _ = os.ReadFile(seed)
		pub, err := bus.EnsureSeed(seed)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(conf, []byte(pub)) {
			t.Errorf("auth.conf lacks %s's key", id)
		}
	}
	for _, f := range []string{"server.crt", "server.key", "ca.crt"} {
		if _, err := os.Stat(filepath.Join(natsDir, f)); err != nil {
			t.Error(err)
		}
	}
	if err := checkURL(context.Background(), etcdURL+"/health"); err != nil {
		t.Fatal(err)
	}
	if err := checkURL(context.Background(), etcdURL+"/no-such-path"); err == nil {
		t.Fatal("check-url passed on a 404")
	}
	oldAdmin, err := os.ReadFile(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	oldProber := filepath.Join(out, "prober.kubeconfig")
	if data, err := os.ReadFile(filepath.Join(ids, "prober", "kubeconfig")); err != nil || os.WriteFile(oldProber, data, 0o600) != nil {
		t.Fatal(err)
	}
	r.stop(t)
	if err := checkCmd(context.Background(), []string{"--kubeconfig=" + kubeconfig}); err == nil {
		t.Fatal("check passed after stop")
	}

	// A restart keeps the CA and credentials: the first run's still work.
	r = startRun(t, kubeconfig, args...)
	defer r.stop(t)
	if now, err := os.ReadFile(copyPath); err != nil || !bytes.Equal(now, oldAdmin) {
		t.Errorf("the admin kubeconfig changed across a restart (%v)", err)
	}
	if got, _ := whoAmI(t, oldProber); got != "splitlet:prober" {
		t.Errorf("the first run's prober identity is %q after a restart", got)
	}
	for id, seed := range seeds {
		if now, _ := os.ReadFile(filepath.Join(ids, id, "nats.nk")); !bytes.Equal(now, seed) {
			t.Errorf("the bus seed of %s changed across a restart", id)
		}
	}
}
