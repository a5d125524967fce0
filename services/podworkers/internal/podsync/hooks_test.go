package podsync

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/services/podworkers/internal/podworker"
)

// seen drains the recorder and says which of the wanted Events came.
func seen(rec *record.FakeRecorder, want ...string) map[string]bool {
	got := map[string]bool{}
	for {
		select {
		case ev := <-rec.Events:
			for _, w := range want {
				if strings.HasPrefix(ev, w) {
					got[w] = true
				}
			}
		default:
			return got
		}
	}
}

// TestLifecycleHooks: postStart runs once a container starts, preStop
// before it is stopped and within its grace, both through the runtime's
// exec (kubelet: startContainer, killContainer). A failed postStart kills
// the container (then restarted as the policy says) and records
// FailedPostStartHook; a failed preStop records FailedPreStopHook and the
// stop goes on.
func TestLifecycleHooks(t *testing.T) {
	rec := record.NewFakeRecorder(1000)
	r := newRig(t, WithRecorder(rec), WithBackOff(10*time.Millisecond, 100*time.Millisecond))
	r.rt.ExecFails = map[string]bool{"post fail": true, "pre fail": true}
	hooks := func(post, pre string) *corev1.Lifecycle {
		return &corev1.Lifecycle{
			PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: strings.Fields(post)}},
			PreStop:   &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: strings.Fields(pre)}},
		}
	}
	ten := int64(10)
	good := pod("h1", corev1.RestartPolicyAlways, "app")
	good.Spec.Containers[0].Lifecycle = hooks("post ok", "pre ok")
	good.Spec.TerminationGracePeriodSeconds = &ten
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: good})
	eventually(t, "running after postStart", func() bool { return running(r.sk.get("h1"), "app") && r.rt.Executed("post ok") })
	if r.rt.Executed("pre ok") {
		t.Fatal("preStop ran before any stop")
	}
	id := r.sk.get("h1").ContainerStatuses[0].ContainerID
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateKill, Pod: good})
	eventually(t, "stopped after preStop", func() bool { st := r.sk.get("h1"); return st != nil && st.Terminated })
	if !r.rt.Executed("pre ok") {
		t.Fatal("preStop did not run")
	}
	if g, ok := r.rt.GraceOf(id); !ok || g > 10*time.Second || g < 9*time.Second {
		t.Errorf("stop after a quick preStop with %v of the 10 s grace (stopped %v)", g, ok)
	}

	bad := pod("h2", corev1.RestartPolicyAlways, "crashy")
	bad.Spec.Containers[0].Lifecycle = hooks("post fail", "pre ok")
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: bad})
	eventually(t, "killed after postStart failed, then started again", func() bool { return r.rt.StartsOf("crashy") >= 3 })
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateKill, Pod: bad})
	eventually(t, "crash-looping pod stopped", func() bool { st := r.sk.get("h2"); return st != nil && st.Terminated })

	stubborn := pod("h4", corev1.RestartPolicyAlways, "app")
	stubborn.Spec.Containers[0].Lifecycle = hooks("post ok", "pre fail")
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: stubborn})
	eventually(t, "running", func() bool { return running(r.sk.get("h4"), "app") })
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateKill, Pod: stubborn})
	eventually(t, "stopped although preStop failed", func() bool { st := r.sk.get("h4"); return st != nil && st.Terminated && r.rt.Executed("pre fail") })
	post, pre := "Warning FailedPostStartHook PostStartHook failed", "Warning FailedPreStopHook PreStopHook failed"
	got := map[string]bool{}
	eventually(t, "both hook Events", func() bool {
		for ev := range seen(rec, post, pre) {
			got[ev] = true
		}
		return got[post] && got[pre]
	})
}

// TestPreStopOutlivesGrace: a preStop hook still running when the grace
// period ends is not cut short; the container is stopped with the two
// seconds' minimum and the hook ends with it, so a hook that never ends
// lives grace plus two seconds (kubelet: killContainer waits for the hook
// at most the grace period and stops with at least two seconds).
func TestPreStopOutlivesGrace(t *testing.T) {
	r := newRig(t)
	r.rt.ExecUntilStopped = map[string]bool{"pre hang": true}
	one := int64(1)
	p := pod("h5", corev1.RestartPolicyAlways, "app")
	p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"pre", "hang"}}}}
	p.Spec.TerminationGracePeriodSeconds = &one
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateCreate, Pod: p})
	eventually(t, "running", func() bool { return running(r.sk.get("h5"), "app") })
	id := r.sk.get("h5").ContainerStatuses[0].ContainerID
	r.w.UpdatePod(podworker.UpdateOptions{Type: podworker.UpdateKill, Pod: p})
	eventually(t, "stopped", func() bool { st := r.sk.get("h5"); return st != nil && st.Terminated })
	eventually(t, "the hook ended", func() bool { return r.rt.ExecEnd("pre hang") != "" })
	if end := r.rt.ExecEnd("pre hang"); end != "stopped" {
		t.Errorf("the hook was %s before its container stopped", end)
	}
	if g, ok := r.rt.GraceOf(id); !ok || g != minPreStopGrace {
		t.Errorf("stopped with %v (stopped %v), want the minimum %v", g, ok, minPreStopGrace)
	}
}

// TestHTTPHook: an httpGet hook succeeds on any answer and fails when the
// connection fails (kubelet: runHTTPHandler checks no status code).
func TestHTTPHook(t *testing.T) {
	r := newRig(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	n, _ := strconv.Atoi(port)
	p := pod("h3", corev1.RestartPolicyAlways, "app")
	p.UID = types.UID("h3")
	c := &p.Spec.Containers[0]
	c.Ports = []corev1.ContainerPort{{Name: "web", ContainerPort: int32(n)}}
	get := func(port intstr.IntOrString) *corev1.LifecycleHandler {
		return &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Host: "127.0.0.1", Port: port, Path: "/hook"}}
	}
	if msg, err := r.sy.runHook(t.Context(), p, c, get(intstr.FromString("web")), time.Second); err != nil {
		t.Fatalf("a 500 answer failed the hook: %s", msg)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cport := closed.Addr().(*net.TCPAddr).Port
	_ = closed.Close()
	msg, err := r.sy.runHook(t.Context(), p, c, get(intstr.FromInt(cport)), time.Second)
	if err == nil || !strings.HasPrefix(msg, `HTTP lifecycle hook (/hook) for Container "app" in Pod "ph3_ns(h3)" failed - error: `) {
		t.Fatalf("a refused connection: %q, %v", msg, err)
	}
	// HTTPS: the container's own certificate is not verified (kubelet).
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {}))
	defer tlsSrv.Close()
	_, tport, _ := net.SplitHostPort(strings.TrimPrefix(tlsSrv.URL, "https://"))
	tn, _ := strconv.Atoi(tport)
	h := get(intstr.FromInt(tn))
	h.HTTPGet.Scheme = corev1.URISchemeHTTPS
	if msg, err := r.sy.runHook(t.Context(), p, c, h, time.Second); err != nil {
		t.Fatalf("an HTTPS hook with a self-signed certificate: %s", msg)
	}
}
