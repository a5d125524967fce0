package main

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/splitlet/splitlet/libs/testenv"
	"github.com/splitlet/splitlet/libs/testenv/deviceplugin"
)

// TestDevicePlugin: a device plugin registers with the agent; the Node
// states its device; a pod that asks for it runs with the environment the
// plugin's Allocate returned; a second pod finds none free and is rejected
// as the kubelet rejects it; once the first pod is gone its device goes to
// the next; and a device turning unhealthy, then its plugin going, leave
// the capacity with nothing allocatable.
func TestDevicePlugin(t *testing.T) {
	testenv.SkipShort(t, "containerd, etcd and kube-apiserver")
	ctx := t.Context()
	cd := hostContainerd(t)
	cp := testenv.ControlPlaneForTest(t)
	dir, err := os.MkdirTemp("", "dp") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	const node, res = "e2e-devices", "example.com/stub"
	startAgent(t, cp, node, "--runtime=cri", "--cri-endpoint="+cd.Endpoint, "--nodehb.device-plugins-dir="+dir,
		"--nodehb.node-status-update-frequency=1s")
	cs := cp.Clientset()
	waitNodeReady(t, cs, node)

	plugin := deviceplugin.New("d0")
	if err := plugin.Serve(dir, "stub.sock"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plugin.Stop)
	if err := plugin.Register(ctx, dir, "stub.sock", res); err != nil {
		t.Fatal(err)
	}
	waitDeviceFigures(t, cs, node, res, 1, 1)

	holder := devicePod(node, "holder", "sleep 3600")
	create(t, cs, holder)
	waitPod(t, cs, "holder", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	create(t, cs, devicePod(node, "rejected", "true"))
	want := "Pod was rejected: Allocate failed due to requested number of devices unavailable for example.com/stub. Requested: 1, Available: 0, which is unexpected"
	waitPod(t, cs, "rejected", "rejected with UnexpectedAdmissionError", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "UnexpectedAdmissionError" && p.Status.Message == want
	})

	if err := cs.CoreV1().Pods("default").Delete(ctx, "holder", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "holder gone", func() (bool, string) {
		_, err := cs.CoreV1().Pods("default").Get(ctx, "holder", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	// the container writes the variable the plugin set as its
	// termination message, where the pod's status shows it.
	create(t, cs, devicePod(node, "user", `printf %s "$STUB_DEVICES" > /dev/termination-log`))
	waitPod(t, cs, "user", "Succeeded with STUB_DEVICES=d0", func(p *corev1.Pod) bool {
		for _, c := range p.Status.ContainerStatuses {
			if term := c.State.Terminated; term != nil && term.ExitCode == 0 && term.Message == "d0" {
				return true
			}
		}
		return false
	})

	plugin.SetHealth("d0", pluginapi.Unhealthy)
	waitDeviceFigures(t, cs, node, res, 1, 0)
	plugin.SetHealth("d0", pluginapi.Healthy)
	waitDeviceFigures(t, cs, node, res, 1, 1)
	plugin.Stop()
	waitDeviceFigures(t, cs, node, res, 1, 0)
}

func devicePod(node, name, script string) *corev1.Pod {
	one := corev1.ResourceList{"example.com/stub": resource.MustParse("1")}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{
		NodeName: node, RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: ptr(int64(1)),
		Containers: []corev1.Container{{Name: "c", Image: testenv.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"sh", "-c", script}, Resources: corev1.ResourceRequirements{Limits: one, Requests: one}}},
	}}
}

func create(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod) {
	t.Helper()
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	})
}

func waitPod(t *testing.T, cs kubernetes.Interface, name, what string, ok func(*corev1.Pod) bool) {
	t.Helper()
	testenv.Eventually(t, 2*time.Minute, name+" "+what, func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ok(p), fmt.Sprintf("%s %s %q %+v", p.Status.Phase, p.Status.Reason, p.Status.Message, p.Status.ContainerStatuses)
	})
}

// waitDeviceFigures waits for the Node's capacity and allocatable of res.
func waitDeviceFigures(t *testing.T, cs kubernetes.Interface, node, res string, capacity, allocatable int64) {
	t.Helper()
	testenv.Eventually(t, time.Minute, fmt.Sprintf("%s capacity %d allocatable %d", res, capacity, allocatable), func() (bool, string) {
		n, err := cs.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c, okC := n.Status.Capacity[corev1.ResourceName(res)]
		a, okA := n.Status.Allocatable[corev1.ResourceName(res)]
		return okC && okA && c.Value() == capacity && a.Value() == allocatable, fmt.Sprintf("capacity %v allocatable %v", c.String(), a.String())
	})
}
