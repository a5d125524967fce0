package cri

import (
	"maps"
	"slices"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/runtime"
)

// SupportsDevices implements runtime.DeviceRuntime: the container's devices
// go into its CreateContainer.
func (r *Runtime) SupportsDevices() bool { return true }

// applyDevices puts what the device plugins answered into the container's
// config as the kubelet does: their environment before the container's own
// (a variable of the spec wins), their mounts before the volumes, their
// device files, and their annotations under the agent's own.
func applyDevices(cfg *runtimeapi.ContainerConfig, d *runtime.DeviceOptions) {
	if d == nil {
		return
	}
	var envs []*runtimeapi.KeyValue
	for _, k := range slices.Sorted(maps.Keys(d.Envs)) {
		envs = append(envs, &runtimeapi.KeyValue{Key: k, Value: []byte(d.Envs[k])})
	}
	cfg.Envs = append(envs, cfg.Envs...)
	var mounts []*runtimeapi.Mount
	for _, m := range d.Mounts {
		mounts = append(mounts, &runtimeapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, Readonly: m.ReadOnly})
	}
	cfg.Mounts = append(mounts, cfg.Mounts...)
	for _, dev := range d.Devices {
		cfg.Devices = append(cfg.Devices, &runtimeapi.Device{ContainerPath: dev.ContainerPath, HostPath: dev.HostPath, Permissions: dev.Permissions})
	}
	for k, v := range d.Annotations {
		if _, own := cfg.Annotations[k]; !own {
			if cfg.Annotations == nil {
				cfg.Annotations = map[string]string{}
			}
			cfg.Annotations[k] = v
		}
	}
}
