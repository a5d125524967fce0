package podheap

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestRetainedPerPod(t *testing.T) {
	p := corev1.Pod{}
	p.Annotations = map[string]string{"big": strings.Repeat("x", 64<<10)}
	doc, err := json.Marshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	docs := [][]byte{doc, doc, doc, doc}
	whole := RetainedPerPod(docs, func(p *corev1.Pod) any { return p })
	none := RetainedPerPod(docs, func(*corev1.Pod) any { return nil })
	if whole < 64<<10 || none >= 16<<10 {
		t.Errorf("whole pods %d bytes each, nothing kept %d: want at least 64 KiB and near nothing", whole, none)
	}
}
