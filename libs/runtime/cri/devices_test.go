package cri

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/runtime"
)

// The device plugins' answer goes into the container's config: their
// variables before the container's own, their mounts before the volumes,
// the device files, and annotations that do not override the agent's.
func TestApplyDevices(t *testing.T) {
	cfg := &runtimeapi.ContainerConfig{
		Envs:        []*runtimeapi.KeyValue{{Key: "A", Value: []byte("own")}},
		Mounts:      []*runtimeapi.Mount{{ContainerPath: "/vol"}},
		Annotations: map[string]string{annotationHash: "1"},
	}
	applyDevices(cfg, &runtime.DeviceOptions{
		Envs:        map[string]string{"A": "plugin", "B": "b"},
		Mounts:      []runtime.Mount{{ContainerPath: "/dev-lib", HostPath: "/host/lib", ReadOnly: true}},
		Devices:     []runtime.Device{{ContainerPath: "/dev/x", HostPath: "/dev/x0", Permissions: "rw"}},
		Annotations: map[string]string{"vendor/a": "v", annotationHash: "plugin"},
	})
	if len(cfg.Envs) != 3 || cfg.Envs[0].Key != "A" || string(cfg.Envs[0].Value) != "plugin" || cfg.Envs[1].Key != "B" || string(cfg.Envs[2].Value) != "own" {
		t.Errorf("envs %v: the plugin's first, the container's last", cfg.Envs)
	}
	if len(cfg.Mounts) != 2 || cfg.Mounts[0].ContainerPath != "/dev-lib" || !cfg.Mounts[0].Readonly {
		t.Errorf("mounts %v", cfg.Mounts)
	}
	if len(cfg.Devices) != 1 || cfg.Devices[0].HostPath != "/dev/x0" || cfg.Devices[0].Permissions != "rw" {
		t.Errorf("devices %v", cfg.Devices)
	}
	if cfg.Annotations["vendor/a"] != "v" || cfg.Annotations[annotationHash] != "1" {
		t.Errorf("annotations %v", cfg.Annotations)
	}
	applyDevices(cfg, nil)
}
