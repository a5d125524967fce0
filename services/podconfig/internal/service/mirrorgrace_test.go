package service

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/podconfig/internal/merge"
)

// waitStatusFollower waits until podconfig follows the pod workers'
// statuses (its ordered consumer on podstatus exists): what is published
// before that is not its to see.
func (e *env) waitStatusFollower() {
	e.t.Helper()
	testenv.EventuallyTrue(e.t, 10*time.Second, "podconfig following podstatus", func() bool {
		s, err := e.js.Stream(context.Background(), bus.StreamName(e.node, bus.StreamPodStatus))
		if err != nil {
			return false
		}
		names := s.ConsumerNames(context.Background())
		found := false
		for n := range names.Name() {
			found = found || strings.HasPrefix(n, "podconfig-mirrors-")
		}
		return found
	})
}

// publishRuntime publishes a pod workers' status of the static pod.
func (e *env) publishRuntime(uid types.UID, name string, terminated bool) {
	e.t.Helper()
	pub := bus.NewPublisher(e.nc, e.js, e.node, "podworkers-test")
	rs := &bus.PodRuntimeStatus{UID: uid, Namespace: "default", Name: name, Terminating: terminated, Terminated: terminated}
	if err := pub.Publish(context.Background(), bus.For(e.node).PodStatus(bus.Partition(string(uid), partitions)), bus.KindPodRuntimeStatus, "", rs); err != nil {
		e.t.Fatal(err)
	}
}

// mirrorStays checks for a while that the mirror pod is the same object,
// naming the same static pod.
func (e *env) mirrorStays(name string, apiUID types.UID, static types.UID) {
	e.t.Helper()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		m := e.mirror(name)
		if m == nil {
			e.t.Fatalf("the mirror pod of %s (static pod %s) was deleted while the pod workers run that pod", name, static)
		}
		if m.UID != apiUID || m.DeletionTimestamp != nil || m.Annotations[merge.AnnotationMirror] != string(static) {
			e.t.Fatalf("the mirror pod of %s (static pod %s) was replaced while the pod workers run that pod: now %s of static pod %s",
				name, static, m.UID, m.Annotations[merge.AnnotationMirror])
		}
	}
}

// A static pod's mirror pod follows the static pod the pod workers run: a
// changed manifest does not replace it, nor does a removed one delete it,
// until the pod workers report the old static pod terminated (the kubelet
// keeps it through the old pod's grace period).
func TestMirrorPodFollowsTheRunningStaticPod(t *testing.T) {
	e := newEnv(t, "node-mirror-grace", true)
	dir := t.TempDir()
	manifest := filepath.Join(dir, "web.yaml")
	writeFile(t, manifest, manifestYAML("web", "nginx:1.25", ""))
	cfg := testConfig()
	cfg.StaticPodPath = dir
	e.start(cfg)
	e.waitAllReady()
	e.waitStatusFollower()
	name := "web-" + e.node
	var uid1 types.UID
	testenv.EventuallyTrue(t, 10*time.Second, "static pod ADD", func() bool { uid1 = e.bus.uidByName(name); return uid1 != "" })
	testenv.EventuallyTrue(t, 10*time.Second, "mirror pod", func() bool { return e.mirror(name) != nil })
	m1 := e.mirror(name)
	e.publishRuntime(uid1, name, false)

	// the manifest changes: the old pod terminates within its grace.
	writeFile(t, manifest, manifestYAML("web", "nginx:1.26", ""))
	var uid2 types.UID
	testenv.EventuallyTrue(t, 10*time.Second, "changed static pod", func() bool {
		uid2 = e.bus.uidByName(name)
		return uid2 != uid1
	})
	e.mirrorStays(name, m1.UID, uid1)
	e.publishRuntime(uid1, name, true)
	testenv.EventuallyTrue(t, 10*time.Second, "mirror pod of the new static pod once the old one terminated", func() bool {
		m := e.mirror(name)
		return m != nil && m.Annotations[merge.AnnotationMirror] == string(uid2) && m.Spec.Containers[0].Image == "nginx:1.26"
	})

	// the manifest goes: the mirror stays until the pod has terminated.
	e.publishRuntime(uid2, name, false)
	m2 := e.mirror(name)
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "static pod REMOVE", func() bool { return len(e.bus.ops(uid2)) == 2 })
	e.mirrorStays(name, m2.UID, uid2)
	e.publishRuntime(uid2, name, true)
	testenv.EventuallyTrue(t, 10*time.Second, "mirror pod deleted once its static pod terminated", func() bool { return e.mirror(name) == nil })
}

// A node without static or mirror pods reads none of the pod workers'
// statuses. A static pod that appears later makes podconfig read them
// again, back far enough to take a status the pod workers published
// before it started reading: the pod's mirror then stays until the pod
// terminates.
func TestStatusesReadOnlyWithStaticPods(t *testing.T) {
	e := newEnv(t, "node-status-reads", true)
	dir := t.TempDir()
	cfg := testConfig()
	cfg.StaticPodPath = dir
	r := e.start(cfg)
	e.waitAllReady()
	following := func(want bool) func() bool {
		return func() bool { return r.statuses.following.Load() == want }
	}
	testenv.EventuallyTrue(t, 10*time.Second, "no reader of statuses on a node without static pods", following(false))

	// a static pod comes and goes: read while it is there.
	manifest := filepath.Join(dir, "web.yaml")
	writeFile(t, manifest, manifestYAML("web", "nginx:1.25", ""))
	name := "web-" + e.node
	var uid types.UID
	testenv.EventuallyTrue(t, 10*time.Second, "static pod ADD", func() bool { uid = e.bus.uidByName(name); return uid != "" })
	testenv.EventuallyTrue(t, 10*time.Second, "a reader of statuses with a static pod", following(true))
	testenv.EventuallyTrue(t, 10*time.Second, "mirror pod", func() bool { return e.mirror(name) != nil })
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "orphaned mirror pod deleted", func() bool { return e.mirror(name) == nil })
	testenv.EventuallyTrue(t, 10*time.Second, "no reader once the static and the mirror pod are gone", following(false))

	// The pod workers report the pod running while podconfig reads no
	// status; the same manifest comes back (the same UID): the status is
	// read back, and the mirror stays through the pod's termination.
	e.publishRuntime(uid, name, false)
	writeFile(t, manifest, manifestYAML("web", "nginx:1.25", ""))
	testenv.EventuallyTrue(t, 10*time.Second, "a reader of statuses again", following(true))
	testenv.EventuallyTrue(t, 10*time.Second, "mirror pod again", func() bool { return e.mirror(name) != nil })
	m := e.mirror(name)
	if err := os.Remove(manifest); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "static pod REMOVE", func() bool {
		ops := e.bus.ops(uid)
		return len(ops) == 4 && ops[3] == string(bus.OpRemove)
	})
	e.mirrorStays(name, m.UID, uid)
	e.publishRuntime(uid, name, true)
	testenv.EventuallyTrue(t, 10*time.Second, "mirror pod deleted once its static pod terminated", func() bool { return e.mirror(name) == nil })
	testenv.EventuallyTrue(t, 10*time.Second, "no reader at the end", following(false))
}
