package manifest

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/services/podconfig/internal/merge"
)

const web = `apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: nginx
    image: nginx:1.25
    livenessProbe:
      httpGet: {path: /, port: 80}
`

func TestDecodeAppliesKubeletDefaults(t *testing.T) {
	o := Origin{Node: "Node-1", File: "/etc/manifests/web.yaml"}
	pods, err := Decode([]byte(web), o, true)
	if err != nil {
		t.Fatal(err)
	}
	p := pods[0]
	switch {
	case p.Name != "web-node-1":
		t.Fatalf("name %q", p.Name)
	case p.Namespace != "default":
		t.Fatalf("namespace %q", p.Namespace)
	case p.Spec.NodeName != "Node-1":
		t.Fatalf("nodeName %q", p.Spec.NodeName)
	case len(p.UID) != 32 || p.Annotations[merge.AnnotationHash] != string(p.UID):
		t.Fatalf("uid %q hash %q", p.UID, p.Annotations[merge.AnnotationHash])
	case p.Spec.RestartPolicy != corev1.RestartPolicyAlways || *p.Spec.TerminationGracePeriodSeconds != 30:
		t.Fatal("spec defaults missing")
	case p.Spec.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent:
		t.Fatalf("pull policy %q", p.Spec.Containers[0].ImagePullPolicy)
	case p.Spec.Containers[0].LivenessProbe.PeriodSeconds != 10:
		t.Fatal("probe defaults missing")
	case p.Status.Phase != corev1.PodPending:
		t.Fatal("phase not Pending")
	case len(p.Spec.Tolerations) != 1 || p.Spec.Tolerations[0].Effect != corev1.TaintEffectNoExecute:
		t.Fatalf("tolerations %+v", p.Spec.Tolerations)
	case p.Kind != "" || p.APIVersion != "":
		t.Fatal("type fields kept")
	}
}

func TestUIDDerivation(t *testing.T) {
	uid := func(data string, o Origin) string {
		t.Helper()
		pods, err := Decode([]byte(data), o, false)
		if err != nil {
			t.Fatal(err)
		}
		return string(pods[0].UID)
	}
	o := Origin{Node: "n1", File: "/m/web.yaml"}
	a := uid(web, o)
	if a != uid(web, o) {
		t.Fatal("the UID is not stable")
	}
	if a == uid(web, Origin{Node: "n2", File: "/m/web.yaml"}) || a == uid(web, Origin{Node: "n1", File: "/m/other.yaml"}) {
		t.Fatal("the UID ignores the node or the file")
	}
	if a == uid(strings.Replace(web, "nginx:1.25", "nginx:1.26", 1), o) {
		t.Fatal("the UID ignores the content")
	}
	// JSON of the same pod: same UID.
	js := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","labels":{"app":"web"}},"spec":{"containers":[{"name":"nginx","image":"nginx:1.25","livenessProbe":{"httpGet":{"path":"/","port":80}}}]}}`
	if a != uid(js, o) {
		t.Fatal("YAML and JSON of one pod differ")
	}
	// http: the URL is the origin; a pod alone or in a list hashes the same.
	u := Origin{Node: "n1", URL: "http://127.0.0.1/pods"}
	list := `{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"web","labels":{"app":"web"}},"spec":{"containers":[{"name":"nginx","image":"nginx:1.25","livenessProbe":{"httpGet":{"path":"/","port":80}}}]}}]}`
	if uid(js, u) != uid(list, u) {
		t.Fatal("a pod alone and in a list differ")
	}
	// An explicit UID is kept.
	if got := uid(strings.Replace(web, "  name: web", "  name: web\n  uid: my-uid", 1), o); got != "my-uid" {
		t.Fatalf("explicit uid replaced by %q", got)
	}
}

func TestDecodeRejects(t *testing.T) {
	o := Origin{Node: "n1", File: "/m/x"}
	for name, tc := range map[string]struct {
		data   string
		single bool
		want   string
	}{
		"bad yaml":      {"metadata: {name: [", true, "not valid YAML"},
		"no kind":       {`{"apiVersion":"v1","metadata":{"name":"a"}}`, true, "not a Pod"},
		"a service":     {"apiVersion: v1\nkind: Service\nmetadata: {name: a}\n", true, "not a Pod"},
		"list in file":  {`{"apiVersion":"v1","kind":"PodList","items":[]}`, true, "not a Pod"},
		"no name":       {"apiVersion: v1\nkind: Pod\nspec: {containers: [{name: c, image: i}]}\n", true, "name is needed"},
		"no containers": {"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: []}\n", true, "spec.containers: Required"},
		"no image":      {"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n", true, "image: Required"},
		"dup container": {"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: i}, {name: c, image: i}]}\n", true, "Duplicate"},
		"bad name":      {"apiVersion: v1\nkind: Pod\nmetadata: {name: A_b}\nspec: {containers: [{name: c, image: i}]}\n", true, "metadata.name"},
		"bad restart":   {"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {restartPolicy: Sometimes, containers: [{name: c, image: i}]}\n", true, "restartPolicy"},
		"wrong type":    {"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: nope}\n", true, "invalid pod"},
	} {
		_, err := Decode([]byte(tc.data), o, tc.single)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.want)
		}
		if name == "a service" && !errors.Is(err, ErrNotAPod) {
			t.Errorf("%s: not ErrNotAPod", name)
		}
	}
}
