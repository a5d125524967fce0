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
	s, err := parseJUnit(strings.NewReader(junitReport), []junitSkip{{re: regexp.MustCompile(`ImageVolume should`), cause: "pulls"}})
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
	if _, err := parseJUnit(strings.NewReader("<testsuites><testsuite>"), nil); err == nil {
		t.Error("a truncated report parsed")
	}
}
