package testenv

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// BootstrappersGroup is the group of every bootstrap token's user
// (system:bootstrap:<token-id>).
const BootstrappersGroup = "system:bootstrappers"

// BootstrapBindings are the ClusterRoleBindings kubeadm makes for a node's
// TLS bootstrap, by name: bootstrap tokens may ask for a node client
// certificate, and have it approved; nodes have their renewals approved.
// (kubeadm binds its own token group, system:bootstrappers:kubeadm:default-node-token;
// these bind every bootstrap token.)
var BootstrapBindings = []struct{ Name, ClusterRole, Group string }{
	{"kubeadm:kubelet-bootstrap", "system:node-bootstrapper", BootstrappersGroup},
	{"kubeadm:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", BootstrappersGroup},
	{"kubeadm:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", NodesGroup},
}

// BootstrapRBAC makes the BootstrapBindings (kept when they exist).
func BootstrapRBAC(ctx context.Context, cs kubernetes.Interface) error {
	for _, b := range BootstrapBindings {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: b.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.ClusterRole},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: b.Group}},
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("testenv: %s: %w", b.Name, err)
		}
	}
	return nil
}

// NewBootstrapToken makes a bootstrap token (<id>.<secret>) valid for ttl:
// the Secret bootstrap-token-<id> in kube-system, of type
// bootstrap.kubernetes.io/token, for authentication only, as `kubeadm
// token create` makes it.
func NewBootstrapToken(ctx context.Context, cs kubernetes.Interface, ttl time.Duration) (string, error) {
	id, secret := randomLower(6), randomLower(16)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: metav1.NamespaceSystem},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id":                       id,
			"token-secret":                   secret,
			"expiration":                     time.Now().Add(ttl).UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"description":                    "splitlet node join",
		},
	}
	if _, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("testenv: bootstrap token: %w", err)
	}
	return id + "." + secret, nil
}

// WriteBootstrapKubeconfig writes a kubeconfig (0600) with the API server,
// its CA and the bootstrap token, as a node is given to join.
func (cp *ControlPlane) WriteBootstrapKubeconfig(path, token string) error {
	return WriteKubeconfigFor(path, "kubelet-bootstrap", &rest.Config{Host: cp.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: cp.CAData}})
}

// randomLower is n characters of [a-z0-9], the alphabet of bootstrap tokens.
func randomLower(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
