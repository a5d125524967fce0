package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/splitlet/splitlet/libs/app/apptest"
	"github.com/splitlet/splitlet/libs/nodecert"
	"github.com/splitlet/splitlet/libs/testenv"
)

// authErrors are what a stage's log shows when the API server refuses its
// credentials or a TLS handshake fails on them.
var authErrors = regexp.MustCompile(`Unauthorized|certificate has expired|bad certificate|unknown certificate|x509:`)

// A node given only a bootstrap token joins a cluster as the kubelet does,
// its five stages in five processes: nodehb asks for the node's client
// certificate (approved and signed by kube-controller-manager), writes it
// and the kubeconfig that names it, and the other stages use that file.
// The node is Ready, runs a pod whose logs come through the API server's
// node proxy, and is system:node:<name>. With certificates of two minutes
// the client pair is renewed at least twice while the pod keeps running,
// every stage follows the file, and none logs an authentication error; the
// kubelet API's serving certificate, requested by CSR and approved here as
// a cluster admin would, is renewed and served at once while a connection
// opened before stays up; nodehb killed with SIGKILL while it waits for a
// renewal comes back with a valid certificate.
func TestBootstrapTokenJoin(t *testing.T) {
	testenv.SkipShort(t, "etcd, kube-apiserver and kube-controller-manager")
	const node = "boot-node"
	bin := buildBinary(t)
	cp := testenv.ControlPlaneForTest(t, testenv.ControlPlaneOptions{BootstrapTokens: true, CSRControllers: true, SigningDuration: 2 * time.Minute})
	cs := cp.Clientset()
	ctx := t.Context()
	token, err := testenv.NewBootstrapToken(ctx, cs, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bootstrap := filepath.Join(dir, "bootstrap-kubeconfig")
	if err := cp.WriteBootstrapKubeconfig(bootstrap, token); err != nil {
		t.Fatal(err)
	}
	go approveServing(ctx, cs, node)
	nats := testenv.NATSForTest(t)
	kubeletPort, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, certDir := filepath.Join(dir, "node", "kubeconfig"), filepath.Join(dir, "node", "pki")
	common := []string{"--node-name=" + node, "--nats-url=" + nats.URL, "--runtime=sim", "--http-addr=127.0.0.1:0", "--kubeconfig=" + kubeconfig}
	nodehbArgs := append([]string{"--services=nodehb", "--data-dir=" + filepath.Join(dir, "nodehb"), "--cert-dir=" + certDir,
		"--bootstrap-kubeconfig=" + bootstrap, "--rotate-certificates", "--nodehb.rotate-server-certificates",
		fmt.Sprintf("--nodehb.port=%d", kubeletPort), "--nodehb.client-ca-file=" + cp.CAFile, "--nodehb.agent-not-ready-grace=1s"}, common...)
	nodehb := startKillable(t, bin, nodehbArgs...)
	testenv.Eventually(t, 90*time.Second, "the node's kubeconfig written after TLS bootstrap", func() (bool, string) {
		_, err := os.Stat(kubeconfig)
		return err == nil, fmt.Sprint(err)
	})
	checkPrivate(t, kubeconfig, nodecert.ClientCertPath(certDir))
	if user, groups, err := testenv.WhoAmI(ctx, kubeconfig); err != nil || user != "system:node:"+node || !contains(groups, "system:nodes") {
		t.Fatalf("the node's kubeconfig is %s %v (%v), want system:node:%s in system:nodes", user, groups, err, node)
	}
	stages := map[string]*killable{"nodehb": nodehb}
	for _, s := range []string{"podconfig", "podworkers", "prober", "statussync"} {
		stages[s] = startKillable(t, bin, append([]string{"--services=" + s, "--data-dir=" + filepath.Join(dir, s)}, common...)...)
	}
	waitNodeReady(t, cs, node)
	pod := runSleepPod(t, cs, node)
	// The kubelet API serves once its certificate is approved and issued.
	testenv.Eventually(t, 60*time.Second, "logs through the API server's node proxy", func() (bool, string) {
		_, err := logsOf(ctx, cs, pod.Name, &corev1.PodLogOptions{})
		return err == nil, fmt.Sprint(err)
	})

	// The serving certificate: served once approved; a connection opened
	// now must survive its renewal.
	addr := fmt.Sprintf("127.0.0.1:%d", kubeletPort)
	var conn *servingConn
	testenv.Eventually(t, 90*time.Second, "the kubelet API serving the certificate of its CSR", func() (bool, string) {
		c, err := openServing(addr, cp.CAData)
		if err != nil {
			return false, err.Error()
		}
		conn = c
		return true, ""
	})
	t.Cleanup(func() { conn.c.Close() })
	if cn := conn.cert.Subject.CommonName; cn != "system:node:"+node {
		t.Fatalf("serving certificate of %q", cn)
	}

	testenv.Eventually(t, 5*time.Minute, "two renewals of the client certificate, followed by every stage, and one of the serving certificate", func() (bool, string) {
		var state []string
		done := true
		n := strings.Count(nodehb.logs.String(), "the node's client certificate rotated")
		state = append(state, fmt.Sprintf("nodehb renewed %d", n))
		done = done && n >= 2
		for name, s := range stages {
			n := strings.Count(s.logs.String(), "client certificate reloaded")
			state = append(state, fmt.Sprintf("%s reloaded %d", name, n))
			done = done && n >= 2
		}
		fresh, err := openServing(addr, cp.CAData)
		if err != nil {
			return false, err.Error()
		}
		fresh.c.Close()
		renewed := fresh.cert.SerialNumber.Cmp(conn.cert.SerialNumber) != 0
		state = append(state, fmt.Sprintf("serving renewed %v", renewed))
		return done && renewed, strings.Join(state, ", ")
	})
	if err := conn.get(); err != nil {
		t.Errorf("a kubelet API connection opened before the serving certificate's renewal: %v", err)
	}
	checkPodRunning(t, cs, pod.Name)
	if _, err := logsOf(ctx, cs, pod.Name, &corev1.PodLogOptions{}); err != nil {
		t.Errorf("logs after the renewals: %v", err)
	}

	// SIGKILL of nodehb as it asks for its next client certificate.
	seen, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	csrs, err := cs.CertificatesV1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{ResourceVersion: seen.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(3 * time.Minute)
	for killed := false; !killed; {
		select {
		case ev := <-csrs.ResultChan():
			c, ok := ev.Object.(*certificatesv1.CertificateSigningRequest)
			if ok && ev.Type == watch.Added && c.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && c.Spec.Username == "system:node:"+node {
				nodehb.kill(t)
				killed = true
				t.Logf("nodehb killed as it asked for %s", c.Name)
			}
		case <-deadline:
			t.Fatal("no renewal of the client certificate within 3 minutes")
		}
	}
	csrs.Stop()
	// The first nodehb was refused until the API server knew the token;
	// from its start on, it was the node.
	first := nodehb.logs.String()
	first = first[strings.Index(first, "splitlet up"):]
	if m := authErrors.FindAllString(first, 5); len(m) > 0 {
		t.Errorf("nodehb logged authentication errors once up: %v\n%s", m, tail(first, 4000))
	}
	nodehb = startKillable(t, bin, nodehbArgs...)
	stages["nodehb"] = nodehb
	testenv.Eventually(t, 90*time.Second, "nodehb back with a valid client certificate", func() (bool, string) {
		pair, err := tls.LoadX509KeyPair(nodecert.ClientCertPath(certDir), nodecert.ClientCertPath(certDir))
		if err != nil {
			return false, err.Error()
		}
		if time.Now().After(pair.Leaf.NotAfter) {
			return false, "expired"
		}
		user, _, err := testenv.WhoAmI(ctx, kubeconfig)
		return err == nil && user == "system:node:"+node && strings.Contains(nodehb.logs.String(), "splitlet up"), fmt.Sprint(user, err)
	})
	waitNodeReady(t, cs, node)
	checkPodRunning(t, cs, pod.Name)
	for name, s := range stages {
		if m := authErrors.FindAllString(s.logs.String(), 5); len(m) > 0 {
			t.Errorf("%s logged authentication errors: %v\n%s", name, m, tail(s.logs.String(), 4000))
		}
	}
}

// approveServing approves the node's kubelet-serving CSRs as a cluster
// admin would (kube-controller-manager approves only client CSRs).
func approveServing(ctx context.Context, cs kubernetes.Interface, node string) {
	for ctx.Err() == nil {
		list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err == nil {
			for i := range list.Items {
				c := &list.Items[i]
				if c.Spec.SignerName != certificatesv1.KubeletServingSignerName || c.Spec.Username != "system:node:"+node || len(c.Status.Conditions) > 0 {
					continue
				}
				c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
					Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "TestApproved", Message: "the node's serving certificate",
				})
				_, _ = cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, c.Name, c, metav1.UpdateOptions{})
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// servingConn is one TLS connection to the kubelet API and the
// certificate it was served.
type servingConn struct {
	c    *tls.Conn
	r    *bufio.Reader
	cert *x509.Certificate
}

// openServing connects to the kubelet API, verifying its certificate with
// the cluster's CA, and makes one request on the connection.
func openServing(addr string, ca []byte) (*servingConn, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		return nil, err
	}
	s := &servingConn{c: c, r: bufio.NewReader(c), cert: c.ConnectionState().PeerCertificates[0]}
	if err := s.get(); err != nil {
		c.Close()
		return nil, err
	}
	return s, nil
}

// get sends a request on the connection and reads the answer (401: no
// credentials; what matters is that the connection serves).
func (s *servingConn) get() error {
	if err := s.c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	if _, err := fmt.Fprint(s.c, "GET /healthz HTTP/1.1\r\nHost: kubelet\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(s.r, nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

// killable is a stage process the test may SIGKILL.
type killable struct {
	cmd  *exec.Cmd
	logs *apptest.Buffer
	done chan struct{}
}

// startKillable runs bin with args, stopped (SIGTERM, then SIGKILL) when
// the test ends.
func startKillable(t *testing.T, bin string, args ...string) *killable {
	t.Helper()
	k := &killable{cmd: exec.Command(bin, args...), logs: &apptest.Buffer{}, done: make(chan struct{})}
	k.cmd.Stdout, k.cmd.Stderr = k.logs, k.logs
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := k.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = k.cmd.Wait(); close(k.done) }()
	t.Cleanup(func() {
		_ = k.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-k.done:
		case <-time.After(15 * time.Second):
			_ = k.cmd.Process.Kill()
			<-k.done
		}
		if t.Failed() {
			t.Logf("%s:\n%s", strings.Join(args, " "), tail(k.logs.String(), 6000))
		}
	})
	return k
}

func (k *killable) kill(t *testing.T) {
	t.Helper()
	if err := k.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-k.done
}

// checkPrivate fails t unless each file (a link is followed) is 0600.
func checkPrivate(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", p, fi, err)
		}
	}
}

// runSleepPod creates a pod bound to node and waits until it runs.
func runSleepPod(t *testing.T, cs kubernetes.Interface, node string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "joined", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{Name: "app", Image: "busybox", Command: []string{"sleep", "3600"}}}},
	}
	pod, err := cs.CoreV1().Pods("default").Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkPodRunning(t, cs, pod.Name)
	return pod
}

// checkPodRunning waits until the pod is Running with its container never
// restarted.
func checkPodRunning(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "pod Running, no restart", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.RestartCount > 0 {
				t.Fatalf("container %s restarted %d times", c.Name, c.RestartCount)
			}
		}
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
