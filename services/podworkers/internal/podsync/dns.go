package podsync

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/services/podworkers/internal/dns"
)

// WithDNS sets the DNS configurer that computes each pod's resolver
// configuration; without one the runtime gives pods the host's.
func WithDNS(c *dns.Configurer) Option { return func(s *Syncer) { s.dns = c } }

// podDNS sets what the runtime gets of the pod's DNS configuration: a
// function it calls as it makes the pod's sandbox, or, on a runtime whose
// containers read the host's file whatever the pod asks, nothing, and the
// pod is told once what it does not get.
func (s *Syncer) podDNS(pod *corev1.Pod, opts *runtime.StartOptions) {
	if s.dns == nil {
		return
	}
	if _, hostOnly := s.rt.(runtime.HostDNS); !hostOnly {
		opts.DNS = func() (*runtime.DNSConfig, error) { return s.dns.PodDNS(pod) }
		return
	}
	s.mu.Lock()
	told := s.dnsTold[pod.UID]
	s.dnsTold[pod.UID] = true
	s.mu.Unlock()
	if !told {
		s.dns.HostOnly(pod, s.rt.Type())
	}
}
