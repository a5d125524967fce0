package devices

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/splitlet/splitlet/libs/bus"
)

// ReasonUnexpectedAdmissionError is the kubelet's rejection reason when the
// device manager cannot allocate a pod's devices.
const ReasonUnexpectedAdmissionError = "UnexpectedAdmissionError"

// allocation is the devices one container holds of one resource and what
// the plugin answered for them.
type allocation struct {
	IDs     []string                   `json:"ids"`
	Options bus.DeviceContainerOptions `json:"options"`
}

// podAllocations: pod UID -> container -> resource -> allocation.
type podAllocations map[types.UID]map[string]map[string]*allocation

// inUse are the devices of a resource held by any container.
func (p podAllocations) inUse(resource string) map[string]bool {
	out := map[string]bool{}
	for _, cs := range p {
		for _, rs := range cs {
			if a := rs[resource]; a != nil {
				for _, id := range a.IDs {
					out[id] = true
				}
			}
		}
	}
	return out
}

// Allocate gives the pod's containers their devices (kubelet: the device
// manager's Allocate for each container, init containers first), or says
// why the pod cannot have them. A container that holds devices keeps them;
// a resource no plugin registered is left alone (not a device resource).
func (m *Manager) Allocate(ctx context.Context, req *bus.DeviceAllocateRequest) *bus.DeviceAllocateResult {
	m.allocMu.Lock()
	defer m.allocMu.Unlock()
	m.mu.Lock()
	_, had := m.pods[req.PodUID]
	m.mu.Unlock()
	if !had {
		m.releaseInactive(ctx, req.PodUID)
	}
	reusable := map[string]map[string]bool{}
	for _, c := range req.Containers {
		if err := m.allocateContainer(ctx, req.PodUID, c, reusable); err != nil {
			if !had {
				m.mu.Lock()
				delete(m.pods, req.PodUID)
				m.saveLocked()
				m.mu.Unlock()
			}
			m.log.Info("device allocation failed", zap.String("pod", req.Namespace+"/"+req.Pod), zap.String("uid", string(req.PodUID)), zap.Error(err))
			return &bus.DeviceAllocateResult{Reason: ReasonUnexpectedAdmissionError,
				Message: fmt.Sprintf("Allocate failed due to %v, which is unexpected", err)}
		}
	}
	if req.Start != "" {
		if err := m.preStart(ctx, req.PodUID, req.Start); err != nil {
			return &bus.DeviceAllocateResult{Error: err.Error()}
		}
	}
	return &bus.DeviceAllocateResult{Containers: m.options(req.PodUID)}
}

// allocateContainer allocates each device resource of one container,
// reusing what earlier init containers of the pod held and handed on.
func (m *Manager) allocateContainer(ctx context.Context, uid types.UID, c bus.DeviceContainer, reusable map[string]map[string]bool) error {
	for _, name := range slices.Sorted(maps.Keys(c.Resources)) {
		need := int(c.Resources[name])
		m.mu.Lock()
		_, registered := m.res[name]
		m.mu.Unlock()
		if need == 0 || !registered {
			continue
		}
		ids, err := m.devicesFor(ctx, uid, c.Name, name, need, reusable[name])
		if err != nil {
			return err
		}
		if reusable[name] == nil {
			reusable[name] = map[string]bool{}
		}
		for _, id := range ids {
			if c.Init && !c.Restartable {
				reusable[name][id] = true
			} else {
				delete(reusable[name], id)
			}
		}
	}
	return nil
}

// devicesFor returns the container's devices of the resource, allocating
// them through the plugin when it holds none yet.
func (m *Manager) devicesFor(ctx context.Context, uid types.UID, container, name string, need int, reuse map[string]bool) ([]string, error) {
	m.mu.Lock()
	if a := m.pods[uid][container][name]; a != nil {
		m.mu.Unlock()
		if len(a.IDs) != need {
			return nil, fmt.Errorf("pod %q container %q changed request for resource %q from %d to %d", uid, container, name, len(a.IDs), need)
		}
		return a.IDs, nil
	}
	r := m.res[name]
	var healthy []string
	for id, ok := range r.devices {
		if ok {
			healthy = append(healthy, id)
		}
	}
	sort.Strings(healthy)
	used := m.pods.inUse(name)
	ep := r.ep
	m.mu.Unlock()
	if len(healthy) == 0 {
		return nil, fmt.Errorf("no healthy devices present; cannot allocate unhealthy devices %s", name)
	}
	var chosen []string
	for _, id := range slices.Sorted(maps.Keys(reuse)) {
		if len(chosen) < need {
			chosen = append(chosen, id)
		}
	}
	var available []string
	for _, id := range healthy {
		if !used[id] {
			available = append(available, id)
		}
	}
	if len(chosen) < need && len(available) < need-len(chosen) {
		return nil, fmt.Errorf("requested number of devices unavailable for %s. Requested: %d, Available: %d", name, need-len(chosen), len(available))
	}
	if len(chosen) < need {
		preferred, err := m.preferred(ctx, ep, available, chosen, need)
		if err != nil {
			return nil, err
		}
		chosen = fill(chosen, need, preferred, available)
	}
	opts, err := m.allocateRPC(ctx, ep, name, chosen)
	if err != nil {
		return nil, err
	}
	opts.Name = container
	m.mu.Lock()
	if m.pods[uid] == nil {
		m.pods[uid] = map[string]map[string]*allocation{}
	}
	if m.pods[uid][container] == nil {
		m.pods[uid][container] = map[string]*allocation{}
	}
	m.pods[uid][container][name] = &allocation{IDs: chosen, Options: opts}
	m.saveLocked()
	m.mu.Unlock()
	m.log.Info("devices allocated", zap.String("uid", string(uid)), zap.String("container", container),
		zap.String("resource", name), zap.Strings("devices", chosen))
	return chosen, nil
}

// fill completes chosen to need devices: the plugin's preferred ones
// first, then the available ones in order.
func fill(chosen []string, need int, preferred, available []string) []string {
	ok := map[string]bool{}
	for _, id := range available {
		ok[id] = true
	}
	for _, list := range [][]string{preferred, available} {
		for _, id := range list {
			if len(chosen) == need {
				return chosen
			}
			if ok[id] && !slices.Contains(chosen, id) {
				chosen = append(chosen, id)
			}
		}
	}
	return chosen
}

// preferred asks the plugin which devices it would rather give, if it
// offers that (kubelet: callGetPreferredAllocationIfAvailable).
func (m *Manager) preferred(ctx context.Context, ep *endpoint, available, must []string, need int) ([]string, error) {
	if ep == nil || !ep.options.GetGetPreferredAllocationAvailable() {
		return nil, nil
	}
	resp, err := ep.client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: append(slices.Clone(available), must...), MustIncludeDeviceIDs: must, AllocationSize: int32(need),
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("device plugin GetPreferredAllocation rpc failed with err: %v", err)
	}
	if rs := resp.GetContainerResponses(); len(rs) > 0 {
		return rs[0].GetDeviceIDs(), nil
	}
	return nil, nil
}

// allocateRPC calls the plugin's Allocate for one container's devices and
// turns its answer into what the container is created with.
func (m *Manager) allocateRPC(ctx context.Context, ep *endpoint, name string, ids []string) (bus.DeviceContainerOptions, error) {
	if ep == nil {
		return bus.DeviceContainerOptions{}, fmt.Errorf("unknown Device Plugin %s", name)
	}
	resp, err := ep.client.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}},
	})
	if err != nil {
		return bus.DeviceContainerOptions{}, err
	}
	rs := resp.GetContainerResponses()
	if len(rs) == 0 {
		return bus.DeviceContainerOptions{}, fmt.Errorf("no containers return in allocation response %v", resp)
	}
	return containerOptions(rs[0]), nil
}

func containerOptions(r *pluginapi.ContainerAllocateResponse) bus.DeviceContainerOptions {
	var o bus.DeviceContainerOptions
	for _, d := range r.GetDevices() {
		o.Devices = append(o.Devices, bus.DeviceNode{ContainerPath: d.GetContainerPath(), HostPath: d.GetHostPath(), Permissions: d.GetPermissions()})
	}
	for _, mt := range r.GetMounts() {
		o.Mounts = append(o.Mounts, bus.DeviceMount{ContainerPath: mt.GetContainerPath(), HostPath: mt.GetHostPath(), ReadOnly: mt.GetReadOnly()})
	}
	if len(r.GetEnvs()) > 0 {
		o.Envs = maps.Clone(r.GetEnvs())
	}
	if len(r.GetAnnotations()) > 0 {
		o.Annotations = maps.Clone(r.GetAnnotations())
	}
	return o
}

// preStart calls PreStartContainer for the container's devices of every
// plugin that asks for it (kubelet: callPreStartContainerIfNeeded).
func (m *Manager) preStart(ctx context.Context, uid types.UID, container string) error {
	m.mu.Lock()
	type call struct {
		ep  *endpoint
		ids []string
	}
	var calls []call
	for name, a := range m.pods[uid][container] {
		r := m.res[name]
		if r == nil || r.ep == nil || !r.ep.options.GetPreStartRequired() {
			continue
		}
		calls = append(calls, call{r.ep, a.IDs})
	}
	m.mu.Unlock()
	for _, c := range calls {
		pctx, cancel := context.WithTimeout(ctx, pluginapi.KubeletPreStartContainerRPCTimeoutInSecs*1e9)
		_, err := c.ep.client.PreStartContainer(pctx, &pluginapi.PreStartContainerRequest{DevicesIds: c.ids})
		cancel()
		if err != nil {
			return fmt.Errorf("device plugin PreStartContainer rpc failed with err: %v", err)
		}
	}
	return nil
}

// options merges, per container, what each of its resources' plugins
// answered (kubelet: GetDeviceRunContainerOptions).
func (m *Manager) options(uid types.UID) []bus.DeviceContainerOptions {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []bus.DeviceContainerOptions
	for _, container := range slices.Sorted(maps.Keys(m.pods[uid])) {
		o := bus.DeviceContainerOptions{Name: container}
		rs := m.pods[uid][container]
		for _, name := range slices.Sorted(maps.Keys(rs)) {
			a := rs[name].Options
			o.Devices = append(o.Devices, a.Devices...)
			o.Mounts = append(o.Mounts, a.Mounts...)
			for k, v := range a.Envs {
				if o.Envs == nil {
					o.Envs = map[string]string{}
				}
				o.Envs[k] = v
			}
			for k, v := range a.Annotations {
				if o.Annotations == nil {
					o.Annotations = map[string]string{}
				}
				o.Annotations[k] = v
			}
		}
		out = append(out, o)
	}
	return out
}

// releaseInactive frees the devices of pods no longer active (kubelet:
// UpdateAllocatedDevices before an allocation); keep is the pod asking.
// When the pods cannot be listed nothing is freed.
func (m *Manager) releaseInactive(ctx context.Context, keep types.UID) {
	if m.cfg.Active == nil {
		return
	}
	m.mu.Lock()
	n := len(m.pods)
	m.mu.Unlock()
	if n == 0 {
		return
	}
	active, err := m.cfg.Active(ctx)
	if err != nil {
		m.log.Warn("cannot list the active pods, no devices released", zap.Error(err))
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	changed := false
	for uid := range m.pods {
		if uid != keep && !active[uid] {
			delete(m.pods, uid)
			changed = true
			m.log.Info("devices released", zap.String("uid", string(uid)))
		}
	}
	if changed {
		m.saveLocked()
	}
}
