package testenv

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// KubeDNSService names the cluster DNS Service, in kube-system, as kubeadm
// names it.
const KubeDNSService = "kube-dns"

// makeObjects gives CoreDNSUser its role and makes the kube-dns Service
// with an EndpointSlice of its own: the Service has no selector, since
// CoreDNS is a host process, not a pod; its endpoint is the gateway
// address CoreDNS listens on.
func (n *ClusterNetwork) makeObjects(ctx context.Context, cp *ControlPlane) error {
	cs := cp.Clientset()
	if err := coreDNSRBAC(ctx, cs); err != nil {
		return fmt.Errorf("testenv: CoreDNS role: %w", err)
	}
	if err := n.kubeDNSService(ctx, cs); err != nil {
		return fmt.Errorf("testenv: %s Service: %w", KubeDNSService, err)
	}
	return nil
}

// coreDNSRBAC is kubeadm's system:coredns ClusterRole (read the Services,
// EndpointSlices, pods and namespaces the kubernetes plugin serves), bound
// to CoreDNSUser.
func coreDNSRBAC(ctx context.Context, cs kubernetes.Interface) error {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: CoreDNSUser},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: CoreDNSUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: CoreDNSUser},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: CoreDNSUser}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// kubeDNSService makes the kube-dns Service at DNSServiceIP (ports 53 over
// UDP and TCP) and its EndpointSlice: the gateway address, ready.
func (n *ClusterNetwork) kubeDNSService(ctx context.Context, cs kubernetes.Interface) error {
	ports := []corev1.ServicePort{
		{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
		{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: KubeDNSService, Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{"k8s-app": KubeDNSService, "kubernetes.io/name": "CoreDNS"}},
		Spec: corev1.ServiceSpec{ClusterIP: n.DNS.String(), Ports: ports},
	}
	if _, err := cs.CoreV1().Services(metav1.NamespaceSystem).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	var slicePorts []discoveryv1.EndpointPort
	for _, p := range ports {
		slicePorts = append(slicePorts, discoveryv1.EndpointPort{Name: &p.Name, Protocol: &p.Protocol, Port: &p.Port})
	}
	ready := true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: KubeDNSService + "-coredns", Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: KubeDNSService,
				discoveryv1.LabelManagedBy:   "testenv.splitlet.io",
			}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{n.Gateway.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName:   &n.opts.Node,
		}},
		Ports: slicePorts,
	}
	slices := cs.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem)
	_, err := slices.Create(ctx, slice, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// A network started before on this control plane: its gateway.
		var old *discoveryv1.EndpointSlice
		if old, err = slices.Get(ctx, slice.Name, metav1.GetOptions{}); err == nil {
			slice.ResourceVersion = old.ResourceVersion
			_, err = slices.Update(ctx, slice, metav1.UpdateOptions{})
		}
	}
	return err
}
