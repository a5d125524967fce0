package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/bus/bustest"
	"github.com/splitlet/splitlet/libs/recording"
)

// TestBusDiffLive: `splitlet bus diff --live prober --for D --json` reads
// the live probe results and the shadow's, prints a difference (JSON) for
// the pod on which they disagree and none for the one on which they agree,
// and exits 1; with the shadow agreeing on both it exits 0.
func TestBusDiffLive(t *testing.T) {
	const node = "live-diff"
	n := bustest.Start(t, node)
	js, err := jetstream.New(n.Connect(t, bus.AdminIdentity))
	if err != nil {
		t.Fatal(err)
	}
	pub := bus.NewPublisher(nil, js, node, "test")
	send := func(s bus.Subjects, uid, result string) {
		t.Helper()
		r := &bus.ProbeResult{PodUID: types.UID(uid), Namespace: "default", Name: uid, Container: "app", ContainerID: "sim://" + uid,
			Probe: bus.ProbeReadiness, Result: bus.ProbeOutcome(result)}
		if err := pub.Publish(t.Context(), s.ProbeResults(bus.Partition(uid, 2)), bus.KindProbeResult, "", r); err != nil {
			t.Fatal(err)
		}
	}
	live, shadow := bus.For(node), bus.For(node).Shadow(bus.StageProber)
	run := func() (int, string) {
		var out, errOut bytes.Buffer
		code := runBus(t.Context(), []string{"diff", "--live", "prober", "--node-name", node, "--nats-url", n.URL,
			"--nats-nkey", n.Seed(bus.AdminIdentity), "--for", "2s", "--settle", "300ms", "--every", "500ms", "--json"}, &out, &errOut)
		if errOut.Len() > 0 {
			t.Logf("stderr: %s", errOut.String())
		}
		return code, out.String()
	}
	send(shadow, "same", "Success")
	send(live, "same", "Success")
	if code, out := run(); code != 0 {
		t.Fatalf("agreeing sides: exit %d, want 0:\n%s", code, out)
	}
	send(shadow, "planted", "Success")
	send(live, "planted", "Failure")
	code, out := run()
	if code != 1 {
		t.Fatalf("a planted difference: exit %d, want 1:\n%s", code, out)
	}
	var diffs []string
	var last *recording.LiveSummary
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev recording.LiveEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		if ev.Difference != nil {
			diffs = append(diffs, ev.Difference.Pod)
		}
		if ev.Summary != nil {
			last = ev.Summary
		}
	}
	if len(diffs) != 1 || diffs[0] != "default/planted (planted)" {
		t.Errorf("differences %v, want the planted pod alone", diffs)
	}
	if last == nil || last.Differ != 1 || last.Keys != 2 || last.Compared != 4 {
		t.Errorf("last summary %+v: want 4 messages about 2 probes, 1 differing", last)
	}
}
