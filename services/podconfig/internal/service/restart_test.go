package service

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
)

// TestRestartNoSpuriousRemove: podconfig stopped and started again while
// pods exist sends no REMOVE for any of them; its first view of each source
// goes out as ADDs, the periodic SETs hold exactly what exists (a pod deleted
// while it was down is absent), and the mirror pod is left alone.
func TestRestartNoSpuriousRemove(t *testing.T) {
	e := newEnv(t, "node-restart", true)
	ctx := t.Context()
	pods := e.cs.CoreV1().Pods("default")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "static.yaml"), manifestYAML("static", "busybox", ""))
	uids := map[string]types.UID{}
	for _, n := range []string{"r1", "r2", "r3"} {
		p, err := pods.Create(ctx, testPod(n, e.node), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[n] = p.UID
	}
	cfg := testConfig()
	cfg.StaticPodPath = dir
	first := e.start(cfg)
	e.waitAllReady()
	staticName := "static-" + e.node
	testenv.EventuallyTrue(t, 10*time.Second, "first run's ADDs", func() bool {
		return len(e.bus.ops(uids["r3"])) == 1 && e.bus.uidByName(staticName) != ""
	})
	staticUID := e.bus.uidByName(staticName)
	testenv.EventuallyTrue(t, 10*time.Second, "mirror pod", func() bool { return e.mirror(staticName) != nil })
	mirrorUID := e.mirror(staticName).UID
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	mark := len(e.bus.snapshot())

	// While podconfig is down: r3 goes, r4 comes.
	zero := int64(0)
	if err := pods.Delete(ctx, "r3", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	p4, err := pods.Create(ctx, testPod("r4", e.node), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	uids["r4"] = p4.UID

	cfg.SnapshotPeriod = 300 * time.Millisecond
	e.start(cfg)
	latest := func() (api, file []string, complete bool) {
		seen := map[string]map[string][]string{"api": {}, "file": {}}
		for _, r := range e.bus.snapshot()[mark:] {
			if r.Op != bus.OpSet {
				continue
			}
			var in []string
			for _, p := range r.Pods {
				in = append(in, string(p.UID))
			}
			seen[r.Source][r.Subject] = in
		}
		for _, s := range seen["api"] {
			api = append(api, s...)
		}
		for _, s := range seen["file"] {
			file = append(file, s...)
		}
		sort.Strings(api)
		return api, file, len(seen["api"]) == partitions && len(seen["file"]) == partitions
	}
	want := []string{string(uids["r1"]), string(uids["r2"]), string(uids["r4"])}
	sort.Strings(want)
	testenv.EventuallyTrue(t, 15*time.Second, "SETs of the restarted podconfig holding exactly the existing pods", func() bool {
		api, file, complete := latest()
		return complete && strings.Join(api, ",") == strings.Join(want, ",") && strings.Join(file, ",") == string(staticUID)
	})
	for _, r := range e.bus.snapshot()[mark:] {
		if r.Op == bus.OpRemove {
			t.Fatalf("REMOVE after restart on %s from %s: %d pods (first %s)", r.Subject, r.Source, len(r.Pods), r.Pods[0].Name)
		}
	}
	for _, n := range []string{"r1", "r2", "r4"} {
		if ops := e.bus.ops(uids[n]); ops[len(ops)-1] != "ADD" {
			t.Fatalf("%s: ops %v, want a last ADD from the restarted podconfig", n, ops)
		}
	}
	if m := e.mirror(staticName); m == nil || m.UID != mirrorUID {
		t.Fatal("the mirror pod was replaced by the restart")
	}
	for _, n := range []string{"r1", "r2", "r4"} {
		_ = pods.Delete(ctx, n, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
}
