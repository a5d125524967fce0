package testenv

import (
	"strings"
	"testing"
)

// The kubelet's configuration holds what a run needs of it: the API
// authenticated and authorized through the control plane, cgroup v1 and
// swap accepted, no image garbage collection, pod logs of its own; maxPods
// and cgroupRoot only when asked for.
func TestKubeletConfig(t *testing.T) {
	o := KubeletConfigOptions{
		Port: 10301, HealthzPort: 10302, ClientCAFile: "/cp/ca.crt",
		CertFile: "/k/kubelet.crt", KeyFile: "/k/kubelet.key",
		CRIEndpoint: "unix:///c/containerd.sock", PodLogsDir: "/k/pod-logs", ResolvConf: "/etc/resolv.conf",
		StaticPodDir: "/s/manifests",
	}
	got := KubeletConfig(o)
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
	if strings.Contains(got, "maxPods") || strings.Contains(got, "cgroupRoot") {
		t.Errorf("maxPods or cgroupRoot set though not asked for:\n%s", got)
	}
	o.MaxPods = 250
	if got := KubeletConfig(o); !strings.HasSuffix(got, "\nmaxPods: 250\n") {
		t.Errorf("no maxPods: 250 in\n%s", got)
	}
	o.CgroupRoot = "/agents/kubelet"
	if got := KubeletConfig(o); !strings.Contains(got, "\ncgroupRoot: \"/agents/kubelet\"\n") {
		t.Errorf("no cgroupRoot in\n%s", got)
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
