// Package nodecert gives a node its API server credentials as a kubelet
// gets them: TLS bootstrap (a bootstrap token asks for the node's client
// certificate by CertificateSigningRequest), rotation of that certificate
// and of the kubelet API's serving certificate (client-go's
// util/certificate manager), and a client transport that follows the
// certificate files as they change, so that every stage of a node, in the
// process that rotates them or in another, uses the current pair.
package nodecert

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/client-go/util/keyutil"

	"github.com/splitlet/splitlet/libs/atomicfile"
)

// The node's identity: the user and group a kubelet's client certificate
// names, which the Node authorizer and NodeRestriction recognise.
const (
	NodeUserPrefix = "system:node:"
	NodesGroup     = "system:nodes"
)

// The certificate pairs in the certificate directory, as the kubelet names
// them: <prefix>-current.pem (a link to the newest <prefix>-<time>.pem,
// certificate and key in one file, 0600).
const (
	clientPairPrefix = "kubelet-client"
	serverPairPrefix = "kubelet-server"
)

// Options say where the node's credentials come from and go.
type Options struct {
	// Node is the node's name: the certificate is for system:node:<Node>.
	Node string
	// BootstrapKubeconfig holds the bootstrap token (or any credential
	// allowed to create CSRs for the node's client certificate).
	BootstrapKubeconfig string
	// Kubeconfig is where the node's kubeconfig is written: the server and
	// CA of BootstrapKubeconfig, and the client certificate file.
	Kubeconfig string
	// CertDir holds the certificate pairs.
	CertDir string
	// UserAgent of the bootstrap client.
	UserAgent string
}

// ClientCertPath is the file every stage of the node reads its client
// certificate and key from.
func ClientCertPath(certDir string) string {
	return filepath.Join(certDir, clientPairPrefix+"-current.pem")
}

// ServerCertPath is the kubelet API's current serving pair.
func ServerCertPath(certDir string) string {
	return filepath.Join(certDir, serverPairPrefix+"-current.pem")
}

// clientTemplate is the node's client CSR: system:node:<name> in
// system:nodes (what kube-controller-manager's approver checks).
func clientTemplate(node string) *x509.CertificateRequest {
	return &x509.CertificateRequest{Subject: pkix.Name{CommonName: NodeUserPrefix + node, Organization: []string{NodesGroup}}}
}

// clientUsages: a client certificate with an ECDSA key (the manager's and
// the kubelet's key type), which needs no key encipherment.
var clientUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}

// EnsureClientCert makes sure o.Kubeconfig names a valid client certificate
// of the node: when it does not (first start, or the certificate expired
// while the node was down), it asks for one with the bootstrap credentials
// and waits until it is signed (an approver and a signer must act: a
// cluster's kube-controller-manager), then writes the pair (0600) and the
// kubeconfig. It returns when ctx ends.
func EnsureClientCert(ctx context.Context, log *zap.Logger, o Options) error {
	// The kubeconfig names the pair by an absolute path, for any process.
	certDir, err := filepath.Abs(o.CertDir)
	if err != nil {
		return fmt.Errorf("cert-dir: %w", err)
	}
	o.CertDir = certDir
	if err := os.MkdirAll(o.CertDir, 0o700); err != nil {
		return fmt.Errorf("cert-dir: %w", err)
	}
	store, err := certificate.NewFileStore(clientPairPrefix, o.CertDir, o.CertDir, "", "")
	if err != nil {
		return fmt.Errorf("cert-dir: %w", err)
	}
	bootstrap, err := clientcmd.LoadFromFile(o.BootstrapKubeconfig)
	if err != nil {
		return fmt.Errorf("bootstrap-kubeconfig: %w", err)
	}
	if cert, err := store.Current(); err == nil && cert.Leaf != nil && time.Now().Before(cert.Leaf.NotAfter) {
		log.Info("the node's client certificate is valid", zap.String("subject", cert.Leaf.Subject.CommonName), zap.Time("notAfter", cert.Leaf.NotAfter))
		if kubeconfigNames(o.Kubeconfig, ClientCertPath(o.CertDir)) {
			return nil
		}
		return writeKubeconfig(o.Kubeconfig, bootstrap, ClientCertPath(o.CertDir))
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*bootstrap, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("bootstrap-kubeconfig: %w", err)
	}
	cfg.UserAgent = o.UserAgent
	if err := requestClientCert(ctx, log, cfg, store, o.Node); err != nil {
		return err
	}
	return writeKubeconfig(o.Kubeconfig, bootstrap, ClientCertPath(o.CertDir))
}

// requestClientCert asks for the node's client certificate with cfg's
// credentials, waits until it is issued and stores it.
func requestClientCert(ctx context.Context, log *zap.Logger, cfg *rest.Config, store certificate.Store, node string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	keyPEM, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return err
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return err
	}
	csrPEM, err := certutil.MakeCSRFromTemplate(key, clientTemplate(node))
	if err != nil {
		return err
	}
	for {
		name, uid, err := csr.RequestCertificateWithContext(ctx, cs, csrPEM, "", certificatesv1.KubeAPIServerClientKubeletSignerName, nil, clientUsages, key)
		if err == nil {
			log.Info("asked for the node's client certificate", zap.String("csr", name))
			var certPEM []byte
			if certPEM, err = csr.WaitForCertificate(ctx, cs, name, uid); err == nil {
				cert, err := store.Update(certPEM, keyPEM)
				if err != nil {
					return fmt.Errorf("store the node's client certificate: %w", err)
				}
				log.Info("the node's client certificate is issued", zap.String("subject", cert.Leaf.Subject.CommonName), zap.Time("notAfter", cert.Leaf.NotAfter))
				return nil
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the node's client certificate: %w", errors.Join(ctx.Err(), err))
		}
		log.Warn("no client certificate yet; asking again", zap.Error(err))
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
}

// kubeconfigNames reports whether the kubeconfig at path exists and names
// certFile as its client certificate and key.
func kubeconfigNames(path, certFile string) bool {
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return false
	}
	ctx := kc.Contexts[kc.CurrentContext]
	if ctx == nil || kc.AuthInfos[ctx.AuthInfo] == nil {
		return false
	}
	ai := kc.AuthInfos[ctx.AuthInfo]
	return ai.ClientCertificate == certFile && ai.ClientKey == certFile
}

// writeKubeconfig writes the node's kubeconfig at once (0600): the
// bootstrap kubeconfig's server and CA, the client certificate and key of
// certFile (which rotation replaces in place).
func writeKubeconfig(path string, bootstrap *clientcmdapi.Config, certFile string) error {
	bctx := bootstrap.Contexts[bootstrap.CurrentContext]
	if bctx == nil || bootstrap.Clusters[bctx.Cluster] == nil {
		return errors.New("bootstrap-kubeconfig: no current context with a cluster")
	}
	cluster := bootstrap.Clusters[bctx.Cluster].DeepCopy()
	if cluster.CertificateAuthority != "" && len(cluster.CertificateAuthorityData) == 0 {
		ca, err := os.ReadFile(cluster.CertificateAuthority)
		if err != nil {
			return fmt.Errorf("bootstrap-kubeconfig: CA: %w", err)
		}
		cluster.CertificateAuthority, cluster.CertificateAuthorityData = "", ca
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["default-cluster"] = cluster
	kc.AuthInfos["default-auth"] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: certFile}
	kc.Contexts["default-context"] = &clientcmdapi.Context{Cluster: "default-cluster", AuthInfo: "default-auth"}
	kc.CurrentContext = "default-context"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, data)
}
