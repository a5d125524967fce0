package kubeletapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// onePod is a PodSource of one pod bound to the node.
type onePod struct{ pod *corev1.Pod }

func (o onePod) ListPods(context.Context) ([]corev1.Pod, error) { return []corev1.Pod{*o.pod}, nil }

func (o onePod) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	if ns != o.pod.Namespace || name != o.pod.Name {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
	}
	return o.pod, nil
}

// A port-forward to a pod the node does not run (another name, another
// namespace, the pod under another UID) is refused with 404 before the
// pod worker is asked (the server has no bus: asking would fail with a
// 500); a WebSocket client that names no port, or no port, is refused
// with 400, as the kubelet does.
func TestPortForwardRefusals(t *testing.T) {
	web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"}}
	s, err := New(Config{Node: "n", Partitions: 1, Anonymous: true, Authorizer: AlwaysAllow{}, Pods: onePod{web}})
	if err != nil {
		t.Fatal(err)
	}
	ws := func(r *http.Request) {
		r.Header.Set("Connection", "Upgrade")
		r.Header.Set("Upgrade", "websocket")
	}
	for _, c := range []struct {
		path   string
		modify func(*http.Request)
		code   int
		body   string
	}{
		{"/portForward/default/other", nil, http.StatusNotFound, `pod "default/other" not found on node "n"`},
		{"/portForward/kube-system/web", nil, http.StatusNotFound, `pod "kube-system/web" not found on node "n"`},
		{"/portForward/default/web/uid-other", nil, http.StatusNotFound, `pod "default/web" with UID uid-other not found`},
		{"/portForward/default/web", ws, http.StatusBadRequest, `query parameter "port" is required`},
		{"/portForward/default/web?port=0", ws, http.StatusBadRequest, `port "0" must be > 0`},
		{"/portForward/default/web?port=80,http", ws, http.StatusBadRequest, `unable to parse "80,http" as a port`},
		{"/portForward/default/web?port=65536", ws, http.StatusBadRequest, `unable to parse "65536" as a port`},
	} {
		r := httptest.NewRequest(http.MethodPost, c.path, nil)
		if c.modify != nil {
			c.modify(r)
		}
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, r)
		if w.Code != c.code || !strings.HasPrefix(w.Body.String(), c.body) {
			t.Errorf("%s: %d %q, want %d %q", c.path, w.Code, w.Body.String(), c.code, c.body)
		}
	}
}

// A WebSocket client's ports are parsed as the kubelet parses them; an
// SPDY client's query says nothing.
func TestForwardPorts(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/portForward/default/web?port=80,8080&port=53", nil)
	if ports, err := forwardPorts(r); err != nil || ports != nil {
		t.Errorf("SPDY: %v, %v; want none", ports, err)
	}
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Upgrade", "websocket")
	if ports, err := forwardPorts(r); err != nil || !slices.Equal(ports, []int32{80, 8080, 53}) {
		t.Errorf("WebSocket: %v, %v; want [80 8080 53]", ports, err)
	}
}
