package statusmanager

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/reference"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/kube/podheap"
)

// fixtureTime is the time of everything in the fixtures: well before any
// time a test stamps, so that stamped times can be told apart.
var fixtureTime = metav1.NewTime(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))

// conformancePod is a pod as the conformance suite's pods come out of the
// API server: an init container and a sidecar, three containers with env,
// mounts, ports, probes and resources, the service account's projected
// token volume and a few other volumes, the admission defaults, a readiness
// gate, managed fields of its creator and of the status writer, and a
// Running status. i makes the names, UID and IPs its own.
func conformancePod(i int) *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	expiry := int64(3607)
	grace := int64(30)
	mode := int32(420)
	priority := int32(0)
	preempt := corev1.PreemptLowerPriority
	tolerate := int64(300)
	mounts := func(extra ...corev1.VolumeMount) []corev1.VolumeMount {
		return append([]corev1.VolumeMount{{Name: fmt.Sprintf("kube-api-access-%05d", i), ReadOnly: true,
			MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}, extra...)
	}
	env := func(n int) []corev1.EnvVar {
		out := []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}},
		}
		for k := 0; k < n; k++ {
			out = append(out, corev1.EnvVar{Name: fmt.Sprintf("E2E_SETTING_%d", k), Value: fmt.Sprintf("value-%d-of-the-test-%d", k, i)})
		}
		return out
	}
	requests := func(cpu, mem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}
	}
	httpProbe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(8080), Scheme: corev1.URISchemeHTTP}},
			InitialDelaySeconds: 1, TimeoutSeconds: 1, PeriodSeconds: 2, SuccessThreshold: 1, FailureThreshold: 3}
	}
	container := func(name, image string, args []string) corev1.Container {
		return corev1.Container{Name: name, Image: image, Args: args, ImagePullPolicy: corev1.PullIfNotPresent,
			TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile}
	}
	agnhost := "registry.k8s.io/e2e-test-images/agnhost:2.53"
	busybox := "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"

	setup := container("setup", busybox, []string{"sh", "-c", "echo setting up > /data/ready"})
	setup.Env, setup.VolumeMounts, setup.Resources = env(2), mounts(corev1.VolumeMount{Name: "data", MountPath: "/data"}), requests("10m", "16Mi")
	proxy := container("proxy", agnhost, []string{"netexec", "--http-port=8081"})
	proxy.RestartPolicy = &always
	proxy.Ports = []corev1.ContainerPort{{Name: "proxy", ContainerPort: 8081, Protocol: corev1.ProtocolTCP}}
	proxy.Env, proxy.VolumeMounts, proxy.Resources = env(2), mounts(), requests("20m", "32Mi")
	proxy.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8081)}},
		PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 30}
	proxy.ReadinessProbe = httpProbe("/healthz")
	app := container("app", agnhost, []string{"netexec", "--http-port=8080", "--udp-port=8080"})
	app.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {Name: "udp", ContainerPort: 8080, Protocol: corev1.ProtocolUDP}}
	app.Env, app.Resources = env(8), requests("100m", "64Mi")
	app.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}
	app.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}
	app.VolumeMounts = mounts(corev1.VolumeMount{Name: "config", MountPath: "/etc/config"}, corev1.VolumeMount{Name: "creds", MountPath: "/etc/creds", ReadOnly: true},
		corev1.VolumeMount{Name: "data", MountPath: "/data"})
	app.ReadinessProbe, app.LivenessProbe = httpProbe("/readyz"), httpProbe("/healthz")
	app.SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: new(bool), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	worker := container("worker", busybox, []string{"sh", "-c", "while true; do date >> /data/log; sleep 5; done"})
	worker.Env, worker.VolumeMounts, worker.Resources = env(4), mounts(corev1.VolumeMount{Name: "data", MountPath: "/data"}), requests("10m", "16Mi")
	worker.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "/data/log"}}},
		PeriodSeconds: 5, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
	logger := container("logger", busybox, []string{"sh", "-c", "tail -F /data/log"})
	logger.Env, logger.VolumeMounts = env(1), mounts(corev1.VolumeMount{Name: "data", MountPath: "/data", ReadOnly: true})

	name := fmt.Sprintf("pod-e2e-%05d-3f9c2a71", i)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "pods-8231", UID: types.UID(fmt.Sprintf("7c1e3f52-%04x-4a8b-9f61-%012x", i%0xffff, i)),
			ResourceVersion: fmt.Sprint(1000000 + i), Generation: 2, CreationTimestamp: fixtureTime,
			Labels: map[string]string{"name": name, "time": "771234567", "test": "pod-lifecycle"},
			Annotations: map[string]string{
				"example.com/owner": "sig-node conformance",
				"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"Pod","metadata":{"annotations":{},"name":"` + name +
					`","namespace":"pods-8231"},"spec":{"containers":[{"image":"` + agnhost + `","name":"app"}]}}`,
			},
		},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{setup, proxy},
			Containers:     []corev1.Container{app, worker, logger},
			Volumes: []corev1.Volume{
				{Name: fmt.Sprintf("kube-api-access-%05d", i), VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					DefaultMode: &mode,
					Sources: []corev1.VolumeProjection{
						{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: &expiry, Path: "token"}},
						{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
							Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
						{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
							FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
					}}}},
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, DefaultMode: &mode}}},
				{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds", DefaultMode: &mode}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: &grace,
			DNSPolicy:                     corev1.DNSClusterFirst,
			ServiceAccountName:            "default",
			NodeName:                      "node-1",
			SecurityContext:               &corev1.PodSecurityContext{},
			SchedulerName:                 corev1.DefaultSchedulerName,
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tolerate},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tolerate},
			},
			Priority:           &priority,
			EnableServiceLinks: new(bool),
			PreemptionPolicy:   &preempt,
			ReadinessGates:     []corev1.PodReadinessGate{{ConditionType: "example.com/gate"}},
		},
		Status: runningStatus(i, []string{"setup", "proxy"}, []string{"app", "worker", "logger"}),
	}
	p.ManagedFields = managedFields(p)
	return p
}

// benchPod is the pod bench/ creates (one busybox container), Running, as
// the API server shows it.
func benchPod(i int) *corev1.Pod {
	grace := int64(30)
	tolerate := int64(300)
	expiry := int64(3607)
	mode := int32(420)
	name := fmt.Sprintf("bench-split-%05d", i)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(fmt.Sprintf("0b6d2c1e-%04x-4e0f-8a53-%012x", i%0xffff, i)),
			ResourceVersion: fmt.Sprint(2000000 + i), CreationTimestamp: fixtureTime, Labels: map[string]string{"bench-run": "split"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "infinity"}, ImagePullPolicy: corev1.PullAlways,
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-abcde", ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}}},
			Volumes: []corev1.Volume{{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				DefaultMode: &mode,
				Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: &expiry, Path: "token"}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				}}}}},
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace, DNSPolicy: corev1.DNSClusterFirst,
			ServiceAccountName: "default", NodeName: "bench-node", SecurityContext: &corev1.PodSecurityContext{}, SchedulerName: corev1.DefaultSchedulerName,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists},
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &tolerate}},
		},
		Status: runningStatus(i, nil, []string{"c"}),
	}
	p.ManagedFields = managedFields(p)
	return p
}

// runningStatus is the status of a pod whose init containers ran and whose
// containers run, ready.
func runningStatus(i int, inits, containers []string) corev1.PodStatus {
	ip := fmt.Sprintf("10.%d.%d.%d", 64+i>>16&63, i>>8&255, i&255)
	start := fixtureTime
	yes := true
	no := false
	s := corev1.PodStatus{
		Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBurstable, ObservedGeneration: 2,
		HostIP: "172.18.0.2", HostIPs: []corev1.HostIP{{IP: "172.18.0.2"}}, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &start,
	}
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled, "example.com/gate"} {
		s.Conditions = append(s.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: fixtureTime, ObservedGeneration: 2})
	}
	status := func(name string, k int) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, Ready: true, Started: &yes, Image: "registry.k8s.io/e2e-test-images/agnhost:2.53",
			ImageID:     "registry.k8s.io/e2e-test-images/agnhost@sha256:99c6b4bb4a1e1df3f0b3752168c89358794d02258ebebc26bf21c29399011a85",
			ContainerID: fmt.Sprintf("containerd://%064x", i*16+k),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: fixtureTime}},
			VolumeMounts: []corev1.VolumeMountStatus{{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount",
				ReadOnly: true, RecursiveReadOnly: ptrTo(corev1.RecursiveReadOnlyDisabled)}}}
	}
	for k, n := range inits {
		c := status(n, k)
		if k == 0 { // the first init container ran to completion
			c.Ready, c.Started = true, &no
			c.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
				StartedAt: fixtureTime, FinishedAt: fixtureTime, ContainerID: c.ContainerID}}
		}
		s.InitContainerStatuses = append(s.InitContainerStatuses, c)
	}
	for k, n := range containers {
		s.ContainerStatuses = append(s.ContainerStatuses, status(n, 8+k))
	}
	return s
}

func ptrTo[T any](v T) *T { return &v }

// managedFields are the managed fields the API server keeps for a pod: its
// creator's (metadata and spec, one key per container, env entry, mount,
// port and volume) and the status writer's.
func managedFields(p *corev1.Pod) []metav1.ManagedFieldsEntry {
	var b strings.Builder
	b.WriteString(`{"f:metadata":{"f:labels":{`)
	for k := range p.Labels {
		fmt.Fprintf(&b, `"f:%s":{},`, k)
	}
	b.WriteString(`".":{}}},"f:spec":{`)
	containers := func(key string, cs []corev1.Container) {
		fmt.Fprintf(&b, `"f:%s":{`, key)
		for _, c := range cs {
			fmt.Fprintf(&b, `"k:{\"name\":\"%s\"}":{".":{},"f:args":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},"f:resources":{},`+
				`"f:terminationMessagePath":{},"f:terminationMessagePolicy":{},"f:env":{".":{}`, c.Name)
			for _, e := range c.Env {
				fmt.Fprintf(&b, `,"k:{\"name\":\"%s\"}":{".":{},"f:name":{},"f:value":{}}`, e.Name)
			}
			b.WriteString(`},"f:volumeMounts":{".":{}`)
			for _, m := range c.VolumeMounts {
				fmt.Fprintf(&b, `,"k:{\"mountPath\":\"%s\"}":{".":{},"f:mountPath":{},"f:name":{}}`, m.MountPath)
			}
			b.WriteString(`},"f:ports":{".":{}`)
			for _, port := range c.Ports {
				fmt.Fprintf(&b, `,"k:{\"containerPort\":%d,\"protocol\":\"%s\"}":{".":{},"f:containerPort":{},"f:name":{},"f:protocol":{}}`, port.ContainerPort, port.Protocol)
			}
			b.WriteString(`}},`)
		}
		b.WriteString(`".":{}},`)
	}
	containers("initContainers", p.Spec.InitContainers)
	containers("containers", p.Spec.Containers)
	b.WriteString(`"f:volumes":{".":{}`)
	for _, v := range p.Spec.Volumes {
		fmt.Fprintf(&b, `,"k:{\"name\":\"%s\"}":{".":{},"f:name":{}}`, v.Name)
	}
	b.WriteString(`},"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}`)
	status := `{"f:status":{"f:conditions":{"k:{\"type\":\"ContainersReady\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},` +
		`"k:{\"type\":\"Initialized\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},` +
		`"k:{\"type\":\"PodReadyToStartContainers\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},` +
		`"k:{\"type\":\"Ready\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}}},` +
		`"f:containerStatuses":{},"f:hostIP":{},"f:hostIPs":{},"f:phase":{},"f:podIP":{},"f:podIPs":{".":{},"k:{\"ip\":\"10.64.0.1\"}":{".":{},"f:ip":{}}},"f:startTime":{}}}`
	return []metav1.ManagedFieldsEntry{
		{Manager: "e2e.test", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &fixtureTime, FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(b.String())}},
		{Manager: "splitlet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &fixtureTime, FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(status)}, Subresource: "status"},
	}
}

// TestAPIViewDrops: the view keeps what statussync reads and nothing else
// of a conformance pod.
func TestAPIViewDrops(t *testing.T) {
	full := conformancePod(1)
	full.Spec.Volumes = append(full.Spec.Volumes, corev1.Volume{Name: "host",
		VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/e2e"}}})
	full.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-uid"}}
	v := apiView(full.DeepCopy())

	if v.ManagedFields != nil || v.Labels != nil || v.Annotations != nil || v.OwnerReferences != nil {
		t.Errorf("metadata kept: managed fields %d, labels %v, annotations %v, owners %v", len(v.ManagedFields), v.Labels, v.Annotations, v.OwnerReferences)
	}
	if len(v.Spec.Volumes) != 1 || v.Spec.Volumes[0].Name != "host" {
		t.Errorf("volumes: got %v, want only the hostPath volume (the projected token, configMap, secret and emptyDir dropped)", v.Spec.Volumes)
	}
	if v.Spec.Tolerations != nil || v.Spec.NodeName != "" || v.Spec.ServiceAccountName != "" || v.Spec.SecurityContext != nil ||
		v.Spec.TerminationGracePeriodSeconds != nil || v.Spec.Priority != nil {
		t.Errorf("pod spec fields kept: %+v", v.Spec)
	}
	for _, pair := range [][2][]corev1.Container{{full.Spec.InitContainers, v.Spec.InitContainers}, {full.Spec.Containers, v.Spec.Containers}} {
		if len(pair[0]) != len(pair[1]) {
			t.Fatalf("containers: %d, want %d", len(pair[1]), len(pair[0]))
		}
		for k, c := range pair[1] {
			orig := pair[0][k]
			if c.Env != nil || c.EnvFrom != nil || c.VolumeMounts != nil || c.Args != nil || c.Command != nil || c.Ports != nil ||
				c.LivenessProbe != nil || c.SecurityContext != nil || c.TerminationMessagePath != "" || c.ImagePullPolicy != "" {
				t.Errorf("container %s: fields kept: %+v", c.Name, c)
			}
			if c.Name != orig.Name || c.Image != orig.Image || !equality.Semantic.DeepEqual(c.RestartPolicy, orig.RestartPolicy) ||
				!equality.Semantic.DeepEqual(c.Resources, orig.Resources) {
				t.Errorf("container %s: read fields lost: %+v", orig.Name, c)
			}
			if (c.StartupProbe != nil) != (orig.StartupProbe != nil) || (c.ReadinessProbe != nil) != (orig.ReadinessProbe != nil) {
				t.Errorf("container %s: probe presence lost", orig.Name)
			}
			if (c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil) || (c.StartupProbe != nil && c.StartupProbe.TCPSocket != nil) {
				t.Errorf("container %s: probe details kept", orig.Name)
			}
		}
	}
	if !equality.Semantic.DeepEqual(v.Status, full.Status) {
		t.Error("status not kept whole")
	}
	if v.Name != full.Name || v.Namespace != full.Namespace || v.UID != full.UID || v.ResourceVersion != full.ResourceVersion ||
		v.Generation != full.Generation || !v.CreationTimestamp.Equal(&full.CreationTimestamp) {
		t.Errorf("metadata lost: %+v", v.ObjectMeta)
	}
	if !equality.Semantic.DeepEqual(v.Spec.ReadinessGates, full.Spec.ReadinessGates) || v.Spec.RestartPolicy != full.Spec.RestartPolicy {
		t.Error("readiness gates or restart policy lost")
	}
	if again := apiView(v.DeepCopy()); !equality.Semantic.DeepEqual(again, v) {
		t.Error("the view is not idempotent")
	}

	// The start SLI's stateless/stateful answer stays, both ways.
	if !stateful(full) || !stateful(v) {
		t.Error("stateful pod not stateful in the view")
	}
	stateless := conformancePod(2)
	if stateful(stateless) || stateful(apiView(stateless)) || apiView(stateless).Spec.Volumes != nil {
		t.Error("stateless pod: stateful in the view, or stateless volumes kept")
	}

	// An Event on the view refers to the same object.
	want, err := reference.GetReference(scheme.Scheme, full)
	if err != nil {
		t.Fatal(err)
	}
	got, err := reference.GetReference(scheme.Scheme, v)
	if err != nil {
		t.Fatal(err)
	}
	if *got != *want {
		t.Errorf("event reference %+v, want %+v", got, want)
	}

	// Of the annotations, only the mirror and source ones stay.
	mirror := conformancePod(3)
	mirror.Annotations[AnnotationMirror] = "hash"
	mirror.Annotations[AnnotationSource] = "file"
	mirror.Annotations[bus.AnnotationSeen] = "2025-03-01T12:00:00Z"
	if a := apiView(mirror).Annotations; len(a) != 2 || a[AnnotationMirror] != "hash" || a[AnnotationSource] != "file" {
		t.Errorf("annotations of a mirror pod: %v", a)
	}

	// Ephemeral containers keep their name and image.
	debug := conformancePod(4)
	debug.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debugger", Image: "busybox", Command: []string{"sh"}, Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}, TargetContainerName: "app"}}
	if e := apiView(debug).Spec.EphemeralContainers; len(e) != 1 || e[0].Name != "debugger" || e[0].Image != "busybox" || e[0].Command != nil || e[0].TargetContainerName != "" {
		t.Errorf("ephemeral containers: %+v", e)
	}

	// A tombstone passes unchanged.
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: v}
	if out, err := APIView(tomb); err != nil || out != any(tomb) {
		t.Errorf("tombstone: %v %v", out, err)
	}

	fullJSON, _ := json.Marshal(full)
	viewJSON, _ := json.Marshal(v)
	t.Logf("conformance pod as JSON: %d bytes, its view %d", len(fullJSON), len(viewJSON))
}

// twin is a manager whose informer cache and bus copies hold either the
// pods as they come (what the stage did before the views) or their views
// (APIView, busView), with every request it makes recorded.
type twin struct {
	name    string
	view    bool
	m       *Manager
	cs      *fake.Clientset
	inf     cache.SharedIndexInformer
	actions []string
}

// apiPod is the pod as the API server has it now.
func (tw *twin) apiPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	obj, err := tw.cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*corev1.Pod).DeepCopy()
}

// withoutStamps is a patch without the times the test stamped (metav1.Now
// cut to seconds: transition and start times), re-encoded with its keys in
// order: whether a patch carries such a time depends on whether a second
// began since the last one, which differs between two managers run one
// after the other. The fixtures' times are older and stay.
func withoutStamps(patch []byte, since time.Time) (string, error) {
	var doc any
	if err := json.Unmarshal(patch, &doc); err != nil {
		return "", err
	}
	var strip func(any)
	strip = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok {
					if at, err := time.Parse(time.RFC3339, s); err == nil && !at.Before(since) {
						delete(v, k)
						continue
					}
				}
				strip(x)
			}
		case []any:
			for _, x := range v {
				strip(x)
			}
		}
	}
	strip(doc)
	out, err := json.Marshal(doc)
	return string(out), err
}

func newTwin(t *testing.T, name string, view bool, apiPods ...*corev1.Pod) *twin {
	t.Helper()
	start := time.Now().Add(-2 * time.Second)
	objs := make([]k8sruntime.Object, len(apiPods))
	for i, p := range apiPods {
		objs[i] = p.DeepCopy()
	}
	cs := fake.NewClientset(objs...)
	tw := &twin{name: name}
	version := 5000000
	cs.PrependReactor("*", "pods", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		switch a := a.(type) {
		case k8stesting.PatchAction:
			patch, err := withoutStamps(a.GetPatch(), start)
			if err != nil {
				t.Error(err)
			}
			tw.actions = append(tw.actions, fmt.Sprintf("patch %s/%s %s %s", a.GetNamespace(), a.GetName(), a.GetSubresource(), patch))
			// The tracker applies the patch but leaves the resource version
			// as it was; the API server moves it on, and freshest relies on
			// that.
			handled, obj, err := k8stesting.ObjectReaction(cs.Tracker())(a)
			if p, ok := obj.(*corev1.Pod); ok && err == nil {
				version++
				p.ResourceVersion = fmt.Sprint(version)
				err = cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), p, p.Namespace)
			}
			return handled, obj, err
		case k8stesting.DeleteAction:
			tw.actions = append(tw.actions, fmt.Sprintf("delete %s/%s", a.GetNamespace(), a.GetName()))
		default:
			tw.actions = append(tw.actions, a.GetVerb()+" "+a.GetSubresource())
		}
		return false, nil, nil
	})
	tw.inf = informers.NewSharedInformerFactory(cs, 0).Core().V1().Pods().Informer()
	m, err := New(cs, tw.inf, zap.NewNop(), Options{Partitions: 4, CoalesceDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.queue.ShutDown)
	if !view {
		m.view = func(p *corev1.Pod) *corev1.Pod { return p }
		// what PodUpdate kept before the bus view: a shallow copy
		m.busView = func(p *corev1.Pod) *corev1.Pod { c := *p; return &c }
	}
	tw.m, tw.cs, tw.view = m, cs, view
	for _, p := range apiPods {
		tw.apiEvent(t, p, true)
	}
	return tw
}

// apiEvent caches an API pod (or its view) as the informer would, and
// tells the manager.
func (tw *twin) apiEvent(t *testing.T, p *corev1.Pod, added bool) {
	t.Helper()
	var obj any = p.DeepCopy()
	if tw.view {
		obj, _ = APIView(obj)
	} else {
		obj, _ = kube.StripManagedFields(obj)
	}
	if err := tw.inf.GetIndexer().Update(obj); err != nil {
		t.Fatal(err)
	}
	tw.m.onAPIPod(obj, added)
}

// sameRequests runs steps on a manager over full API pods and on one over
// their views, syncing uid after each step, and fails unless both make
// the same requests and cache the same statuses.
func sameRequests(t *testing.T, uid types.UID, apiPods []*corev1.Pod, steps ...func(*twin)) {
	t.Helper()
	full := newTwin(t, "full", false, apiPods...)
	view := newTwin(t, "view", true, apiPods...)
	for i, step := range steps {
		for _, tw := range []*twin{full, view} {
			step(tw)
			if err := tw.m.sync(context.Background(), uid); err != nil {
				t.Fatalf("%s, step %d: sync: %v", tw.name, i, err)
			}
		}
		fs, fv, _ := full.m.Status(uid)
		vs, vv, _ := view.m.Status(uid)
		if fv != vv || !apiStatusEqual(&fs, &vs) {
			t.Errorf("step %d: cached statuses differ:\nfull (v%d): %s\nview (v%d): %s", i, fv, statusJSON(fs), vv, statusJSON(vs))
		}
	}
	if strings.Join(full.actions, "\n") != strings.Join(view.actions, "\n") {
		t.Errorf("requests differ:\nfull:\n  %s\nview:\n  %s", strings.Join(full.actions, "\n  "), strings.Join(view.actions, "\n  "))
	}
	if len(full.actions) == 0 {
		t.Error("no request made: the case tests nothing")
	}
}

// apiStatusEqual compares two statuses but for the times a test stamps.
func apiStatusEqual(a, b *corev1.PodStatus) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	for _, s := range []*corev1.PodStatus{a, b} {
		for i := range s.Conditions {
			s.Conditions[i].LastTransitionTime = metav1.Time{}
		}
		if s.StartTime != nil && !s.StartTime.Equal(&fixtureTime) {
			s.StartTime = nil
		}
	}
	return equality.Semantic.DeepEqual(a, b)
}

func statusJSON(s corev1.PodStatus) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// podStatus is a runtime status of the conformance pod p.
func podStatus(p *corev1.Pod, init, containers []corev1.ContainerStatus) *bus.PodRuntimeStatus {
	return &bus.PodRuntimeStatus{UID: p.UID, Namespace: p.Namespace, Name: p.Name, PodIP: "10.64.9.9", HostIP: "172.18.0.2",
		InitContainerStatuses: init, ContainerStatuses: containers}
}

func cRunning(name, id string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, ContainerID: id, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: fixtureTime}}}
}

func cWaiting(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
}

func cTerminated(name, id string, code int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, ContainerID: id, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: code, StartedAt: fixtureTime, FinishedAt: fixtureTime, ContainerID: id}}}
}

func probe(p *corev1.Pod, container, id string, t bus.ProbeType, r bus.ProbeOutcome) *bus.ProbeResult {
	return &bus.ProbeResult{PodUID: p.UID, Namespace: p.Namespace, Name: p.Name, Container: container, ContainerID: id, Probe: t, Result: r}
}

// boundPod is a conformance pod just bound to the node: no status but the
// scheduler's and the readiness gate's condition.
func boundPod(i int) *corev1.Pod {
	p := conformancePod(i)
	p.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable, Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: fixtureTime},
		{Type: "example.com/gate", Status: corev1.ConditionTrue, LastTransitionTime: fixtureTime},
	}}
	return p
}

// TestAPIViewSameRequests: a manager over the views makes the same status
// patches and deletes, and caches the same statuses, as one over the full
// pods, in the cases where it reads the API copy most: the API copy
// standing in for the spec (no spec on the bus: probes, sidecars, QoS,
// readiness gates, ephemeral containers, observed generation), a deleted
// pod that finishes and is deleted, a static pod's mirror pod, and a
// restarted stage seeding a runtime status from the API copy.
func TestAPIViewSameRequests(t *testing.T) {
	t.Run("spec from the API copy", func(t *testing.T) {
		p := boundPod(10)
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: "registry.k8s.io/e2e-test-images/busybox:1.37.0-1", Command: []string{"sh"}}, TargetContainerName: "app"}}
		sameRequests(t, p.UID, []*corev1.Pod{p}, append([]func(*twin){
			// the init container runs, the rest waits
			func(tw *twin) {
				tw.m.RuntimeStatus(podStatus(p, []corev1.ContainerStatus{cRunning("setup", "c://setup")}, nil))
			},
		}, sidecarToReady(p)...)...)
	})
	t.Run("QoS class from the containers", func(t *testing.T) {
		p := boundPod(11)
		p.Status.QOSClass = ""
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		sameRequests(t, p.UID, []*corev1.Pod{p},
			func(tw *twin) {
				tw.m.RuntimeStatus(podStatus(p, []corev1.ContainerStatus{cTerminated("setup", "c://setup", 1)}, nil))
			},
		)
	})
	t.Run("QoS class from the pod's resources", func(t *testing.T) {
		p := boundPod(12)
		p.Status.QOSClass = ""
		both := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}
		p.Spec.Resources = &corev1.ResourceRequirements{Requests: both, Limits: both}
		sameRequests(t, p.UID, []*corev1.Pod{p},
			func(tw *twin) { tw.m.RuntimeStatus(allRunning(p)) },
		)
	})
	t.Run("readiness gate changed in the API", func(t *testing.T) {
		p := boundPod(13)
		sameRequests(t, p.UID, []*corev1.Pod{p},
			func(tw *twin) {
				tw.m.ProbeResult(probe(p, "proxy", "c://proxy", bus.ProbeStartup, bus.ProbeSuccess))
				readyProbes(tw.m, p, "proxy", "app", "worker")
				tw.m.RuntimeStatus(allRunning(p))
			},
			// the patched pod comes back through the informer
			func(tw *twin) { tw.apiEvent(t, tw.apiPod(t, p.Namespace, p.Name), false) },
			// someone turns the gate's condition False; Ready follows
			func(tw *twin) {
				api := tw.apiPod(t, p.Namespace, p.Name)
				for i := range api.Status.Conditions {
					if api.Status.Conditions[i].Type == "example.com/gate" {
						api.Status.Conditions[i].Status = corev1.ConditionFalse
					}
				}
				api.ResourceVersion = "9999999"
				tw.apiEvent(t, api, false)
			},
		)
	})
	t.Run("deleted, finished and deleted", func(t *testing.T) {
		p := conformancePod(14)
		p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
		now := metav1.NewTime(fixtureTime.Add(time.Minute))
		p.DeletionTimestamp = &now
		sameRequests(t, p.UID, []*corev1.Pod{p},
			// terminating: the containers stop, the runtime lost the
			// logger (shown stopped, its restart not counted: the pod is
			// being deleted)
			func(tw *twin) {
				tw.m.RuntimeStatus(deletionStatus(p, false))
			},
			// every container stopped, the resources reclaimed: the pod goes
			func(tw *twin) {
				tw.m.RuntimeStatus(deletionStatus(p, true))
			},
		)
	})
	t.Run("static pod's mirror", func(t *testing.T) {
		static := boundPod(15)
		static.UID = "static-pod-hash"
		static.Annotations[AnnotationSource] = "file"
		mirror := boundPod(15)
		mirror.UID = "mirror-uid"
		mirror.Annotations[AnnotationSource] = "file"
		mirror.Annotations[AnnotationMirror] = string(static.UID)
		sameRequests(t, static.UID, []*corev1.Pod{mirror},
			func(tw *twin) {
				tw.m.PodUpdate(bus.OpAdd, "file", bus.Partition(string(static.UID), 4), []corev1.Pod{*static.DeepCopy()})
				tw.m.RuntimeStatus(allRunning(static))
			},
			func(tw *twin) { readyProbes(tw.m, static, "proxy", "app", "worker") },
		)
	})
	t.Run("restarted stage seeds from the API copy", func(t *testing.T) {
		p := conformancePod(16)
		p.Status.ContainerStatuses[1].Ready = false // worker not ready when the stage stopped
		for i := range p.Status.Conditions {
			if c := &p.Status.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
				c.Status = corev1.ConditionFalse
			}
		}
		worker := p.Status.ContainerStatuses[1].ContainerID
		sameRequests(t, p.UID, []*corev1.Pod{p},
			// the worker's probe passes after the restart
			func(tw *twin) { tw.m.ProbeResult(probe(p, "worker", worker, bus.ProbeReadiness, bus.ProbeSuccess)) },
		)
	})
}

// BenchmarkCachedPodBytes: heap a cached pod holds, over 5000 pods, as the
// informer cached them before the view ("stripped": managed fields dropped,
// kube.NodePodsFactory) and with it ("view": APIView), for conformance-like
// pods and for bench/'s one-container pods. "decoded" is the pod as it comes,
// which is what Manager.written held of each patch's answer before the view.
//
//	go test -run '^$' -bench CachedPodBytes -benchtime 1x ./services/statussync/internal/statusmanager/
func BenchmarkCachedPodBytes(b *testing.B) {
	benchPodBytes(b, func(p *corev1.Pod) *corev1.Pod { return p },
		podKeep{"decoded", func(p *corev1.Pod) any { return p }},
		podKeep{"stripped", func(p *corev1.Pod) any { o, _ := kube.StripManagedFields(p); return o }},
		podKeep{"view", func(p *corev1.Pod) any { o, _ := APIView(p); return o }})
}

// podKeep is what a cache keeps of a decoded pod.
type podKeep struct {
	name string
	keep func(*corev1.Pod) any
}

// benchPodBytes reports the heap each keep holds a pod, over 5000
// conformance-like pods and 5000 of bench/'s, each shaped by shape (as the
// API or the bus brings it) and decoded from its own JSON.
func benchPodBytes(b *testing.B, shape func(*corev1.Pod) *corev1.Pod, keeps ...podKeep) {
	const n = 5000
	for _, kind := range []struct {
		name string
		pod  func(int) *corev1.Pod
	}{{"conformance", conformancePod}, {"bench", benchPod}} {
		docs := make([][]byte, n)
		for i := range docs {
			var err error
			if docs[i], err = json.Marshal(shape(kind.pod(i))); err != nil {
				b.Fatal(err)
			}
		}
		for _, k := range keeps {
			b.Run(kind.name+"/"+k.name, func(b *testing.B) {
				var per uint64
				for range b.N {
					per = podheap.RetainedPerPod(docs, k.keep)
				}
				b.ReportMetric(float64(per), "B/pod")
			})
		}
	}
}

// readyProbes reports the containers' readiness probes passing.
func readyProbes(m *Manager, p *corev1.Pod, containers ...string) {
	for _, c := range containers {
		m.ProbeResult(probe(p, c, "c://"+c, bus.ProbeReadiness, bus.ProbeSuccess))
	}
}

// allRunning is the runtime status of boundPod's pod with its init
// container done and every other container running.
func allRunning(p *corev1.Pod) *bus.PodRuntimeStatus {
	return podStatus(p, []corev1.ContainerStatus{cTerminated("setup", "c://setup", 0), cRunning("proxy", "c://proxy")},
		[]corev1.ContainerStatus{cRunning("app", "c://app"), cRunning("worker", "c://worker"), cRunning("logger", "c://logger")})
}

// sidecarToReady are the twin steps of boundPod's pod once its init
// container runs: the sidecar starts and passes its probes, the containers
// start (and an ephemeral one), app then worker become ready.
func sidecarToReady(p *corev1.Pod) []func(*twin) {
	return []func(*twin){
		// the sidecar starts, its probes pending
		func(tw *twin) {
			tw.m.RuntimeStatus(podStatus(p, []corev1.ContainerStatus{cTerminated("setup", "c://setup", 0), cRunning("proxy", "c://proxy")}, nil))
		},
		// the sidecar's probes pass; the containers start
		func(tw *twin) {
			tw.m.ProbeResult(probe(p, "proxy", "c://proxy", bus.ProbeStartup, bus.ProbeSuccess))
			readyProbes(tw.m, p, "proxy")
			rs := podStatus(p, []corev1.ContainerStatus{cTerminated("setup", "c://setup", 0), cRunning("proxy", "c://proxy")},
				[]corev1.ContainerStatus{cRunning("app", "c://app"), cRunning("worker", "c://worker"), cWaiting("logger")})
			rs.EphemeralContainerStatuses = []corev1.ContainerStatus{cRunning("debugger", "c://debugger")}
			tw.m.RuntimeStatus(rs)
		},
		// app ready, worker not yet; logger runs (it has no probe)
		func(tw *twin) {
			readyProbes(tw.m, p, "app")
			rs := allRunning(p)
			rs.EphemeralContainerStatuses = []corev1.ContainerStatus{cRunning("debugger", "c://debugger")}
			tw.m.RuntimeStatus(rs)
		},
		// worker ready: the pod is Ready (its gate is True)
		func(tw *twin) { readyProbes(tw.m, p, "worker") },
	}
}

// deletionStatus is the runtime status of boundPod's pod being deleted: its
// containers stopped, but the logger, which the runtime lost while it ran;
// terminated, every container stopped and the pod's resources reclaimed.
func deletionStatus(p *corev1.Pod, terminated bool) *bus.PodRuntimeStatus {
	stopped := []corev1.ContainerStatus{cTerminated("app", "c://app", 0), cTerminated("worker", "c://worker", 0)}
	if terminated {
		stopped = append(stopped, cTerminated("logger", "c://logger", 0))
	}
	rs := podStatus(p, []corev1.ContainerStatus{cTerminated("setup", "c://setup", 0), cTerminated("proxy", "c://proxy", 137)}, stopped)
	rs.Terminating, rs.Terminated = true, terminated
	return rs
}

// DecodeBusPod keeps what busView takes: the view of a pod decoded by it is
// the view of the pod decoded whole, for the conformance suite's pods and
// the bench's, with podconfig's annotations and a deletion time.
func TestDecodeBusPodKeepsTheBusView(t *testing.T) {
	deleted := metav1.NewTime(fixtureTime.Add(time.Minute))
	for i, p := range []*corev1.Pod{conformancePod(1), benchPod(2), conformancePod(3)} {
		p = p.DeepCopy()
		p.ManagedFields = nil // podconfig's informer drops them
		p.Annotations = map[string]string{AnnotationSource: "api", bus.AnnotationSeen: fixtureTime.Format(time.RFC3339Nano), "other": "x"}
		if i == 2 {
			p.DeletionTimestamp = &deleted
			p.Status.QOSClass = corev1.PodQOSGuaranteed
		}
		raw, err := p.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		var whole, part corev1.Pod
		if err := whole.Unmarshal(raw); err != nil {
			t.Fatal(err)
		}
		if err := DecodeBusPod(raw, &part); err != nil {
			t.Fatal(err)
		}
		if w, p := busView(&whole), busView(&part); !equality.Semantic.DeepEqual(w, p) {
			t.Errorf("pod %d: the view of the pod decoded by DecodeBusPod differs from the whole pod's:\n whole %+v\n part  %+v", i, w, p)
		}
		if len(part.Status.Conditions) != 0 || len(part.Status.ContainerStatuses) != 0 {
			t.Errorf("pod %d: DecodeBusPod decoded more of the status than the QoS class: %+v", i, part.Status)
		}
	}
}

// BenchmarkDecodeBusPod decodes the bench's running pod from a pod update
// whole, then as statussync does.
func BenchmarkDecodeBusPod(b *testing.B) {
	p := benchPod(1)
	p.ManagedFields = nil
	raw, err := p.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	for name, dec := range map[string]bus.PodDecoder{
		"whole":      func(raw []byte, p *corev1.Pod) error { return p.Unmarshal(raw) },
		"statussync": DecodeBusPod,
	} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var got corev1.Pod
				if err := dec(raw, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
