package devices

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/services/podworkers/internal/admission"
)

// answer is a device manager that answers every request with res (or err),
// recording the requests.
type answer struct {
	res  *bus.DeviceAllocateResult
	err  error
	reqs []*bus.DeviceAllocateRequest
}

func (a *answer) Request(_ context.Context, _ string, kind bus.Kind, payload any) (*bus.Envelope, error) {
	if kind != bus.KindDeviceAllocateRequest {
		panic(kind)
	}
	a.reqs = append(a.reqs, payload.(*bus.DeviceAllocateRequest))
	if a.err != nil {
		return nil, a.err
	}
	data, _, err := bus.NewPublisher(nil, nil, "n", "nodehb").Seal(bus.KindDeviceAllocateResult, "", a.res)
	if err != nil {
		return nil, err
	}
	return bus.Decode(data)
}

func pod(limits corev1.ResourceList) *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u", Namespace: "ns", Name: "p"}, Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "side", RestartPolicy: &always, Resources: corev1.ResourceRequirements{Limits: limits}}},
		Containers: []corev1.Container{
			{Name: "main", Resources: corev1.ResourceRequirements{Limits: limits}},
			{Name: "plain", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}},
		},
	}}
}

func TestRequestNamesExtendedResources(t *testing.T) {
	if Request(pod(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")})) != nil {
		t.Fatal("a pod without extended resources asks for devices")
	}
	req := Request(pod(corev1.ResourceList{"example.com/gpu": resource.MustParse("2"), corev1.ResourceCPU: resource.MustParse("1")}))
	if req == nil || len(req.Containers) != 2 {
		t.Fatalf("request %+v, want side and main", req)
	}
	side, main := req.Containers[0], req.Containers[1]
	if side.Name != "side" || !side.Init || !side.Restartable || side.Resources["example.com/gpu"] != 2 || len(side.Resources) != 1 {
		t.Errorf("side: %+v", side)
	}
	if main.Name != "main" || main.Init || main.Resources["example.com/gpu"] != 2 {
		t.Errorf("main: %+v", main)
	}
}

func TestAdmitAndOptions(t *testing.T) {
	p := pod(corev1.ResourceList{"example.com/gpu": resource.MustParse("1")})
	given := &bus.DeviceAllocateResult{Containers: []bus.DeviceContainerOptions{{Name: "main", Envs: map[string]string{"GPU": "0"},
		Devices: []bus.DeviceNode{{ContainerPath: "/dev/g", HostPath: "/dev/g0", Permissions: "rw"}}}}}
	rejected := &bus.DeviceAllocateResult{Reason: ReasonUnexpectedAdmissionError, Message: "Allocate failed due to x, which is unexpected"}
	for _, c := range []struct {
		name      string
		a         *answer
		supported bool
		admit     bool
		reason    string
		optErr    string
		env       string
	}{
		{"given", &answer{res: given}, true, true, "", "", "0"},
		{"rejected", &answer{res: rejected}, true, false, ReasonUnexpectedAdmissionError, "Allocate failed due to x", ""},
		{"process runtime", &answer{res: given}, false, false, ReasonUnexpectedAdmissionError, "the process runtime gives containers no devices", ""},
		// no device manager: admitted, and a resource the Node does not
		// state starts without devices.
		{"no device manager", &answer{err: nats.ErrNoResponders}, true, true, "", "", ""},
		{"device manager failing", &answer{err: context.DeadlineExceeded}, true, true, "", "device manager", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := New(c.a, "subj", "process", c.supported, func() *corev1.Node { return &corev1.Node{} }, zap.NewNop())
			r := cl.Admit(&admission.Attributes{Pod: p})
			if r.Admit != c.admit || r.Reason != c.reason {
				t.Fatalf("Admit = %+v, want admit %v reason %q", r, c.admit, c.reason)
			}
			o, err := cl.Options(t.Context(), p, "main")
			if c.optErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.optErr) {
					t.Fatalf("Options error %v, want %q", err, c.optErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := ""; o != nil {
				got = o.Envs["GPU"]
				if got != c.env || len(o.Devices) != 1 || o.Devices[0].HostPath != "/dev/g0" {
					t.Fatalf("options %+v", o)
				}
			} else if c.env != "" {
				t.Fatal("no options")
			}
			if last := c.a.reqs[len(c.a.reqs)-1]; last.Start != "main" {
				t.Fatalf("start request names %q", last.Start)
			}
		})
	}
	// a device resource the Node states, with no device manager answering:
	// the start waits for it.
	cl := New(&answer{err: nats.ErrNoResponders}, "subj", "cri", true, func() *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Capacity: corev1.ResourceList{"example.com/gpu": resource.MustParse("1")}}}
	}, zap.NewNop())
	if _, err := cl.Options(t.Context(), p, "main"); err == nil {
		t.Fatal("a container started without the devices the Node states")
	}
}
