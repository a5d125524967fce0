package service

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/podconfig/internal/merge"
)

// manifestServer serves whatever body and status it is told to.
type manifestServer struct {
	mu     sync.Mutex
	status int
	body   string
	hits   int
}

func (m *manifestServer) set(status int, body string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status, m.body = status, body
}

func (m *manifestServer) hitCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hits
}

func (m *manifestServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hits++
	if r.Header.Get("X-Token") != "secret" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	w.WriteHeader(m.status)
	_, _ = w.Write([]byte(m.body))
}

const podListJSON = `{"apiVersion":"v1","kind":"PodList","items":[
 {"metadata":{"name":"alpha"},"spec":{"containers":[{"name":"c","image":"busybox"}]}},
 {"metadata":{"name":"beta","namespace":"kube-system"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}]}`

const onePodYAML = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: alpha\nspec:\n  containers:\n  - name: c\n    image: busybox\n"

// TestHTTPSource: a PodList and then a single pod from a manifest URL give
// ADDs (the configured header sent) and a REMOVE; while the URL fails or serves garbage, the last good
// state stays (no REMOVE) and polling goes on; mirror pods follow. The
// token in the URL's query shows in no log line and no Event.
func TestHTTPSource(t *testing.T) {
	e := newEnv(t, "node-http", true)
	srv := &manifestServer{status: http.StatusOK, body: podListJSON}
	hs := httptest.NewServer(srv) // 127.0.0.1
	t.Cleanup(hs.Close)

	cfg := testConfig()
	const token = "s3cret-in-query"
	cfg.ManifestURL = hs.URL + "/pods?token=" + token
	cfg.ManifestURLHeader = []string{"X-Token:secret"}
	e.start(cfg)
	e.waitAllReady()

	var alpha, beta types.UID
	testenv.EventuallyTrue(t, 10*time.Second, "both pods added", func() bool {
		alpha, beta = e.bus.uidByName("alpha-"+e.node), e.bus.uidByName("beta-"+e.node)
		return alpha != "" && beta != ""
	})
	p, rec, _ := e.bus.last(beta, bus.OpAdd)
	if rec.Source != "http" || p.Namespace != "kube-system" || p.Annotations[merge.AnnotationSource] != "http" || p.Annotations[merge.AnnotationHash] != string(beta) {
		t.Fatalf("http pod %s/%s from %s, annotations %v", p.Namespace, p.Name, rec.Source, p.Annotations)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "mirror pod of alpha", func() bool { return e.mirror("alpha-"+e.node) != nil })

	// Failing and garbage: state kept, polling continues.
	srv.set(http.StatusInternalServerError, "boom")
	h := srv.hitCount()
	testenv.EventuallyTrue(t, 10*time.Second, "polls while failing", func() bool { return srv.hitCount() >= h+3 })
	srv.set(http.StatusOK, "{not a pod")
	h = srv.hitCount()
	testenv.EventuallyTrue(t, 10*time.Second, "polls while garbage", func() bool { return srv.hitCount() >= h+3 })
	if got := fmt.Sprint(e.bus.ops(alpha), e.bus.ops(beta)); got != "[ADD] [ADD]" {
		t.Fatalf("a failing URL changed the pods: %s", got)
	}
	// The failures were logged and recorded as Node Events, the URL in them
	// redacted.
	var shown []string
	testenv.EventuallyTrue(t, 10*time.Second, "Events about the failing manifest URL", func() bool {
		list, err := e.cs.CoreV1().Events("default").List(t.Context(), metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.kind": "Node", "involvedObject.name": e.node}.String()})
		if err != nil {
			return false
		}
		shown = shown[:0]
		for _, ev := range list.Items {
			if strings.HasPrefix(ev.Message, "Manifest URL ") {
				shown = append(shown, ev.Message)
			}
		}
		return len(shown) >= 2
	})
	for _, msg := range append(shown, e.logs.String()) {
		if strings.Contains(msg, token) {
			t.Errorf("the manifest URL's token shows in %q", msg)
		}
	}
	if !strings.Contains(shown[0], "token=REDACTED") || !strings.Contains(e.logs.String(), "token=REDACTED") {
		t.Errorf("the redacted URL is not in the Events or logs: %q", shown)
	}

	// One pod now (alpha unchanged, so same UID): beta goes.
	srv.set(http.StatusOK, onePodYAML)
	testenv.EventuallyTrue(t, 10*time.Second, "beta removed", func() bool { return fmt.Sprint(e.bus.ops(beta)) == "[ADD REMOVE]" })
	eqOps(t, "alpha", e.bus.ops(alpha), "ADD")
	testenv.EventuallyTrue(t, 10*time.Second, "beta's mirror pod removed", func() bool {
		return e.mirrorIn("kube-system", "beta-"+e.node) == nil
	})
}
