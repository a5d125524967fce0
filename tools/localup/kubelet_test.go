package main

import (
	"strings"
	"testing"
)

// The kubelet's configuration holds what the run needs of it: the API
// authenticated and authorized through the control plane, cgroup v1 and
// swap accepted, no image garbage collection, pod logs of its own.
func TestKubeletConfig(t *testing.T) {
	got := kubeletConfig(kubeletConfigOptions{
		port: 10301, healthzPort: 10302, clientCAFile: "/cp/ca.crt",
		certFile: "/k/kubelet.crt", keyFile: "/k/kubelet.key",
		criEndpoint: "unix:///c/containerd.sock", podLogsDir: "/k/pod-logs", resolvConf: "/etc/resolv.conf",
		staticPodDir: "/s/manifests",
	})
	for _, want := range []string{
		"kind: KubeletConfiguration\n",
		"port: 10301\n", "healthzPort: 10302\n", "readOnlyPort: 0\n",
		"    clientCAFile: \"/cp/ca.crt\"\n", "  mode: Webhook\n",
		"containerRuntimeEndpoint: \"unix:///c/containerd.sock\"\n",
		"cgroupDriver: cgroupfs\n", "failSwapOn: false\n", "failCgroupV1: false\n",
		"podLogsDir: \"/k/pod-logs\"\n", "imageGCHighThresholdPercent: 100\n",
		"  nodefs.available: \"1%\"\n", "staticPodPath: \"/s/manifests\"\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	if strings.Contains(got, "%!") {
		t.Errorf("a formatting error:\n%s", got)
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`/a/b`:         "/a/b",
		`/a\040b`:      "/a b",
		`/a\134b`:      `/a\b`,
		`/trailing\04`: `/trailing\04`,
		`/x\011y\012z`: "/x\ty\nz",
	} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}
