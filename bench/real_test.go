package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestParsePodCounts(t *testing.T) {
	for in, want := range map[string][]int{
		"100,200": {100, 200}, " 100 , 200 ": {100, 200}, "": nil, "0": nil, "0,50": {50},
	} {
		got, err := parsePodCounts(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parsePodCounts(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"ten", "-1", "100;200"} {
		if _, err := parsePodCounts(bad); err == nil {
			t.Errorf("parsePodCounts(%q): no error", bad)
		}
	}
}

func TestRealFlagsOptions(t *testing.T) {
	f := &realFlags{enabled: true, pods: "100", agents: "kubelet,allinone", variants: "probe", idlePods: 110}
	o, err := f.options()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.agents, []string{"kubelet", "allinone"}) || !slices.Equal(o.variants, []string{variantProbe}) || !o.enabled() {
		t.Errorf("options %+v", o)
	}
	if _, err := (&realFlags{enabled: true, agents: "kwok"}).options(); err == nil {
		t.Error("an unknown agent taken")
	}
	if _, err := (&realFlags{enabled: true, agents: "split", variants: "fancy"}).options(); err == nil {
		t.Error("an unknown variant taken")
	}
	if o, _ := (&realFlags{enabled: false, pods: "100", agents: "split"}).options(); o.enabled() {
		t.Error("-real=false still runs the case")
	}
	if o, _ := (&realFlags{enabled: true, pods: "0", agents: "split", idlePods: 110}).options(); o.enabled() {
		t.Error("no pod counts and no idle duration still run the case")
	}
}

// /proc/<pid>/stat: the command name may hold spaces and parentheses;
// utime, stime, cutime and cstime are fields 14 to 17, in clock ticks.
func TestParseProcStat(t *testing.T) {
	stat := "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 12 0 1000 100000 500 18446744073709551615\n"
	got, err := parseProcStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	if got.self != 3.0 || got.children != 0.1 || got.total() != 3.1 {
		t.Errorf("parseProcStat = %+v, want self 3.0, children 0.1", got)
	}
	for _, bad := range []string{"4242 no name", "4242 (x) S 1 2", "4242 (x) S 1 2 3 4 5 6 7 8 9 10 ten 1 1 1 1 1"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q): no error", bad)
		}
	}
}

func TestCPUSnapshotSince(t *testing.T) {
	sum, each := cpuSnapshot{"a": 5, "b": 2.5}.since(cpuSnapshot{"a": 1, "b": 2})
	if sum != 4.5 || each["a"] != 4 || each["b"] != 0.5 {
		t.Errorf("since = %v %v", sum, each)
	}
}

func TestShimAddress(t *testing.T) {
	cmd := func(args ...string) []byte { return []byte(strings.Join(args, "\x00") + "\x00") }
	for _, c := range []struct {
		cmdline []byte
		want    string
	}{
		{cmd("/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc", "-address", "/w/c.sock"), "/w/c.sock"},
		{cmd("/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-address=/w/c.sock", "-id", "abc"), "/w/c.sock"},
		{cmd("/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-address", "/w/c.sock", "-id", "abc", "start"), ""},
		{cmd("/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-address", "/w/c.sock", "-id", "abc", "delete"), ""},
		{cmd("/usr/bin/containerd", "--config", "/w/config.toml", "-address", "/w/c.sock"), ""},
		{cmd("sleep", "3600"), ""},
		{nil, ""},
	} {
		if got := shimAddress(c.cmdline); got != c.want {
			t.Errorf("shimAddress(%q) = %q, want %q", c.cmdline, got, c.want)
		}
	}
	if !mayBecomeShim(cmd("/usr/bin/containerd", "--config", "x")) || mayBecomeShim(cmd("/bin/sh")) || mayBecomeShim(nil) {
		t.Error("mayBecomeShim: containerd's forks may become shims, nothing else")
	}
}

func TestSandboxCounts(t *testing.T) {
	sb := func(uid string, st runtimeapi.PodSandboxState) *runtimeapi.PodSandbox {
		return &runtimeapi.PodSandbox{Metadata: &runtimeapi.PodSandboxMetadata{Uid: uid}, State: st}
	}
	sbs := []*runtimeapi.PodSandbox{
		sb("a", runtimeapi.PodSandboxState_SANDBOX_READY),
		sb("a", runtimeapi.PodSandboxState_SANDBOX_NOTREADY), // an earlier attempt
		sb("b", runtimeapi.PodSandboxState_SANDBOX_NOTREADY),
		sb("other", runtimeapi.PodSandboxState_SANDBOX_READY),
	}
	ready, present := sandboxCounts(sbs, map[types.UID]bool{"a": true, "b": true, "c": true})
	if ready != 1 || present != 3 {
		t.Errorf("sandboxCounts = %d ready, %d present; want 1, 3", ready, present)
	}
}

// The probe variant's pods read their configMap volume in an exec probe;
// both variants' containers end on SIGTERM, use the imported image only
// and have names the API server takes.
func TestRealPod(t *testing.T) {
	plain := realPod(podName("real-kubelet-plain-100", 7), "real-kubelet-plain-100", "n", variantPlain)
	if errs := validation.IsDNS1123Label(plain.Name); len(errs) > 0 {
		t.Errorf("pod name %q: %v", plain.Name, errs)
	}
	c := plain.Spec.Containers[0]
	if c.ImagePullPolicy != corev1.PullIfNotPresent || c.ReadinessProbe != nil || len(plain.Spec.Volumes) != 0 || !strings.Contains(c.Command[2], "TERM") {
		t.Errorf("plain pod %+v", plain.Spec)
	}
	probe := realPod("p", "l", "n", variantProbe)
	pc := probe.Spec.Containers[0]
	if pc.ReadinessProbe == nil || pc.ReadinessProbe.Exec == nil || len(probe.Spec.Volumes) != 1 ||
		probe.Spec.Volumes[0].ConfigMap == nil || probe.Spec.Volumes[0].ConfigMap.Name != benchConfigMap {
		t.Fatalf("probe pod %+v", probe.Spec)
	}
	read := pc.ReadinessProbe.Exec.Command[len(pc.ReadinessProbe.Exec.Command)-1]
	if !strings.HasPrefix(read, pc.VolumeMounts[0].MountPath+"/") {
		t.Errorf("the probe reads %s, not the volume at %s", read, pc.VolumeMounts[0].MountPath)
	}
}

func sampleReport() *realReport {
	return &realReport{
		Cases: []*realCaseResult{
			{Agent: "allinone", Variant: variantPlain, Pods: 100, AllReadySec: 8, P99Ms: 700, AgentCPUSec: 2, PeakPSSBytes: 60 << 20, SandboxesRemovedSec: 10},
			{Agent: "split", Variant: variantPlain, Pods: 100, AllReadySec: 9, P99Ms: 900, AgentCPUSec: 5, PeakPSSBytes: 150 << 20, SandboxesRemovedSec: -1},
			{Agent: "kubelet", Variant: variantPlain, Pods: 100, AllReadySec: 10, P99Ms: 1000, AgentCPUSec: 10, PeakPSSBytes: 100 << 20, SandboxesRemovedSec: 70},
		},
		Idle: []*realIdleResult{
			{Agent: "allinone", Pods: 110, Minutes: 2, AgentCPUPerMin: 0.5},
			{Agent: "kubelet", Pods: 110, Minutes: 2, AgentCPUPerMin: 1},
		},
	}
}

// The table puts each agent's figure over the kubelet's and says of each
// target whether it is met; a wait that did not end has no ratio.
func TestPrintRealTables(t *testing.T) {
	var b bytes.Buffer
	printRealTables(&b, sampleReport())
	got := b.String()
	for _, want := range []string{
		"| figure | allinone | split | kubelet | allinone/kubelet | split/kubelet | target |",
		"| time to all Running+Ready (s) | 8.00 | 9.00 | 10.00 | 0.80 | 0.90 | allinone ≤ 0.8: met |",
		"| agent CPU, first create → teardown done (s) | 2.00 | 5.00 | 10.00 | 0.20 | 0.50 | allinone ≤ 0.3: met; split ≤ 0.6: met |",
		"| agent peak PSS, summed (MiB) | 60.00 | 150 | 100 | 0.60 | 1.50 | allinone ≤ 0.75: met; split ≤ 1.5: met |",
		"| every sandbox stopped and removed: full teardown (s) | 10.00 | not within the wait | 70.00 | 0.14 | – | allinone ≤ 0.5: met; split ≤ 0.5: – |",
		"real containers, idle: 110 pods running, 2.0 minutes:",
		"| agent CPU per minute (s) | 0.50 | 1.00 | 0.50 | allinone ≤ 0.3: missed |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}

// With several rounds, a figure is the median of the agent's rounds with
// their min–max, and the ratio is of the medians.
func TestPrintRealTablesRounds(t *testing.T) {
	var cases []*realCaseResult
	for i, ready := range [][2]float64{{8, 10}, {12, 20}, {9, 15}} {
		for j, agent := range []string{"allinone", "kubelet"} {
			cases = append(cases, &realCaseResult{Agent: agent, Variant: variantPlain, Pods: 100, Round: i + 1, AllReadySec: ready[j]})
		}
	}
	var b bytes.Buffer
	printRealTables(&b, &realReport{Cases: cases})
	for _, want := range []string{
		"real containers, 100 pods, busybox sleeping (medians of 3 rounds, min–max in brackets):",
		"| time to all Running+Ready (s) | 9.00 (8.00–12.00) | 15.00 (10.00–20.00) | 0.60 | allinone ≤ 0.8: met |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in\n%s", want, b.String())
		}
	}
	rs := realRatios(&realReport{Cases: cases})
	if len(rs) == 0 || rs[0].Figure != realRows[0].name || rs[0].Ratio != 0.6 {
		t.Errorf("ratios %+v, want the medians' 0.6 first", rs)
	}
}

// Without the kubelet there is no ratio and no target column.
func TestPrintRealTablesWithoutKubelet(t *testing.T) {
	rep := sampleReport()
	rep.Cases, rep.Idle = rep.Cases[:1], nil
	var b bytes.Buffer
	printRealTables(&b, rep)
	if strings.Contains(b.String(), "target") || !strings.Contains(b.String(), "| figure | allinone |\n") {
		t.Errorf("table without the kubelet:\n%s", b.String())
	}
}

// Reports of several runs (one agent each) make one table.
func TestReadRealReports(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for i, c := range sampleReport().Cases {
		data, err := json.Marshal(map[string]any{"real": &realReport{Cases: []*realCaseResult{c}}})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, string(rune('a'+i))+".json")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	rep, err := readRealReports(paths)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Cases) != 3 || rep.Cases[2].Agent != "kubelet" || rep.Cases[1].SandboxesRemovedSec != -1 {
		t.Errorf("merged %+v", rep.Cases)
	}
	if err := os.WriteFile(filepath.Join(dir, "sim.json"), []byte(`{"pods": 5000}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readRealReports([]string{filepath.Join(dir, "sim.json")}); err == nil {
		t.Error("a report without real-container figures taken")
	}
}

// Writes are counted by verb and resource, reads left out; the delta keeps
// what moved, per unit.
func TestWritesByResource(t *testing.T) {
	metrics := `# HELP apiserver_request_total x
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",resource="pods",subresource="",verb="POST"} 100
apiserver_request_total{code="200",resource="pods",subresource="status",verb="PATCH"} 250
apiserver_request_total{code="200",resource="events",subresource="",verb="POST"} 40
apiserver_request_total{code="200",resource="events",subresource="",verb="PATCH"} 2
apiserver_request_total{code="200",resource="pods",subresource="",verb="LIST"} 7
apiserver_request_total{code="200",resource="pods",subresource="",verb="WATCH"} 3
`
	got, err := parseWritesByResource([]byte(metrics))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"POST pods": 100, "PATCH pods/status": 250, "POST events": 40, "PATCH events": 2}
	if len(got) != len(want) {
		t.Errorf("writes %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
	if w := sumWrites(got); w.pods != 350 || w.all != 392 {
		t.Errorf("sums %+v, want pods 350 of all 392", w)
	}
	d := writesDelta(map[string]float64{"POST pods": 100, "POST events": 40}, map[string]float64{"POST pods": 300, "POST events": 40, "PATCH leases": 10}, 2)
	if len(d) != 2 || d["POST pods"] != 100 || d["PATCH leases"] != 5 {
		t.Errorf("delta %v", d)
	}
	if s := byResource(map[string]float64{"b": 1, "a": 1, "c": 3}); s != "c 3.00, a 1.00, b 1.00" {
		t.Errorf("byResource = %q", s)
	}
	if _, err := parseWritesByResource([]byte("# TYPE other counter\nother 1\n")); err == nil {
		t.Error("no apiserver_request_total taken")
	}
}

// The JSON report keeps each agent's ratios to the kubelet and whether
// each target is met; a wait that did not end has no ratio.
func TestRealRatios(t *testing.T) {
	got := realRatios(sampleReport())
	find := func(c, agent, figure string) *realRatio {
		for i := range got {
			if got[i].Case == c && got[i].Agent == agent && got[i].Figure == figure {
				return &got[i]
			}
		}
		return nil
	}
	cpu := find("plain 100", "split", "agent CPU, first create → teardown done (s)")
	if cpu == nil || cpu.Ratio != 0.5 || cpu.Target != 0.6 || cpu.Met == nil || !*cpu.Met {
		t.Errorf("split CPU ratio %+v", cpu)
	}
	idle := find("idle", "allinone", "agent CPU per minute (s)")
	if idle == nil || idle.Ratio != 0.5 || idle.Met == nil || *idle.Met {
		t.Errorf("idle ratio %+v", idle)
	}
	if r := find("plain 100", "split", "every sandbox stopped and removed: full teardown (s)"); r != nil {
		t.Errorf("a ratio for a wait that did not end: %+v", r)
	}
	if r := find("plain 100", "kubelet", "agent CPU, first create → teardown done (s)"); r != nil {
		t.Errorf("the kubelet against itself: %+v", r)
	}
}
