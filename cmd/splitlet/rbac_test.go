package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
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

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/runtime/sim"
	"github.com/splitlet/splitlet/libs/testenv"
)

// rbacDir holds one ClusterRole (and binding) per stage.
const rbacDir = "../../deploy/rbac"

// stageUser is the API identity deploy/rbac binds a stage's role to.
func stageUser(stage string) string { return "splitlet:" + stage }

// nodeUser is the kubelet's identity for the node (Node authorizer).
func nodeUser(node string) string { return "system:node:" + node }

// TestStageAPIRoles runs every stage as its own process with its own API
// identity, with no more than deploy/rbac gives it (first each stage with
// its role; then nodehb, podconfig, podworkers and statussync as the node itself under
// the Node authorizer and NodeRestriction, as a kubelet runs), through what
// uses each permission: the Node and its Lease, a static pod's mirror pod,
// a pod Ready through an exec probe, a failing probe's Unhealthy Event,
// logs through the API server, a kubelet API request with a bearer token,
// deletion. The API server's audit log must show no request of theirs
// refused: a role short of a verb fails the test.
func TestStageAPIRoles(t *testing.T) {
	testenv.SkipShort(t, "etcd and kube-apiserver")
	bin := buildBinary(t)
	for _, asNode := range []bool{false, true} {
		name := "roles"
		if asNode {
			name = "node identity"
		}
		t.Run(name, func(t *testing.T) {
			node := "rbac-node"
			if asNode {
				node = "rbac-node-identity"
			}
			cp := testenv.ControlPlaneForTest(t, testenv.ControlPlaneOptions{Audit: true})
			ctx := t.Context()
			if err := testenv.Apply(ctx, cp.Config, rbacDir); err != nil {
				t.Fatalf("deploy/rbac: %v", err)
			}
			nats := testenv.NATSForTest(t)
			static := t.TempDir()
			writeStaticPod(t, static, "static-web")
			kubeletPort, err := testenv.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			users := map[string]bool{}
			for _, stage := range bus.Stages {
				user, groups := stageUser(stage), []string(nil)
				if asNode && stage != bus.StageProber {
					user, groups = nodeUser(node), []string{"system:nodes"}
				}
				users[user] = true
				cfg, err := cp.ClientConfig(user, groups...)
				if err != nil {
					t.Fatal(err)
				}
				kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
				if err := testenv.WriteKubeconfigFor(kubeconfig, user, cfg); err != nil {
					t.Fatal(err)
				}
				startSplitlet(t, bin, cp, node, stage, "--services="+stage, "--kubeconfig="+kubeconfig,
					"--nats-url="+nats.URL, "--runtime=sim", "--nodehb.agent-not-ready-grace=1s",
					fmt.Sprintf("--nodehb.port=%d", kubeletPort), "--podconfig.static-pod-path="+static)
			}
			var who []string
			for u := range users {
				who = append(who, u)
			}
			cs := cp.Clientset()
			waitNodeReady(t, cs, node)
			exerciseStages(t, cs, cp, node, kubeletPort)

			forbidden, err := cp.Forbidden(who...)
			if err != nil {
				t.Fatal(err)
			}
			if len(forbidden) > 0 {
				t.Errorf("requests the stages' identities were refused (a role lacks them):\n%s", strings.Join(forbidden, "\n"))
			}

			// The check above can fail: what a role does not give is
			// refused and shows in the audit log.
			probercfg, err := cp.ClientConfig(stageUser(bus.StageProber))
			if err != nil {
				t.Fatal(err)
			}
			prober := kubernetes.NewForConfigOrDie(probercfg)
			if _, err := prober.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("prober listing pods: %v, want forbidden", err)
			}
			if got, _ := cp.Forbidden(stageUser(bus.StageProber)); len(got) == 0 {
				t.Errorf("the prober's refused list is not in the audit log")
			}
			if asNode {
				// The Node authorizer and NodeRestriction keep the node to
				// its own objects.
				nodecfg, err := cp.ClientConfig(nodeUser(node), "system:nodes")
				if err != nil {
					t.Fatal(err)
				}
				nodeClient := kubernetes.NewForConfigOrDie(nodecfg)
				other := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "someone-else"}}
				if _, err := nodeClient.CoreV1().Nodes().Create(ctx, other, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
					t.Errorf("node creating another Node: %v, want forbidden", err)
				}
				if _, err := nodeClient.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
					t.Errorf("node listing every pod: %v, want forbidden", err)
				}
			}
		})
	}
}

func writeStaticPod(t *testing.T, dir, name string) {
	t.Helper()
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
spec:
  containers:
  - name: web
    image: busybox
    command: ["sleep", "3600"]
`, name)
	if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
}

// exerciseStages makes each stage use what its role gives it.
func exerciseStages(t *testing.T, cs kubernetes.Interface, cp *testenv.ControlPlane, node string, kubeletPort int) {
	t.Helper()
	ctx := context.Background()
	// podconfig: the static pod's mirror pod.
	mirrorName := "static-web-" + node
	testenv.Eventually(t, 60*time.Second, "mirror pod of the static pod", func() (bool, string) {
		_, err := cs.CoreV1().Pods("default").Get(ctx, mirrorName, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	// nodehb: the Lease.
	testenv.Eventually(t, 30*time.Second, "node lease", func() (bool, string) {
		_, err := cs.CoordinationV1().Leases("kube-node-lease").Get(ctx, node, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	ready := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "rbac-ready", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{Name: "app", Image: "busybox", Command: []string{"sleep", "3600"},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 1}}}},
	}
	// prober: a readiness probe that fails records Unhealthy Events.
	unready := ready.DeepCopy()
	unready.Name = "rbac-unready"
	unready.Annotations = map[string]string{sim.AnnotationExecExitCode: "1"}
	for _, p := range []*corev1.Pod{ready, unready} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 60*time.Second, "pod Ready through an exec probe", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, ready.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return podCondition(p, corev1.PodReady) == corev1.ConditionTrue, string(p.Status.Phase)
	})
	testenv.Eventually(t, 60*time.Second, "Unhealthy Event of the failing probe", func() (bool, string) {
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + unready.Name + ",reason=Unhealthy"})
		if err != nil {
			return false, err.Error()
		}
		return len(evs.Items) > 0, "none yet"
	})
	// nodehb: kubectl logs through the API server (client certificate and
	// SubjectAccessReview), and a bearer token on the kubelet API itself
	// (TokenReview).
	if _, err := logsOf(ctx, cs, ready.Name, &corev1.PodLogOptions{}); err != nil {
		t.Errorf("logs through the API server: %v", err)
	}
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/pods", kubeletPort), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+cp.Tokens[testenv.AdminUser])
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("kubelet API: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("kubelet API /pods with a bearer token: %s", resp.Status)
	}
	// statussync: the deleted pods are removed once their containers end.
	for _, name := range []string{ready.Name, unready.Name} {
		if err := cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 60*time.Second, "pods gone", func() (bool, string) {
		for _, name := range []string{ready.Name, unready.Name} {
			if _, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, name + ": " + fmt.Sprint(err)
			}
		}
		return true, ""
	})
	// podconfig: a mirror pod deleted by hand is made again.
	mirror, err := cs.CoreV1().Pods("default").Get(ctx, mirrorName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods("default").Delete(ctx, mirrorName, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "mirror pod made again", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, mirrorName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.UID != mirror.UID && p.UID != types.UID(""), "same UID"
	})
}
