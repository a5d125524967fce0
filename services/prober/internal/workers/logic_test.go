package workers

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestWithDefaults(t *testing.T) {
	p := withDefaults(&corev1.Probe{})
	if p.TimeoutSeconds != 1 || p.PeriodSeconds != 10 || p.SuccessThreshold != 1 || p.FailureThreshold != 3 {
		t.Errorf("defaults %+v", p)
	}
	set := &corev1.Probe{TimeoutSeconds: 5, PeriodSeconds: 2, SuccessThreshold: 2, FailureThreshold: 7, InitialDelaySeconds: 3}
	if got := withDefaults(set); !reflect.DeepEqual(got, set) {
		t.Errorf("set fields changed: %+v", got)
	}
}

func TestWillRestart(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	cases := []struct {
		pod  corev1.RestartPolicy
		c    *corev1.ContainerRestartPolicy
		exit int32
		want bool
	}{
		{corev1.RestartPolicyAlways, nil, 0, true},
		{corev1.RestartPolicyNever, nil, 1, false},
		{corev1.RestartPolicyOnFailure, nil, 0, false},
		{corev1.RestartPolicyOnFailure, nil, 2, true},
		{corev1.RestartPolicyNever, &always, 0, true},
	}
	for _, tc := range cases {
		pod := &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: tc.pod}}
		if got := willRestart(&corev1.Container{RestartPolicy: tc.c}, pod, tc.exit); got != tc.want {
			t.Errorf("pod %s container %v exit %d: %v, want %v", tc.pod, tc.c, tc.exit, got, tc.want)
		}
	}
}

// The first run of a worker waits a random part of a period only while the
// prober is younger than one period (kubelet rule).
func TestInitialDelaySpread(t *testing.T) {
	m, err := New()
	if err != nil {
		t.Fatal(err)
	}
	period := 10 * time.Second
	distinct := map[time.Duration]bool{}
	for range 20 {
		d := m.initialDelay(period)
		if d < 0 || d >= period {
			t.Fatalf("delay %v outside [0, %v)", d, period)
		}
		distinct[d] = true
	}
	if len(distinct) < 2 {
		t.Errorf("delays not random: %v", distinct)
	}
	m.start = time.Now().Add(-time.Minute)
	if d := m.initialDelay(period); d != 0 {
		t.Errorf("delay %v for a prober running for a minute, want 0", d)
	}
}
