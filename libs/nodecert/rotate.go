package nodecert

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"
	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/certificate"
)

// rotationLog is the manager's rotation observer: a log line per renewed
// pair (the manager itself logs its steps through klog at V(2)).
type rotationLog struct {
	log  *zap.Logger
	what string
	cur  func() *tls.Certificate
}

// Observe is called with the lifetime the replaced pair lived.
func (r rotationLog) Observe(lived float64) {
	f := []zap.Field{zap.Duration("replacedAfter", time.Duration(lived*float64(time.Second)))}
	if c := r.cur(); c != nil && c.Leaf != nil {
		f = append(f, zap.String("subject", c.Leaf.Subject.CommonName), zap.Time("notAfter", c.Leaf.NotAfter))
	}
	r.log.Info(r.what+" rotated", f...)
}

// NewClientRotator renews the node's client certificate in o.CertDir when
// 70 to 90 % of its lifetime has passed (client-go's certificate manager),
// asking with the node's own credentials (node, a client of the current
// pair) and with the bootstrap credentials when the current pair has
// expired. Start it once EnsureClientCert returned; Stop stops it.
func NewClientRotator(log *zap.Logger, o Options, node kubernetes.Interface) (certificate.Manager, error) {
	store, err := certificate.NewFileStore(clientPairPrefix, o.CertDir, o.CertDir, "", "")
	if err != nil {
		return nil, fmt.Errorf("cert-dir: %w", err)
	}
	var m certificate.Manager
	m, err = certificate.NewManager(&certificate.Config{
		ClientsetFn: func(current *tls.Certificate) (kubernetes.Interface, error) {
			if current != nil {
				return node, nil
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", o.BootstrapKubeconfig)
			if err != nil {
				return nil, fmt.Errorf("bootstrap-kubeconfig: %w", err)
			}
			cfg.UserAgent = o.UserAgent
			return kubernetes.NewForConfig(cfg)
		},
		Template:            clientTemplate(o.Node),
		SignerName:          certificatesv1.KubeAPIServerClientKubeletSignerName,
		Usages:              clientUsages,
		CertificateStore:    store,
		Name:                "kubelet-client",
		CertificateRotation: rotationLog{log: log, what: "the node's client certificate", cur: func() *tls.Certificate { return m.Current() }},
	})
	return m, err
}

// ServerCertUsages: a serving certificate with an ECDSA key.
var serverUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}

// NewServerRotator requests the kubelet API's serving certificate
// (kubernetes.io/kubelet-serving, system:node:<name> in system:nodes, the
// node's host names and addresses as SANs) with the node's credentials,
// and renews it at 70 to 90 % of its lifetime. Its Current is what the
// server hands out at each handshake (tls.Config.GetCertificate), so that
// a renewed pair is served at once and open connections are kept.
// kube-controller-manager does not approve these requests: a cluster
// admin (or an approver of the cluster's) does.
func NewServerRotator(log *zap.Logger, certDir, node string, hostnames []string, ips []net.IP, cs kubernetes.Interface) (certificate.Manager, error) {
	store, err := certificate.NewFileStore(serverPairPrefix, certDir, certDir, "", "")
	if err != nil {
		return nil, fmt.Errorf("cert-dir: %w", err)
	}
	var m certificate.Manager
	m, err = certificate.NewManager(&certificate.Config{
		ClientsetFn: func(*tls.Certificate) (kubernetes.Interface, error) { return cs, nil },
		Template: &x509.CertificateRequest{
			Subject:     pkix.Name{CommonName: NodeUserPrefix + node, Organization: []string{NodesGroup}},
			DNSNames:    hostnames,
			IPAddresses: ips,
		},
		SignerName:          certificatesv1.KubeletServingSignerName,
		Usages:              serverUsages,
		CertificateStore:    store,
		Name:                "kubelet-serving",
		CertificateRotation: rotationLog{log: log, what: "the kubelet API's serving certificate", cur: func() *tls.Certificate { return m.Current() }},
	})
	return m, err
}
