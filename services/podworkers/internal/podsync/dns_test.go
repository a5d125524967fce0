package podsync

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/services/podworkers/internal/dns"
	"github.com/splitlet/splitlet/services/podworkers/internal/fakeruntime"
)

// hostDNSRuntime is a runtime whose containers read the host's
// /etc/resolv.conf (as the process runtime's do).
type hostDNSRuntime struct{ *fakeruntime.Runtime }

func (hostDNSRuntime) HostDNS() {}

func clusterDNS(rec record.EventRecorder) *dns.Configurer {
	return dns.New(dns.Options{DNS: config.DNS{ClusterDNS: []net.IP{net.ParseIP("10.96.0.10")}, ClusterDomain: "cluster.local"},
		Node: "n1", Recorder: rec})
}

// A runtime with sandboxes gets the pod's DNS configuration to compute as
// it makes the sandbox: ClusterFirst's, from the node's keys.
func TestStartGivesTheRuntimePodDNS(t *testing.T) {
	rt := fakeruntime.New()
	s := New(rt, &sink{}, WithDNS(clusterDNS(nil)))
	p := pod("d1", corev1.RestartPolicyAlways, "app")
	if _, err := s.startContainer(context.Background(), p, &p.Spec.Containers[0], 0); err != nil {
		t.Fatal(err)
	}
	f := rt.LastOptions["app"].DNS
	if f == nil {
		t.Fatal("no DNS configuration given to the runtime")
	}
	got, err := f()
	if err != nil || !slices.Equal(got.Servers, []string{"10.96.0.10"}) ||
		!slices.Equal(got.Searches, []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local"}) || !slices.Equal(got.Options, []string{"ndots:5"}) {
		t.Errorf("the pod's DNS configuration: %+v, %v", got, err)
	}
}

// A runtime whose containers read the host's file gets no configuration;
// the pod is told once, with a Warning, what it does not get, and again
// after the pod was forgotten.
func TestHostDNSRuntimeTellsThePodOnce(t *testing.T) {
	rt := hostDNSRuntime{fakeruntime.New()}
	rec := record.NewFakeRecorder(100)
	s := New(rt, &sink{}, WithDNS(clusterDNS(rec)))
	p := pod("d2", corev1.RestartPolicyAlways, "app", "side")
	start := func(c *corev1.Container) {
		if _, err := s.startContainer(context.Background(), p, c, 0); err != nil {
			t.Fatal(err)
		}
		if rt.LastOptions[c.Name].DNS != nil {
			t.Errorf("%s: a DNS configuration given to a runtime that cannot apply it", c.Name)
		}
	}
	warnings := func() int {
		n := 0
		for len(rec.Events) > 0 {
			ev := <-rec.Events
			if !strings.HasPrefix(ev, "Warning DNSConfigForming DNS configuration not applied: the fake runtime's containers read the host's /etc/resolv.conf") {
				t.Errorf("unexpected Event %q", ev)
			}
			n++
		}
		return n
	}
	start(&p.Spec.Containers[0])
	start(&p.Spec.Containers[1])
	if n := warnings(); n != 1 {
		t.Errorf("%d Warnings for the pod's two containers, want 1", n)
	}
	s.Forget(p.UID)
	start(&p.Spec.Containers[0])
	if n := warnings(); n != 1 {
		t.Errorf("%d Warnings after the pod was forgotten, want 1", n)
	}
}
