package testenv_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/splitlet/splitlet/libs/testenv"
)

// TestControlPlane starts etcd and kube-apiserver, creates a pod through a
// client built from the written kubeconfig, checks the tokens, and stops.
func TestControlPlane(t *testing.T) {
	testenv.SkipShort(t, "etcd and kube-apiserver")
	ctx := context.Background()
	cp, err := testenv.StartControlPlane(ctx, testenv.ControlPlaneOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			cp.Stop()
		}
	}()
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != "v1.36.3" {
		t.Errorf("server version %q, want v1.36.3 (stamped at build)", v.GitVersion)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:   "node-a",
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
		},
	}
	created, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("pod create: %v", err)
	}
	if created.UID == "" || created.Spec.NodeName != "node-a" {
		t.Fatalf("created pod %+v", created.ObjectMeta)
	}
	// The unprivileged user is authenticated but forbidden.
	nobody := kubernetes.NewForConfigOrDie(cp.ConfigFor(testenv.NobodyUser))
	_, err = nobody.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("nobody listing pods: want Forbidden, got %v", err)
	}

	dir := cp.Dir
	pids := cp.PIDs()
	cp.Stop()
	stopped = true
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after Stop (%v)", pid, err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("work dir %s left behind", dir)
	}
	testenv.EventuallyTrue(t, 5*time.Second, "API server gone after Stop", func() bool {
		_, err := cs.Discovery().ServerVersion()
		return err != nil
	})
}

// kube-apiserver killed and started again keeps its port, credentials and
// data: a client made before the outage works after it.
func TestRestartAPIServer(t *testing.T) {
	cp := testenv.ControlPlaneForTest(t)
	cs := cp.Clientset()
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kept"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cp.KillAPIServer()
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "kept", metav1.GetOptions{}); err == nil {
		t.Fatal("the API server answers while it is down")
	}
	if err := cp.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
}
