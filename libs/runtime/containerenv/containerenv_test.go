package containerenv

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Service variables as the kubelet makes them, after the container's own
// variables, which win; $(VAR) sees them.
func TestServiceVariables(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "my-db"}, Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.9",
		Ports: []corev1.ServicePort{{Name: "sql", Port: 5432, Protocol: corev1.ProtocolTCP}, {Port: 53, Protocol: corev1.ProtocolUDP}}}}
	headless := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "none"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone,
		Ports: []corev1.ServicePort{{Port: 1}}}}
	vars := ServiceVariables([]*corev1.Service{svc, headless})
	want := []string{"MY_DB_SERVICE_HOST=10.0.0.9", "MY_DB_SERVICE_PORT=5432", "MY_DB_SERVICE_PORT_SQL=5432",
		"MY_DB_PORT=tcp://10.0.0.9:5432", "MY_DB_PORT_5432_TCP=tcp://10.0.0.9:5432", "MY_DB_PORT_5432_TCP_PROTO=tcp",
		"MY_DB_PORT_5432_TCP_PORT=5432", "MY_DB_PORT_5432_TCP_ADDR=10.0.0.9", "MY_DB_PORT_53_UDP=udp://10.0.0.9:53",
		"MY_DB_PORT_53_UDP_PROTO=udp", "MY_DB_PORT_53_UDP_PORT=53", "MY_DB_PORT_53_UDP_ADDR=10.0.0.9"}
	if !slices.Equal(vars, want) {
		t.Fatalf("variables:\n%v\nwant\n%v", vars, want)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	c := &corev1.Container{Env: []corev1.EnvVar{{Name: "MY_DB_SERVICE_PORT", Value: "1"}, {Name: "URL", Value: "db:$(MY_DB_SERVICE_PORT_SQL)"}}}
	env, err := Build(context.Background(), pod, c, Options{ServiceEnv: vars})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(env, "MY_DB_SERVICE_PORT=1") || slices.Contains(env, "MY_DB_SERVICE_PORT=5432") || !slices.Contains(env, "URL=db:5432") ||
		!slices.Contains(env, "MY_DB_SERVICE_HOST=10.0.0.9") {
		t.Errorf("environment %v", env)
	}
}

type sources struct{}

func (sources) ConfigMap(_ context.Context, _, name string) (*corev1.ConfigMap, error) {
	if name != "cm" {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmap"}, name)
	}
	return &corev1.ConfigMap{Data: map[string]string{"a": "1"}}, nil
}

func (sources) Secret(_ context.Context, _, name string) (*corev1.Secret, error) {
	if name != "s" {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secret"}, name)
	}
	return &corev1.Secret{Data: map[string][]byte{"p": []byte("pw")}}, nil
}

// envFrom and valueFrom through Sources: prefixes, optional sources and
// keys skipped, the kubelet's messages otherwise.
func TestSources(t *testing.T) {
	yes := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	ref := func(name string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: name} }
	c := &corev1.Container{
		EnvFrom: []corev1.EnvFromSource{
			{Prefix: "S_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: ref("s")}},
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref("none"), Optional: &yes}},
		},
		Env: []corev1.EnvVar{
			{Name: "A", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref("cm"), Key: "a"}}},
			{Name: "B", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref("cm"), Key: "b", Optional: &yes}}},
		},
	}
	env, err := Build(context.Background(), pod, c, Options{Sources: sources{}})
	if err != nil || !slices.Equal(env, []string{"S_p=pw", "A=1"}) {
		t.Fatalf("environment %v, %v", env, err)
	}
	for want, e := range map[string]corev1.EnvVar{
		"couldn't find key b in ConfigMap ns/cm": {Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref("cm"), Key: "b"}}},
		`secret "gone" not found`:                {Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref("gone"), Key: "p"}}},
	} {
		_, err := Build(context.Background(), pod, &corev1.Container{Env: []corev1.EnvVar{e}}, Options{Sources: sources{}})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v, want %q", err, want)
		}
	}
}
