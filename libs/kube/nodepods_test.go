package kube_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/testenv"
)

// watchCounter counts the watches of pods a client opens.
type watchCounter struct {
	rt http.RoundTripper
	n  *atomic.Int32
}

func (w watchCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, "/pods") && req.URL.Query().Get("watch") == "true" {
		w.n.Add(1)
	}
	return w.rt.RoundTrip(req)
}

// noLabels is a narrower view than FullPods: the pod without its labels.
var noLabels = kube.PodView{Name: "no-labels", Transform: func(obj any) (any, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		cp := p.DeepCopy()
		cp.Labels, cp.ManagedFields = nil, nil
		return cp, nil
	}
	return obj, nil
}}

// seen records the pod names a handler was given.
type seen struct {
	mu    sync.Mutex
	names map[string]bool
}

func (s *seen) handler() cache.ResourceEventHandler {
	s.names = map[string]bool{}
	return cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			s.mu.Lock()
			s.names[p.Name] = true
			s.mu.Unlock()
		}
	}}
}

func (s *seen) has(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.names[name]
}

func TestNodePods(t *testing.T) {
	testenv.SkipShort(t, "etcd and kube-apiserver")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cp, err := testenv.StartControlPlane(ctx, testenv.ControlPlaneOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	watches := &atomic.Int32{}
	cfg := rest.CopyConfig(cp.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return watchCounter{rt: rt, n: watches} })
	cs := kubernetes.NewForConfigOrDie(cfg)
	admin := cp.Clientset()

	create := func(t *testing.T, node, name string) {
		t.Helper()
		_, err := admin.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "img"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	// cached returns the informer's copy of the pod once it has one.
	cached := func(t *testing.T, inf cache.SharedIndexInformer, name string) *corev1.Pod {
		t.Helper()
		var p *corev1.Pod
		testenv.EventuallyTrue(t, 30*time.Second, "pod "+name+" cached", func() bool {
			obj, ok, _ := inf.GetIndexer().GetByKey("default/" + name)
			if ok {
				p = obj.(*corev1.Pod)
			}
			return ok
		})
		return p
	}

	t.Run("stages of one process share one watch of the widest view", func(t *testing.T) {
		n := kube.NewNodePods(cs, "shared")
		n.Want(kube.FullPods)
		n.Want(noLabels)
		before := watches.Load()
		full, releaseFull := n.Acquire(kube.FullPods)
		narrow, releaseNarrow := n.Acquire(noLabels)
		defer releaseNarrow()
		var a, b seen
		if _, err := full.AddEventHandler(a.handler()); err != nil {
			t.Fatal(err)
		}
		if _, err := narrow.AddEventHandler(b.handler()); err != nil {
			t.Fatal(err)
		}
		create(t, "shared", "p1")
		testenv.EventuallyTrue(t, 30*time.Second, "both stages see p1", func() bool { return a.has("p1") && b.has("p1") })
		if got := watches.Load() - before; got != 1 {
			t.Errorf("watches of pods opened: %d, want 1", got)
		}
		if p := cached(t, narrow, "p1"); p.Labels["app"] != "p1" || p.ManagedFields != nil {
			t.Errorf("the shared cache holds labels %v and %d managed fields, want the full view (labels kept, managed fields dropped)", p.Labels, len(p.ManagedFields))
		}

		// One stage lets go: its handler hears nothing more, the other's does.
		releaseFull()
		create(t, "shared", "p2")
		testenv.EventuallyTrue(t, 30*time.Second, "the stage still holding sees p2", func() bool { return b.has("p2") })
		if a.has("p2") {
			t.Error("a released stage's handler was given a pod created after its release")
		}
		if full.IsStopped() {
			t.Error("the informer stopped while a stage still holds it")
		}

		// A stage that restarts takes the running informer again: its new
		// handler is given every pod already cached, as a fresh informer's
		// would be.
		restarted, releaseRestarted := n.Acquire(kube.FullPods)
		var c seen
		regC, err := restarted.AddEventHandler(c.handler())
		if err != nil {
			t.Fatal(err)
		}
		testenv.EventuallyTrue(t, 30*time.Second, "the restarted stage's handler synced", regC.HasSynced)
		if !c.has("p1") || !c.has("p2") {
			t.Errorf("the restarted stage's handler was not given the cached pods (p1 %v, p2 %v)", c.has("p1"), c.has("p2"))
		}
		if got := watches.Load() - before; got != 1 {
			t.Errorf("watches of pods opened after the restart: %d, want still 1", got)
		}
		releaseRestarted()

		// The last one lets go: the informer stops; the next stage starts another.
		releaseNarrow()
		testenv.EventuallyTrue(t, 30*time.Second, "informer stopped", narrow.IsStopped)
		again, releaseAgain := n.Acquire(noLabels)
		defer releaseAgain()
		regAgain, err := again.AddEventHandler(cache.ResourceEventHandlerFuncs{})
		if err != nil {
			t.Fatal(err)
		}
		testenv.EventuallyTrue(t, 30*time.Second, "the new informer's handler synced", regAgain.HasSynced)
		if again.IsStopped() {
			t.Error("the informer taken after the last release is not running")
		}
		if p := cached(t, again, "p2"); p.Labels["app"] != "p2" {
			t.Errorf("the new informer's cache lost the widest view: labels %v", p.Labels)
		}
	})

	t.Run("a stage alone caches its own view", func(t *testing.T) {
		n := kube.NewNodePods(cs, "alone")
		n.Want(noLabels)
		inf, release := n.Acquire(noLabels)
		defer release()
		create(t, "alone", "p3")
		if p := cached(t, inf, "p3"); len(p.Labels) != 0 {
			t.Errorf("a stage alone cached labels %v: its view drops them", p.Labels)
		}
	})

	t.Run("a view the running informer does not cover gets an informer of its own", func(t *testing.T) {
		n := kube.NewNodePods(cs, "late")
		n.Want(noLabels)
		before := watches.Load()
		narrow, releaseNarrow := n.Acquire(noLabels)
		defer releaseNarrow()
		full, releaseFull := n.Acquire(kube.FullPods) // declared too late to be shared
		create(t, "late", "p4")
		if p := cached(t, narrow, "p4"); len(p.Labels) != 0 {
			t.Errorf("the narrow informer cached labels %v", p.Labels)
		}
		if p := cached(t, full, "p4"); p.Labels["app"] != "p4" {
			t.Errorf("the late full view got labels %v, want the pod's", p.Labels)
		}
		if got := watches.Load() - before; got != 2 {
			t.Errorf("watches of pods opened: %d, want 2 (one a view)", got)
		}
		releaseFull()
		testenv.EventuallyTrue(t, 30*time.Second, "the unshared informer stopped", full.IsStopped)
		if narrow.IsStopped() {
			t.Error("releasing the unshared informer stopped the shared one")
		}
	})

	t.Run("indexers added again after a restart are skipped", func(t *testing.T) {
		n := kube.NewNodePods(cs, "indexers")
		inf, release := n.Acquire(kube.FullPods)
		defer release()
		idx := cache.Indexers{"byLabel": func(obj any) ([]string, error) {
			return []string{obj.(*corev1.Pod).Labels["app"]}, nil
		}}
		for i := range 2 {
			if err := kube.AddMissingIndexers(inf, idx); err != nil {
				t.Fatalf("adding the indexers, time %d: %v", i+1, err)
			}
		}
		create(t, "indexers", "p5")
		testenv.EventuallyTrue(t, 30*time.Second, "p5 indexed", func() bool {
			objs, err := inf.GetIndexer().ByIndex("byLabel", "p5")
			return err == nil && len(objs) == 1
		})
	})
}
