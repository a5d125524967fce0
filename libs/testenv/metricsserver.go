package testenv

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/splitlet/splitlet/libs/atomicfile"
)

// MetricsServerBinary is metrics-server, which `make testenv` builds into
// BinDir (hack/testenv/metrics-server).
const MetricsServerBinary = "metrics-server"

// MetricsServerUser is metrics-server's identity: a client certificate
// of the control plane's CA, with the RBAC of metrics-server's manifests
// (nodes/metrics, pods and nodes; authentication and authorization
// delegated to the API server).
const MetricsServerUser = "metrics-server"

// aggregationArgs are kube-apiserver's aggregation layer flags: the
// front proxy's CA (a CA of its own) and the client certificate the API
// server shows the extension API servers it proxies to, with the user in
// request headers. With keep, those of an earlier start are used when all
// three files are there.
func (cp *ControlPlane) aggregationArgs(keep bool) ([]string, error) {
	caFile := filepath.Join(cp.Dir, "front-proxy-ca.crt")
	certFile := filepath.Join(cp.Dir, "front-proxy-client.crt")
	keyFile := filepath.Join(cp.Dir, "front-proxy-client.key")
	if !keep || !filesExist(caFile, certFile, keyFile) {
		if err := writeFrontProxyCerts(caFile, certFile, keyFile); err != nil {
			return nil, err
		}
	}
	return []string{
		"--requestheader-client-ca-file=" + caFile,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + certFile,
		"--proxy-client-key-file=" + keyFile,
	}, nil
}

// writeFrontProxyCerts makes the front proxy's CA and its client
// certificate (CN front-proxy-client).
func writeFrontProxyCerts(caFile, certFile, keyFile string) error {
	caDER, caKeyDER, err := newCA("splitlet-testenv-front-proxy-ca")
	if err != nil {
		return err
	}
	front := &pki{}
	if err := front.useCA(caDER, caKeyDER); err != nil {
		return err
	}
	certDER, keyDER, err := front.sign(certificate{cn: "front-proxy-client", usages: clientUse})
	if err != nil {
		return err
	}
	for _, w := range []struct {
		path, kind string
		der        []byte
	}{{caFile, "CERTIFICATE", caDER}, {certFile, "CERTIFICATE", certDER}, {keyFile, "EC PRIVATE KEY", keyDER}} {
		if err := writePEM(w.path, w.kind, w.der); err != nil {
			return err
		}
	}
	return nil
}

// filesExist reports whether every path exists.
func filesExist(paths ...string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

// MetricsServer is a metrics-server on 127.0.0.1 serving the resource
// metrics API (metrics.k8s.io/v1beta1, what `kubectl top` reads) through
// the API server's aggregation layer.
type MetricsServer struct {
	// Port it serves on.
	Port int
	// Log is its log file.
	Log  string
	proc *process
}

// MetricsServerOptions tune StartMetricsServer.
type MetricsServerOptions struct {
	// Dir holds its kubeconfig, certificates and log.
	Dir string
	// Resolution is --metric-resolution (at least 10 s); 0: 10 s.
	Resolution time.Duration
	// KubeletCAFile verifies the nodes' serving certificates; empty:
	// --kubelet-insecure-tls (a node's self-signed certificate).
	KubeletCAFile string
}

// StartMetricsServer registers metrics-server with the control plane
// (started with AggregationLayer; RegisterMetricsServer) and starts it on
// a free port of 127.0.0.1. It scrapes each node's kubelet API at the
// node's InternalIP and status port, as MetricsServerUser (a client
// certificate). It returns once the APIService is Available.
func StartMetricsServer(ctx context.Context, cp *ControlPlane, opts MetricsServerOptions) (*MetricsServer, error) {
	bin, err := Binary(MetricsServerBinary)
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	m := &MetricsServer{Port: port, Log: filepath.Join(opts.Dir, "metrics-server.log")}
	if err := RegisterMetricsServer(ctx, cp, opts.Dir, port); err != nil {
		return nil, err
	}
	if m.proc, err = startProcess(MetricsServerBinary, m.Log, bin, MetricsServerArgs(opts.Dir, port, opts)...); err != nil {
		return nil, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := m.proc.waitFor(waitCtx, "APIService v1beta1.metrics.k8s.io Available", func() error {
		return apiServiceAvailable(ctx, cp)
	}); err != nil {
		m.Stop()
		return nil, err
	}
	return m, nil
}

// The files RegisterMetricsServer writes in its directory, which
// MetricsServerArgs names: metrics-server's kubeconfig (a client
// certificate of MetricsServerUser) and its serving certificate and key.
const (
	MetricsServerKubeconfig = "kubeconfig"
	MetricsServerCert       = "tls.crt"
	MetricsServerKey        = "tls.key"
)

// RegisterMetricsServer writes metrics-server's credentials to dir (0600)
// and makes what routes metrics.k8s.io/v1beta1 to a metrics-server on
// 127.0.0.1:port: its RBAC, a Service kube-system/metrics-server of type
// ExternalName "localhost" (there is no service network: the aggregator
// resolves an ExternalName service to its name and the APIService's port)
// and the APIService v1beta1.metrics.k8s.io with the control plane's CA,
// which signs metrics-server's serving certificate. What exists already
// (an earlier start) is kept, the APIService brought to this port and CA.
func RegisterMetricsServer(ctx context.Context, cp *ControlPlane, dir string, port int) error {
	if err := cp.WriteClientKubeconfig(filepath.Join(dir, MetricsServerKubeconfig), MetricsServerUser); err != nil {
		return err
	}
	if err := metricsServerCert(cp, dir); err != nil {
		return err
	}
	cs := cp.Clientset()
	if err := metricsServerRBAC(ctx, cs); err != nil {
		return fmt.Errorf("testenv: metrics-server RBAC: %w", err)
	}
	return registerMetricsAPI(ctx, cp, cs, port)
}

// MetricsServerArgs is metrics-server's command line with the files
// RegisterMetricsServer wrote in dir (as the process sees them), serving
// on 127.0.0.1:port.
func MetricsServerArgs(dir string, port int, opts MetricsServerOptions) []string {
	if opts.Resolution == 0 {
		opts.Resolution = 10 * time.Second
	}
	kubeconfig := filepath.Join(dir, MetricsServerKubeconfig)
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + itoa(port),
		"--tls-cert-file=" + filepath.Join(dir, MetricsServerCert),
		"--tls-private-key-file=" + filepath.Join(dir, MetricsServerKey),
		"--metric-resolution=" + opts.Resolution.String(),
		"--kubelet-request-timeout=5s",
		"--kubelet-use-node-status-port",
		"--kubelet-preferred-address-types=InternalIP",
		"--v=1", // incomplete node and pod figures are logged
	}
	if opts.KubeletCAFile != "" {
		return append(args, "--kubelet-certificate-authority="+opts.KubeletCAFile)
	}
	return append(args, "--kubelet-insecure-tls")
}

// Stop stops metrics-server.
func (m *MetricsServer) Stop() {
	if m != nil && m.proc != nil {
		m.proc.stop(5 * time.Second)
	}
}

// metricsServerCert writes metrics-server's serving certificate to dir,
// for the name the aggregator checks (<service>.<namespace>.svc) and
// 127.0.0.1.
func metricsServerCert(cp *ControlPlane, dir string) error {
	certPEM, keyPEM, err := cp.ServerCertificate([]net.IP{net.ParseIP("127.0.0.1")},
		[]string{"metrics-server.kube-system.svc", "localhost"})
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(dir, MetricsServerCert), certPEM); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, MetricsServerKey), keyPEM)
}

// metricsServerRBAC grants MetricsServerUser what metrics-server's own
// manifests grant its service account.
func metricsServerRBAC(ctx context.Context, cs kubernetes.Interface) error {
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: MetricsServerUser}}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:metrics-server"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes/metrics"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}},
	}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for name, ref := range map[string]string{"system:metrics-server": "system:metrics-server", "metrics-server:system:auth-delegator": "system:auth-delegator"} {
		b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ref}}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "metrics-server-auth-reader", Namespace: metav1.NamespaceSystem}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"}}
	if _, err := cs.RbacV1().RoleBindings(metav1.NamespaceSystem).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// registerMetricsAPI makes the Service and the APIService that route
// metrics.k8s.io/v1beta1 to metrics-server on localhost:port.
func registerMetricsAPI(ctx context.Context, cp *ControlPlane, cs kubernetes.Interface, port int) error {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "metrics-server", Namespace: metav1.NamespaceSystem},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"}}
	if _, err := cs.CoreV1().Services(metav1.NamespaceSystem).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("testenv: metrics-server Service: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	as := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1beta1.metrics.k8s.io"},
		"spec": map[string]any{
			"group": "metrics.k8s.io", "version": "v1beta1",
			"service":              map[string]any{"name": "metrics-server", "namespace": metav1.NamespaceSystem, "port": int64(port)},
			"caBundle":             base64.StdEncoding.EncodeToString(cp.CAData),
			"groupPriorityMinimum": int64(100), "versionPriority": int64(100),
		},
	}}
	apis := dyn.Resource(apiServiceGVR)
	_, err = apis.Create(ctx, as, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var old *unstructured.Unstructured
		if old, err = apis.Get(ctx, as.GetName(), metav1.GetOptions{}); err == nil {
			as.SetResourceVersion(old.GetResourceVersion())
			_, err = apis.Update(ctx, as, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("testenv: APIService v1beta1.metrics.k8s.io: %w", err)
	}
	return nil
}

// apiServiceAvailable is nil once v1beta1.metrics.k8s.io is Available.
func apiServiceAvailable(ctx context.Context, cp *ControlPlane) error {
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	as, err := dyn.Resource(apiServiceGVR).Get(ctx, "v1beta1.metrics.k8s.io", metav1.GetOptions{})
	if err != nil {
		return err
	}
	conds, _, _ := unstructured.NestedSlice(as.Object, "status", "conditions")
	for _, c := range conds {
		c, _ := c.(map[string]any)
		if c["type"] == "Available" {
			if c["status"] == "True" {
				return nil
			}
			return fmt.Errorf("Available %v: %v %v", c["status"], c["reason"], c["message"])
		}
	}
	return errors.New("no Available condition")
}
