package cri

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/splitlet/splitlet/libs/runtime"
)

// A pod's sandbox runs under the runtime handler StartOptions name (its
// RuntimeClass's: containerd reports the handler it was given), a handler
// the runtime lacks fails the sandbox with the kubelet's message and starts
// no container, and a handler that cannot be looked up fails it the same
// way without asking the runtime.
func TestSandboxRuntimeHandler(t *testing.T) {
	r := newRuntime(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	handler := func(h string, err error) runtime.StartOptions {
		return runtime.StartOptions{RuntimeHandler: func() (string, error) { return h, err }}
	}

	// runc, named: the shared containerd's default handler, which an
	// unnamed handler also gets, but then reported as "".
	p := newPod("handler-runc", true, shell("c", `sleep 3600`))
	cleanupPod(t, p)
	if _, err := r.StartContainer(ctx, p, &p.Spec.Containers[0], 0, handler("runc", nil)); err != nil {
		t.Fatalf("start with handler runc: %v", err)
	}
	sbs := sandboxesOf(t, r, p.UID)
	if len(sbs) != 1 {
		t.Fatalf("sandboxes %v: want one", sbs)
	}
	st, err := r.rs.PodSandboxStatus(ctx, sbs[0], false)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.GetStatus().GetRuntimeHandler(); got != "runc" {
		t.Errorf("sandbox runtime handler %q, want runc", got)
	}

	unknown := newPod("handler-unknown", true, shell("c", `sleep 3600`))
	cleanupPod(t, unknown)
	got, err := r.StartContainer(ctx, unknown, &unknown.Spec.Containers[0], 0, handler("no-such-handler", nil))
	if err == nil {
		t.Fatal("a pod whose runtime handler containerd lacks started")
	}
	if !strings.HasPrefix(got.Message, runtime.SandboxFailed) || !strings.Contains(got.Message, "no-such-handler") {
		t.Errorf("message %q: want %q and the handler", got.Message, runtime.SandboxFailed)
	}
	if sbs := sandboxesOf(t, r, unknown.UID); len(sbs) != 0 {
		t.Errorf("sandboxes %v of a pod whose handler is unknown", sbs)
	}

	missing := newPod("handler-lookup", true, shell("c", `sleep 3600`))
	cleanupPod(t, missing)
	lookupErr := `runtimeclass.node.k8s.io "gone" not found`
	got, err = r.StartContainer(ctx, missing, &missing.Spec.Containers[0], 0, handler("", errorString(lookupErr)))
	if err == nil {
		t.Fatal("a pod whose RuntimeClass cannot be looked up started")
	}
	if want := runtime.SandboxFailed + lookupErr; got.Message != want {
		t.Errorf("message %q, want %q", got.Message, want)
	}
	if sbs := sandboxesOf(t, r, missing.UID); len(sbs) != 0 {
		t.Errorf("sandboxes %v of a pod whose RuntimeClass is missing", sbs)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
