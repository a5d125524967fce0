package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/splitlet/splitlet/libs/testenv"
)

// The cluster network test's pods: on a bridge and subnet of their own.
const (
	clusterNetBridge = "splitlet-dns0"
	clusterNetSubnet = "10.95.0.0/16"
)

// clientScript runs each check (5 s at most) until its output has the
// text wanted (a minute at most) and prints "<check>: <output on one line>", or "<check>
// FAILED: <output>" and exits 1. (busybox nslookup of a short name asks
// for every search path and fails when one is not found, so the output
// decides, not the exit status; wget's own -T timeout crashes that
// busybox.)
// $WEB_IP and $WEB_CLUSTER_IP come from the pod's env.
const clientScript = `
check() {
	name=$1; want=$2; shift 2; end=$(($(date +%s) + 60))
	until out=$(timeout 5 "$@" 2>&1); echo "$out" | grep -q "$want"; do
		if [ "$(date +%s)" -ge $end ]; then echo "$name FAILED: $(echo "$out" | tr '\n' ' ')"; exit 1; fi
		sleep 1
	done
	echo "$name: $(echo "$out" | tr '\n' ' ')"
}
echo "resolv.conf: $(tr '\n' ';' </etc/resolv.conf)"
check kubernetes 'Address: 10.0.0.1$' nslookup kubernetes.default.svc.cluster.local
check short-name "Address: $WEB_CLUSTER_IP\$" nslookup web
check by-name "` + webPage + `" wget -q -O - http://web/
check by-cluster-ip "` + webPage + `" wget -q -O - http://$WEB_CLUSTER_IP/
check pod-to-pod "` + webPage + `" wget -q -O - http://$WEB_IP/
`

// TestEndToEndCRIClusterDNSAndServices: with every stage in one process on
// the CRI runtime, CoreDNS and kube-proxy beside the control plane
// (testenv.ClusterNetworkForTest) and --cluster-dns the kube-dns Service,
// a ClusterFirst pod resolves kubernetes.default.svc.cluster.local and a
// Service by its short name through CoreDNS, reaches the Service by name
// and by ClusterIP through kube-proxy's rules, and reaches the Service's
// pod directly across the bridge.
func TestEndToEndCRIClusterDNSAndServices(t *testing.T) {
	testenv.SkipShort(t, "containerd, etcd, kube-apiserver, CoreDNS, kube-proxy and root")
	ctx := t.Context()
	// A containerd of the test's own, whose bridge is the pods' gateway:
	// kube-proxy's DNAT happens on the host, and CoreDNS listens there.
	cd, err := testenv.EnsureContainerd(ctx, testenv.ContainerdOptions{
		Address:   filepath.Join(t.TempDir(), "none.sock"),
		CNIConfig: testenv.ServicesCNIConfig("splitlet-clusternet", clusterNetBridge, clusterNetSubnet),
	})
	if err != nil {
		t.Fatalf("the cluster network needs a containerd of its own: %v", err)
	}
	t.Cleanup(cd.Stop)
	cp := testenv.ControlPlaneForTest(t, testenv.ControlPlaneOptions{ServiceControllers: true})
	const node = "e2e-cri-clusternet"
	// Memory alone as an eviction signal: how full the shared test
	// machine's disk is has nothing to do with this test.
	startAgent(t, cp, node, "--runtime=cri", "--cri-endpoint="+cd.Endpoint, "--cluster-dns="+testenv.DNSServiceIP,
		"--nodehb.eviction-hard=memory.available<100Mi")
	// kube-proxy starts once the Node has its address.
	waitNodeReady(t, cp.Clientset(), node)
	cn := testenv.ClusterNetworkForTest(t, cp, testenv.ClusterNetworkOptions{Bridge: clusterNetBridge, Subnet: clusterNetSubnet, Node: node})
	t.Cleanup(func() { deletePods(t, cp, "web", "client") })

	web, svc := startWebService(t, cp, node)
	client := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			DNSPolicy:                     corev1.DNSClusterFirst,
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "client", Image: testenv.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", clientScript},
				Env:     []corev1.EnvVar{{Name: "WEB_IP", Value: web.Status.PodIP}, {Name: "WEB_CLUSTER_IP", Value: svc.Spec.ClusterIP}},
			}},
		},
	}
	if _, err := cp.Clientset().CoreV1().Pods("default").Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// nslookup's output in one line, its tabs and spaces as one space.
	logs := strings.Join(strings.Fields(clientLogs(t, cp)), " ")
	t.Logf("the client pod's output: %s", logs)
	for _, want := range []string{
		"kubernetes: Server: " + cn.DNS.String(),
		"Name: kubernetes.default.svc.cluster.local Address: 10.0.0.1 ",
		"short-name: Server: " + cn.DNS.String(),
		"Name: web.default.svc.cluster.local Address: " + svc.Spec.ClusterIP + " ",
		"by-name: " + webPage,
		"by-cluster-ip: " + webPage,
		"pod-to-pod: " + webPage,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the client pod's output lacks %q:\n%s", want, logs)
		}
	}
}

// startWebService runs the web pod (label app=web) and a Service web
// selecting it, and waits until the Service's EndpointSlice has the pod's
// address, ready.
func startWebService(t *testing.T, cp *testenv.ControlPlane, node string) (*corev1.Pod, *corev1.Service) {
	t.Helper()
	ctx := t.Context()
	cs := cp.Clientset()
	pod := webPod("web", node, "", 0)
	pod.Labels = map[string]string{"app": "web"}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}) })
	var web *corev1.Pod
	testenv.Eventually(t, 2*time.Minute, "the web pod Running with an IP", func() (bool, string) {
		web, err = cs.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return web.Status.Phase == corev1.PodRunning && web.Status.PodIP != "", string(web.Status.Phase)
	})
	testenv.Eventually(t, time.Minute, "the web Service's endpoint ready", func() (bool, string) {
		slices, err := cs.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
		if err != nil {
			return false, err.Error()
		}
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if len(e.Addresses) > 0 && e.Addresses[0] == web.Status.PodIP && e.Conditions.Ready != nil && *e.Conditions.Ready {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%+v", slices.Items)
	})
	return web, svc
}

// clientLogs waits for the client pod to end and returns its output; it
// fails the test (with the output) unless the pod Succeeded.
func clientLogs(t *testing.T, cp *testenv.ControlPlane) string {
	t.Helper()
	ctx := t.Context()
	cs := cp.Clientset()
	var phase corev1.PodPhase
	testenv.Eventually(t, 3*time.Minute, "the client pod done", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "client", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, string(phase)
	})
	var logs string
	testenv.Eventually(t, 30*time.Second, "the client pod's log", func() (bool, string) {
		b, err := cs.CoreV1().Pods("default").GetLogs("client", &corev1.PodLogOptions{}).DoRaw(ctx)
		logs = string(b)
		return err == nil, fmt.Sprintf("%v: %s", err, b)
	})
	if phase != corev1.PodSucceeded {
		t.Fatalf("the client pod %s:\n%s", phase, logs)
	}
	return logs
}
