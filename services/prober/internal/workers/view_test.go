package workers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/kube/podheap"
	"github.com/splitlet/splitlet/services/prober/internal/probe"
)

// probedPod is a pod as the conformance suite's probe tests make them, as
// podconfig publishes it: a plain init container and a sidecar, three
// containers with env, mounts, ports and resources, and every kind of
// probe: the sidecar's tcpSocket startup and httpGet readiness probes on
// its named port, the app's httpGet readiness on a named port and liveness
// on a numbered one, the worker's exec readiness probe whose command reads
// its env; the logger has none. Every port is port; i makes the names and
// UID its own.
func probedPod(i, port int) *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	grace := int64(30)
	name := fmt.Sprintf("pod-e2e-%05d-3f9c2a71", i)
	env := func(n int) []corev1.EnvVar {
		out := []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}},
		}
		for k := 0; k < n; k++ {
			out = append(out, corev1.EnvVar{Name: fmt.Sprintf("E2E_SETTING_%d", k), Value: fmt.Sprintf("value-%d-of-the-test-%d", k, i)})
		}
		return out
	}
	mounts := []corev1.VolumeMount{{Name: "kube-api-access", ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"},
		{Name: "data", MountPath: "/data"}}
	container := func(name string, args ...string) corev1.Container {
		return corev1.Container{Name: name, Image: "registry.k8s.io/e2e-test-images/agnhost:2.53", Args: args, Env: env(3), VolumeMounts: mounts,
			ImagePullPolicy: corev1.PullIfNotPresent, TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}}}
	}
	httpProbe := func(path string, p intstr.IntOrString) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: p, Scheme: corev1.URISchemeHTTP}},
			TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
	}
	setup := container("setup", "sh", "-c", "echo set up > /data/ready")
	proxy := container("proxy", "netexec", fmt.Sprintf("--http-port=%d", port))
	proxy.RestartPolicy = &always
	proxy.Ports = []corev1.ContainerPort{{Name: "proxy", ContainerPort: int32(port), Protocol: corev1.ProtocolTCP}}
	proxy.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("proxy")}},
		PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 30}
	proxy.ReadinessProbe = httpProbe("/healthz", intstr.FromString("proxy"))
	app := container("app", "netexec", fmt.Sprintf("--http-port=%d", port))
	app.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port), Protocol: corev1.ProtocolTCP},
		{Name: "udp", ContainerPort: int32(port), Protocol: corev1.ProtocolUDP}}
	app.ReadinessProbe = httpProbe("/readyz", intstr.FromString("http"))
	app.LivenessProbe = httpProbe("/healthz", intstr.FromInt(port))
	worker := container("worker", "sh", "-c", "while true; do date >> /data/log; sleep 5; done")
	worker.Env = append(worker.Env, corev1.EnvVar{Name: "LOG", Value: "/data/log"})
	worker.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "$(LOG)"}}},
		PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1}
	logger := container("logger", "sh", "-c", "tail -F /data/log")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "container-probe-8231", UID: types.UID(fmt.Sprintf("7c1e3f52-%04x-4a8b-9f61-%012x", i%0xffff, i)),
			ResourceVersion: fmt.Sprint(1000000 + i), Generation: 1, CreationTimestamp: metav1.NewTime(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)),
			Labels: map[string]string{"name": name, "test": "liveness-and-readiness"},
			Annotations: map[string]string{"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": "2025-03-01T12:00:00.5Z",
				"example.com/owner": "sig-node conformance"},
		},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{setup, proxy},
			Containers:     []corev1.Container{app, worker, logger},
			Volumes: []corev1.Volume{
				{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				}}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			RestartPolicy: corev1.RestartPolicyOnFailure, TerminationGracePeriodSeconds: &grace, DNSPolicy: corev1.DNSClusterFirst,
			ServiceAccountName: "default", NodeName: "node-1", SchedulerName: corev1.DefaultSchedulerName,
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable, HostIP: "172.18.0.2",
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}},
	}
}

// plainPod is the pod bench/ creates (one busybox container, no probe), as
// podconfig publishes it.
func plainPod(i, _ int) *corev1.Pod {
	name := fmt.Sprintf("bench-split-%05d", i)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(fmt.Sprintf("0b6d2c1e-%04x-4e0f-8a53-%012x", i%0xffff, i)),
			ResourceVersion: fmt.Sprint(2000000 + i), Labels: map[string]string{"bench-run": "split"},
			Annotations: map[string]string{"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": "2025-03-01T12:00:00.5Z"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "infinity"}, ImagePullPolicy: corev1.PullAlways,
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-abcde", ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}}},
			Volumes: []corev1.Volume{{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}},
			RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst, ServiceAccountName: "default", NodeName: "bench-node",
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBestEffort},
	}
}

// TestProbeViewDrops: the view keeps what the prober reads and nothing else.
func TestProbeViewDrops(t *testing.T) {
	full := probedPod(1, 8080)
	gone := metav1.Now()
	full.DeletionTimestamp = &gone
	v := probeView(full.DeepCopy())
	if v.Name != full.Name || v.Namespace != full.Namespace || v.UID != full.UID || !v.DeletionTimestamp.Equal(full.DeletionTimestamp) ||
		v.Spec.RestartPolicy != full.Spec.RestartPolicy || v.Status.Phase != full.Status.Phase {
		t.Errorf("read fields lost: %+v", v)
	}
	if v.Labels != nil || v.Annotations != nil || v.ResourceVersion != "" || v.Spec.Volumes != nil || v.Spec.NodeName != "" ||
		v.Spec.Tolerations != nil || v.Status.Conditions != nil || v.Status.QOSClass != "" {
		t.Errorf("fields kept: %+v", v)
	}
	names := func(cs []corev1.Container) (out []string) {
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	if got := names(v.Spec.InitContainers); !slices.Equal(got, []string{"proxy"}) {
		t.Errorf("init containers %v, want the sidecar alone", got)
	}
	if got := names(v.Spec.Containers); !slices.Equal(got, []string{"app", "worker"}) {
		t.Errorf("containers %v, want those with a probe", got)
	}
	for _, c := range append(slices.Clone(v.Spec.InitContainers), v.Spec.Containers...) {
		if c.Image != "" || c.Args != nil || c.VolumeMounts != nil || c.Resources.Requests != nil || c.TerminationMessagePath != "" {
			t.Errorf("container %s: fields kept: %+v", c.Name, c)
		}
		orig := findContainer(full, c.Name)
		if !equality.Semantic.DeepEqual(c.RestartPolicy, orig.RestartPolicy) || !equality.Semantic.DeepEqual(c.StartupProbe, orig.StartupProbe) ||
			!equality.Semantic.DeepEqual(c.ReadinessProbe, orig.ReadinessProbe) || !equality.Semantic.DeepEqual(c.LivenessProbe, orig.LivenessProbe) {
			t.Errorf("container %s: restart policy or probes lost", c.Name)
		}
	}
	app, worker := &v.Spec.Containers[0], &v.Spec.Containers[1]
	if want := []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "udp", ContainerPort: 8080}}; !equality.Semantic.DeepEqual(app.Ports, want) || app.Env != nil {
		t.Errorf("app: ports %+v (want names and numbers), env %v (want none: no exec probe)", app.Ports, app.Env)
	}
	if want := []string{"E2E_SETTING_0", "E2E_SETTING_1", "E2E_SETTING_2", "LOG"}; worker.Ports != nil || !slices.Equal(names2(worker.Env), want) {
		t.Errorf("worker: ports %+v (want none), env %v (want %v: the literal ones)", worker.Ports, names2(worker.Env), want)
	}
	if again := probeView(v.DeepCopy()); !equality.Semantic.DeepEqual(again, v) {
		t.Error("the view is not idempotent")
	}
	fullJSON, _ := json.Marshal(full)
	viewJSON, _ := json.Marshal(v)
	t.Logf("probed pod as JSON: %d bytes, its view %d", len(fullJSON), len(viewJSON))
}

func names2(env []corev1.EnvVar) (out []string) {
	for _, e := range env {
		out = append(out, e.Name)
	}
	return out
}

func findContainer(p *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// scriptedExecer answers exec probes: exit 0 for `cat /data/log` (the
// worker's command once $(LOG) is expanded), 1 for anything else, and
// records each request.
type scriptedExecer struct {
	mu   sync.Mutex
	reqs []string
}

func (s *scriptedExecer) Exec(_ context.Context, req bus.ExecRequest, _ time.Duration) (*probe.ExecOutcome, error) {
	s.mu.Lock()
	s.reqs = append(s.reqs, fmt.Sprintf("exec %s/%s %s %q", req.Namespace, req.Pod, req.Container, req.Command))
	s.mu.Unlock()
	if slices.Equal(req.Command, []string{"cat", "/data/log"}) {
		return &probe.ExecOutcome{ExitCode: 0}, nil
	}
	return &probe.ExecOutcome{ExitCode: 1, Output: []byte("no such file")}, nil
}

// probeTwin is a manager keeping either whole pods or their views, whose
// workers are run by hand, one at a time in key order, with all they do
// recorded.
type probeTwin struct {
	m      *Manager
	rec    *recorded
	events *record.FakeRecorder
	ex     *scriptedExecer
	log    []string
}

func newProbeTwin(t *testing.T, view bool) *probeTwin {
	t.Helper()
	tw := &probeTwin{rec: &recorded{}, events: record.NewFakeRecorder(1000), ex: &scriptedExecer{}}
	m, err := New(WithSink(tw.rec.sink), WithExecer(tw.ex), WithRecorder(tw.events))
	if err != nil {
		t.Fatal(err)
	}
	if !view {
		m.view = func(p *corev1.Pod) *corev1.Pod { return p }
	}
	tw.m = m
	t.Cleanup(func() {
		// the workers still there have no timer to end them by
		m.mu.Lock()
		left := make([]*worker, 0, len(m.workers))
		for _, w := range m.workers {
			left = append(left, w)
		}
		m.mu.Unlock()
		for _, w := range left {
			w.finish()
		}
		_ = m.Stop(context.Background())
	})
	return tw
}

// upsert takes in a copy of p, and stops the timers of the workers it
// made: the test runs them.
func (tw *probeTwin) upsert(p *corev1.Pod) {
	tw.m.UpsertPod(p.DeepCopy())
	tw.m.mu.Lock()
	defer tw.m.mu.Unlock()
	for _, w := range tw.m.workers {
		w.mu.Lock()
		w.timer.Stop()
		w.mu.Unlock()
	}
}

// workers describes the manager's workers, in key order, by what they were
// built from.
func (tw *probeTwin) workers() []string {
	tw.m.mu.Lock()
	defer tw.m.mu.Unlock()
	var out []string
	for _, w := range tw.m.workers {
		spec, _ := json.Marshal(w.spec)
		out = append(out, fmt.Sprintf("%s/%s/%s %s/%s init=%v period=%v initial=%s spec=%s", w.key.uid, w.key.container, w.key.probe,
			w.namespace, w.name, w.isInit, w.period, w.initial, spec))
	}
	slices.Sort(out)
	return out
}

// round runs every worker once, in key order, as its timer would, and logs
// whether it goes on, then what reached the sink, the recorder and the
// runtime.
func (tw *probeTwin) round(step string) {
	tw.m.mu.Lock()
	var ws []*worker
	for _, w := range tw.m.workers {
		ws = append(ws, w)
	}
	tw.m.mu.Unlock()
	slices.SortFunc(ws, func(a, b *worker) int {
		return strings.Compare(fmt.Sprint(a.key), fmt.Sprint(b.key))
	})
	for _, w := range ws {
		keep := w.doProbe(tw.m.ctx)
		tw.log = append(tw.log, fmt.Sprintf("%s: %s/%s keep=%v", step, w.key.container, w.key.probe, keep))
		if !keep {
			w.finish()
		}
	}
	for _, r := range tw.rec.list() {
		tw.log = append(tw.log, fmt.Sprintf("%s: result %+v", step, r))
	}
	tw.rec.mu.Lock()
	tw.rec.all = nil
	tw.rec.mu.Unlock()
	for len(tw.events.Events) > 0 {
		tw.log = append(tw.log, step+": event "+<-tw.events.Events)
	}
	tw.ex.mu.Lock()
	for _, r := range tw.ex.reqs {
		tw.log = append(tw.log, step+": "+r)
	}
	tw.ex.reqs = nil
	tw.ex.mu.Unlock()
}

// TestProbeViewSameBehaviour: a manager that keeps the views of the pods
// builds the same workers as one that keeps them whole, and its workers
// probe the same targets with the same commands and send the same results
// and Events, through a pod's life: its probes on named and numbered ports
// and its exec probe's env, a container that fails and will restart
// (restart policy OnFailure), one that completes and will not, a deletion,
// and a terminal phase on the bus.
func TestProbeViewSameBehaviour(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	pod := probedPod(7, port)
	// periods far beyond the test: no timer of a worker fires before the
	// test stops it
	for _, c := range []*corev1.Container{&pod.Spec.InitContainers[1], &pod.Spec.Containers[0], &pod.Spec.Containers[1]} {
		for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
			if p != nil {
				p.PeriodSeconds = 3600
			}
		}
	}
	started := metav1.NewTime(time.Now().Add(-5 * time.Second))
	run := func(name, id string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, ContainerID: id, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}
	}
	done := func(name, id string, code int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, ContainerID: id, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
	}
	status := func(cs ...corev1.ContainerStatus) *bus.PodRuntimeStatus {
		return &bus.PodRuntimeStatus{UID: pod.UID, Namespace: pod.Namespace, Name: pod.Name, PodIP: "127.0.0.1",
			InitContainerStatuses: []corev1.ContainerStatus{done("setup", "c://setup", 0), run("proxy", "c://proxy")}, ContainerStatuses: cs}
	}
	deleting := pod.DeepCopy()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	failed := deleting.DeepCopy()
	failed.Status.Phase = corev1.PodFailed

	var logs [2][]string
	for i, view := range []bool{false, true} {
		tw := newProbeTwin(t, view)
		tw.upsert(pod)
		tw.log = append(tw.log, tw.workers()...)
		tw.m.UpdateStatus(status(run("app", "c://app"), run("worker", "c://worker"), run("logger", "c://logger")))
		tw.round("running")
		tw.round("running again")
		// the app fails (it will restart: OnFailure), the worker completes
		// (it will not)
		tw.m.UpdateStatus(status(done("app", "c://app", 1), done("worker", "c://worker", 0), run("logger", "c://logger")))
		tw.round("stopped")
		tw.m.UpdateStatus(status(run("app", "c://app-2"), done("worker", "c://worker", 0), run("logger", "c://logger")))
		tw.upsert(deleting)
		tw.round("deleting")
		tw.upsert(failed)
		tw.round("failed")
		tw.log = append(tw.log, tw.workers()...)
		logs[i] = tw.log
	}
	whole, view := strings.Join(logs[0], "\n"), strings.Join(logs[1], "\n")
	if whole != view {
		t.Errorf("the managers differ:\nwhole pods:\n  %s\nviews:\n  %s", strings.ReplaceAll(whole, "\n", "\n  "), strings.ReplaceAll(view, "\n", "\n  "))
	}
	for _, want := range []string{"exec container-probe-8231/" + pod.Name + ` worker ["cat" "/data/log"]`, "statuscode: 503",
		"proxy/Startup keep=true", "worker/Readiness keep=false", "app/Liveness keep=false", "Result:Success"} {
		if !strings.Contains(view, want) {
			t.Errorf("the case tests less than it should: no %q in\n%s", want, view)
		}
	}
}

// BenchmarkPodBytes: heap the prober holds a pod, over 5000 pods each
// decoded from its own JSON, kept whole (what UpsertPod kept before the
// view) and as probeView, for probed conformance-like pods and for bench/'s
// one-container pods without probes. "pod" is the pod alone; "manager" is
// everything a Manager holds once told of the pods (its workers, their
// timers and metric series included), per pod.
//
//	go test -run '^$' -bench PodBytes -benchtime 1x ./services/prober/internal/workers/
func BenchmarkPodBytes(b *testing.B) {
	const n = 5000
	for _, kind := range []struct {
		name string
		pod  func(int, int) *corev1.Pod
	}{{"probed", probedPod}, {"bench", plainPod}} {
		docs := make([][]byte, n)
		for i := range docs {
			var err error
			if docs[i], err = json.Marshal(kind.pod(i, 8080)); err != nil {
				b.Fatal(err)
			}
		}
		for _, view := range []bool{false, true} {
			name := map[bool]string{false: "whole", true: "view"}[view]
			b.Run(kind.name+"/pod/"+name, func(b *testing.B) {
				keep := func(p *corev1.Pod) any { return p }
				if view {
					keep = func(p *corev1.Pod) any { return probeView(p) }
				}
				var per uint64
				for range b.N {
					per = podheap.RetainedPerPod(docs, keep)
				}
				b.ReportMetric(float64(per), "B/pod")
			})
			b.Run(kind.name+"/manager/"+name, func(b *testing.B) {
				var per uint64
				for range b.N {
					m, err := New()
					if err != nil {
						b.Fatal(err)
					}
					if !view {
						m.view = func(p *corev1.Pod) *corev1.Pod { return p }
					}
					per = podheap.RetainedPerPod(docs, func(p *corev1.Pod) any { m.UpsertPod(p); return nil })
					if err := m.Stop(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(per), "B/pod")
			})
		}
	}
}
