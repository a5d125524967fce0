package service

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
)

// --runtime=cri: a pod's sandbox runs under its RuntimeClass's handler, as
// the API server holds the class; a class whose handler containerd lacks,
// and a class that does not exist, fail the sandbox with the kubelet's
// FailedCreatePodSandBox Event (its message) and run nothing.
func TestCRIRuntimeClassHandler(t *testing.T) {
	e, cd := criEnv(t, "pw-cri-rc")
	ctx := t.Context()
	classes := map[string]string{"splitlet-test-runc": "runc", "splitlet-test-unknown": "no-such-handler"}
	for name, handler := range classes {
		rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: handler}
		if _, err := e.cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.cs.NodeV1().RuntimeClasses().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	e.startReplica(t, config.RuntimeCRI, nil)
	withClass := func(class string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.NodeName = e.node
			e.podDefaults(p)
			p.Spec.RuntimeClassName = &class
		}
	}
	good := newPod(t, e.cs, "rc-runc", withClass("splitlet-test-runc"))
	unknown := newPod(t, e.cs, "rc-unknown", withClass("splitlet-test-unknown"))
	// the API server refuses a pod naming a missing class: the bus says it.
	gone := newPod(t, e.cs, "rc-gone", withClass("splitlet-test-runc"))
	goneClass := "splitlet-test-gone"
	gone.Spec.RuntimeClassName = &goneClass
	e.track(good, unknown, gone)
	e.send(bus.OpAdd, good, unknown, gone)

	eventually(t, time.Minute, "the pod of class runc running", func() bool { st, _ := e.get(good.UID); return containerRunning(st) })
	if got := sandboxHandlers(t, cd.Endpoint, good); !slices.Equal(got, []string{"runc"}) {
		t.Errorf("sandbox handlers %q of the pod of class runc, want [runc]", got)
	}
	e.waitSandboxEvent(t, unknown, `Failed to create pod sandbox: `, `no runtime for "no-such-handler" is configured`)
	e.waitSandboxEvent(t, gone, `Failed to create pod sandbox: runtimeclass.node.k8s.io "splitlet-test-gone" not found`, "")
	for _, p := range []*corev1.Pod{unknown, gone} {
		if got := sandboxHandlers(t, cd.Endpoint, p); len(got) != 0 {
			t.Errorf("%s has sandboxes of handlers %q", p.Name, got)
		}
		if st, _ := e.get(p.UID); containerRunning(st) {
			t.Errorf("%s runs", p.Name)
		}
	}
}

// waitSandboxEvent waits for the pod's Warning FailedCreatePodSandBox
// Event whose message starts with prefix and contains part.
func (e *env) waitSandboxEvent(t *testing.T, p *corev1.Pod, prefix, part string) {
	t.Helper()
	eventually(t, time.Minute, "FailedCreatePodSandBox on "+p.Name+" ("+prefix+part+")", func() bool {
		evs, err := e.cs.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(p.UID)})
		if err != nil {
			return false
		}
		return slices.ContainsFunc(evs.Items, func(ev corev1.Event) bool {
			return ev.Reason == "FailedCreatePodSandBox" && ev.Type == corev1.EventTypeWarning &&
				strings.HasPrefix(ev.Message, prefix) && strings.Contains(ev.Message, part)
		})
	})
}

// sandboxHandlers lists the runtime handlers of the pod's sandboxes, as
// containerd reports them.
func sandboxHandlers(t *testing.T, endpoint string, p *corev1.Pod) []string {
	t.Helper()
	rs, err := remote.NewRemoteRuntimeService(t.Context(), endpoint, 30*time.Second, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close(context.Background())
	sbs, err := rs.ListPodSandbox(t.Context(), &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": string(p.UID)}})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, sb := range sbs {
		out = append(out, sb.GetRuntimeHandler())
	}
	return out
}
