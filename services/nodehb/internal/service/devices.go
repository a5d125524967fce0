package service

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/services/nodehb/internal/devices"
)

// devicePluginsDir is the device manager's directory, empty when it does
// not run: only the cri runtime passes devices to containers, so another
// runtime accepts only the default (and serves nothing there).
func (c *Config) devicePluginsDir(common *config.Common) (string, error) {
	if common.Runtime == config.RuntimeCRI {
		if c.DevicePluginsDir != "" && !filepath.IsAbs(c.DevicePluginsDir) {
			return "", fmt.Errorf("invalid value %q for nodehb.device-plugins-dir: must be an absolute path", c.DevicePluginsDir)
		}
		return c.DevicePluginsDir, nil
	}
	if c.DevicePluginsDir != "" && c.DevicePluginsDir != devices.DefaultDir {
		return "", fmt.Errorf("invalid value %q for nodehb.device-plugins-dir: the %s runtime gives containers no devices (only cri does)", c.DevicePluginsDir, common.Runtime)
	}
	return "", nil
}

// deviceManager builds the device manager, nil when it does not run. Its
// checkpoint is in the data dir (the plugin directory is shared with any
// other agent on the host).
func (c *Config) deviceManager(common *config.Common, pods apiPods, log *zap.Logger) (*devices.Manager, error) {
	dir, err := c.devicePluginsDir(common)
	if err != nil || dir == "" {
		return nil, err
	}
	return devices.New(devices.Config{
		Dir:        dir,
		Checkpoint: filepath.Join(common.DataDir, "devices", "checkpoint.json"),
		Active:     pods.activeUIDs,
		Log:        log,
	}), nil
}

// activeUIDs are the node's pods that may hold devices: those the API
// server has, not in a terminal phase.
func (a apiPods) activeUIDs(ctx context.Context) (map[types.UID]bool, error) {
	list, err := a.ListPods(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[types.UID]bool, len(list))
	for i := range list {
		if p := list[i].Status.Phase; p != corev1.PodSucceeded && p != corev1.PodFailed {
			out[list[i].UID] = true
		}
	}
	return out, nil
}

// startDevices serves the registration socket and the pod workers'
// allocations. A socket it cannot serve is logged, and the node runs
// without device plugins.
func (r *Runner) startDevices(nc *nats.Conn, pub *bus.Publisher) {
	if r.Devices == nil {
		return
	}
	if err := r.Devices.Start(); err != nil {
		r.log.Error("device plugins not served", zap.Error(err))
		r.Devices = nil
		return
	}
	if nc == nil {
		return
	}
	sub, err := r.Devices.Serve(nc, pub, bus.For(r.node).DevicesAllocate())
	if err != nil {
		r.log.Error("device allocations not served", zap.Error(err))
	}
	r.devicesSub = sub
}

// stopDevices stops answering allocations (the requests already received
// are answered), then the socket.
func (r *Runner) stopDevices() {
	if sub := r.devicesSub; sub != nil {
		_ = sub.Drain()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) { return !sub.IsValid(), nil })
		cancel()
	}
	if r.Devices != nil {
		r.Devices.Stop()
	}
}
