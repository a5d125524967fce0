package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/splitlet/splitlet/libs/testenv"
)

// e2e_node.test's command line starts no services, reaches the API server
// with the host and token, pulls nothing, names the CRI endpoint and the
// system spec, selects the parallel NodeConformance specs unless the user
// gives a label filter of their own, skips each group, and puts the user's
// flags last.
func TestNodeE2EArgs(t *testing.T) {
	env := suiteEnv{reportDir: "/out", criEndpoint: "unix:///c.sock"}
	args := nodeE2EArgs("https://10.0.0.1:6443", "tok", "/s/spec.yaml", env, time.Hour, false, []string{"--ginkgo.focus=Pods"})
	joined := strings.Join(args, "\n") + "\n"
	for _, want := range []string{
		"--start-services=false", "--host=https://10.0.0.1:6443", "--bearer-token=tok", "--prepull-images=false",
		"--container-runtime-endpoint=unix:///c.sock", "--system-spec-file=/s/spec.yaml", "--report-dir=/out",
		"--ginkgo.label-filter=" + nodeConformanceLabels, "--ginkgo.timeout=1h0m0s", "--dns-domain=cluster.local",
	} {
		if !strings.Contains(joined, want+"\n") {
			t.Errorf("missing %s in\n%s", want, joined)
		}
	}
	skips := 0
	for _, a := range args {
		if p, ok := strings.CutPrefix(a, "--ginkgo.skip="); ok {
			if _, err := regexp.Compile(p); err != nil {
				t.Errorf("skip pattern %q: %v", p, err)
			}
			skips++
		}
	}
	if skips != len(nodeConformanceSkips) || skips < len(conformanceSkips) {
		t.Errorf("%d skip flags for %d groups", skips, len(nodeConformanceSkips))
	}
	if args[len(args)-1] != "--ginkgo.focus=Pods" {
		t.Errorf("the user's flags are not last: %v", args)
	}
	own := nodeE2EArgs("h", "t", "s", env, time.Hour, false, []string{"--ginkgo.label-filter=Serial"})
	if n := strings.Count(strings.Join(own, "\n"), "--ginkgo.label-filter="); n != 1 {
		t.Errorf("a label filter of the user's: %d label filters in %v", n, own)
	}
}

// With --serial the node suite selects the Serial specs too and skips
// nodeSerialSkips beside the usual groups; a label filter of the user's
// still wins.
func TestNodeE2EArgsSerial(t *testing.T) {
	env := suiteEnv{reportDir: "/out", criEndpoint: "unix:///c.sock"}
	args := nodeE2EArgs("h", "t", "s", env, time.Hour, true, nil)
	labels, skips := []string{}, []string{}
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--ginkgo.label-filter="); ok {
			labels = append(labels, v)
		}
		if v, ok := strings.CutPrefix(a, "--ginkgo.skip="); ok {
			skips = append(skips, v)
		}
	}
	if len(labels) != 1 || labels[0] != nodeSerialLabels {
		t.Errorf("label filters %q, want %q", labels, nodeSerialLabels)
	}
	want := append(append([]conformanceSkip(nil), nodeConformanceSkips...), nodeSerialSkips...)
	if len(skips) != len(want) {
		t.Fatalf("%d skip flags, want %d", len(skips), len(want))
	}
	for i, s := range want {
		if skips[i] != s.pattern {
			t.Errorf("skip %d: %q, want %q", i, skips[i], s.pattern)
		}
	}
	if n := len(nodeSkips(false)); n != len(nodeConformanceSkips) {
		t.Errorf("without --serial: %d skips", n)
	}
	own := nodeE2EArgs("h", "t", "s", env, time.Hour, true, []string{"--ginkgo.label-filter=Serial"})
	if n := strings.Count(strings.Join(own, "\n"), "--ginkgo.label-filter="); n != 1 {
		t.Errorf("a label filter of the user's: %d label filters in %v", n, own)
	}
}

// nodeSerialSkips leave out just the Serial specs they name, and name
// every one the serial selection leaves out: on the node suite's spec
// names (testdata/node-conformance-specs.txt), no pattern matches a
// parallel spec (they run as without --serial), each matches a Serial
// one, and the Serial specs left out are the named eight, each counted
// in the summary as skipped with its cause.
func TestNodeSerialSkips(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "node-conformance-specs.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var serial, parallel []string
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(l, "S "):
			serial = append(serial, l[2:])
		case strings.HasPrefix(l, "P "):
			parallel = append(parallel, l[2:])
		}
	}
	if len(serial) != 37 || len(parallel) != 437 {
		t.Fatalf("%d Serial and %d parallel specs in the list, want 37 and 437", len(serial), len(parallel))
	}
	skips := junitSkips(nodeSerialSkips)
	for _, sk := range skips {
		for _, name := range parallel {
			if sk.re.MatchString(name) {
				t.Errorf("serial skip %q matches a parallel spec: %s", sk.re, name)
			}
		}
		hit := false
		for _, name := range serial {
			hit = hit || sk.re.MatchString(name)
		}
		if !hit {
			t.Errorf("serial skip %q matches no Serial spec", sk.re)
		}
	}
	left := 0
	for _, name := range serial {
		if cause := skipCause(name, skips, conformanceTag.MatchString); cause != "" {
			left++
		}
	}
	if left != 8 {
		t.Errorf("%d Serial specs left out, want 8", left)
	}
	for _, name := range serial {
		if strings.Contains(name, "[Disruptive]") && skipCause(name, skips, conformanceTag.MatchString) == "" {
			t.Errorf("a Disruptive spec without a cause: %s", name)
		}
	}
}

// The node suite's command line comes from the run's admin kubeconfig:
// its server and token; the system spec is written to the state
// directory; the token is the secret to redact.
func TestNodeSuiteArgs(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg := &rest.Config{Host: "https://192.0.2.1:6443", BearerToken: "s3cret"}
	if err := testenv.WriteKubeconfigFor(kubeconfig, "admin", cfg); err != nil {
		t.Fatal(err)
	}
	args, secrets, err := nodeSuiteArgs(suiteEnv{kubeconfig: kubeconfig, reportDir: dir, criEndpoint: "unix:///c", state: dir}, conformanceOptions{timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(args, " ")
	if !strings.Contains(joined, "--host=https://192.0.2.1:6443") || !strings.Contains(joined, "--bearer-token=s3cret") {
		t.Errorf("args %v", args)
	}
	if len(secrets) != 1 || secrets[0] != "s3cret" {
		t.Errorf("secrets %v", secrets)
	}
	if shown := shellJoin(redact(args, secrets)); strings.Contains(shown, "s3cret") || !strings.Contains(shown, "--bearer-token=<redacted>") {
		t.Errorf("redacted command line: %s", shown)
	}
	if spec, err := os.ReadFile(filepath.Join(dir, "system-spec.yaml")); err != nil || !strings.Contains(string(spec), "versions: ['.*']") {
		t.Errorf("system spec: %q, %v", spec, err)
	}
	// A kubeconfig without a token cannot serve.
	if err := testenv.WriteKubeconfigFor(kubeconfig, "admin", &rest.Config{Host: "https://192.0.2.1:6443", BearerToken: ""}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := nodeSuiteArgs(suiteEnv{kubeconfig: kubeconfig, state: dir}, conformanceOptions{}); err == nil {
		t.Error("a kubeconfig without a token was taken")
	}
}

// Each suite and node agent has its own binary, state directory and pods'
// network, so that the four runs may go at once.
func TestSuiteOf(t *testing.T) {
	e2e, node := suiteOf(""), suiteOf(suiteNodeE2E)
	if e2e.binary != "e2e.test" || node.binary != "e2e_node.test" || e2e.stateDir == node.stateDir {
		t.Errorf("e2e %+v, node %+v", e2e, node)
	}
	seen := map[string]bool{}
	for _, v := range []string{e2e.bridge, e2e.kubeletBridge, node.bridge, node.kubeletBridge, e2e.subnet, e2e.kubeletSubnet, node.subnet, node.kubeletSubnet} {
		if seen[v] || len(v) > 15 && !strings.Contains(v, "/") {
			t.Errorf("bridge or subnet %q repeated or too long (IFNAMSIZ)", v)
		}
		seen[v] = true
	}
	if e2e.bridge != defaultCNIBridge || len(e2e.skips) != len(conformanceSkips) {
		t.Errorf("make conformance's suite changed: %+v", e2e)
	}
}

func TestHasFlag(t *testing.T) {
	for args, want := range map[string]bool{
		"--ginkgo.label-filter=x":     true,
		"-ginkgo.label-filter x":      true,
		"--ginkgo.label-filterx=1":    false,
		"--ginkgo.focus=label-filter": false,
	} {
		if got := hasFlag(strings.Fields(args), "ginkgo.label-filter"); got != want {
			t.Errorf("hasFlag(%q) = %v, want %v", args, got, want)
		}
	}
}
