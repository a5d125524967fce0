package conformance

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv/deviceplugin"
)

// devicesAllocate is NodeHB's device case (docs/bus.md,
// DeviceAllocateRequest): the kit registers a device plugin with one device
// in Target.DevicePluginsDir; the Node states it (capacity and allocatable
// 1); a DeviceAllocateRequest of a pod for it is answered with what the
// plugin's Allocate returned (its variable), the same again for the same
// pod, and one of a second pod, while the first is in the API server, with
// the kubelet's rejection (UnexpectedAdmissionError, "Allocate failed due
// to requested number of devices unavailable ...").
func (h *harness) devicesAllocate(t *testing.T, cs kubernetes.Interface) {
	if h.tg.DevicePluginsDir == "" {
		t.Skip("Target.DevicePluginsDir not set: the stage serves no device plugins here")
	}
	res := "conformance.splitlet.dev/d" + string(uuid.NewUUID())[:8]
	plugin := deviceplugin.New("dev0")
	ep := fmt.Sprintf("conformance-%d.sock", os.Getpid())
	if err := plugin.Serve(h.tg.DevicePluginsDir, ep); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plugin.Stop)
	if err := plugin.Register(t.Context(), h.tg.DevicePluginsDir, ep, res); err != nil {
		t.Fatalf("registration: %v", err)
	}
	h.waitObject(t, "the Node's "+res+" at capacity 1, allocatable 1", func(ctx context.Context) (any, bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, h.tg.Node, metav1.GetOptions{})
		if err != nil {
			return nil, false, err
		}
		c, a := n.Status.Capacity[corev1.ResourceName(res)], n.Status.Allocatable[corev1.ResourceName(res)]
		return map[string]string{"capacity": c.String(), "allocatable": a.String()}, c.Value() == 1 && a.Value() == 1, nil
	})
	first := h.devicePod(t, cs, res)
	got := h.allocate(t, first, res)
	if got.Reason != "" || got.Error != "" || len(got.Containers) != 1 || got.Containers[0].Envs["STUB_DEVICES"] != "dev0" {
		t.Fatalf("first pod: %+v, want its container with STUB_DEVICES=dev0", got)
	}
	if again := h.allocate(t, first, res); len(again.Containers) != 1 || again.Containers[0].Envs["STUB_DEVICES"] != "dev0" {
		t.Fatalf("first pod asked again: %+v, want the same answer", again)
	}
	second := h.allocate(t, h.devicePod(t, cs, res), res)
	want := "Allocate failed due to requested number of devices unavailable for " + res + ". Requested: 1, Available: 0, which is unexpected"
	if second.Reason != "UnexpectedAdmissionError" || second.Message != want || len(second.Containers) != 0 {
		t.Fatalf("second pod: %+v, want UnexpectedAdmissionError %q", second, want)
	}
}

// devicePod is a pod of the node in the API server that asks for one res.
func (h *harness) devicePod(t *testing.T, cs kubernetes.Interface, res string) *corev1.Pod {
	one := corev1.ResourceList{corev1.ResourceName(res): resource.MustParse("1")}
	pod := h.newPod("devices", corev1.Container{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{Limits: one, Requests: one}})
	pod.UID, pod.ResourceVersion, pod.CreationTimestamp = "", "", metav1.Time{}
	created, err := cs.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	return created
}

func (h *harness) allocate(t *testing.T, pod *corev1.Pod, res string) *bus.DeviceAllocateResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), h.tg.Timeout+10*time.Second)
	defer cancel()
	e, err := h.workers.Request(ctx, h.subjects.DevicesAllocate(), bus.KindDeviceAllocateRequest, &bus.DeviceAllocateRequest{
		PodUID: pod.UID, Namespace: pod.Namespace, Pod: pod.Name,
		Containers: []bus.DeviceContainer{{Name: "c", Resources: map[string]int64{res: 1}}},
	})
	if err != nil {
		t.Fatalf("DeviceAllocateRequest: %v", err)
	}
	out, err := bus.DecodeDeviceAllocateResult(e)
	if err != nil {
		t.Fatalf("the answer is not a DeviceAllocateResult: %v", err)
	}
	return out
}
