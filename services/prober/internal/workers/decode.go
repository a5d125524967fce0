package workers

import (
	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/protofields"
)

// DecodePod is the prober's bus.PodDecoder: a pod with a probe in any of
// its containers or init containers is decoded whole, any other only its
// metadata. Such a pod gets no worker (hasProbes), and it never gains a
// probe: the API server refuses a change of a container's probes. Bytes
// that do not read as a pod are decoded whole, which reports them.
func DecodePod(raw []byte, p *corev1.Pod) error {
	if probed, err := probesIn(raw); err != nil || probed {
		return p.Unmarshal(raw)
	}
	return bus.PodMetadata(raw, p)
}

// Kubernetes' protobuf field numbers read by probesIn, past the pod's spec.
const (
	specContainers     protowire.Number = 2
	specInitContainers protowire.Number = 20
	containerLiveness  protowire.Number = 10
	containerReadiness protowire.Number = 11
	containerStartup   protowire.Number = 22
)

// probesIn says whether a container or an init container of the pod's
// protobuf form has a probe.
func probesIn(raw []byte) (bool, error) {
	found := false
	err := protofields.Walk(raw, func(n protowire.Number, _ uint64, spec []byte) error {
		if n != bus.PodFieldSpec || spec == nil {
			return nil
		}
		return protofields.Walk(spec, func(n protowire.Number, _ uint64, c []byte) error {
			if (n != specContainers && n != specInitContainers) || c == nil {
				return nil
			}
			return protofields.Walk(c, func(n protowire.Number, _ uint64, _ []byte) error {
				found = found || n == containerLiveness || n == containerReadiness || n == containerStartup
				return nil
			})
		})
	})
	return found, err
}
