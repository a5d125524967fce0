package manifest

import (
	"testing"
)

// FuzzDecode: whatever bytes a static pod file or a manifest URL holds,
// Decode returns pods or an error, never panics, and every pod it returns
// is named, has a UID and passes Validate.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		"apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox\n",
		`{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}]}`,
		"apiVersion: v1\nkind: Pod\nmetadata: {name: x, namespace: kube-system, uid: fixed}\nspec: {containers: [{name: c, image: i, ports: [{containerPort: 80}]}]}\n",
		"{not a pod", "", "---\n---\n", "kind: List\nitems: [1, 2]\n", "apiVersion: v2\nkind: Pod\n",
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, fromURL bool) {
		o := Origin{Node: "fuzz-node", File: "/etc/kubernetes/manifests/fuzz.yaml"}
		single := !fromURL
		if fromURL {
			o = Origin{Node: "fuzz-node", URL: "http://127.0.0.1:8080/pods"}
		}
		pods, err := Decode(data, o, single)
		if err != nil {
			return
		}
		for _, p := range pods {
			if p == nil || p.Name == "" || p.UID == "" {
				t.Fatalf("Decode returned a pod without name or UID: %+v", p)
			}
			if err := Validate(p); err != nil {
				t.Fatalf("Decode returned a pod that does not validate: %v", err)
			}
		}
	})
}
