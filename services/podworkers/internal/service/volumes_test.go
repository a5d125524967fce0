package service

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/testenv"
)

// nodeClientset is a clientset with the node's identity (system:node:<node>
// in system:nodes): the Node authorizer lets it read only the Secrets and
// ConfigMaps of pods bound to the node, as podworkers runs in the stack.
func nodeClientset(t *testing.T, node string) kubernetes.Interface {
	t.Helper()
	cfg, err := controlPlane(t).ClientConfig("system:node:"+node, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// volumeObjects creates, in namespace default, the ConfigMap, Secret and
// service account the volume pods use, named after the test's node.
func volumeObjects(t *testing.T, cs kubernetes.Interface, node string) (cm, secret, account string) {
	t.Helper()
	ctx := context.Background()
	cm, secret, account = node+"-cm", node+"-secret", node+"-sa"
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm},
		Data: map[string]string{"a": "one", "b": "two"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret},
		Data: map[string][]byte{"password": []byte("s3cret")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: account}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = cs.CoreV1().ConfigMaps("default").Delete(ctx, cm, metav1.DeleteOptions{})
		_ = cs.CoreV1().Secrets("default").Delete(ctx, secret, metav1.DeleteOptions{})
		_ = cs.CoreV1().ServiceAccounts("default").Delete(ctx, account, metav1.DeleteOptions{})
	})
	return cm, secret, account
}

// volumePod shapes a pod that mounts one volume of each kind and copies
// what it sees into its emptyDir "out": root is the prefix of the mount
// paths ("" for a container with a file system of its own, "." for the
// process runtime, whose mounts are links under the container's
// directory).
func volumePod(node, root, cm, secret, account, hostDir string) func(*corev1.Pod) {
	mode := int32(0o400)
	exp := int64(3600)
	optional := true
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	script := strings.ReplaceAll(`R=ROOT
cat $R/etc/cm/dir/a.txt > $R/out/a
stat -L -c %a $R/etc/cm/dir/a.txt > $R/out/mode
cat $R/etc/secret/password > $R/out/secret
cat $R/etc/dapi/labels > $R/out/labels
cat $R/etc/proj/namespace > $R/out/namespace
cat $R/etc/proj/token > $R/out/token
cat $R/etc/proj/ca > $R/out/projected-cm
printf %s "$FROM_b|$KEY|${MISSING:-unset}" > $R/out/env
printf %s "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT_HTTPS" > $R/out/svc
echo here > $R/sub/x
cat $R/host/h.txt > $R/out/host
[ -z "$R" ] && head -1 /etc/hosts > /out/hosts
while true; do cat $R/etc/cm/dir/a.txt > $R/out/a-now; sleep 0.2; done`, "ROOT", root)
	return func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "volumes", "tier": "test"}
		p.Spec.NodeName = node
		p.Spec.ServiceAccountName = account
		p.Spec.Volumes = []corev1.Volume{
			{Name: "out", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: cm},
				Items:                []corev1.KeyToPath{{Key: "a", Path: "dir/a.txt", Mode: &mode}}}}},
			{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}},
			{Name: "dapi", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
				Items: []corev1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
			{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: cm},
					Items: []corev1.KeyToPath{{Key: "b", Path: "ca"}}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
			}}}},
			{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir, Type: &dirOrCreate}}},
		}
		c := &p.Spec.Containers[0]
		c.Command = []string{"sh", "-c", script}
		c.EnvFrom = []corev1.EnvFromSource{{Prefix: "FROM_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}
		c.Env = []corev1.EnvVar{
			{Name: "KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: "password"}}},
			{Name: "MISSING", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "no-such-cm"}, Key: "x", Optional: &optional}}},
		}
		c.VolumeMounts = []corev1.VolumeMount{
			{Name: "out", MountPath: "/out"},
			{Name: "out", MountPath: "/sub", SubPath: "subdir"},
			{Name: "cm", MountPath: "/etc/cm"},
			{Name: "secret", MountPath: "/etc/secret"},
			{Name: "dapi", MountPath: "/etc/dapi"},
			{Name: "proj", MountPath: "/etc/proj"},
			{Name: "host", MountPath: "/host"},
		}
	}
}

// runVolumePod runs the volume pod on a replica of e (runtime rt, root the
// mount prefix) and checks, on the host, what its container saw: each kind
// of volume, modes, envFrom and valueFrom, service variables, subPath, a ConfigMap update
// reaching the running container; a pod naming a missing ConfigMap waits in
// ContainerCreating with a FailedMount Event; removing the pod removes its
// volumes.
func runVolumePod(t *testing.T, e *env, rt, root string) {
	admin := controlPlane(t).Clientset()
	cm, secret, account := volumeObjects(t, admin, e.node)
	// what a test that stops half-way leaves mounted goes with it.
	rootDir := testenv.DataDir(t)
	testenv.OpenWay(t, rootDir)
	hostDir := filepath.Join(t.TempDir(), "host")
	testenv.OpenWay(t, hostDir)
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hostDir, "h.txt"), []byte("from the host"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.replicaCS = nodeClientset(t, e.node)
	e.startReplica(t, rt, func(c *Config) {
		c.RootDir = rootDir
		c.ResyncInterval = time.Second
	})
	shape := volumePod(e.node, root, cm, secret, account, hostDir)
	p := newPod(t, admin, e.node+"-vol", func(p *corev1.Pod) {
		if e.podDefaults != nil {
			e.podDefaults(p)
		}
		shape(p)
	})
	missing := newPod(t, admin, e.node+"-nocm", func(p *corev1.Pod) {
		if e.podDefaults != nil {
			e.podDefaults(p)
		}
		p.Spec.NodeName = e.node
		p.Spec.Volumes = []corev1.Volume{{Name: "gone", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "no-such-cm"}}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "gone", MountPath: "/gone"}}
	})
	e.track(p, missing)
	e.send(bus.OpAdd, p, missing)
	out := filepath.Join(rootDir, "pods", string(p.UID), "volumes", "kubernetes.io~empty-dir", "out")
	read := func(name string) string {
		data, _ := os.ReadFile(filepath.Join(out, name))
		return string(data)
	}
	eventually(t, 90*time.Second, "the container copying its ConfigMap in a loop", func() bool { return read("a-now") == "one" })
	for name, want := range map[string]string{
		"a": "one", "mode": "400\n", "secret": "s3cret", "labels": "app=\"volumes\"\ntier=\"test\"",
		"namespace": "default", "projected-cm": "two", "env": "two|s3cret|unset", "host": "from the host",
		"svc": "10.0.0.1:443", // the API server's service, default/kubernetes
	} {
		if got := read(name); got != want {
			t.Errorf("%s: the container saw %q, want %q", name, got, want)
		}
	}
	if root == "" {
		// a host-network pod's /etc/hosts is the node's, under the
		// kubelet's header.
		if got := read("hosts"); got != "# Kubernetes-managed hosts file (host network).\n" {
			t.Errorf("/etc/hosts begins with %q", got)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(out, "subdir", "x")); string(got) != "here\n" {
		t.Errorf("subPath: %q written through /sub is not in the volume's subdir", got)
	}
	claims := tokenClaims(t, read("token"))
	if claims.Sub != "system:serviceaccount:default:"+account || claims.K8s.Pod.Name != p.Name || claims.K8s.Pod.UID != string(p.UID) {
		t.Errorf("token claims %+v: want the pod's service account, bound to the pod", claims)
	}

	// an update of the ConfigMap reaches the running container.
	cmObj, err := admin.CoreV1().ConfigMaps("default").Get(context.Background(), cm, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cmObj.Data["a"] = "updated"
	if _, err := admin.CoreV1().ConfigMaps("default").Update(context.Background(), cmObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the ConfigMap update in the running container", func() bool { return read("a-now") == "updated" })
	if st, _ := e.get(p.UID); st.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the update restarted the container: %+v", st.ContainerStatuses[0])
	}

	eventually(t, 60*time.Second, "a FailedMount Event for the missing ConfigMap", func() bool {
		evs, err := admin.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(missing.UID)).String()})
		if err != nil {
			return false
		}
		for _, ev := range evs.Items {
			if ev.Reason == "FailedMount" && ev.Type == corev1.EventTypeWarning &&
				strings.Contains(ev.Message, `MountVolume.SetUp failed for volume "gone" : configmap "no-such-cm" not found`) {
				return true
			}
		}
		return false
	})
	if st, _ := e.get(missing.UID); st == nil || st.ContainerStatuses[0].State.Waiting == nil || st.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating" {
		t.Errorf("the pod with a missing ConfigMap: %+v, want its container waiting in ContainerCreating", st)
	}

	volumes := filepath.Join(rootDir, "pods", string(p.UID))
	e.send(bus.OpDelete, markDeleted(p))
	eventually(t, 60*time.Second, "pod terminated", func() bool { st, _ := e.get(p.UID); return st.Terminated })
	// kubelet: a terminated pod's volumes go before the pod object does.
	if _, err := os.Stat(volumes); !os.IsNotExist(err) {
		t.Errorf("the terminated pod still has its volumes (%s: %v)", volumes, err)
	}
	e.send(bus.OpRemove, p)
	eventually(t, 60*time.Second, "the pod's volumes removed", func() bool { _, err := os.Stat(volumes); return os.IsNotExist(err) })
	if _, err := os.Stat(filepath.Join(hostDir, "h.txt")); err != nil {
		t.Errorf("the hostPath volume's file went with the pod: %v", err)
	}
}

type claims struct {
	Sub string `json:"sub"`
	K8s struct {
		Pod struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"pod"`
	} `json:"kubernetes.io"`
}

// tokenClaims decodes a JWT's claims (unverified: the API server issued it).
func tokenClaims(t *testing.T, tok string) claims {
	t.Helper()
	parts := strings.Split(tok, ".")
	var c claims
	if len(parts) != 3 {
		t.Errorf("token %d bytes: not a JWT", len(tok))
		return c
	}
	data, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err == nil {
		err = json.Unmarshal(data, &c)
	}
	if err != nil {
		t.Errorf("token claims: %v", err)
	}
	return c
}

// Volumes on the process runtime: mounts are links under the container's
// directory, which is its working directory.
func TestVolumesProcess(t *testing.T) {
	runVolumePod(t, newEnv(t, "pw-vol-proc"), config.RuntimeProcess, ".")
}

// Volumes on containerd: real bind mounts, read-only where the kubelet
// makes them so.
func TestVolumesCRI(t *testing.T) {
	e, _ := criEnv(t, "pw-vol-cri")
	runVolumePod(t, e, config.RuntimeCRI, "")

	// what a container writes to its terminationMessagePath is its
	// termination message.
	p := newPod(t, controlPlane(t).Clientset(), e.node+"-msg", func(p *corev1.Pod) {
		e.podDefaults(p)
		p.Spec.NodeName = e.node
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		p.Spec.Containers[0].TerminationMessagePath = "/dev/termination-log"
		p.Spec.Containers[0].Command = []string{"sh", "-c", "printf 'gone fishing' > /dev/termination-log; exit 3"}
	})
	e.track(p)
	e.send(bus.OpAdd, p)
	eventually(t, 60*time.Second, "the container's termination message", func() bool {
		st, _ := e.get(p.UID)
		if st == nil || len(st.ContainerStatuses) == 0 || st.ContainerStatuses[0].State.Terminated == nil {
			return false
		}
		term := st.ContainerStatuses[0].State.Terminated
		if term.Message != "gone fishing" || term.ExitCode != 3 {
			t.Fatalf("terminated %+v, want exit 3 with message %q", term, "gone fishing")
		}
		return true
	})
	// the image was there: the kubelet's Pulled Event says so.
	want := fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", p.Spec.Containers[0].Image)
	eventually(t, 30*time.Second, "the Pulled Event", func() bool {
		evs, err := controlPlane(t).Clientset().CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.uid", string(p.UID)).String()})
		if err != nil {
			return false
		}
		for _, ev := range evs.Items {
			if ev.Reason == "Pulled" && ev.Message == want && ev.InvolvedObject.FieldPath == "spec.containers{app}" {
				return true
			}
		}
		return false
	})
}
