package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/splitlet/splitlet/libs/testenv"
)

// webPage is what the test pods serve at /.
const webPage = "hello from the web pod"

// webPod serves webPage over HTTP on port 80 (busybox httpd), port 80
// mapped to hostIP:hostPort.
func webPod(name, node, hostIP string, hostPort int32) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "web", Image: testenv.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", "mkdir -p /www && echo '" + webPage + "' > /www/index.html && exec httpd -f -p 80 -h /www"},
				Ports:   []corev1.ContainerPort{{Name: "http", ContainerPort: 80, HostPort: hostPort, HostIP: hostIP}},
			}},
		},
	}
}

// httpGet is the body of GET u, or the error.
func httpGet(ctx context.Context, u string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("status %s", resp.Status)
	}
	return string(b), err
}

// forward runs a port-forward over dialer to the pod's port 80 from a
// port of 127.0.0.1, and returns that port; it ends with the test.
func forward(t *testing.T, dialer httpstream.Dialer) (uint16, error) {
	stop, ready := make(chan struct{}), make(chan struct{})
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:80"}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	t.Cleanup(func() { close(stop); <-done })
	select {
	case <-ready:
	case err := <-done:
		done <- err
		return 0, fmt.Errorf("port-forward ended before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		return 0, fmt.Errorf("port-forward not ready after 30 s")
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		return 0, fmt.Errorf("port-forward ports %v: %v", ports, err)
	}
	return ports[0].Local, nil
}

// spdyDialer dials u with cfg's credentials over SPDY, as `kubectl
// port-forward` did before WebSockets.
func spdyDialer(t *testing.T, cfg *rest.Config, u *url.URL) httpstream.Dialer {
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
}

// TestEndToEndCRIHostPortsAndPortForward: with every stage in one process
// on the CRI runtime (a containerd whose CNI chain has the portmap
// plugin), a pod's hostPort on 127.0.0.1 reaches its HTTP server; a second
// pod asking for the same host port is rejected at admission with the
// kubelet's reason; `kubectl port-forward` through the API server, over
// SPDY and over WebSocket (which the API server tunnels to the node as
// SPDY), carries an HTTP request to the pod; the kubelet API refuses a
// port-forward to a pod of another node or of another UID.
func TestEndToEndCRIHostPortsAndPortForward(t *testing.T) {
	testenv.SkipShort(t, "containerd, etcd and kube-apiserver")
	ctx := t.Context()
	// A containerd of the test's own: the pods' bridge is their gateway on
	// the host, so that the host reaches them, and portmap maps host ports.
	cd, err := testenv.EnsureContainerd(ctx, testenv.ContainerdOptions{
		Address:   filepath.Join(t.TempDir(), "none.sock"),
		CNIConfig: testenv.GatewayCNIConfig("splitlet-hostports", "splitlet-hp0", "10.94.0.0/16"),
	})
	if err != nil {
		t.Fatalf("host ports need a containerd of their own: %v", err)
	}
	t.Cleanup(cd.Stop)
	cp := testenv.ControlPlaneForTest(t)
	const node = "e2e-cri-ports"
	startAgent(t, cp, node, "--runtime=cri", "--cri-endpoint="+cd.Endpoint)
	cs := cp.Clientset()

	free, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	hostPort := int32(free)
	web, err := cs.CoreV1().Pods("default").Create(ctx, webPod("web", node, "127.0.0.1", hostPort), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePods(t, cp, "web", "web2") })
	testenv.Eventually(t, 2*time.Minute, "the web pod Running", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
	})

	// The host port, on the host's loopback, reaches the pod's server.
	hostURL := fmt.Sprintf("http://127.0.0.1:%d/", hostPort)
	testenv.Eventually(t, 30*time.Second, "the pod's page on "+hostURL, func() (bool, string) {
		body, err := httpGet(ctx, hostURL)
		return strings.TrimSpace(body) == webPage, fmt.Sprintf("%q, %v", body, err)
	})

	// The same host port again: rejected at admission, as the kubelet does.
	if _, err := cs.CoreV1().Pods("default").Create(ctx, webPod("web2", node, "127.0.0.1", hostPort), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "web2 rejected for its host port", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "web2", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		want := "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "NodePorts" && p.Status.Message == want,
			fmt.Sprintf("%s, %s: %s", p.Status.Phase, p.Status.Reason, p.Status.Message)
	})

	// kubectl port-forward through the API server, over SPDY and over
	// WebSocket.
	pfURL := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name("web").SubResource("portforward").URL()
	ws, err := portforward.NewSPDYOverWebsocketDialer(pfURL, cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		name   string
		dialer httpstream.Dialer
	}{{"SPDY", spdyDialer(t, cp.Config, pfURL)}, {"WebSocket", ws}} {
		local, err := forward(t, d.dialer)
		if err != nil {
			t.Errorf("port-forward over %s: %v", d.name, err)
			continue
		}
		body, err := httpGet(ctx, fmt.Sprintf("http://127.0.0.1:%d/", local))
		if strings.TrimSpace(body) != webPage {
			t.Errorf("port-forward over %s: GET / answered %q, %v; want the pod's page", d.name, body, err)
		}
	}

	refusesPortForwardToOthers(t, cp, node, web)
}

// refusesPortForwardToOthers asks the node's kubelet API directly, as one
// the API server authorises (system:masters), for a port-forward to a pod
// bound to another node and to the web pod under another UID: both are
// refused as not found, before any stream is set up.
func refusesPortForwardToOthers(t *testing.T, cp *testenv.ControlPlane, node string, web *corev1.Pod) {
	ctx := t.Context()
	cs := cp.Clientset()
	other := webPod("elsewhere", "another-node", "", 0)
	if _, err := cs.CoreV1().Pods("default").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods("default").Delete(context.Background(), "elsewhere", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	})
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := cp.ClientConfig("port-forward-test", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Host = fmt.Sprintf("https://127.0.0.1:%d", n.Status.DaemonEndpoints.KubeletEndpoint.Port)
	cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.Insecure = nil, true // nodehb's certificate is self-signed
	for _, path := range []string{
		"/portForward/default/elsewhere",
		"/portForward/other/web",
		"/portForward/default/web/" + string(web.UID) + "x",
	} {
		u, _ := url.Parse(cfg.Host + path)
		_, err := forward(t, spdyDialer(t, cfg, u))
		if err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("port-forward on %s: %v, want refused as not found", path, err)
		}
	}
	// The same credentials reach the web pod: the refusals are the pods'.
	u, _ := url.Parse(cfg.Host + "/portForward/default/web/" + string(web.UID))
	if _, err := forward(t, spdyDialer(t, cfg, u)); err != nil {
		t.Errorf("port-forward on the kubelet API to the web pod: %v", err)
	}
}

// deletePods deletes the pods and waits until they are gone (the agent
// stops and removes their containers).
func deletePods(t *testing.T, cp *testenv.ControlPlane, names ...string) {
	ctx := context.Background()
	cs := cp.Clientset()
	for _, name := range names {
		_ = cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{})
	}
	testenv.Eventually(t, time.Minute, "the pods gone", func() (bool, string) {
		for _, name := range names {
			if _, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("%s: %v", name, err)
			}
		}
		return true, ""
	})
}
