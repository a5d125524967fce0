package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

// e2e.test's command line selects the node conformance specs of
// common/{node,storage,network}, node and storage, skips each group of the list, and puts
// the user's flags last (a string flag given twice keeps the last value).
func TestE2EArgs(t *testing.T) {
	args := e2eArgs("/k", "/out", "unix:///c.sock", "", 2*time.Hour, []string{"--ginkgo.focus=Pods"})
	joined := strings.Join(args, "\n")
	for _, want := range []string{
		"--provider=local", "--kubeconfig=/k", "--report-dir=/out",
		"--ginkgo.focus-file=" + conformanceFiles, "--ginkgo.label-filter=" + conformanceLabels,
		"--ginkgo.timeout=2h0m0s",
	} {
		if !strings.Contains(joined, want+"\n") {
			t.Errorf("missing %s in\n%s", want, joined)
		}
	}
	skips := 0
	for _, a := range args {
		if p, ok := strings.CutPrefix(a, "--ginkgo.skip="); ok {
			if _, err := regexp.Compile(p); err != nil {
				t.Errorf("skip pattern %q: %v", p, err)
			}
			skips++
		}
	}
	if skips != len(conformanceSkips) {
		t.Errorf("%d skip flags for %d groups", skips, len(conformanceSkips))
	}
	if args[len(args)-1] != "--ginkgo.focus=Pods" {
		t.Errorf("the user's flags are not last: %v", args)
	}
	for _, s := range conformanceSkips {
		if s.cause == "" {
			t.Errorf("skip %q has no cause", s.pattern)
		}
	}
}

func TestUserFiltered(t *testing.T) {
	for args, want := range map[string]bool{
		"--ginkgo.focus=Pods":                    true,
		"-ginkgo.focus-file=x":                   true,
		"--ginkgo.label-filter=Slow":             true,
		"--ginkgo.skip=Pods --ginkgo.v":          false,
		"":                                       false,
		"--ginkgo.fail-fast --ginkgo.focus Pods": true,
	} {
		if got := userFiltered(strings.Fields(args)); got != want {
			t.Errorf("userFiltered(%q) = %v, want %v", args, got, want)
		}
	}
}

func TestShellJoin(t *testing.T) {
	got := shellJoin([]string{"e2e.test", "--ginkgo.focus-file=test/(a|b)/", "--x=it's", ""})
	want := `e2e.test '--ginkgo.focus-file=test/(a|b)/' '--x=it'\''s' ''`
	if got != want {
		t.Errorf("shellJoin = %s, want %s", got, want)
	}
}

// The pods' network is a valid CNI network list for any bridge; the
// default keeps its name (host-local's address store), another bridge
// gets a name of its own.
func TestConformanceCNIConfig(t *testing.T) {
	for _, c := range []struct{ bridge, subnet, name string }{
		{defaultCNIBridge, defaultCNISubnet, "splitlet-conformance"},
		{kubeletCNIBridge, kubeletCNISubnet, "splitlet-conformance-" + kubeletCNIBridge},
	} {
		var conf struct {
			Name    string `json:"name"`
			Plugins []struct {
				Type   string `json:"type"`
				Bridge string `json:"bridge"`
				IPAM   struct {
					Ranges [][]struct {
						Subnet string `json:"subnet"`
					} `json:"ranges"`
				} `json:"ipam"`
			} `json:"plugins"`
		}
		if err := json.Unmarshal([]byte(conformanceCNIConfig(c.bridge, c.subnet)), &conf); err != nil {
			t.Fatalf("%s: %v", c.bridge, err)
		}
		if conf.Name != c.name || len(conf.Plugins) != 3 || conf.Plugins[2].Type != "portmap" || conf.Plugins[0].Bridge != c.bridge || conf.Plugins[0].IPAM.Ranges[0][0].Subnet != c.subnet {
			t.Errorf("%s: %+v", c.bridge, conf)
		}
	}
}

// A skip for one agent is on that agent's command line alone: Splitlet
// runs the image volume spec the kubelet cannot pass on this machine.
func TestSkipsForAgent(t *testing.T) {
	count := func(agent string) (n int, imageVolume bool) {
		for _, a := range e2eArgs("/k", "/out", "unix:///c.sock", agent, time.Hour, nil) {
			if p, ok := strings.CutPrefix(a, "--ginkgo.skip="); ok {
				n++
				imageVolume = imageVolume || strings.HasPrefix(p, "ImageVolume")
			}
		}
		return n, imageVolume
	}
	if n, iv := count(agentKubelet); n != len(conformanceSkips) || !iv {
		t.Errorf("kubelet: %d skips (image volume %v), want all %d", n, iv, len(conformanceSkips))
	}
	if n, iv := count(agentSplitlet); n != len(conformanceSkips)-1 || iv {
		t.Errorf("splitlet: %d skips (image volume %v), want all but the image volume's", n, iv)
	}
}
