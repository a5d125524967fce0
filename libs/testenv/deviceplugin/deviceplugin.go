// Package deviceplugin is a small device plugin for tests: it serves the
// DevicePlugin service on a socket, lists the devices it is given and
// sends every change, answers Allocate with an environment variable per
// device, and records the calls it got.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Plugin is the stub.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	// Options are answered to GetDevicePluginOptions.
	Options pluginapi.DevicePluginOptions
	// Fail, if set, makes the named call fail with its error.
	Fail func(call string) error
	// Env names the variable Allocate sets: its value the devices' IDs,
	// joined by ",".
	Env string

	mu      sync.Mutex
	devices []*pluginapi.Device
	update  chan struct{}
	calls   []string
	server  *grpc.Server
}

// New makes a plugin listing devices, every one healthy.
func New(ids ...string) *Plugin {
	p := &Plugin{update: make(chan struct{}, 16), Env: "STUB_DEVICES"}
	for _, id := range ids {
		p.devices = append(p.devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	return p
}

func (p *Plugin) called(name string) error {
	p.mu.Lock()
	p.calls = append(p.calls, name)
	p.mu.Unlock()
	if p.Fail != nil {
		return p.Fail(name)
	}
	return nil
}

// Calls are the calls the plugin got, in order.
func (p *Plugin) Calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.calls...)
}

// SetHealth sets one device's health and sends the list again.
func (p *Plugin) SetHealth(id, health string) {
	p.mu.Lock()
	for _, d := range p.devices {
		if d.ID == id {
			d.Health = health
		}
	}
	p.mu.Unlock()
	p.update <- struct{}{}
}

// GetDevicePluginOptions implements the plugin API.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	if err := p.called("GetDevicePluginOptions"); err != nil {
		return nil, err
	}
	return &pluginapi.DevicePluginOptions{
		PreStartRequired:                p.Options.PreStartRequired,
		GetPreferredAllocationAvailable: p.Options.GetPreferredAllocationAvailable,
	}, nil
}

// ListAndWatch implements the plugin API.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := p.called("ListAndWatch"); err != nil {
		return err
	}
	for {
		p.mu.Lock()
		resp := &pluginapi.ListAndWatchResponse{}
		for _, d := range p.devices {
			resp.Devices = append(resp.Devices, &pluginapi.Device{ID: d.ID, Health: d.Health})
		}
		p.mu.Unlock()
		if err := s.Send(resp); err != nil {
			return err
		}
		select {
		case <-s.Context().Done():
			return nil
		case <-p.update:
		}
	}
}

// Allocate implements the plugin API.
func (p *Plugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	if err := p.called("Allocate"); err != nil {
		return nil, err
	}
	out := &pluginapi.AllocateResponse{}
	for _, c := range r.ContainerRequests {
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs:        map[string]string{p.Env: strings.Join(c.DevicesIds, ",")},
			Annotations: map[string]string{"stub.example.com/devices": strings.Join(c.DevicesIds, ",")},
		})
	}
	return out, nil
}

// GetPreferredAllocation implements the plugin API: the last devices
// available first.
func (p *Plugin) GetPreferredAllocation(_ context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	if err := p.called("GetPreferredAllocation"); err != nil {
		return nil, err
	}
	out := &pluginapi.PreferredAllocationResponse{}
	for _, c := range r.ContainerRequests {
		ids := append([]string(nil), c.MustIncludeDeviceIDs...)
		for i := len(c.AvailableDeviceIDs) - 1; i >= 0 && len(ids) < int(c.AllocationSize); i-- {
			id := c.AvailableDeviceIDs[i]
			dup := false
			for _, x := range ids {
				dup = dup || x == id
			}
			if !dup {
				ids = append(ids, id)
			}
		}
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return out, nil
}

// PreStartContainer implements the plugin API.
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	if err := p.called("PreStartContainer"); err != nil {
		return nil, err
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}

// Serve serves the plugin on dir/endpoint.
func (p *Plugin) Serve(dir, endpoint string) error {
	lis, err := net.Listen("unix", filepath.Join(dir, endpoint))
	if err != nil {
		return err
	}
	p.server = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.server, p)
	go func() { _ = p.server.Serve(lis) }()
	return nil
}

// Register registers the plugin with the agent's socket in dir.
func (p *Plugin) Register(ctx context.Context, dir, endpoint, resource string) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, pluginapi.KubeletSocket[strings.LastIndex(pluginapi.KubeletSocket, "/")+1:]),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resource, Options: &p.Options,
	}, grpc.WaitForReady(true))
	return err
}

// Stop stops serving (the agent's ListAndWatch ends).
func (p *Plugin) Stop() {
	if p.server != nil {
		p.server.Stop()
	}
}

// ErrInjected is a failure a test injects.
var ErrInjected = errors.New("injected failure")

// FailOn fails the named call.
func FailOn(name string) func(string) error {
	return func(call string) error {
		if call == name {
			return fmt.Errorf("%s failed: %w", name, ErrInjected)
		}
		return nil
	}
}
