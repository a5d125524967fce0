package main

import (
	"regexp"
	"strings"
	"testing"
)

// A report as the e2e framework writes it (junit_01.xml), shortened.
const junitReport = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="7" disabled="0" errors="1" failures="1" time="95.5">
  <testsuite name="Kubernetes e2e suite" package="/work" tests="7" disabled="0" skipped="3" errors="1" failures="1" time="95.5" timestamp="2026-01-01T00:00:00">
    <properties><property name="SuiteSucceeded" value="false"></property></properties>
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1.5"></testcase>
    <testcase name="[sig-node] Pods should get a host IP [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="passed" time="10"></testcase>
    <testcase name="[sig-node] Probing container should be restarted with a exec &#34;cat /tmp/health&#34; liveness probe [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="failed" time="60">
      <failure type="failed">[FAILED] expected pod to be restarted&#xA;In [It] at: probe.go:123</failure>
    </testcase>
    <testcase name="[sig-storage] EmptyDir volumes should support (root,0644,tmpfs) [LinuxOnly] [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="interrupted" time="20">
      <error type="interrupted">&#xA;[INTERRUPTED] Interrupted by Timeout</error>
    </testcase>
    <testcase name="[sig-node] Container Runtime should be able to pull image [NodeConformance]" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped - no registry&#xA;more"></skipped>
    </testcase>
    <testcase name="[sig-apps] Deployment should run" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[sig-apps] Job should run" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-node] ImageVolume should mount [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-apps] ImageVolume should mount" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[ReportAfterSuite] Kubernetes e2e suite report" classname="Kubernetes e2e suite" status="failed" time="4">
      <failure type="failed">report failed</failure>
    </testcase>
  </testsuite>
</testsuites>`

func TestParseJUnit(t *testing.T) {
	s, err := parseJUnit(strings.NewReader(junitReport), []junitSkip{{re: regexp.MustCompile(`ImageVolume should`), cause: "pulls"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Passed) != 1 || !strings.Contains(s.Passed[0], "should get a host IP") {
		t.Errorf("passed = %v", s.Passed)
	}
	if len(s.Failed) != 2 {
		t.Fatalf("failed = %v", s.Failed)
	}
	for name, why := range s.Failed {
		switch {
		case strings.Contains(name, `"cat /tmp/health"`):
			if why != "failed: [FAILED] expected pod to be restarted" {
				t.Errorf("failure cause %q", why)
			}
		case strings.Contains(name, "EmptyDir"):
			if why != "interrupted: [INTERRUPTED] Interrupted by Timeout" {
				t.Errorf("interruption cause %q", why)
			}
		default:
			t.Errorf("unexpected failure %q", name)
		}
	}
	if len(s.Skipped) != 2 || s.Skipped["[sig-node] Container Runtime should be able to pull image [NodeConformance]"] != "no registry" ||
		s.Skipped["[It] [sig-node] ImageVolume should mount [Conformance]"] != "skip list: pulls" {
		t.Errorf("skipped = %v", s.Skipped)
	}
	// (the spec that matches a skip pattern but is no conformance spec
	// was left out by the filters)
	if s.NotSelected != 3 {
		t.Errorf("not selected = %d, want 3", s.NotSelected)
	}
	if len(s.SuiteFailures) != 1 {
		t.Errorf("suite failures = %v", s.SuiteFailures)
	}
	if got := s.headline(); !strings.HasPrefix(got, "passed 1, failed 2, skipped 2 (33.3% of the specs that ran passed") {
		t.Errorf("headline %q", got)
	}
	if _, err := parseJUnit(strings.NewReader("<testsuites><testsuite>"), nil, nil); err == nil {
		t.Error("a truncated report parsed")
	}
}

// In a run of the node suite, whose label filter selects the
// [NodeConformance] specs but the Serial and Disruptive ones, a skip-listed
// spec counts as skipped only when that filter selects it: an e2e
// [Conformance] spec, or a Serial one, that a pattern matches was left out
// by the filter, not by the list.
func TestSkipListCountsSelectedSpecsOnly(t *testing.T) {
	report := `<testsuites><testsuite>
    <testcase name="[It] [sig-node] ImageVolume should succeed with pod and pull policy of Always [LinuxOnly] [Conformance]" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-node] MirrorPod should fail [NodeConformance] [Serial]" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-node] Pods should pull from the list [NodeConformance]" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-node] Pods should run [NodeConformance]" status="passed" time="1"></testcase>
  </testsuite></testsuites>`
	skips := []junitSkip{
		{re: regexp.MustCompile(`ImageVolume should succeed`), cause: "no image volumes"},
		{re: regexp.MustCompile(`MirrorPod should fail`), cause: "the host"},
		{re: regexp.MustCompile(`should pull from the list`), cause: "no registry"},
	}
	parse := func(filter string) *summary {
		t.Helper()
		selected, err := selectorFor(filter)
		if err != nil {
			t.Fatal(err)
		}
		s, err := parseJUnit(strings.NewReader(report), skips, selected)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := parse(nodeConformanceLabels)
	if len(s.Skipped) != 1 || s.Skipped["[It] [sig-node] Pods should pull from the list [NodeConformance]"] != "skip list: no registry" {
		t.Errorf("skipped = %v", s.Skipped)
	}
	if s.NotSelected != 2 {
		t.Errorf("not selected = %d, want 2", s.NotSelected)
	}
	// The serial filter selects the Serial spec; the e2e one selects the
	// conformance specs, the Serial one among them.
	for filter, want := range map[string]int{nodeSerialLabels: 2, conformanceLabels: 3} {
		if s := parse(filter); len(s.Skipped) != want {
			t.Errorf("filter %q: skipped = %v, want %d", filter, s.Skipped, want)
		}
	}
	if _, err := selectorFor("NodeConformance &&"); err == nil {
		t.Error("a truncated label filter parsed")
	}
}

// The specs the API server alone decides are counted apart from the
// node's, in the summary's list, its counts and its headline.
func TestAPIOnlyCountedApart(t *testing.T) {
	report := strings.Replace(junitReport, `<testcase name="[SynchronizedBeforeSuite]"`,
		`<testcase name="[It] [sig-node] Lease lease API should be available [Conformance]" status="passed" time="1"></testcase>
    <testcase name="[It] [sig-storage] CSIStorageCapacity should support CSIStorageCapacities API operations [Conformance]" status="failed" time="1"><failure type="failed">no</failure></testcase>
    <testcase name="[SynchronizedBeforeSuite]"`, 1)
	s, err := parseJUnit(strings.NewReader(report), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.APIOnly) != 2 || !strings.Contains(s.APIOnly[0], "Lease") || !strings.Contains(s.APIOnly[1], "CSIStorageCapacity") {
		t.Errorf("API-only specs %v", s.APIOnly)
	}
	c := s.counts()
	if c.Node != (resultCounts{Passed: 1, Failed: 2, Skipped: 1}) || c.APIOnly != (resultCounts{Passed: 1, Failed: 1}) {
		t.Errorf("counts %+v", c)
	}
	if got := s.headline(); !strings.HasPrefix(got, "passed 1, failed 2, skipped 1 (33.3% of the specs that ran passed); API server only: passed 1, failed 1, skipped 0;") {
		t.Errorf("headline %q", got)
	}
}

// The classification: the API-only specs of the selection (as e2e.test
// --ginkgo.dry-run lists them) match a pattern, specs whose pods run on
// the node do not.
func TestAPIOnlyClassification(t *testing.T) {
	for _, n := range []string{
		"[sig-node] ConfigMap should update ConfigMap successfully [NodeConformance] [Conformance]",
		"[sig-node] Secrets should patch a secret [Conformance]",
		"[sig-storage] Secrets should be immutable if `immutable` field is set [Conformance]",
		"[sig-node] PodTemplates should replace a pod template [Conformance]",
		"[sig-node] Node Lifecycle should run through the lifecycle of a node [Conformance]",
		"[sig-node] RuntimeClass should reject a Pod requesting a deleted RuntimeClass [NodeConformance] [Conformance]",
		"[sig-node] Override hostname of Pod [NodeConformance] [FeatureGate:HostnameOverride] [Beta] a pod with hostNetwork and hostnameOverride fields will fail to be created",
		"[sig-node] Pods Extended Pods Set QOS Class should be set on Pods with matching resource requests and limits for memory and cpu [Conformance]",
		"[sig-storage] CSIInlineVolumes should support CSIVolumeSource in Pod API [Conformance]",
		"[sig-storage] VolumeAttributesClass [FeatureGate:VolumeAttributesClass] should run through the lifecycle of a VolumeAttributesClass [Conformance]",
	} {
		if !apiOnly(n) {
			t.Errorf("not API-only: %s", n)
		}
	}
	for _, n := range []string{
		"[sig-node] ConfigMap should be consumable via environment variable [NodeConformance] [Conformance]",
		"[sig-node] RuntimeClass should schedule a Pod requesting a RuntimeClass without PodOverhead [NodeConformance] [Conformance]",
		"[sig-node] Override hostname of Pod [NodeConformance] [FeatureGate:HostnameOverride] [Beta] a pod with only hostnameOverride field will have hostnameOverride as hostname",
		"[sig-node] Pods Extended (pod generation) Pod Generation pod generation should start at 1 and increment per update [MinimumKubeletVersion:1.34] [Conformance]",
		"[sig-node] Pods should delete a collection of pods [Conformance]",
		"[sig-storage] ConfigMap should be consumable from pods in volume [NodeConformance] [Conformance]",
		"[sig-node] NodeLease [NodeConformance] NodeLease should have OwnerReferences set",
	} {
		if apiOnly(n) {
			t.Errorf("API-only: %s", n)
		}
	}
	for _, a := range apiOnlySpecs {
		if a.why == "" {
			t.Errorf("%s: no reason", a.pattern)
		}
	}
}
