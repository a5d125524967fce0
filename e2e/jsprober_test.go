package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/discovery"
	"github.com/splitlet/splitlet/libs/testenv"
)

// jsPort is the port of jsPod's web server (clear of webPod's and flakyPod's).
const jsPort = 18150

// TestComposeStackJSProber: the stack with the prober replaced by
// examples/jsprober, a prober in JavaScript on Node.js
// (compose.jsprober.yaml). It answers as splitlet-prober (implementation
// jsprober) under the prober's identity; a pod whose containers are gated
// by a startup probe (tcpSocket) and made ready by an httpGet and an exec
// probe (through the pod workers, runtime.probeexec.<p>) becomes Ready; a failing
// liveness probe restarts a container; deleted pods go.
func TestComposeStackJSProber(t *testing.T) {
	override := filepath.Join(composeDir(t), "compose.jsprober.yaml")
	if _, err := os.Stat(override); err != nil {
		t.Fatalf("%s: %v", override, err)
	}
	if err := exec.Command("docker", "image", "inspect", image("jsprober")).Run(); err != nil {
		t.Fatalf("image %s missing; run `make images` (it needs `make jsprober-deps`)", image("jsprober"))
	}
	s := upStack(t, map[string]string{"SPLITLET_PODWORKERS": "1"}, "compose.yaml", "compose.jsprober.yaml")
	ctx := t.Context()
	s.checkProberIsJS(t)
	s.waitNodeReady(t)

	s.create(t, flakyPod("flaky", flakyPort))
	s.create(t, jsPod("jsweb", jsPort))
	testenv.Eventually(t, 90*time.Second, "jsweb Running and Ready (startup, httpGet and exec probes)", func() (bool, string) {
		p, err := s.cs.CoreV1().Pods(namespace).Get(ctx, "jsweb", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var cs []string
		for _, c := range p.Status.ContainerStatuses {
			cs = append(cs, fmt.Sprintf("%s started=%v ready=%v", c.Name, c.Started != nil && *c.Started, c.Ready))
		}
		return runningReady(p), fmt.Sprintf("%s ready=%s %s", p.Status.Phase, podCondition(p, corev1.PodReady), strings.Join(cs, ", "))
	})
	testenv.Eventually(t, 90*time.Second, "flaky restarted after its liveness probe failed", func() (bool, string) {
		p, err := s.cs.CoreV1().Pods(namespace).Get(ctx, "flaky", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, fmt.Sprint(err)
		}
		return p.Status.ContainerStatuses[0].RestartCount >= 1, fmt.Sprintf("restarts %d", p.Status.ContainerStatuses[0].RestartCount)
	})

	for _, n := range []string{"flaky", "jsweb"} {
		if err := s.cs.CoreV1().Pods(namespace).Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s: %v", n, err)
		}
	}
	testenv.Eventually(t, time.Minute, "pods gone after delete", func() (bool, string) {
		var left []string
		for _, n := range []string{"flaky", "jsweb"} {
			if _, err := s.cs.CoreV1().Pods(namespace).Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				left = append(left, n)
			}
		}
		return len(left) == 0, strings.Join(left, " ")
	})
}

// checkProberIsJS: the one instance that answers on the prober's status
// subject is jsprober, and it is ready.
func (s *stack) checkProberIsJS(t *testing.T) {
	t.Helper()
	nc, err := s.natsConnect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subject := bus.For(nodeName).Status("prober")
	testenv.Eventually(t, 30*time.Second, "jsprober alone answers on "+subject+", ready", func() (bool, string) {
		inbox := nc.NewRespInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			return false, err.Error()
		}
		defer func() { _ = sub.Unsubscribe() }()
		if err := nc.PublishRequest(subject, inbox, nil); err != nil {
			return false, err.Error()
		}
		var answers []discovery.StageStatus
		for {
			m, err := sub.NextMsg(time.Second) // every instance answers; a second collects them
			if err != nil {
				break
			}
			var st discovery.StageStatus
			if err := json.Unmarshal(m.Data, &st); err != nil {
				return false, fmt.Sprintf("%v: %s", err, m.Data)
			}
			answers = append(answers, st)
		}
		ok := len(answers) == 1 && answers[0].Implementation == "jsprober" && answers[0].Ready
		return ok, fmt.Sprintf("%+v", answers)
	})
}

// jsPod: container web serves /index.html on port (busybox httpd); its
// startup probe waits for the port, its readiness probe GETs the page.
// Container worker is ready once its file exists, as an exec probe sees it
// ($(READY_FILE) expanded from its env).
func jsPod(name string, port int32) *corev1.Pod {
	dir := "/tmp/" + name
	ready := dir + "-ready"
	web := fmt.Sprintf(`mkdir -p %[1]s && echo ok > %[1]s/index.html && exec httpd -f -p 127.0.0.1:%[2]d -h %[1]s`, dir, port)
	worker := fmt.Sprintf(`rm -f %[1]s; sleep 2; touch %[1]s; while true; do sleep 1; done`, ready)
	probe := func(h corev1.ProbeHandler, failures int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: h, PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: failures}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"e2e": "js"}},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			TerminationGracePeriodSeconds: ptr(int64(2)),
			Containers: []corev1.Container{
				{
					Name: "web", Image: "busybox", Command: []string{"sh", "-c", web},
					StartupProbe: probe(corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Host: "127.0.0.1", Port: intstr.FromInt32(port)}}, 30),
					ReadinessProbe: probe(corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
						Host: "127.0.0.1", Path: "/index.html", Port: intstr.FromInt32(port)}}, 1),
				},
				{
					Name: "worker", Image: "busybox", Command: []string{"sh", "-c", worker},
					Env:            []corev1.EnvVar{{Name: "READY_FILE", Value: ready}},
					ReadinessProbe: probe(corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "$(READY_FILE)"}}}, 1),
				},
			},
		},
	}
}
