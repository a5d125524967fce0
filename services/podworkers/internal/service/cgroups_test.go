package service

import (
	"strings"
	"testing"

	"github.com/splitlet/splitlet/libs/config"
)

// The cgroup keys a runtime cannot apply are refused with the key named.
func TestCgroupKeysPerRuntime(t *testing.T) {
	for _, c := range []struct {
		name    string
		runtime string
		mod     func(*config.Cgroups)
		refused string
	}{
		{"cri defaults", config.RuntimeCRI, nil, ""},
		{"process defaults", config.RuntimeProcess, nil, ""},
		{"sim defaults", config.RuntimeSim, nil, ""},
		{"process with cgroups-per-qos", config.RuntimeProcess, func(c *config.Cgroups) { c.PerQOS = config.True }, "cgroups-per-qos"},
		{"process with a cgroup root", config.RuntimeProcess, func(c *config.Cgroups) { c.Root = "/x" }, "cgroup-root"},
		{"process with a pids limit", config.RuntimeProcess, func(c *config.Cgroups) { c.PodPidsLimit = 100 }, "pod-pids-limit"},
		{"cri without QoS cgroups but enforcing", config.RuntimeCRI, func(c *config.Cgroups) { c.PerQOS = config.False }, "enforce-node-allocatable"},
		{"cri without QoS cgroups", config.RuntimeCRI, func(c *config.Cgroups) { c.PerQOS, c.EnforceNodeAllocatable = config.False, nil }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := defaults(t)
			if c.mod != nil {
				c.mod(&cfg.Cgroups)
			}
			err := cfg.checkCgroups(c.runtime)
			switch {
			case c.refused == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
				t.Errorf("error %v, want one naming %s", err, c.refused)
			}
		})
	}
}
