package service

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/podconfig/internal/merge"
)

// TestAPISourceLifecycle: a pod bound to the node goes through ADD, UPDATE,
// RECONCILE, DELETE (graceful) and REMOVE in that order on its partition's
// subjects (the RECONCILE on the reconcile one); a pod of another node never
// reaches the bus; a change the kubelet ignores is not re-sent.
func TestAPISourceLifecycle(t *testing.T) {
	e := newEnv(t, "node-api", false)
	ctx := t.Context()
	pods := e.cs.CoreV1().Pods("default")
	other, err := pods.Create(ctx, testPod("elsewhere", "node-other"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.start(testConfig())
	e.waitAllReady()
	if sr := e.sourcesReady(); strings.Join(sr.Sources, ",") != "api" || strings.Join(sr.Ready, ",") != "api" {
		t.Fatalf("SourcesReady %+v", sr)
	}

	p, err := pods.Create(ctx, testPod("web", e.node), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "ADD", func() bool { return len(e.bus.ops(p.UID)) == 1 })
	got, rec, _ := e.bus.last(p.UID, bus.OpAdd)
	if want := bus.For(e.node).PodUpdates(bus.Partition(string(p.UID), partitions)); rec.Subject != want || rec.Source != "api" {
		t.Fatalf("ADD on %s from %s, want %s from api", rec.Subject, rec.Source, want)
	}
	if got.Annotations[merge.AnnotationSource] != "api" || got.Annotations[merge.AnnotationSeen] == "" {
		t.Fatalf("annotations %v", got.Annotations)
	}
	if len(got.ManagedFields) != 0 {
		t.Fatal("managed fields are published")
	}

	// A label: UPDATE.
	p.Labels = map[string]string{"tier": "web"}
	if p, err = pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "UPDATE", func() bool { return len(e.bus.ops(p.UID)) == 2 })
	// Status alone: RECONCILE.
	p.Status.Phase = corev1.PodRunning
	if p, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "RECONCILE", func() bool { return len(e.bus.ops(p.UID)) == 3 })
	// on its own subject, which the prober and statussync do
	// not consume.
	if _, rec, _ := e.bus.last(p.UID, bus.OpReconcile); rec.Subject != bus.For(e.node).PodReconciles(bus.Partition(string(p.UID), partitions)) {
		t.Fatalf("RECONCILE on %s, want %s", rec.Subject, bus.For(e.node).PodReconciles(bus.Partition(string(p.UID), partitions)))
	}
	// Graceful deletion: DELETE.
	if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "DELETE", func() bool { return len(e.bus.ops(p.UID)) == 4 })
	if d, _, _ := e.bus.last(p.UID, bus.OpDelete); d.DeletionTimestamp == nil {
		t.Fatal("DELETE without deletionTimestamp")
	}
	// Gone: REMOVE.
	zero := int64(0)
	if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "REMOVE", func() bool {
		ops := e.bus.ops(p.UID)
		return len(ops) > 0 && ops[len(ops)-1] == "REMOVE"
	})
	// The grace-0 deletion first shortens the grace period (a change of a
	// deletion field: DELETE again, as the kubelet sees it), then removes.
	eqOps(t, "web", e.bus.ops(p.UID), "ADD", "UPDATE", "RECONCILE", "DELETE", "DELETE", "REMOVE")
	// The first DELETE goes to every consumer; the second only shortens the
	// grace period, which only the owner reads: the owner's subject.
	part := bus.Partition(string(p.UID), partitions)
	var deletes []string
	for _, r := range e.bus.snapshot() {
		for _, q := range r.Pods {
			if q.UID == p.UID && r.Op == bus.OpDelete {
				deletes = append(deletes, r.Subject)
			}
		}
	}
	if want := []string{bus.For(e.node).PodUpdates(part), bus.For(e.node).PodReconciles(part)}; strings.Join(deletes, " ") != strings.Join(want, " ") {
		t.Fatalf("the DELETEs went to %v, want %v", deletes, want)
	}

	// Nothing about the other node's pod, even after it changed.
	other.Labels = map[string]string{"x": "y"}
	if _, err := pods.Update(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	marker, err := pods.Create(ctx, testPod("marker", e.node), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "marker ADD", func() bool { return len(e.bus.ops(marker.UID)) == 1 })
	for _, r := range e.bus.snapshot() {
		for _, q := range r.Pods {
			if q.UID == other.UID || q.Spec.NodeName != e.node {
				t.Fatalf("pod %s of node %q published on %s", q.Name, q.Spec.NodeName, r.Subject)
			}
		}
	}
	_ = pods.Delete(ctx, other.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	_ = pods.Delete(ctx, marker.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
}

// TestPeriodicSnapshot: every snapshot period, each partition of a seen
// source gets a SET with exactly its pods, empty partitions included.
func TestPeriodicSnapshot(t *testing.T) {
	e := newEnv(t, "node-snap", false)
	ctx := t.Context()
	pods := e.cs.CoreV1().Pods("default")
	var uids []string
	for _, n := range []string{"s1", "s2", "s3"} {
		p, err := pods.Create(ctx, testPod(n, e.node), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids = append(uids, string(p.UID))
	}
	cfg := testConfig()
	cfg.SnapshotPeriod = 300 * time.Millisecond
	e.start(cfg)
	// Wait for a SET on every partition after all three ADDs.
	testenv.EventuallyTrue(t, 10*time.Second, "a SET on every partition", func() bool {
		seen := map[string]bool{}
		for _, r := range e.bus.snapshot() {
			if r.Op == bus.OpSet && r.Source == "api" {
				seen[r.Subject] = true
			}
		}
		return len(seen) == partitions
	})
	latest := map[string][]string{}
	for _, r := range e.bus.snapshot() {
		if r.Op == bus.OpSet {
			var in []string
			for _, p := range r.Pods {
				in = append(in, string(p.UID))
			}
			latest[r.Subject] = in
		}
	}
	total := 0
	for subject, in := range latest {
		part, _ := bus.PartitionOf(subject)
		for _, uid := range in {
			if bus.Partition(uid, partitions) != part {
				t.Fatalf("SET on %s holds %s of partition %d", subject, uid, bus.Partition(uid, partitions))
			}
		}
		total += len(in)
	}
	if total != len(uids) {
		t.Fatalf("SETs hold %d pods, want %d: %v", total, len(uids), latest)
	}
	zero := int64(0)
	for _, n := range []string{"s1", "s2", "s3"} {
		_ = pods.Delete(ctx, n, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
}

// TestSnapshotMode: with notification-mode=snapshot the first sight of the
// source is a SET on every partition and a new pod is a SET of its
// partition, never an ADD.
func TestSnapshotMode(t *testing.T) {
	e := newEnv(t, "node-snapmode", false)
	ctx := t.Context()
	cfg := testConfig()
	cfg.NotificationMode = "snapshot"
	e.start(cfg)
	e.waitAllReady()
	testenv.EventuallyTrue(t, 10*time.Second, "a SET on every partition at first sight", func() bool {
		seen := map[string]bool{}
		for _, r := range e.bus.snapshot() {
			if r.Op == bus.OpSet {
				seen[r.Subject] = true
			}
		}
		return len(seen) == partitions
	})
	pods := e.cs.CoreV1().Pods("default")
	p, err := pods.Create(ctx, testPod("snapmode", e.node), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "a SET holding the new pod", func() bool {
		_, rec, ok := e.bus.last(p.UID, bus.OpSet)
		return ok && rec.Subject == bus.For(e.node).PodUpdates(bus.Partition(string(p.UID), partitions))
	})
	if ops := e.bus.ops(p.UID); len(ops) != 0 {
		t.Fatalf("snapshot mode sent %v", ops)
	}
	zero := int64(0)
	_ = pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
}
