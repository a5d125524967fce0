package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/splitlet/splitlet/libs/runtime/cri"
	"github.com/splitlet/splitlet/libs/testenv"
)

// kubectl runs the real kubectl against the stack.
func (s *stack) kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestComposeCRI: the stack with podworkers on the host's containerd
// (compose.cri.yaml). A busybox pod, a real image, becomes Ready through an
// exec readiness probe; kubectl logs and exec work; its container is a
// containerd container of its sandbox; kubectl delete stops it with SIGTERM
// within its grace, and its sandbox is removed.
func TestComposeCRI(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatalf("kubectl is not on PATH: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cd, err := testenv.EnsureContainerd(ctx, testenv.ContainerdOptions{})
	if err != nil {
		t.Fatalf("the CRI stack needs a containerd with its CRI plugin: %v", err)
	}
	t.Cleanup(cd.Stop)
	rs, err := remote.NewRemoteRuntimeService(ctx, cd.Endpoint, 10*time.Second, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	s := upStack(t, map[string]string{testenv.ContainerdAddressEnv: cd.Address}, "compose.yaml", "compose.cri.yaml")
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		_ = testenv.RemoveSandboxes(cctx, cd.Endpoint, testenv.PodLogRoot, map[string]string{cri.NodeLabel: nodeName})
	})
	s.waitNodeReady(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cri-web", Namespace: namespace},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: ptr(int64(10)),
			Containers: []corev1.Container{{
				Name:            "web",
				Image:           "busybox",
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"sh", "-c", `trap 'echo bye; exit 0' TERM; touch /tmp/ready; echo hello-cri; while true; do sleep 0.2; done`},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/tmp/ready"}}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
	s.create(t, pod)
	var uid string
	testenv.Eventually(t, 3*time.Minute, "the busybox pod Ready through its exec probe", func() (bool, string) {
		p, err := s.cs.CoreV1().Pods(namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		uid = string(p.UID)
		return runningReady(p), string(p.Status.Phase) + " " + containerID(p)
	})
	p, _ := s.cs.CoreV1().Pods(namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	id := containerID(p)
	if !strings.HasPrefix(id, "containerd://") {
		t.Fatalf("container ID %q: not containerd's", id)
	}
	status, err := rs.ContainerStatus(ctx, strings.TrimPrefix(id, "containerd://"), false)
	if err != nil || status.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING ||
		status.GetStatus().GetLabels()["io.kubernetes.pod.uid"] != uid {
		t.Fatalf("containerd's view of %s: %+v, %v", id, status.GetStatus(), err)
	}
	testenv.Eventually(t, time.Minute, "kubectl logs", func() (bool, string) {
		out, err := s.kubectl(t, "logs", pod.Name)
		return err == nil && strings.Contains(out, "hello-cri"), out
	})
	testenv.Eventually(t, time.Minute, "kubectl exec", func() (bool, string) {
		out, err := s.kubectl(t, "exec", pod.Name, "--", "sh", "-c", "echo from-exec; cat /tmp/ready && echo ready-file")
		return err == nil && strings.Contains(out, "from-exec") && strings.Contains(out, "ready-file"), out
	})

	// delete: the last status before the object goes says how it ended.
	w, err := s.cs.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if out, err := s.kubectl(t, "delete", "pod", pod.Name, "--wait=false"); err != nil {
		t.Fatalf("kubectl delete: %v: %s", err, out)
	}
	var last *corev1.ContainerStateTerminated
	deadline := time.After(2 * time.Minute)
	for done := false; !done; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed before the pod was gone")
			}
			if p, isPod := ev.Object.(*corev1.Pod); isPod && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Terminated != nil {
				last = p.Status.ContainerStatuses[0].State.Terminated
			}
			done = ev.Type == watch.Deleted
		case <-deadline:
			t.Fatal("the pod was not gone within 2 minutes of kubectl delete")
		}
	}
	if last == nil || last.ExitCode != 0 || last.Reason != "Completed" {
		t.Fatalf("the container's end %+v: want exit 0 on SIGTERM within the grace (137 would be a kill after it)", last)
	}
	testenv.Eventually(t, time.Minute, "the pod's sandbox removed from containerd", func() (bool, string) {
		sbs, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}})
		if err != nil {
			return false, err.Error()
		}
		return len(sbs) == 0, ""
	})
}
