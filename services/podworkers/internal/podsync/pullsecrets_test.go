package podsync

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/services/podworkers/internal/fakeruntime"
	"github.com/splitlet/splitlet/services/podworkers/internal/podworker"
)

// secretsOf answers the Secrets it holds, NotFound for any other.
type secretsOf map[string]*corev1.Secret

func (s secretsOf) ConfigMap(context.Context, string, string) (*corev1.ConfigMap, error) {
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmap"}, "x")
}

func (s secretsOf) Secret(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	if sec, ok := s[namespace+"/"+name]; ok {
		return sec, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secret"}, name)
}

// The pod's imagePullSecrets reach the runtime's start; one that cannot be
// read is skipped and named in the kubelet's Warning Event, without its
// data.
func TestPullSecretsReachTheStart(t *testing.T) {
	rt := fakeruntime.New()
	rec := record.NewFakeRecorder(100)
	regcred := &corev1.Secret{Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)}}
	regcred.Namespace, regcred.Name = "ns", "regcred"
	sy := New(rt, &sink{last: map[types.UID]*bus.PodRuntimeStatus{}}, WithRecorder(rec), WithPullSecrets(secretsOf{"ns/regcred": regcred}))
	p := pod("ps", corev1.RestartPolicyAlways, "app")
	p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}, {Name: ""}, {Name: "gone"}}
	if _, err := sy.SyncPod(t.Context(), podworker.UpdateSync, p); err != nil {
		t.Fatal(err)
	}
	got := rt.LastOptions["app"].PullSecrets
	if len(got) != 1 || got[0].Name != "regcred" {
		t.Fatalf("pull secrets at the start: %v, want regcred", got)
	}
	want := "Warning FailedToRetrieveImagePullSecret Unable to retrieve some image pull secrets (gone); attempting to pull the image may not succeed."
	var events []string
	for len(rec.Events) > 0 {
		events = append(events, <-rec.Events)
	}
	if !strings.Contains(strings.Join(events, "\n"), want) {
		t.Errorf("events %q, want %q", events, want)
	}
}
