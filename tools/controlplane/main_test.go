package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/testenv"
)

// startEtcd runs bin/etcd on free ports for the test.
func startEtcd(t *testing.T) string {
	t.Helper()
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

// TestRunAgainstExternalEtcd: run starts kube-apiserver on the given port
// against an etcd that runs already, writes the kubeconfig (and its copy)
// and the CA, check passes while it runs and fails once it stopped, and a
// stale kubeconfig from an earlier run is gone before the new one appears.
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
	if err := os.WriteFile(copyPath, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(state, "kubeconfig")
	if err := checkCmd(context.Background(), []string{"--kubeconfig=" + kubeconfig}); err == nil {
		t.Fatal("check passed before run")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &apptest.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- runCmd(ctx, []string{"--state-dir=" + state, fmt.Sprintf("--port=%d", port), "--etcd-url=" + etcdURL,
			"--kubeconfig-copy=" + copyPath, "--bin-dir=" + binDir}, logs)
	}()
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := checkCmd(context.Background(), []string{"--kubeconfig=" + kubeconfig})
		if err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run ended early: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("check never passed: %v\n%s", err, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
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
	if err := checkURL(context.Background(), etcdURL+"/health"); err != nil {
		t.Fatal(err)
	}
	if err := checkURL(context.Background(), etcdURL+"/no-such-path"); err == nil {
		t.Fatal("check-url passed on a 404")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop")
	}
	if err := checkCmd(context.Background(), []string{"--kubeconfig=" + kubeconfig}); err == nil {
		t.Fatal("check passed after stop")
	}
}
