package testenv

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/splitlet/splitlet/libs/atomicfile"
)

// Users the control plane knows by bearer token.
const (
	// AdminUser is in system:masters: allowed everything.
	AdminUser = "admin"
	// NobodyUser is authenticated and allowed nothing beyond what RBAC
	// grants every authenticated user (for 403 tests).
	NobodyUser = "nobody"
)

// ControlPlaneOptions tune Start.
type ControlPlaneOptions struct {
	// Dir holds the certificates, etcd data and logs; a new temporary
	// directory when empty (removed by Stop).
	Dir string
	// APIServerArgs are added to kube-apiserver's command line.
	APIServerArgs []string
	// Port of the API server; a free one when 0.
	Port int
	// EtcdURL is an etcd that runs already (https://host:port), reached
	// with EtcdCerts' client certificate; empty: Start runs its own etcd,
	// with certificates of its own in Dir/etcd-pki.
	EtcdURL   string
	EtcdCerts *EtcdCerts
	// KeepCredentials reuses the CA, certificates and tokens a previous
	// start left in Dir, so that clients of that start are still served
	// (a restarted control plane locks no one out).
	KeepCredentials bool
	// RBACOnly authorizes with RBAC alone; by default the Node authorizer
	// and the NodeRestriction admission plugin are on as well, as in a
	// real cluster, so that an agent can run as system:node:<name>.
	RBACOnly bool
	// Audit writes kube-apiserver's audit log (every request, metadata
	// only) to Dir/audit.log; Forbidden reads it.
	Audit bool
	// ServiceAccountAdmission turns the ServiceAccount admission plugin on,
	// as in a real cluster: every pod gets its namespace's service account
	// and a projected token volume, and a pod is refused until the
	// account exists. Off by default, since only kube-controller-manager
	// creates the default service accounts (Controllers).
	ServiceAccountAdmission bool
	// Controllers runs kube-controller-manager and kube-scheduler from
	// bin/ beside the API server (StartControllers), each with its own
	// identity; Stop stops them first.
	Controllers bool
	// CSRControllers runs kube-controller-manager alone with the
	// controllers of a node's TLS bootstrap (StartCSRControllers), when
	// Controllers is off.
	CSRControllers bool
	// ServiceControllers runs kube-controller-manager with the
	// ServiceControllers (a Service's EndpointSlices from its pods), when
	// Controllers is off; with CSRControllers, both sets.
	ServiceControllers bool
	// BootstrapTokens turns on bootstrap token authentication
	// (--enable-bootstrap-token-auth) and makes the RBAC bindings kubeadm
	// makes for TLS bootstrap (BootstrapRBAC).
	BootstrapTokens bool
	// SigningDuration is kube-controller-manager's
	// --cluster-signing-duration, the lifetime of the certificates it
	// signs; 0: its default (a year).
	SigningDuration time.Duration
	// AggregationLayer turns on the API server's aggregation layer (the
	// front proxy's CA and client certificate), so that extension API
	// servers such as metrics-server (StartMetricsServer) serve through it.
	AggregationLayer bool
}

// ControlPlane is a running etcd and kube-apiserver on 127.0.0.1.
type ControlPlane struct {
	// URL of the API server (https://127.0.0.1:port).
	URL string
	// Config is an admin client configuration.
	Config *rest.Config
	// Kubeconfig is the path of an admin kubeconfig file.
	Kubeconfig string
	// Tokens maps user names (AdminUser, NobodyUser) to bearer tokens.
	Tokens map[string]string
	// CAData is the PEM CA bundle that signs the serving certificate and
	// the client certificate kube-apiserver shows kubelets.
	CAData []byte
	// CAFile holds CAData: a kubelet's (nodehb's) client CA file, so that
	// it can authenticate kube-apiserver's proxied requests (logs, exec).
	CAFile string
	// Dir is the working directory (logs: etcd.log, kube-apiserver.log),
	// mode 0700.
	Dir string
	// EtcdURL is etcd's client URL (https), which takes only clients with
	// a client certificate of EtcdCerts' CA.
	EtcdURL   string
	EtcdCerts *EtcdCerts

	etcd, apiserver *process
	// controllerManager and scheduler run when ControlPlaneOptions.Controllers.
	controllerManager, scheduler *process
	pki                          *pki
	auditLog                     string
	ownDir                       bool
	restarts                     int // of kube-apiserver (RestartAPIServer)
	signingDuration              time.Duration
}

// StartControlPlane starts etcd and kube-apiserver and waits until the API
// server answers /readyz.
func StartControlPlane(ctx context.Context, opts ControlPlaneOptions) (cp *ControlPlane, err error) {
	etcdBin, apiBin, err := controlPlaneBinaries(opts)
	if err != nil {
		return nil, err
	}
	cp = &ControlPlane{Dir: opts.Dir, Tokens: map[string]string{}, signingDuration: opts.SigningDuration}
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "splitlet-cp-"); err != nil {
			return nil, err
		}
		cp.ownDir = true
	}
	// On an error, stop what was started (by then the result cp is nil).
	started := cp
	defer func() {
		if err != nil {
			started.Stop()
		}
	}()
	if err = PrivateDir(cp.Dir); err != nil {
		return nil, err
	}
	tokenFile, err := cp.writeCredentials(opts.KeepCredentials)
	if err != nil {
		return nil, err
	}

	waitCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cp.EtcdURL, cp.EtcdCerts = opts.EtcdURL, opts.EtcdCerts
	if cp.EtcdURL == "" {
		if err = onFreePorts(func() error { return cp.startEtcd(waitCtx, etcdBin, opts.KeepCredentials) }); err != nil {
			return nil, err
		}
	}
	startAPI := func() error {
		port := opts.Port
		if port == 0 {
			if port, err = FreePort(); err != nil {
				return err
			}
		}
		cp.URL = "https://127.0.0.1:" + itoa(port)
		args, err := cp.apiServerArgs(opts, port, tokenFile)
		if err != nil {
			return err
		}
		return cp.startAPIServer(waitCtx, apiBin, args)
	}
	if opts.Port != 0 {
		err = startAPI()
	} else {
		err = onFreePorts(startAPI)
	}
	if err != nil {
		return nil, err
	}
	if err = cp.startAddOns(ctx, opts); err != nil {
		return nil, err
	}
	return cp, nil
}

// controlPlaneBinaries finds kube-apiserver and, when opts names no running
// etcd, etcd; a running etcd must be reached over TLS with EtcdCerts.
func controlPlaneBinaries(opts ControlPlaneOptions) (etcdBin, apiBin string, err error) {
	if opts.EtcdURL == "" {
		if etcdBin, err = Binary("etcd"); err != nil {
			return "", "", err
		}
	} else if opts.EtcdCerts == nil || !strings.HasPrefix(opts.EtcdURL, "https://") {
		return "", "", errNoEtcdCerts
	}
	if apiBin, err = Binary("kube-apiserver"); err != nil {
		return "", "", err
	}
	return etcdBin, apiBin, nil
}

// writeCredentials makes (or, when keep, reloads) the certificates in Dir
// and writes the token file of AdminUser and NobodyUser, keeping their
// earlier tokens when keep; it returns the token file's path.
func (cp *ControlPlane) writeCredentials(keep bool) (string, error) {
	newCerts := newPKI
	if keep {
		newCerts = loadOrNewPKI
	}
	certs, err := newCerts(cp.Dir)
	if err != nil {
		return "", fmt.Errorf("testenv: certificates: %w", err)
	}
	cp.pki = certs
	cp.CAData = certs.caPEM
	cp.CAFile = certs.caFile
	tokenFile := filepath.Join(cp.Dir, "tokens.csv")
	var kept map[string]string
	if keep {
		kept = readTokens(tokenFile)
	}
	var tokenLines []string
	for _, u := range []struct{ name, groups string }{{AdminUser, "system:masters"}, {NobodyUser, ""}} {
		tok := kept[u.name]
		if tok == "" {
			tok = randomToken()
		}
		cp.Tokens[u.name] = tok
		tokenLines = append(tokenLines, fmt.Sprintf("%s,%s,%s,%q", tok, u.name, u.name, u.groups))
	}
	if err = os.WriteFile(tokenFile, []byte(strings.Join(tokenLines, "\n")+"\n"), 0o600); err != nil {
		return "", err
	}
	return tokenFile, nil
}

// apiServerArgs is kube-apiserver's command line for opts: TLS with the
// control plane's certificates, the token file, the authorizers and
// admission plugins, and what the options turn on.
func (cp *ControlPlane) apiServerArgs(opts ControlPlaneOptions, port int, tokenFile string) ([]string, error) {
	certs := cp.pki
	args := []string{
		"--etcd-servers=" + cp.EtcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + itoa(port),
		"--cert-dir=" + filepath.Join(cp.Dir, "certs"),
		"--tls-cert-file=" + certs.certFile,
		"--tls-private-key-file=" + certs.keyFile,
		"--client-ca-file=" + certs.caFile,
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=" + authorizationMode(opts.RBACOnly),
		// NodeRestriction: a node may change only its own Node, Lease and
		// the pods bound to it (with the Node authorizer above).
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + certs.saPub,
		"--service-account-signing-key-file=" + certs.saKey,
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--allow-privileged=true",
		"--enable-priority-and-fairness=false",
		// How kube-apiserver reaches a kubelet (nodehb) for logs and exec:
		// the Node's InternalIP and kubelet port, with this client certificate.
		"--kubelet-client-certificate=" + certs.kubeletClientCert,
		"--kubelet-client-key=" + certs.kubeletClientKey,
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--v=0",
	}
	args = append(args, cp.EtcdCerts.APIServerArgs()...)
	if opts.BootstrapTokens {
		args = append(args, "--enable-bootstrap-token-auth=true")
	}
	if !opts.ServiceAccountAdmission {
		// Without kube-controller-manager nothing creates the default
		// service account of a namespace, so its admission is off.
		args = append(args, "--disable-admission-plugins=ServiceAccount")
	}
	if opts.AggregationLayer {
		aggregation, err := cp.aggregationArgs(opts.KeepCredentials)
		if err != nil {
			return nil, err
		}
		args = append(args, aggregation...)
	}
	args = append(args, opts.APIServerArgs...)
	if opts.Audit {
		auditArgs, err := cp.auditArgs()
		if err != nil {
			return nil, err
		}
		args = append(args, auditArgs...)
	}
	return args, nil
}

// startAPIServer runs kube-apiserver with args, waits until it answers
// /readyz to the admin and writes the admin's Config and kubeconfig.
func (cp *ControlPlane) startAPIServer(ctx context.Context, bin string, args []string) (err error) {
	cp.apiserver, err = startProcess("kube-apiserver", filepath.Join(cp.Dir, "kube-apiserver.log"), bin, args...)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.pki.caPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	if err = cp.apiserver.waitFor(ctx, "/readyz", func() error { return httpOK(client, cp.URL+"/readyz", cp.Tokens[AdminUser]) }); err != nil {
		return err
	}
	cp.Config = cp.ConfigFor(AdminUser)
	cp.Kubeconfig = filepath.Join(cp.Dir, "kubeconfig")
	return cp.WriteKubeconfig(cp.Kubeconfig, AdminUser)
}

// startAddOns makes the bootstrap token RBAC bindings and starts the
// controllers opts asks for, once the API server serves.
func (cp *ControlPlane) startAddOns(ctx context.Context, opts ControlPlaneOptions) error {
	if opts.BootstrapTokens {
		if err := BootstrapRBAC(ctx, cp.Clientset()); err != nil {
			return err
		}
	}
	switch {
	case opts.Controllers:
		return cp.StartControllers(ctx)
	case opts.CSRControllers || opts.ServiceControllers:
		var names []string
		if opts.CSRControllers {
			names = append(names, CSRControllers...)
		}
		if opts.ServiceControllers {
			names = append(names, ServiceControllers...)
		}
		return cp.startControllers(ctx, false, names)
	}
	return nil
}

// startEtcd runs etcd on two free ports, with TLS and client certificates
// on both (certificates in Dir/etcd-pki, those of an earlier start when
// keep), and waits until it is healthy.
func (cp *ControlPlane) startEtcd(ctx context.Context, bin string, keep bool) error {
	certs := newEtcdCerts
	if keep {
		certs = EnsureEtcdCerts
	}
	var err error
	if cp.EtcdCerts, err = certs(filepath.Join(cp.Dir, "etcd-pki")); err != nil {
		return fmt.Errorf("testenv: etcd certificates: %w", err)
	}
	if !keep {
		// a fresh store: also after a start that failed to bind.
		if err := os.RemoveAll(filepath.Join(cp.Dir, "etcd")); err != nil {
			return err
		}
	}
	clientPort, err := FreePort()
	if err != nil {
		return err
	}
	peerPort, err := FreePort()
	if err != nil {
		return err
	}
	cp.EtcdURL = "https://127.0.0.1:" + itoa(clientPort)
	peerURL := "https://127.0.0.1:" + itoa(peerPort)
	args := append([]string{
		"--name=testenv",
		"--data-dir=" + filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls=" + cp.EtcdURL,
		"--advertise-client-urls=" + cp.EtcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=testenv=" + peerURL,
		"--unsafe-no-fsync=true",
		"--quota-backend-bytes=8589934592",
		"--log-level=warn",
	}, cp.EtcdCerts.ServerArgs()...)
	if cp.etcd, err = startProcess("etcd", filepath.Join(cp.Dir, "etcd.log"), bin, args...); err != nil {
		return err
	}
	tlsConfig, err := cp.EtcdCerts.ClientTLS()
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}, Timeout: 5 * time.Second}
	return cp.etcd.waitFor(ctx, "etcd health", func() error { return httpOK(client, cp.EtcdURL+"/health", "") })
}

// ConfigFor returns a client configuration that authenticates as the user.
func (cp *ControlPlane) ConfigFor(user string) *rest.Config {
	return &rest.Config{
		Host:            cp.URL,
		BearerToken:     cp.Tokens[user],
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.CAData},
		QPS:             1000,
		Burst:           2000,
	}
}

// Clientset is an admin clientset.
func (cp *ControlPlane) Clientset() kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(cp.Config)
}

// WriteKubeconfig writes a kubeconfig for the user (a token user) to path.
func (cp *ControlPlane) WriteKubeconfig(path, user string) error {
	return WriteKubeconfigFor(path, user, cp.ConfigFor(user))
}

// WriteKubeconfigFor writes a kubeconfig with cfg's server, CA and
// credentials (token or client certificate) to path, mode 0600 (also over
// a file of another mode), at once: a reader sees the old file or the new
// one. A missing directory is made with mode 0700.
func WriteKubeconfigFor(path, user string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["splitlet"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["splitlet"] = &clientcmdapi.Context{Cluster: "splitlet", AuthInfo: user}
	kc.CurrentContext = "splitlet"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, data)
}

// ClientConfig returns a client configuration that authenticates with a
// new client certificate signed by the control plane's CA: the user is its
// common name, the groups its organizations (how a kubelet's identity
// system:node:<name> in system:nodes is given).
func (cp *ControlPlane) ClientConfig(user string, groups ...string) (*rest.Config, error) {
	if cp.pki == nil || cp.pki.caKey == nil {
		return nil, errNoCA
	}
	certPEM, keyPEM, err := cp.pki.signPEM(certificate{cn: user, orgs: groups, usages: clientUse})
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            cp.URL,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.CAData, CertData: certPEM, KeyData: keyPEM},
	}, nil
}

// NodeUser is the user of a node's identity, in the group NodesGroup: a
// kubelet's, whom the Node authorizer and NodeRestriction keep to the
// node's own objects.
func NodeUser(node string) string { return "system:node:" + node }

// NodesGroup is the group of every node's identity.
const NodesGroup = "system:nodes"

// WriteClientKubeconfig writes a kubeconfig to path (0600) whose
// credentials are a new client certificate of the user and groups, signed
// by the control plane's CA.
func (cp *ControlPlane) WriteClientKubeconfig(path, user string, groups ...string) error {
	cfg, err := cp.ClientConfig(user, groups...)
	if err != nil {
		return err
	}
	return WriteKubeconfigFor(path, user, cfg)
}

// ServerCertificate returns a PEM serving certificate and key for the IP
// addresses and DNS names, signed by the control plane's CA (for a server
// the stages reach with the same CA file, such as nats-server).
func (cp *ControlPlane) ServerCertificate(ips []net.IP, dns []string) (certPEM, keyPEM []byte, err error) {
	if cp.pki == nil || cp.pki.caKey == nil {
		return nil, nil, errNoCA
	}
	return cp.pki.signPEM(certificate{cn: "splitlet-server", usages: serverUse, ips: ips, dns: dns})
}

func authorizationMode(rbacOnly bool) string {
	if rbacOnly {
		return "RBAC"
	}
	return "Node,RBAC"
}

// readTokens reads the user→token pairs of a token file written by an
// earlier start; nil when there is none.
func readTokens(path string) map[string]string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.SplitN(line, ",", 3)
		if len(fields) == 3 && fields[0] != "" {
			out[fields[1]] = fields[0]
		}
	}
	return out
}

// Stop stops kube-apiserver, then etcd, and removes the directory if Start
// made it.
func (cp *ControlPlane) Stop() {
	cp.stopControllers()
	if cp.apiserver != nil {
		cp.apiserver.stop(10 * time.Second)
	}
	if cp.etcd != nil {
		cp.etcd.stop(10 * time.Second)
	}
	if cp.ownDir {
		_ = os.RemoveAll(cp.Dir)
	}
}

// Running reports whether the processes it started are still up.
func (cp *ControlPlane) Running() bool {
	for _, p := range []*process{cp.etcd, cp.controllerManager, cp.scheduler} {
		if p != nil && p.exited() {
			return false
		}
	}
	return cp.apiserver != nil && !cp.apiserver.exited()
}

// ControlPlaneForTest starts a control plane for t and stops it when t ends;
// under -short it skips t.
func ControlPlaneForTest(t testing.TB, opts ...ControlPlaneOptions) *ControlPlane {
	t.Helper()
	SkipShort(t, "etcd and kube-apiserver")
	var o ControlPlaneOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	cp, err := StartControlPlane(context.Background(), o)
	if err != nil {
		t.Fatalf("test control plane: %v", err)
	}
	t.Cleanup(cp.Stop)
	return cp
}

func httpOK(c *http.Client, url, token string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// PIDs of the control plane processes.
func (cp *ControlPlane) PIDs() []int {
	var out []int
	for _, p := range []*process{cp.etcd, cp.apiserver, cp.controllerManager, cp.scheduler} {
		if p != nil && p.cmd.Process != nil {
			out = append(out, p.cmd.Process.Pid)
		}
	}
	return out
}

// WhoAmI is the user and groups the API server sees behind a kubeconfig's
// credentials (SelfSubjectReview, open to every authenticated user).
func WhoAmI(ctx context.Context, kubeconfig string) (string, []string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return "", nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", nil, err
	}
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", nil, err
	}
	return r.Status.UserInfo.Username, r.Status.UserInfo.Groups, nil
}

// onFreePorts runs start, which binds ports FreePort chose, again (at most
// three times) when a port was taken between the choice and the bind by
// another process of the host (tests of other packages run at once).
func onFreePorts(start func() error) error {
	var err error
	for range 3 {
		if err = start(); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
	}
	return err
}
