package service

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/services/podconfig/internal/merge"
)

func manifestYAML(name, image, extraMeta string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
%s
spec:
  containers:
  - name: main
    image: %s
`, name, extraMeta, image)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	// Write beside and rename, so that a read never sees half a file.
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// uidByName finds the UID of the latest ADD of a pod with that name.
func (b *busLog) uidByName(name string) types.UID {
	recs := b.snapshot()
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Op != bus.OpAdd {
			continue
		}
		for _, p := range recs[i].Pods {
			if p.Name == name {
				return p.UID
			}
		}
	}
	return ""
}

func (e *env) mirror(name string) *corev1.Pod { return e.mirrorIn("default", name) }

func (e *env) mirrorIn(namespace, name string) *corev1.Pod {
	p, err := e.cs.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// TestStaticPodsAndMirrors: a static pod manifest added, changed and removed
// gives ADD, REMOVE+ADD (new content, new UID, as the kubelet derives it) or
// UPDATE (a manifest with its own UID), and REMOVE on the bus, and its mirror
// pod is created, replaced and removed in the API server; a mirror pod
// deleted by hand comes back; an orphaned one goes; mirror pods are never
// published as api pods; bad manifests beside good ones are skipped with an
// Event on the Node.
func TestStaticPodsAndMirrors(t *testing.T) {
	e := newEnv(t, "node-static", true)
	ctx := t.Context()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "web.yaml"), manifestYAML("web", "nginx:1.25", ""))
	writeFile(t, filepath.Join(dir, "bad-yaml.yaml"), "apiVersion: v1\nkind: Pod\nmetadata: {name: [oops\n")
	writeFile(t, filepath.Join(dir, "no-containers.json"), `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"empty"},"spec":{"containers":[]}}`)
	writeFile(t, filepath.Join(dir, "bad-name.yaml"), manifestYAML("Bad_Name", "nginx", ""))
	// An orphan: a mirror pod without a static pod.
	orphan := testPod("ghost-"+e.node, e.node)
	orphan.Annotations = map[string]string{merge.AnnotationMirror: "deadbeef"}
	if _, err := e.cs.CoreV1().Pods("default").Create(ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig()
	cfg.StaticPodPath = dir
	e.start(cfg)
	e.waitAllReady()
	if sr := e.sourcesReady(); strings.Join(sr.Sources, ",") != "api,file" {
		t.Fatalf("SourcesReady %+v", sr)
	}

	name := "web-" + e.node
	var uid1 types.UID
	testenv.EventuallyTrue(t, 10*time.Second, "static pod ADD", func() bool { uid1 = e.bus.uidByName(name); return uid1 != "" })
	p, rec, _ := e.bus.last(uid1, bus.OpAdd)
	if rec.Source != "file" || p.Namespace != "default" || p.Spec.NodeName != e.node ||
		p.Annotations[merge.AnnotationSource] != "file" || p.Annotations[merge.AnnotationHash] != string(uid1) || p.Annotations[merge.AnnotationSeen] == "" {
		t.Fatalf("static pod from %s: %s/%s node %q annotations %v", rec.Source, p.Namespace, p.Name, p.Spec.NodeName, p.Annotations)
	}
	// state.static names it, for nodehb to match its mirror pod by full name.
	testenv.EventuallyTrue(t, 10*time.Second, "StaticPods with the static pod", func() bool {
		return e.staticPodsAre(fmt.Sprintf("%s default/%s", uid1, name))
	})
	// and where the file source reads, which the node's /configz states.
	if sp := e.staticPods(); sp.Path != dir {
		t.Errorf("StaticPods path %q, want %q", sp.Path, dir)
	}
	var m1 *corev1.Pod
	testenv.EventuallyTrue(t, 10*time.Second, "mirror pod", func() bool { m1 = e.mirror(name); return m1 != nil })
	node, err := e.cs.CoreV1().Nodes().Get(ctx, e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m1.Annotations[merge.AnnotationMirror] != string(uid1) || len(m1.OwnerReferences) != 1 ||
		m1.OwnerReferences[0].Kind != "Node" || m1.OwnerReferences[0].UID != node.UID {
		t.Fatalf("mirror pod annotations %v owners %+v", m1.Annotations, m1.OwnerReferences)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "orphaned mirror pod deleted", func() bool { return e.mirror("ghost-"+e.node) == nil })

	// Bad manifests: skipped, with one Event on the Node each.
	testenv.EventuallyTrue(t, 10*time.Second, "Events about the bad manifests", func() bool {
		evs, err := e.cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.kind": "Node", "involvedObject.name": e.node, "reason": "InvalidStaticPodManifest"}.String()})
		if err != nil {
			return false
		}
		found := map[string]bool{}
		for _, ev := range evs.Items {
			for _, f := range []string{"bad-yaml.yaml", "no-containers.json", "bad-name.yaml"} {
				if strings.Contains(ev.Message, f) {
					found[f] = true
				}
			}
		}
		return len(found) == 3
	})

	// Content changed: the kubelet derives a new UID, so REMOVE old + ADD new;
	// the mirror pod is replaced with one of the new hash.
	writeFile(t, filepath.Join(dir, "web.yaml"), manifestYAML("web", "nginx:1.26", ""))
	var uid2 types.UID
	testenv.EventuallyTrue(t, 10*time.Second, "changed static pod", func() bool {
		uid2 = e.bus.uidByName(name)
		return uid2 != uid1 && fmt.Sprint(e.bus.ops(uid1)) == "[ADD REMOVE]"
	})
	testenv.EventuallyTrue(t, 10*time.Second, "mirror pod replaced", func() bool {
		m := e.mirror(name)
		return m != nil && m.Annotations[merge.AnnotationMirror] == string(uid2) && m.Spec.Containers[0].Image == "nginx:1.26"
	})

	// A manifest with its own UID keeps it: a change is an UPDATE.
	writeFile(t, filepath.Join(dir, "fixed.yaml"), manifestYAML("fixed", "busybox", "  uid: fixed-uid-1"))
	testenv.EventuallyTrue(t, 10*time.Second, "fixed ADD", func() bool { return fmt.Sprint(e.bus.ops("fixed-uid-1")) == "[ADD]" })
	writeFile(t, filepath.Join(dir, "fixed.yaml"), manifestYAML("fixed", "busybox", "  uid: fixed-uid-1\n  labels: {v: \"2\"}"))
	testenv.EventuallyTrue(t, 10*time.Second, "fixed UPDATE", func() bool { return fmt.Sprint(e.bus.ops("fixed-uid-1")) == "[ADD UPDATE]" })
	testenv.EventuallyTrue(t, 10*time.Second, "StaticPods with the changed and the fixed pod", func() bool {
		return e.staticPodsAre(fmt.Sprintf("%s default/%s", uid2, name), "fixed-uid-1 default/fixed-"+e.node)
	})

	// The mirror pod deleted by hand comes back.
	m2 := e.mirror(name)
	zero := int64(0)
	if err := e.cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "mirror pod recreated", func() bool {
		m := e.mirror(name)
		return m != nil && m.UID != m2.UID && m.Annotations[merge.AnnotationMirror] == string(uid2)
	})

	// Removed: REMOVE, and the mirror pod goes.
	if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "static pod REMOVE", func() bool { return fmt.Sprint(e.bus.ops(uid2)) == "[ADD REMOVE]" })
	testenv.EventuallyTrue(t, 10*time.Second, "mirror pod deleted", func() bool { return e.mirror(name) == nil })
	testenv.EventuallyTrue(t, 10*time.Second, "StaticPods without the removed pod", func() bool {
		return e.staticPodsAre("fixed-uid-1 default/fixed-" + e.node)
	})

	// Mirror pods never appear as api pods, and bad manifests never at all.
	for _, r := range e.bus.snapshot() {
		for _, q := range r.Pods {
			if r.Source == "api" {
				t.Fatalf("api source published %s (a mirror pod) on %s", q.Name, r.Subject)
			}
			if strings.Contains(q.Name, "empty") || strings.Contains(strings.ToLower(q.Name), "bad") {
				t.Fatalf("bad manifest published: %s", q.Name)
			}
		}
	}
	_ = os.Remove(filepath.Join(dir, "fixed.yaml"))
	testenv.EventuallyTrue(t, 10*time.Second, "fixed mirror pod deleted", func() bool { return e.mirror("fixed-"+e.node) == nil })
}

// TestMirrorPodWaitsForNode: with no Node object yet the static pod is
// published but its mirror pod cannot be made (the owner reference needs the
// Node's UID); once the Node is registered the mirror pod appears, owned by it.
func TestMirrorPodWaitsForNode(t *testing.T) {
	e := newEnv(t, "node-late", false)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "late.yaml"), manifestYAML("late", "busybox", ""))
	cfg := testConfig()
	cfg.StaticPodPath = dir
	e.start(cfg)
	name := "late-" + e.node
	testenv.EventuallyTrue(t, 10*time.Second, "static pod ADD", func() bool { return e.bus.uidByName(name) != "" })
	if e.mirror(name) != nil {
		t.Fatal("a mirror pod exists before its Node")
	}
	e.registerNode()
	node, err := e.cs.CoreV1().Nodes().Get(t.Context(), e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 20*time.Second, "mirror pod after the Node registered", func() bool {
		m := e.mirror(name)
		return m != nil && len(m.OwnerReferences) == 1 && m.OwnerReferences[0].UID == node.UID
	})
	_ = os.Remove(filepath.Join(dir, "late.yaml"))
	testenv.EventuallyTrue(t, 10*time.Second, "mirror pod deleted", func() bool { return e.mirror(name) == nil })
}

// TestOrphanMirrorWithoutStaticSources: with the API source alone every
// mirror pod of the node is an orphan and goes; it is never published.
func TestOrphanMirrorWithoutStaticSources(t *testing.T) {
	e := newEnv(t, "node-nostatic", true)
	orphan := testPod("lost-"+e.node, e.node)
	orphan.Annotations = map[string]string{merge.AnnotationMirror: "cafe"}
	if _, err := e.cs.CoreV1().Pods("default").Create(t.Context(), orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.start(testConfig())
	e.waitAllReady()
	testenv.EventuallyTrue(t, 10*time.Second, "orphaned mirror pod deleted", func() bool { return e.mirror(orphan.Name) == nil })
	if n := len(e.bus.snapshot()); n != 0 {
		t.Fatalf("%d pod updates published for a node with only a mirror pod", n)
	}
	// No static source: an empty StaticPods, so that no mirror pod stands
	// for a static pod.
	testenv.EventuallyTrue(t, 10*time.Second, "empty StaticPods", func() bool { return e.staticPodsAre() })
}

// TestFileNotifications: with periodic reads an hour apart, file system
// notifications alone bring a new, a changed and a removed manifest.
func TestFileNotifications(t *testing.T) {
	e := newEnv(t, "node-notify", false)
	dir := t.TempDir()
	cfg := testConfig()
	cfg.StaticPodPath = dir
	cfg.FileCheckFrequency = time.Hour
	cfg.MirrorPods = false
	e.start(cfg)
	e.waitAllReady()
	name := "notified-" + e.node
	writeFile(t, filepath.Join(dir, "n.json"), `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"notified","uid":"n-1"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}`)
	testenv.EventuallyTrue(t, 10*time.Second, "ADD on notification", func() bool { return e.bus.uidByName(name) == "n-1" })
	writeFile(t, filepath.Join(dir, "n.json"), `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"notified","uid":"n-1","labels":{"v":"2"}},"spec":{"containers":[{"name":"c","image":"busybox"}]}}`)
	testenv.EventuallyTrue(t, 10*time.Second, "UPDATE on notification", func() bool { return fmt.Sprint(e.bus.ops("n-1")) == "[ADD UPDATE]" })
	if err := os.Remove(filepath.Join(dir, "n.json")); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "REMOVE on notification", func() bool { return fmt.Sprint(e.bus.ops("n-1")) == "[ADD UPDATE REMOVE]" })
}

// A manifest removed and written again at once (within the read that a
// notification brings) is a pod removed and added again, the same UID:
// REMOVE, then ADD (kubelet: the file source's delete and add events), so
// that the pod workers restart it; a manifest replaced by a rename over it
// is no removal.
func TestFileRemovedAndRewrittenAtOnce(t *testing.T) {
	e := newEnv(t, "node-rewrite", false)
	dir := t.TempDir()
	cfg := testConfig()
	cfg.StaticPodPath = dir
	cfg.FileCheckFrequency = time.Hour
	cfg.MirrorPods = false
	e.start(cfg)
	e.waitAllReady()
	name := "again-" + e.node
	file := filepath.Join(dir, "again.yaml")
	writeFile(t, file, manifestYAML("again", "busybox", ""))
	var uid types.UID
	testenv.EventuallyTrue(t, 10*time.Second, "ADD", func() bool { uid = e.bus.uidByName(name); return uid != "" })
	writeFile(t, file, manifestYAML("again", "busybox", ""))
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(manifestYAML("again", "busybox", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyTrue(t, 10*time.Second, "REMOVE and ADD of the same UID", func() bool {
		return fmt.Sprint(e.bus.ops(uid)) == "[ADD REMOVE ADD]"
	})
}
