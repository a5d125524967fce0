package containerenv

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
