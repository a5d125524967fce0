// Package devices is the node's device plugin manager (kubelet: the device
// manager of pkg/kubelet/cm/devicemanager): it serves the device plugin
// registration socket, follows each plugin's devices (ListAndWatch), states
// their counts in the Node's capacity and allocatable, and allocates devices
// to the containers of the pods the pod workers admit, over the bus
// (DeviceAllocateRequest). Its allocations survive a restart in a
// checkpoint file.
package devices

import (
	"context"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// DefaultDir is the kubelet's device plugin directory, where plugins look
// for the registration socket (pluginapi.DevicePluginPath).
const DefaultDir = pluginapi.DevicePluginPath

// SocketName is the registration socket's name in the directory.
const SocketName = "kubelet.sock"

// DefaultStopGrace is how long a resource whose plugin has gone keeps its
// capacity (kubelet: endpointStopGracePeriod, 5 minutes).
const DefaultStopGrace = 5 * time.Minute

// ActivePods lists the UIDs of the pods that may still hold devices: the
// node's pods not in a terminal phase. Allocations of other pods are
// released (kubelet: UpdateAllocatedDevices against the active pods).
type ActivePods func(ctx context.Context) (map[types.UID]bool, error)

// Config is what the manager needs.
type Config struct {
	// Dir holds the registration socket and the plugins' sockets.
	Dir string
	// Checkpoint is the file the registered resources and the allocations
	// are kept in.
	Checkpoint string
	// StopGrace: a resource whose plugin went away keeps its capacity this
	// long (allocatable 0), then reports 0.
	StopGrace time.Duration
	Active    ActivePods
	Log       *zap.Logger
}

// Manager is the device plugin manager.
type Manager struct {
	cfg Config
	log *zap.Logger
	now func() time.Time

	// allocMu serialises allocations (plugin calls included); mu guards
	// the state below and is never held over a plugin call.
	allocMu sync.Mutex
	mu      sync.Mutex
	res     map[string]*resourceState
	// removed are the resources whose plugin stayed away past the grace
	// period: capacity 0 from then on (kubelet: the node keeps a removed
	// device plugin resource at 0, not absent).
	removed map[string]bool
	pods    podAllocations

	server *grpc.Server
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// resourceState is one registered resource.
type resourceState struct {
	ep *endpoint
	// devices: every device the plugin listed last, by ID, true when
	// healthy.
	devices map[string]bool
	// listed: the plugin listed its devices once, or went away; before
	// that the resource is not reported.
	listed bool
	// stopped is when the plugin went away (zero while it is connected).
	stopped time.Time
}

// New builds a manager; Start serves the registration socket.
func New(cfg Config) *Manager {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	return &Manager{cfg: cfg, log: cfg.Log, now: time.Now, res: map[string]*resourceState{},
		removed: map[string]bool{}, pods: podAllocations{}}
}

// Resources are the capacity and allocatable of every device plugin
// resource (allocatable: its healthy devices), as the Node states them; a
// resource whose plugin stayed away past the grace period is 0 in both
// (kubelet: GetCapacity and the node status setter).
func (m *Manager) Resources() (capacity, allocatable corev1.ResourceList) {
	m.mu.Lock()
	defer m.mu.Unlock()
	capacity, allocatable = corev1.ResourceList{}, corev1.ResourceList{}
	expired := false
	for name, r := range m.res {
		if !r.stopped.IsZero() && m.now().Sub(r.stopped) > m.cfg.StopGrace {
			delete(m.res, name)
			m.removed[name] = true
			expired = true
			m.log.Info("device plugin resource removed after its grace period", zap.String("resource", name))
			continue
		}
		if !r.listed {
			continue
		}
		healthy := 0
		for _, ok := range r.devices {
			if ok {
				healthy++
			}
		}
		capacity[corev1.ResourceName(name)] = *resource.NewQuantity(int64(len(r.devices)), resource.DecimalSI)
		allocatable[corev1.ResourceName(name)] = *resource.NewQuantity(int64(healthy), resource.DecimalSI)
	}
	for name := range m.removed {
		capacity[corev1.ResourceName(name)] = *resource.NewQuantity(0, resource.DecimalSI)
		allocatable[corev1.ResourceName(name)] = *resource.NewQuantity(0, resource.DecimalSI)
	}
	if expired {
		m.saveLocked()
	}
	return capacity, allocatable
}

// resourceNames lists the registered resources, sorted.
func (m *Manager) resourceNames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.res))
	for n := range m.res {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// setDevices records a plugin's listing (kubelet:
// genericDeviceUpdateCallback) if ep is still the resource's endpoint.
func (m *Manager) setDevices(name string, ep *endpoint, devs []*pluginapi.Device) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.res[name]
	if r == nil || r.ep != ep {
		return
	}
	r.devices = make(map[string]bool, len(devs))
	for _, d := range devs {
		r.devices[d.GetID()] = d.GetHealth() == pluginapi.Healthy
	}
	r.listed = true
	m.saveLocked()
}

// endpointStopped marks every device of the resource unhealthy and starts
// its grace period (kubelet: PluginDisconnected), if ep is still its
// endpoint: a plugin registered again meanwhile keeps its devices.
func (m *Manager) endpointStopped(name string, ep *endpoint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.res[name]
	if r == nil || r.ep != ep {
		return
	}
	for id := range r.devices {
		r.devices[id] = false
	}
	r.listed = true
	r.stopped = m.now()
	m.log.Info("device plugin gone, its devices are unhealthy", zap.String("resource", name))
}
