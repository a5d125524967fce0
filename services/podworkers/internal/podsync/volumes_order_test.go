package podsync

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/services/podworkers/internal/fakeruntime"
	"github.com/splitlet/splitlet/services/podworkers/internal/podworker"
	"github.com/splitlet/splitlet/services/podworkers/internal/volumes"
)

// orderLog notes the statuses and Events of a sync in the order they go out.
type orderLog struct {
	mu  sync.Mutex
	out []string
}

func (l *orderLog) note(s string) { l.mu.Lock(); l.out = append(l.out, s); l.mu.Unlock() }

func (l *orderLog) Set(*bus.PodRuntimeStatus) { l.note("status") }

func (l *orderLog) Event(_ runtime.Object, _, reason, _ string) { l.note("event " + reason) }

func (l *orderLog) Eventf(_ runtime.Object, _, reason, _ string, _ ...any) { l.note("event " + reason) }

func (l *orderLog) AnnotatedEventf(_ runtime.Object, _ map[string]string, _, reason, _ string, _ ...any) {
	l.note("event " + reason)
}

// kubelet: a pod whose volume cannot be set up has its status (scheduled,
// pending) out before the FailedMount Event, so that a reader who sees the
// Event finds the pod's conditions: the first try sends the status and is
// retried, the next one reports.
func TestStatusGoesOutBeforeFailedMount(t *testing.T) {
	log := &orderLog{}
	client := volumes.Client{CS: fake.NewSimpleClientset()}
	sy := New(fakeruntime.New(), log, WithRecorder(log), WithVolumes(volumes.New(t.TempDir(), client, client)))
	p := pod("v1", corev1.RestartPolicyAlways, "app")
	p.Spec.Volumes = []corev1.Volume{{Name: "gone", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "missing"}}}}
	for try := range 2 {
		if _, err := sy.SyncPod(t.Context(), podworker.UpdateSync, p); err != nil {
			t.Fatal(err)
		}
		if try == 0 && slices.Contains(log.out, "event "+EventFailedMount) {
			t.Fatalf("what went out on the first try: %s, want the status alone", fmt.Sprint(log.out))
		}
	}
	event := slices.Index(log.out, "event "+EventFailedMount)
	if event < 0 || slices.Index(log.out, "status") != 0 || slices.Index(log.out[1:], "status") >= event-1 {
		t.Fatalf("what went out over two tries: %s, want a status, another on the next try, then the FailedMount Event", fmt.Sprint(log.out))
	}
}
