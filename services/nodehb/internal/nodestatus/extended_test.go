package nodestatus

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

type fakeDevices struct{ capacity, allocatable corev1.ResourceList }

func (f fakeDevices) Resources() (corev1.ResourceList, corev1.ResourceList) {
	return f.capacity.DeepCopy(), f.allocatable.DeepCopy()
}

// The device manager's figures go into capacity and allocatable; an
// extended resource the Node had from elsewhere stays (allocatable its
// capacity); one the agent does not own and that is not extended goes.
func TestExtendedResources(t *testing.T) {
	dev := fakeDevices{
		capacity:    corev1.ResourceList{"example.com/gpu": resource.MustParse("2")},
		allocatable: corev1.ResourceList{"example.com/gpu": resource.MustParse("1")},
	}
	c := New(nil, desired(), &fakeReady{ready: true}, WithExtendedResources(dev))
	n := &corev1.Node{Status: corev1.NodeStatus{Capacity: corev1.ResourceList{
		"example.com/dongle": resource.MustParse("3"), "example.com/gpu": resource.MustParse("4"), corev1.ResourceCPU: resource.MustParse("8"),
	}}}
	c.setStatus(n, time.Now())
	for _, w := range []struct {
		list corev1.ResourceList
		name corev1.ResourceName
		want int64
	}{
		{n.Status.Capacity, "example.com/gpu", 2}, {n.Status.Allocatable, "example.com/gpu", 1},
		{n.Status.Capacity, "example.com/dongle", 3}, {n.Status.Allocatable, "example.com/dongle", 3},
		{n.Status.Capacity, corev1.ResourcePods, 110},
	} {
		q, ok := w.list[w.name]
		if !ok || q.Value() != w.want {
			t.Errorf("%s = %v (present %v), want %d", w.name, q.String(), ok, w.want)
		}
	}
	if _, ok := n.Status.Capacity[corev1.ResourceCPU]; ok {
		t.Errorf("cpu kept from the old status: %v", n.Status.Capacity)
	}
}
