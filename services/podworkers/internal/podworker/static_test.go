package podworker

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/kube"
)

func staticPod(uid, name string) *corev1.Pod {
	p := newPod(uid, name)
	p.Annotations = map[string]string{kube.AnnotationConfigSource: "file"}
	return p
}

// A static pod whose manifest changed (a new UID, the same full name) does
// not start while the old one terminates within its grace; it starts once
// the old one has finished. A third version that came meanwhile waits
// behind the second. Pods from the API are not held back by a name.
func TestStaticPodWaitsForTheOldOneOfItsName(t *testing.T) {
	f := newFake()
	b := &blockingTerminate{fakeHandler: f, release: make(chan struct{})}
	w := start(t, b, WithBackOffPeriod(20*time.Millisecond))
	old := staticPod("old", "web")
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: old})
	eventually(t, "the old static pod synced", func() bool { return len(f.callsOf("old")) > 0 })

	// the manifest changes: the old UID goes, a new one comes.
	w.UpdatePod(UpdateOptions{Type: UpdateKill, Pod: old})
	next := staticPod("next", "web")
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: next})
	api := newPod("api", "web")
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: api})
	eventually(t, "the old static pod terminating", func() bool { return w.IsPodForMirrorPodTerminatingByFullName("web_ns") })
	eventually(t, "the API pod of the same name synced", func() bool { return len(f.callsOf("api")) > 0 })
	// several back-off periods pass: the new one still waits.
	deadline := time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		if cs := f.callsOf("next"); len(cs) > 0 {
			t.Fatalf("the new static pod ran %v while the old one terminates", kinds(cs))
		}
		time.Sleep(10 * time.Millisecond)
	}
	third := staticPod("third", "web")
	w.UpdatePod(UpdateOptions{Type: UpdateCreate, Pod: third})

	close(b.release)
	eventually(t, "the new static pod synced after the old one finished", func() bool {
		cs := f.callsOf("next")
		return len(cs) > 0 && cs[0].kind == SyncPodWork
	})
	if !w.IsPodKnownTerminated("old") {
		t.Error("the new static pod started before the old one terminated")
	}
	deadline = time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		if cs := f.callsOf("third"); len(cs) > 0 {
			t.Fatalf("a third static pod of the name ran %v while the second runs", kinds(cs))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// the second goes before it started for long: the third may start.
	w.UpdatePod(UpdateOptions{Type: UpdateKill, Pod: next})
	eventually(t, "the third static pod synced once the second finished", func() bool {
		cs := f.callsOf("third")
		return len(cs) > 0 && cs[0].kind == SyncPodWork
	})
}
