package podsync

import (
	"context"
	"strings"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/logging"
)

// EventFailedToRetrieveImagePullSecret is the kubelet's reason for pull
// secrets it could not read.
const EventFailedToRetrieveImagePullSecret = "FailedToRetrieveImagePullSecret"

// pullSecrets reads the pod's imagePullSecrets (kubelet:
// getPullSecretsForPod). A service account's imagePullSecrets are in the
// pod's spec already: the API server's ServiceAccount admission copies
// them there. A secret that cannot be read is skipped and named in a
// Warning Event; the pull goes on with the others. Only names are logged,
// never a secret's data.
func (s *Syncer) pullSecrets(ctx context.Context, pod *corev1.Pod) []corev1.Secret {
	src := s.pullSecretSrc
	if len(pod.Spec.ImagePullSecrets) == 0 || src == nil {
		return nil
	}
	var out []corev1.Secret
	var failed []string
	for _, ref := range pod.Spec.ImagePullSecrets {
		if ref.Name == "" {
			continue // the API server lets empty names through
		}
		sec, err := src.Secret(ctx, pod.Namespace, ref.Name)
		if err != nil {
			s.log.Info("Unable to retrieve pull secret, the image pull may not succeed.",
				append(logging.Pod(pod.Namespace, pod.Name, string(pod.UID)), zap.String("secret", ref.Name), zap.Error(err))...)
			failed = append(failed, ref.Name)
			continue
		}
		out = append(out, *sec)
	}
	if len(failed) > 0 && s.recorder != nil && ctx.Err() == nil {
		s.recorder.Eventf(kube.PodRef(pod.Namespace, pod.Name, pod.UID), corev1.EventTypeWarning, EventFailedToRetrieveImagePullSecret,
			"Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", strings.Join(failed, ", "))
	}
	return out
}
