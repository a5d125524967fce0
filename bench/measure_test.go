package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Every agent's pods have names the API server takes without a warning.
func TestPodNameIsADNSLabel(t *testing.T) {
	for _, agent := range []string{"split", "kwok-v0.7.0", "allinone"} {
		name := podName(agent, 42)
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Errorf("podName(%q) = %q: %v", agent, name, errs)
		}
	}
}

// TestShadowCPU: the shadow row sums the shadow stages' processes alone.
func TestShadowCPU(t *testing.T) {
	x := &result{CPUEach: map[string]float64{"shadow-prober-0": 0.5, "prober-2": 1, "podworkers-4": 2}}
	if got := x.shadowCPU(); got != 0.5 {
		t.Errorf("shadow CPU %v, want 0.5", got)
	}
}
