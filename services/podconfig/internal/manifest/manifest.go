// Package manifest turns static pod manifests (YAML or JSON, a Pod or a
// PodList) into the pods the kubelet would run from them: decoded, defaulted,
// given their derived UID, node-suffixed name, namespace and config
// annotations, and checked (kubelet pkg/kubelet/config/common.go:
// applyDefaults, tryDecodeSinglePod, tryDecodePodList).
package manifest

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/dump"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/splitlet/splitlet/services/podconfig/internal/merge"
)

// MaxSize is the largest manifest read (kubelet: maxConfigLength).
const MaxSize = 10 << 20

// Origin says where manifests come from; it takes part in the UID.
type Origin struct {
	// Node is the node name: the pod name suffix and spec.nodeName.
	Node string
	// File is the manifest's path (file source); URL the manifest URL (http source).
	File string
	URL  string
}

func (o Origin) isFile() bool { return o.URL == "" }

// ErrNotAPod: the document is neither a Pod nor a PodList.
var ErrNotAPod = errors.New("not a Pod or PodList (apiVersion v1)")

// Decode reads one document: a Pod or, unless single is set, a PodList.
// Each pod is defaulted and checked; the first bad pod fails the whole
// document, as the kubelet does.
func Decode(data []byte, o Origin, single bool) ([]*corev1.Pod, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("manifest larger than %d bytes", MaxSize)
	}
	raw, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML or JSON: %w", err)
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(raw, &tm); err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	if tm.APIVersion != "v1" {
		return nil, fmt.Errorf("%w: apiVersion %q, kind %q", ErrNotAPod, tm.APIVersion, tm.Kind)
	}
	var pods []*corev1.Pod
	switch {
	case tm.Kind == "Pod":
		var p corev1.Pod
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, fmt.Errorf("invalid pod: %w", err)
		}
		pods = []*corev1.Pod{&p}
	case tm.Kind == "PodList" && !single:
		var l corev1.PodList
		if err := json.Unmarshal(raw, &l); err != nil {
			return nil, fmt.Errorf("invalid pod list: %w", err)
		}
		for i := range l.Items {
			pods = append(pods, &l.Items[i])
		}
	default:
		return nil, fmt.Errorf("%w: kind %q", ErrNotAPod, tm.Kind)
	}
	for i, p := range pods {
		if p.Name == "" {
			return nil, fmt.Errorf("invalid pod %d: name is needed for the pod", i)
		}
		// As the kubelet's decoded objects, pods carry no type fields: a pod
		// hashes the same alone or in a list.
		p.TypeMeta = metav1.TypeMeta{}
		SetDefaults(p)
		ApplyStatic(p, o)
		if err := Validate(p); err != nil {
			return nil, fmt.Errorf("invalid pod %q: %w", p.Name, err)
		}
	}
	return pods, nil
}

// Hash is the static pod's UID (and config hash): FNV-128a of the decoded,
// defaulted pod followed by its origin, hex (kubelet: applyDefaults hashes
// its object, then "host:<node>" and "file:<path>", or "url:<url>").
func Hash(p *corev1.Pod, o Origin) string {
	h := fnv.New128a()
	_, _ = h.Write([]byte(dump.ForHash(p)))
	if o.isFile() {
		fmt.Fprintf(h, "host:%s", o.Node)
		fmt.Fprintf(h, "file:%s", o.File)
	} else {
		fmt.Fprintf(h, "url:%s", o.URL)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ApplyStatic gives a decoded pod what the kubelet gives a static pod: a UID
// (kept if the manifest sets one), the "-<node>" name suffix, the default
// namespace, spec.nodeName, the config.hash annotation, a NoExecute
// toleration (file pods) and phase Pending.
func ApplyStatic(p *corev1.Pod, o Origin) {
	if p.UID == "" {
		p.UID = types.UID(Hash(p, o))
	}
	p.Name = p.Name + "-" + strings.ToLower(o.Node)
	if p.Namespace == "" {
		p.Namespace = metav1.NamespaceDefault
	}
	p.Spec.NodeName = o.Node
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	// kubelet: the generated UID is the hash of the manifest.
	p.Annotations[merge.AnnotationHash] = string(p.UID)
	if o.isFile() {
		// kubelet: static pods tolerate every NoExecute taint.
		tol := corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}
		found := false
		for _, t := range p.Spec.Tolerations {
			if t.MatchToleration(&tol) {
				found = true
			}
		}
		if !found {
			p.Spec.Tolerations = append(p.Spec.Tolerations, tol)
		}
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodPending}
}

// SetDefaults applies the API's defaults that matter to a pod's meaning
// (the API server applies the same to API pods).
func SetDefaults(p *corev1.Pod) {
	s := &p.Spec
	if s.DNSPolicy == "" {
		s.DNSPolicy = corev1.DNSClusterFirst
	}
	if s.RestartPolicy == "" {
		s.RestartPolicy = corev1.RestartPolicyAlways
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &corev1.PodSecurityContext{}
	}
	if s.TerminationGracePeriodSeconds == nil {
		g := int64(corev1.DefaultTerminationGracePeriodSeconds)
		s.TerminationGracePeriodSeconds = &g
	}
	if s.SchedulerName == "" {
		s.SchedulerName = corev1.DefaultSchedulerName
	}
	if s.EnableServiceLinks == nil {
		e := corev1.DefaultEnableServiceLinks
		s.EnableServiceLinks = &e
	}
	for _, cs := range [][]corev1.Container{s.InitContainers, s.Containers} {
		for i := range cs {
			defaultContainer(&cs[i])
		}
	}
}

func defaultContainer(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		_, tag, _ := strings.Cut(lastSegment(c.Image), ":")
		if tag == "" || tag == "latest" {
			c.ImagePullPolicy = corev1.PullAlways
		} else {
			c.ImagePullPolicy = corev1.PullIfNotPresent
		}
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	if c.Resources.Limits != nil {
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
		}
		for k, v := range c.Resources.Limits {
			if _, ok := c.Resources.Requests[k]; !ok {
				c.Resources.Requests[k] = v.DeepCopy()
			}
		}
	}
	for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if pr == nil {
			continue
		}
		if pr.TimeoutSeconds == 0 {
			pr.TimeoutSeconds = 1
		}
		if pr.PeriodSeconds == 0 {
			pr.PeriodSeconds = 10
		}
		if pr.SuccessThreshold == 0 {
			pr.SuccessThreshold = 1
		}
		if pr.FailureThreshold == 0 {
			pr.FailureThreshold = 3
		}
	}
}

func lastSegment(image string) string {
	if i := strings.LastIndexByte(image, '/'); i >= 0 {
		image = image[i+1:]
	}
	image, _, _ = strings.Cut(image, "@")
	return image
}

// Validate checks what the API server would refuse in a new pod and the
// agent cannot run: names, containers, images, policies, ports, labels.
func Validate(p *corev1.Pod) error {
	var errs []string
	add := func(f string, a ...any) { errs = append(errs, fmt.Sprintf(f, a...)) }
	for _, m := range validation.IsDNS1123Subdomain(p.Name) {
		add("metadata.name %q: %s", p.Name, m)
	}
	for _, m := range validation.IsDNS1123Label(p.Namespace) {
		add("metadata.namespace %q: %s", p.Namespace, m)
	}
	for k, v := range p.Labels {
		for _, m := range validation.IsQualifiedName(k) {
			add("metadata.labels key %q: %s", k, m)
		}
		for _, m := range validation.IsValidLabelValue(v) {
			add("metadata.labels[%s] %q: %s", k, v, m)
		}
	}
	if len(p.Spec.Containers) == 0 {
		add("spec.containers: Required value")
	}
	names := sets.New[string]()
	check := func(field string, cs []corev1.Container) {
		for i, c := range cs {
			f := fmt.Sprintf("%s[%d]", field, i)
			if c.Name == "" {
				add("%s.name: Required value", f)
			} else {
				for _, m := range validation.IsDNS1123Label(c.Name) {
					add("%s.name %q: %s", f, c.Name, m)
				}
				if names.Has(c.Name) {
					add("%s.name %q: Duplicate value", f, c.Name)
				}
				names.Insert(c.Name)
			}
			if strings.TrimSpace(c.Image) == "" {
				add("%s.image: Required value", f)
			}
			for j, port := range c.Ports {
				if port.ContainerPort < 1 || port.ContainerPort > 65535 {
					add("%s.ports[%d].containerPort %d: must be between 1 and 65535", f, j, port.ContainerPort)
				}
			}
		}
	}
	check("spec.initContainers", p.Spec.InitContainers)
	check("spec.containers", p.Spec.Containers)
	switch p.Spec.RestartPolicy {
	case corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	default:
		add("spec.restartPolicy %q: Unsupported value", p.Spec.RestartPolicy)
	}
	switch p.Spec.DNSPolicy {
	case corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault, corev1.DNSNone:
	default:
		add("spec.dnsPolicy %q: Unsupported value", p.Spec.DNSPolicy)
	}
	if g := p.Spec.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		add("spec.terminationGracePeriodSeconds: must be >= 0")
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}
