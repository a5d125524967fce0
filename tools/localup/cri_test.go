package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/testenv"
)

// `make run RUNTIME=cri`: containerd is readied (started when none
// answers), and the demo pod runs as a real busybox container and logs.
func TestLocalUpCRI(t *testing.T) {
	testenv.SkipShort(t, "containerd (root to start one), etcd and kube-apiserver")
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "splitlet"), filepath.Join(root, "cmd", "splitlet")).CombinedOutput(); err != nil {
		t.Fatalf("build splitlet: %v\n%s", err, out)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	out := &apptest.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, options{stateDir: state, node: "splitlet-node", runtime: "cri", kubeletPort: port, out: out})
	}()
	defer func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v\n%s", err, out.String())
			}
		case <-time.After(2 * time.Minute):
			t.Errorf("run did not stop within 2m\n%s", out.String())
		}
	}()
	var cs kubernetes.Interface
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("the demo pod did not run as a CRI container:\n%s", out.String())
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("run ended early: %v\n%s", err, out.String())
		case <-time.After(500 * time.Millisecond):
		}
		if cs == nil {
			if _, err := os.Stat(filepath.Join(state, "kubeconfig")); err != nil || !strings.Contains(out.String(), "Splitlet is up") {
				continue
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(state, "kubeconfig"))
			if err != nil {
				t.Fatal(err)
			}
			cs = kubernetes.NewForConfigOrDie(cfg)
		}
		p, err := cs.CoreV1().Pods("default").Get(ctx, "demo", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			continue
		}
		c := p.Status.ContainerStatuses[0]
		if c.State.Running != nil && strings.HasPrefix(c.ContainerID, "containerd://") {
			break
		}
	}
	if !strings.Contains(out.String(), "containerd on") {
		t.Errorf("output does not say which containerd runs the pods:\n%s", out.String())
	}
}
