package main

import (
	"bytes"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/splitlet/splitlet/libs/testenv"
)

// holdFinalizer keeps the forged pod in the API server after podconfig
// deletes it as an orphaned mirror pod: the window an attacker would have
// to win, held open for the test.
const holdFinalizer = "splitlet.test/hold"

// execOut runs `kubectl exec <pod> -c <container> -- cmd` through the API
// server (no terminal) and returns its stdout.
func execOut(ctx context.Context, cp *testenv.ControlPlane, pod, container string, cmd ...string) (string, error) {
	req := cp.Clientset().CoreV1().RESTClient().Post().Resource("pods").Namespace("default").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cp.Config, "POST", req.URL())
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	return stdout.String(), err
}

// whoPod is a pod of one container "app" that tells who it is: $WHO in its
// environment and "<who>-log" in its log.
func whoPod(name, node, who string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr(int64(1)), Containers: []corev1.Container{{
			Name: "app", Image: "busybox", Env: []corev1.EnvVar{{Name: "WHO", Value: who}},
			Command: []string{"sh", "-c", "echo " + who + "-log; while true; do sleep 1; done"},
		}}},
	}
}

// TestEndToEndForgedMirrorAnnotation: every stage in one process on the
// process runtime. A user who may create pods and exec makes a pod bound to
// the node with kubernetes.io/config.mirror set to another pod's UID, then
// runs `kubectl exec` and `kubectl logs` on it: neither reaches the other
// pod's container (the kubelet API answers 404, as the kubelet does for a
// mirror pod of no static pod), with podconfig's mirror pods off
// (nothing deletes the forged pod) and on (podconfig deletes it; a
// finalizer holds it in the API server, as an attacker who wins the race
// would). With mirror pods on, a real static pod's mirror pod still serves
// exec and logs from the static pod's container.
func TestEndToEndForgedMirrorAnnotation(t *testing.T) {
	cp := testenv.ControlPlaneForTest(t)
	cs := cp.Clientset()
	for _, mirrorPods := range []bool{false, true} {
		t.Run(fmt.Sprintf("mirror-pods=%v", mirrorPods), func(t *testing.T) {
			ctx := t.Context()
			node := fmt.Sprintf("forged-%v-node", mirrorPods)
			static := t.TempDir()
			manifest := whoPod("static-who", "", "static")
			manifest.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
			writeManifest(t, filepath.Join(static, "who.json"), manifest)
			startAgent(t, cp, node, "--runtime=process", "--podconfig.static-pod-path="+static,
				fmt.Sprintf("--podconfig.mirror-pods=%v", mirrorPods))
			waitNodeReady(t, cs, node)

			victim, err := cs.CoreV1().Pods("default").Create(ctx, whoPod("victim-"+node, node, "victim"), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { deleteNow(cs, victim.Name) })
			testenv.Eventually(t, 60*time.Second, "the victim's log", func() (bool, string) {
				out, err := logsOf(ctx, cs, victim.Name, &corev1.PodLogOptions{Container: "app"})
				return err == nil && strings.Contains(out, "victim-log"), fmt.Sprint(out, err)
			})

			forged := whoPod("forged-"+node, node, "attacker")
			forged.Annotations = map[string]string{"kubernetes.io/config.mirror": string(victim.UID)}
			forged.Finalizers = []string{holdFinalizer}
			if _, err := cs.CoreV1().Pods("default").Create(ctx, forged, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { release(cs, forged.Name) })
			if mirrorPods {
				testenv.Eventually(t, 30*time.Second, "podconfig deletes the orphaned mirror pod", func() (bool, string) {
					p, err := cs.CoreV1().Pods("default").Get(ctx, forged.Name, metav1.GetOptions{})
					return err == nil && p.DeletionTimestamp != nil, fmt.Sprint(err)
				})
			}
			// the victim is still answered by name (the pod worker serves
			// it), and the forged pod is refused every time.
			if out, err := execOut(ctx, cp, victim.Name, "app", "sh", "-c", "echo $WHO"); err != nil || out != "victim\n" {
				t.Fatalf("exec in the victim: %q, %v", out, err)
			}
			for range 3 {
				out, err := execOut(ctx, cp, forged.Name, "app", "sh", "-c", "echo $WHO")
				if strings.Contains(out, "victim") || err == nil || !strings.Contains(err.Error(), "does not exist") {
					t.Fatalf("exec in the forged pod: %q, %v; want refused (does not exist), never the victim's container", out, err)
				}
				// the API server passes the kubelet API's 404 on as NotFound.
				logs, err := logsOf(ctx, cs, forged.Name, &corev1.PodLogOptions{Container: "app"})
				if strings.Contains(logs, "victim") || !apierrors.IsNotFound(err) {
					t.Fatalf("logs of the forged pod: %q, %v; want refused (not found), never the victim's log", logs, err)
				}
			}
			if !mirrorPods {
				return
			}
			mirror := "static-who-" + node
			testenv.Eventually(t, 60*time.Second, "exec in the static pod through its mirror pod", func() (bool, string) {
				out, err := execOut(ctx, cp, mirror, "app", "sh", "-c", "echo $WHO")
				return err == nil && out == "static\n", fmt.Sprint(out, err)
			})
			testenv.Eventually(t, 30*time.Second, "the static pod's log through its mirror pod", func() (bool, string) {
				out, err := logsOf(ctx, cs, mirror, &corev1.PodLogOptions{Container: "app"})
				return err == nil && strings.Contains(out, "static-log"), fmt.Sprint(out, err)
			})
		})
	}
}

func writeManifest(t *testing.T, path string, pod *corev1.Pod) {
	t.Helper()
	data, err := runtimeJSON(pod)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func runtimeJSON(pod *corev1.Pod) ([]byte, error) {
	var buf bytes.Buffer
	err := scheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion).Encode(pod, &buf)
	return buf.Bytes(), err
}

// deleteNow deletes a pod without a grace period (cleanup).
func deleteNow(cs kubernetes.Interface, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
}

// release drops the test's finalizer from a pod and deletes it (cleanup).
func release(cs kubernetes.Interface, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	_, _ = cs.CoreV1().Pods("default").Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	deleteNow(cs, name)
}
