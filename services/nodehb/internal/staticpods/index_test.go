package staticpods

import (
	"testing"

	"github.com/splitlet/splitlet/libs/bus"
)

// The index holds the static pods and the path of the last announcement,
// each replaced by the next one.
func TestIndexSet(t *testing.T) {
	x := New(nil, nil)
	if x.Path() != "" {
		t.Errorf("path before an announcement: %q", x.Path())
	}
	x.Set(&bus.StaticPods{Pods: []bus.StaticPod{{UID: "u1", Namespace: "default", Name: "web-n"}}, Path: "/etc/kubernetes/manifests"})
	if uid, ok := x.UID("default", "web-n"); !ok || uid != "u1" {
		t.Errorf("UID = %q, %v", uid, ok)
	}
	if x.Path() != "/etc/kubernetes/manifests" {
		t.Errorf("path %q", x.Path())
	}
	x.Set(&bus.StaticPods{})
	if _, ok := x.UID("default", "web-n"); ok || x.Path() != "" {
		t.Errorf("after an empty announcement: path %q", x.Path())
	}
}
