package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/nodehb/internal/lease"
)

var cp *testenv.ControlPlane

func TestMain(m *testing.M) {
	if testenv.Short() { // no control plane: startStack skips
		os.Exit(m.Run())
	}
	var err error
	cp, err = testenv.StartControlPlane(context.Background(), testenv.ControlPlaneOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cp.Stop()
	os.Exit(code)
}

// defaults returns a Config with every key at its default.
func defaults(t *testing.T, args ...string) *Config {
	t.Helper()
	cfg := &Config{}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return cfg
}

type stack struct {
	node   string
	cs     kubernetes.Interface
	runner *Runner
	nc     *nats.Conn
	pub    *bus.Publisher
	// podconfig publishes as podconfig does (StaticPods).
	podconfig *bus.Publisher
	port      int
}

// startStack runs nodehb for a new node against the shared control plane
// and a fresh NATS server; extra flags go on top of fast test intervals.
func startStack(t *testing.T, node string, args ...string) *stack {
	t.Helper()
	testenv.SkipShort(t, "etcd and kube-apiserver")
	return startStackWith(t, node, cp.Config, args...)
}

// startStackWith is startStack with base as the process's API client
// configuration (the one fx provides).
func startStackWith(t *testing.T, node string, restCfg *rest.Config, args ...string) *stack {
	t.Helper()
	testenv.SkipShort(t, "etcd and kube-apiserver")
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := []string{
		"--nodehb.port=" + fmt.Sprint(port),
		"--nodehb.node-status-update-frequency=200ms",
		"--nodehb.lease-renew-interval=200ms",
		"--nodehb.agent-ready-timeout=2s",
		"--nodehb.client-ca-file=" + cp.CAFile,
	}
	cfg := defaults(t, append(base, args...)...)
	ns := testenv.NATSForTest(t)
	nc, js := ns.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.EnsureStreams(ctx, js, node); err != nil {
		t.Fatal(err)
	}
	common := &config.Common{NodeName: node, Runtime: config.RuntimeSim, Partitions: 4, DataDir: t.TempDir()}
	cs := cp.Clientset()
	shared, err := kube.Clientset(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	clients, err := cfg.NewClients(restCfg, shared)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Build(cfg, common, zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)), clients, nc, js, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		_ = cs.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
	})
	return &stack{node: node, cs: cs, runner: r, nc: nc, pub: bus.NewPublisher(nc, js, node, "podworkers-test"),
		podconfig: bus.NewPublisher(nc, js, node, "podconfig"), port: port}
}

// announceStatic publishes the node's static pods on state.static as
// podconfig does, and waits until nodehb knows them.
func (s *stack) announceStatic(t *testing.T, pods ...bus.StaticPod) {
	t.Helper()
	if err := s.podconfig.Publish(t.Context(), bus.For(s.node).StaticPods(), bus.KindStaticPods, "", &bus.StaticPods{Pods: pods}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		eventually(t, 10*time.Second, "nodehb knows the static pod "+p.Name, func() error {
			if uid, ok := s.runner.Static.UID(p.Namespace, p.Name); !ok || uid != p.UID {
				return fmt.Errorf("UID %q, %v", uid, ok)
			}
			return nil
		})
	}
}

// eventually polls f until it returns nil or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, f func() error) {
	t.Helper()
	testenv.EventuallyNoError(t, within, what, f)
}

func (s *stack) node_(t *testing.T) *corev1.Node {
	t.Helper()
	n, err := s.cs.CoreV1().Nodes().Get(context.Background(), s.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func (s *stack) waitReady(t *testing.T, want corev1.ConditionStatus, reason string) *corev1.NodeCondition {
	t.Helper()
	var got *corev1.NodeCondition
	eventually(t, 15*time.Second, fmt.Sprintf("Ready=%s %s", want, reason), func() error {
		n, err := s.cs.CoreV1().Nodes().Get(context.Background(), s.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := readyCondition(n)
		if c == nil {
			return errors.New("no Ready condition")
		}
		if c.Status != want || (reason != "" && c.Reason != reason) {
			return fmt.Errorf("Ready=%s reason=%s message=%q", c.Status, c.Reason, c.Message)
		}
		got = c
		return nil
	})
	return got
}

// heartbeat publishes AgentReadiness every period until the returned stop is called.
func (s *stack) heartbeat(t *testing.T, ready bool, period time.Duration) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			err := s.pub.Publish(pctx, bus.For(s.node).AgentReady(), bus.KindAgentReadiness, "",
				&bus.AgentReadiness{Ready: ready, Partitions: 4, Reason: "PartitionsUnowned", Message: "test says so"})
			pcancel()
			if err != nil && ctx.Err() == nil {
				t.Logf("publish AgentReadiness: %v", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(period):
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

func TestNodeRegisteredWithConfiguredFigures(t *testing.T) {
	s := startStack(t, "reg-node", "--nodehb.pods=5000", "--nodehb.cpu=64", "--nodehb.memory=256Gi",
		"--nodehb.labels=tier=test,example.com/zone=a", "--nodehb.taints=dedicated=splitlet:NoSchedule",
		"--nodehb.kube-reserved=cpu=1,memory=1Gi", "--nodehb.system-reserved=cpu=500m,memory=512Mi")
	eventually(t, 15*time.Second, "node registered", func() error {
		_, err := s.cs.CoreV1().Nodes().Get(t.Context(), s.node, metav1.GetOptions{})
		return err
	})
	n := s.node_(t)
	for k, v := range map[string]string{"kubernetes.io/hostname": s.node, "kubernetes.io/os": "linux", "kubernetes.io/arch": n.Status.NodeInfo.Architecture, "tier": "test", "example.com/zone": "a"} {
		if n.Labels[k] != v || v == "" {
			t.Errorf("label %s = %q, want %q", k, n.Labels[k], v)
		}
	}
	// (kube-apiserver's TaintNodesByCondition adds node.kubernetes.io/not-ready.)
	found := false
	for _, taint := range n.Spec.Taints {
		found = found || (taint.Key == "dedicated" && taint.Value == "splitlet" && taint.Effect == corev1.TaintEffectNoSchedule)
	}
	if !found {
		t.Errorf("taints = %v", n.Spec.Taints)
	}
	// allocatable: capacity less kube-reserved, system-reserved and the
	// default hard eviction thresholds (memory.available<100Mi,
	// nodefs.available<10%), as the kubelet computes it.
	for name, want := range map[corev1.ResourceName][2]string{"pods": {"5000", "5000"}, "cpu": {"64", "62500m"},
		"memory": {"256Gi", "260508Mi"}, "ephemeral-storage": {"10Ti", "9Ti"}} {
		for i, list := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
			q := list[name]
			if q.Cmp(resource.MustParse(want[i])) != 0 {
				t.Errorf("%s %s = %s, want %s", []string{"capacity", "allocatable"}[i], name, q.String(), want[i])
			}
		}
	}
	wantAddr := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: s.node}}
	if fmt.Sprint(n.Status.Addresses) != fmt.Sprint(wantAddr) {
		t.Errorf("addresses = %v, want %v", n.Status.Addresses, wantAddr)
	}
	if got := n.Status.DaemonEndpoints.KubeletEndpoint.Port; int(got) != s.port {
		t.Errorf("kubelet port = %d, want %d", got, s.port)
	}
	info := n.Status.NodeInfo
	if info.KubeletVersion == "" || info.ContainerRuntimeVersion != "sim://"+info.KubeletVersion || info.OperatingSystem != "linux" {
		t.Errorf("nodeInfo = %+v", info)
	}
	// The runtime the pod workers name in their readiness becomes the
	// Node's containerRuntimeVersion.
	pctx, pcancel := context.WithTimeout(t.Context(), 5*time.Second)
	err := s.pub.Publish(pctx, bus.For(s.node).AgentReady(), bus.KindAgentReadiness, "",
		&bus.AgentReadiness{Ready: true, Partitions: 4, Runtime: "containerd://1.6.20"})
	pcancel()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "containerRuntimeVersion from the pod workers", func() error {
		if v := s.node_(t).Status.NodeInfo.ContainerRuntimeVersion; v != "containerd://1.6.20" {
			return fmt.Errorf("containerRuntimeVersion %q", v)
		}
		return nil
	})
	types := map[corev1.NodeConditionType]corev1.ConditionStatus{}
	for _, c := range n.Status.Conditions {
		types[c.Type] = c.Status
		if c.LastHeartbeatTime.IsZero() || c.LastTransitionTime.IsZero() {
			t.Errorf("condition %s without times: %+v", c.Type, c)
		}
	}
	want := map[corev1.NodeConditionType]corev1.ConditionStatus{"Ready": "False", "MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False"}
	if fmt.Sprint(types) != fmt.Sprint(want) {
		t.Errorf("conditions = %v, want %v", types, want)
	}
	c := readyCondition(n)
	if c.Reason == "" || c.Message == "" {
		t.Errorf("NotReady without reason or message: %+v", c)
	}

	// The Lease: owned by the Node, 40 s, renewed.
	var first time.Time
	eventually(t, 10*time.Second, "lease", func() error {
		l, err := s.cs.CoordinationV1().Leases(lease.Namespace).Get(t.Context(), s.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 40 || ptr.Deref(l.Spec.HolderIdentity, "") != s.node || l.Spec.RenewTime == nil {
			return fmt.Errorf("lease spec %+v", l.Spec)
		}
		if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].Kind != "Node" || l.OwnerReferences[0].UID != n.UID {
			return fmt.Errorf("lease owners %+v, node uid %s", l.OwnerReferences, n.UID)
		}
		first = l.Spec.RenewTime.Time
		return nil
	})
	eventually(t, 10*time.Second, "lease renewTime advances", func() error {
		l, err := s.cs.CoordinationV1().Leases(lease.Namespace).Get(t.Context(), s.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !l.Spec.RenewTime.Time.After(first) {
			return fmt.Errorf("renewTime still %v", l.Spec.RenewTime.Time)
		}
		return nil
	})
}

func TestReadyFollowsAgentReadiness(t *testing.T) {
	s := startStack(t, "gate-node")
	before := s.waitReady(t, corev1.ConditionFalse, "AgentNotReady")
	if !strings.Contains(before.Message, "not announced") {
		t.Errorf("message %q does not say why", before.Message)
	}
	// Not ready announced: still False, with the workers' reason.
	stop := s.heartbeat(t, false, 200*time.Millisecond)
	s.waitReady(t, corev1.ConditionFalse, "PartitionsUnowned")
	stop()

	stop = s.heartbeat(t, true, 200*time.Millisecond)
	ready := s.waitReady(t, corev1.ConditionTrue, "KubeletReady")
	if err := s.runner.Gate.WaitAgentReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	stop()
	lost := s.waitReady(t, corev1.ConditionFalse, "AgentHeartbeatLost")
	if !lost.LastTransitionTime.After(ready.LastTransitionTime.Time) && !lost.LastTransitionTime.Equal(&ready.LastTransitionTime) {
		t.Errorf("transition time did not move: %v -> %v", ready.LastTransitionTime, lost.LastTransitionTime)
	}
	stop = s.heartbeat(t, true, 200*time.Millisecond)
	s.waitReady(t, corev1.ConditionTrue, "KubeletReady")
	stop()
}

func TestDeletedNodeComesBack(t *testing.T) {
	s := startStack(t, "phoenix-node")
	var uid string
	eventually(t, 15*time.Second, "node registered", func() error {
		n, err := s.cs.CoreV1().Nodes().Get(t.Context(), s.node, metav1.GetOptions{})
		if err == nil {
			uid = string(n.UID)
		}
		return err
	})
	if err := s.cs.CoreV1().Nodes().Delete(t.Context(), s.node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "node registered again", func() error {
		n, err := s.cs.CoreV1().Nodes().Get(t.Context(), s.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if string(n.UID) == uid {
			return errors.New("still the old node")
		}
		if readyCondition(n) == nil {
			return errors.New("no conditions yet")
		}
		return nil
	})
	// The Lease's owner follows the new Node.
	eventually(t, 10*time.Second, "lease owner moved", func() error {
		n := s.node_(t)
		l, err := s.cs.CoordinationV1().Leases(lease.Namespace).Get(t.Context(), s.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != n.UID {
			return fmt.Errorf("owners %+v, node uid %s", l.OwnerReferences, n.UID)
		}
		return nil
	})
}

func TestExistingNodeAdopted(t *testing.T) {
	testenv.SkipShort(t, "etcd and kube-apiserver")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "adopt-node", Labels: map[string]string{"keep": "me"}}}
	cs := cp.Clientset()
	created, err := cs.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := startStack(t, "adopt-node", "--nodehb.labels=added=yes")
	s.waitReady(t, corev1.ConditionFalse, "")
	n := s.node_(t)
	if n.UID != created.UID {
		t.Fatalf("node replaced instead of adopted")
	}
	if n.Labels["keep"] != "me" || n.Labels["added"] != "yes" || n.Labels["kubernetes.io/hostname"] != "adopt-node" {
		t.Errorf("labels = %v", n.Labels)
	}
}

func apiClient(t *testing.T, cert *tls.Certificate) *http.Client {
	t.Helper()
	tc := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the serving certificate is self-signed
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 20 * time.Second}
}

func get(t *testing.T, c *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func createPod(t *testing.T, cs kubernetes.Interface, node, name string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "hello", Image: "busybox"}}},
	}
	created, err := cs.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
	})
	return created
}

func TestKubeletAPIAuthentication(t *testing.T) {
	s := startStack(t, "api-node")
	pod := createPod(t, s.cs, s.node, "api-pod", nil)
	foreign := createPod(t, s.cs, "api-node-elsewhere", "api-foreign-pod", nil)
	base := fmt.Sprintf("https://127.0.0.1:%d", s.port)
	c := apiClient(t, nil)
	if code, body := get(t, c, base+"/pods", ""); code != http.StatusUnauthorized {
		t.Errorf("anonymous /pods: %d %s, want 401", code, body)
	}
	if code, body := get(t, c, base+"/pods", "not-a-token"); code != http.StatusUnauthorized {
		t.Errorf("bad token /pods: %d %s, want 401", code, body)
	}
	if code, body := get(t, c, base+"/pods", cp.Tokens[testenv.NobodyUser]); code != http.StatusForbidden {
		t.Errorf("nobody /pods: %d %s, want 403", code, body)
	}
	eventually(t, 10*time.Second, "admin /pods lists the pod", func() error {
		code, body := get(t, c, base+"/pods", cp.Tokens[testenv.AdminUser])
		if code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		if !strings.Contains(body, string(pod.UID)) || !strings.Contains(body, `"kind":"PodList"`) {
			return fmt.Errorf("pod not listed: %s", body)
		}
		return nil
	})
	// Only the node's own pods are served: another node's pod is neither
	// listed nor found.
	if code, body := get(t, c, base+"/pods", cp.Tokens[testenv.AdminUser]); code != http.StatusOK || strings.Contains(body, string(foreign.UID)) {
		t.Errorf("/pods lists another node's pod: %d %s", code, body)
	}
	if code, body := get(t, c, base+"/containerLogs/default/api-foreign-pod/hello", cp.Tokens[testenv.AdminUser]); code != http.StatusNotFound {
		t.Errorf("logs of another node's pod: %d %s, want 404", code, body)
	}
	if code, body := get(t, c, base+"/containerLogs/default/no-such-pod/hello", cp.Tokens[testenv.AdminUser]); code != http.StatusNotFound {
		t.Errorf("logs of a missing pod: %d %s, want 404", code, body)
	}
	if code, body := get(t, c, base+"/healthz", cp.Tokens[testenv.AdminUser]); code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz: %d %s", code, body)
	}
	// kube-apiserver's kubelet client certificate (system:masters) is let in.
	cert, err := tls.LoadX509KeyPair(filepath.Join(cp.Dir, "kubelet-client.crt"), filepath.Join(cp.Dir, "kubelet-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, apiClient(t, &cert), base+"/healthz", ""); code != http.StatusOK {
		t.Errorf("client cert /healthz: %d %s", code, body)
	}
}

// logResponder answers logs requests of every partition with a fixed text,
// as a pod worker would; it records the requests.
func logResponder(t *testing.T, s *stack, text string) func() []*bus.LogsRequest {
	t.Helper()
	var mu sync.Mutex
	var got []*bus.LogsRequest
	pub := bus.NewPublisher(s.nc, nil, s.node, "podworkers-test")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	sub, err := s.nc.Subscribe(bus.For(s.node).Prefix()+".runtime.logs.*", func(m *nats.Msg) {
		e, err := bus.Decode(m.Data)
		if err != nil {
			t.Errorf("decode logs request: %v", err)
			return
		}
		req, err := bus.DecodeLogsRequest(e)
		if err != nil {
			t.Errorf("decode logs request: %v", err)
			return
		}
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := text
			if req.Timestamps {
				out = "2026-11-21T12:00:00Z " + text
			}
			_ = pub.StreamChunks(ctx, m.Reply, strings.NewReader(out))
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sub.Unsubscribe()
		cancel()
		wg.Wait()
	})
	return func() []*bus.LogsRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]*bus.LogsRequest(nil), got...)
	}
}

func TestLogsThroughAPIServer(t *testing.T) {
	s := startStack(t, "logs-node")
	// A mirror pod: the logs go to the static pod's UID on the bus.
	mirror := createPod(t, s.cs, s.node, "static-web", map[string]string{"kubernetes.io/config.mirror": "static-uid-1"})
	s.announceStatic(t, bus.StaticPod{UID: "static-uid-1", Namespace: "default", Name: "static-web"})
	pod := createPod(t, s.cs, s.node, "logs-pod", nil)
	reqs := logResponder(t, s, "hello\nworld\n")
	eventually(t, 15*time.Second, "node registered", func() error {
		_, err := s.cs.CoreV1().Nodes().Get(t.Context(), s.node, metav1.GetOptions{})
		return err
	})
	var out []byte
	eventually(t, 20*time.Second, "kubectl logs through the API server", func() error {
		var err error
		out, err = s.cs.CoreV1().Pods("default").GetLogs(pod.Name, &corev1.PodLogOptions{Container: "hello", TailLines: ptr.To(int64(5)), Timestamps: true}).DoRaw(t.Context())
		return err
	})
	if string(out) != "2026-11-21T12:00:00Z hello\nworld\n" {
		t.Errorf("logs = %q", out)
	}
	out, err := s.cs.CoreV1().Pods("default").GetLogs(mirror.Name, &corev1.PodLogOptions{Container: "hello"}).DoRaw(t.Context())
	if err != nil || string(out) != "hello\nworld\n" {
		t.Errorf("mirror pod logs = %q, %v", out, err)
	}
	all := reqs()
	if len(all) < 2 {
		t.Fatalf("requests = %d", len(all))
	}
	first, last := all[len(all)-2], all[len(all)-1]
	if string(first.PodUID) != string(pod.UID) || ptr.Deref(first.TailLines, 0) != 5 || !first.Timestamps || first.Container != "hello" {
		t.Errorf("request = %+v", first)
	}
	if string(last.PodUID) != "static-uid-1" {
		t.Errorf("mirror pod request UID = %s, want static-uid-1", last.PodUID)
	}
	// An unknown container is a 404 from the kubelet API.
	_, err = s.cs.CoreV1().Pods("default").GetLogs(pod.Name, &corev1.PodLogOptions{Container: "nope"}).DoRaw(t.Context())
	if err == nil {
		t.Errorf("logs of an unknown container succeeded")
	}
}

// TestForeignStatusWriteIsCorrected: when someone else marks the Node
// Unknown (as the node lifecycle controller does), the next status round
// sees the current Node and writes Ready back (the virtual-kubelet bug of
// patching from a stale copy would leave it Unknown).
func TestForeignStatusWriteIsCorrected(t *testing.T) {
	s := startStack(t, "foreign-node")
	stop := s.heartbeat(t, true, 200*time.Millisecond)
	defer stop()
	s.waitReady(t, corev1.ConditionTrue, "KubeletReady")
	n := s.node_(t)
	c := readyCondition(n)
	c.Status, c.Reason, c.Message = corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status."
	if _, err := s.cs.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitReady(t, corev1.ConditionTrue, "KubeletReady")
}
