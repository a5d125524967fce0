package main

import "regexp"

// apiOnlySpec is a group of conformance specs whose result the API server
// alone decides: no pod of theirs runs on the node, or what they check is
// set by the API server before any node sees the pod. They are counted
// apart from the node's figures (docs/conformance.md lists them).
type apiOnlySpec struct {
	pattern string // a regular expression on the spec's name
	why     string
}

var apiOnlySpecs = []apiOnlySpec{
	{`\[sig-node\] ConfigMap should (fail to create ConfigMap with empty key|run through a ConfigMap lifecycle|update ConfigMap successfully)`,
		"ConfigMap objects only"},
	{`\[sig-node\] Secrets should (fail to create secret due to empty secret key|patch a secret)`,
		"Secret objects only"},
	{`\[sig-storage\] (ConfigMap|Secrets) should be immutable if`,
		"the API server's immutability check"},
	{`\[sig-node\] Lease lease API should be available`,
		"Lease objects only"},
	{`\[sig-node\] PodTemplates `,
		"PodTemplate objects only"},
	{`\[sig-node\] Node Lifecycle should run through the lifecycle of a node`,
		"a fake, unschedulable Node object"},
	{`\[sig-node\] RuntimeClass should (support RuntimeClasses API operations|reject a Pod requesting a (deleted|non-existent) RuntimeClass)`,
		"RuntimeClass objects, and the RuntimeClass admission plugin refusing the pod"},
	{`\[sig-node\] Override hostname of Pod .* will fail to be created`,
		"the API server's validation refuses the pod"},
	{`\[sig-node\] Pods Extended Pods Set QOS Class`,
		"the API server sets status.qosClass when the pod is created; the spec reads it at once"},
	{`\[sig-storage\] (CSIInlineVolumes|CSINodes|CSIStorageCapacity|PersistentVolumes CSI Conformance|StorageClasses CSI Conformance|VolumeAttachment Conformance|VolumeAttributesClass) `,
		"storage API objects (CSIDriver, CSINode, CSIStorageCapacity, PV/PVC, StorageClass, VolumeAttachment, VolumeAttributesClass; a pod with CSI inline volumes is only created)"},
}

var apiOnlyRes = func() []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(apiOnlySpecs))
	for i, a := range apiOnlySpecs {
		out[i] = regexp.MustCompile(a.pattern)
	}
	return out
}()

// apiOnly tells whether the API server alone decides the spec's result.
func apiOnly(name string) bool {
	for _, re := range apiOnlyRes {
		if re.MatchString(name) {
			return true
		}
	}
	return false
}
