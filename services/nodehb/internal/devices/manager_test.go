package devices

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/testenv/deviceplugin"
)

// clock is a settable now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// start runs a manager on a directory of its own (short: a socket path
// has at most 107 bytes).
func start(t *testing.T, active ActivePods) (*Manager, string, *clock) {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m, clk := startIn(t, dir, active)
	return m, dir, clk
}

func startIn(t *testing.T, dir string, active ActivePods) (*Manager, *clock) {
	t.Helper()
	m := New(Config{Dir: dir, Checkpoint: filepath.Join(dir, "state", "checkpoint.json"), Active: active})
	clk := &clock{t: time.Now()}
	m.now = clk.now
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m, clk
}

// plugin serves a stub plugin in dir and registers it.
func plugin(t *testing.T, dir, resource string, p *deviceplugin.Plugin) error {
	t.Helper()
	ep := strings.ReplaceAll(resource, "/", "_") + ".sock"
	if err := p.Serve(dir, ep); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p.Register(t.Context(), dir, ep, resource)
}

// waitFor polls the manager's figures of resource until they are
// capacity/allocatable (-1: absent).
func waitFor(t *testing.T, m *Manager, resource string, capacity, allocatable int64) {
	t.Helper()
	var gotC, gotA int64
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		c, a := m.Resources()
		gotC, gotA = -1, -1
		if q, ok := c[corev1.ResourceName(resource)]; ok {
			gotC = q.Value()
		}
		if q, ok := a[corev1.ResourceName(resource)]; ok {
			gotA = q.Value()
		}
		return gotC == capacity && gotA == allocatable, nil
	})
	if err != nil {
		t.Fatalf("%s: capacity %d allocatable %d, want %d and %d", resource, gotC, gotA, capacity, allocatable)
	}
}

func TestRegistrationRefused(t *testing.T) {
	m, dir, _ := start(t, nil)
	for _, c := range []struct{ version, resource, endpoint, want string }{
		{"v1alpha", "example.com/dev", "a.sock", `requested API version "v1alpha" is not supported by kubelet`},
		{pluginapi.Version, "cpu", "a.sock", `the ResourceName "cpu" is invalid`},
		{pluginapi.Version, "kubernetes.io/dev", "a.sock", `the ResourceName "kubernetes.io/dev" is invalid`},
		{pluginapi.Version, "example.com/dev", "../a.sock", `invalid endpoint "../a.sock"`},
		{pluginapi.Version, "example.com/dev", "missing.sock", "failed to dial device plugin"},
	} {
		g := &registration{m: m, ctx: t.Context()}
		_, err := g.Register(t.Context(), &pluginapi.RegisterRequest{Version: c.version, ResourceName: c.resource, Endpoint: c.endpoint})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Register(%s, %s, %s) = %v, want %q", c.version, c.resource, c.endpoint, err, c.want)
		}
	}
	if c, _ := m.Resources(); len(c) != 0 {
		t.Fatalf("refused registrations left resources: %v", c)
	}
	_ = dir
}

// A plugin whose options fail is not used: the registration fails with the
// kubelet's error, ListAndWatch is never called, no resource appears.
func TestOptionsFailureRefusesPlugin(t *testing.T) {
	m, dir, _ := start(t, nil)
	p := deviceplugin.New("d0")
	p.Fail = deviceplugin.FailOn("GetDevicePluginOptions")
	err := plugin(t, dir, "example.com/opt", p)
	if err == nil || !strings.Contains(err.Error(), "failed to get device plugin options") || !strings.Contains(err.Error(), "GetDevicePluginOptions failed") {
		t.Fatalf("Register = %v, want the options failure", err)
	}
	if calls := p.Calls(); len(calls) != 1 || calls[0] != "GetDevicePluginOptions" {
		t.Fatalf("calls %v, want GetDevicePluginOptions alone", calls)
	}
	if c, _ := m.Resources(); len(c) != 0 {
		t.Fatalf("resources %v, want none", c)
	}
}

// Health moves allocatable, not capacity; a plugin gone leaves capacity for
// the grace period with nothing allocatable, then 0 (never absent).
func TestCapacityFollowsHealthAndPlugin(t *testing.T) {
	m, dir, clk := start(t, nil)
	p := deviceplugin.New("0", "1", "2", "3")
	if err := plugin(t, dir, "example.com/h", p); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "example.com/h", 4, 4)
	p.SetHealth("3", pluginapi.Unhealthy)
	p.SetHealth("1", pluginapi.Unhealthy)
	waitFor(t, m, "example.com/h", 4, 2)
	p.SetHealth("1", pluginapi.Healthy)
	waitFor(t, m, "example.com/h", 4, 3)
	p.Stop()
	waitFor(t, m, "example.com/h", 4, 0)
	clk.add(DefaultStopGrace - time.Second)
	waitFor(t, m, "example.com/h", 4, 0)
	clk.add(2 * time.Second)
	waitFor(t, m, "example.com/h", 0, 0)
}

// A ListAndWatch that fails at once registers the resource at 0 and is not
// called again.
func TestListAndWatchFailureNotRetried(t *testing.T) {
	m, dir, _ := start(t, nil)
	p := deviceplugin.New("d0")
	p.Fail = deviceplugin.FailOn("ListAndWatch")
	if err := plugin(t, dir, "example.com/lw", p); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "example.com/lw", 0, 0)
	consistently(t, 300*time.Millisecond, func() bool { return len(p.Calls()) == 2 }, func() string {
		return fmt.Sprintf("calls %v, want GetDevicePluginOptions and one ListAndWatch", p.Calls())
	})
}

// A plugin registered again keeps serving the resource; the old stream's
// end does not mark the new one's devices unhealthy.
func TestReRegistration(t *testing.T) {
	m, dir, _ := start(t, nil)
	p1 := deviceplugin.New("a", "b")
	if err := plugin(t, dir, "example.com/rr", p1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "example.com/rr", 2, 2)
	m.mu.Lock()
	old := m.res["example.com/rr"].ep
	m.mu.Unlock()
	p2 := deviceplugin.New("a", "b", "c")
	if err := p2.Serve(dir, "rr2.sock"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p2.Stop)
	if err := p2.Register(t.Context(), dir, "rr2.sock", "example.com/rr"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "example.com/rr", 3, 3)
	// the old endpoint's stream ends now, after the new one listed.
	m.endpointStopped("example.com/rr", old)
	waitFor(t, m, "example.com/rr", 3, 3)
	p2.Stop()
	waitFor(t, m, "example.com/rr", 3, 0)
}

func podReq(uid string, containers ...bus.DeviceContainer) *bus.DeviceAllocateRequest {
	return &bus.DeviceAllocateRequest{PodUID: types.UID(uid), Namespace: "ns", Pod: "p-" + uid, Containers: containers}
}

func ctr(name string, n int64) bus.DeviceContainer {
	return bus.DeviceContainer{Name: name, Resources: map[string]int64{"example.com/gpu": n, "example.com/none": 1}}
}

// Allocation: free devices go, the plugin's answer comes back per
// container, the same pod gets the same answer, too few free devices
// reject with the kubelet's reason and message, and the devices of a pod
// gone are released for the next.
func TestAllocateAndRelease(t *testing.T) {
	var mu sync.Mutex
	active := map[types.UID]bool{"a": true, "b": true}
	m, dir, _ := start(t, func(context.Context) (map[types.UID]bool, error) {
		mu.Lock()
		defer mu.Unlock()
		out := map[types.UID]bool{}
		for k, v := range active {
			out[k] = v
		}
		return out, nil
	})
	p := deviceplugin.New("g0", "g1")
	p.Options.GetPreferredAllocationAvailable = true
	p.Options.PreStartRequired = true
	if err := plugin(t, dir, "example.com/gpu", p); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "example.com/gpu", 2, 2)

	res := m.Allocate(t.Context(), podReq("a", ctr("main", 1)))
	if res.Reason != "" || res.Error != "" || len(res.Containers) != 1 || res.Containers[0].Envs["STUB_DEVICES"] != "g1" {
		t.Fatalf("pod a: %+v, want main with STUB_DEVICES=g1 (the plugin prefers the last)", res)
	}
	again := m.Allocate(t.Context(), &bus.DeviceAllocateRequest{PodUID: "a", Namespace: "ns", Pod: "p-a", Containers: []bus.DeviceContainer{ctr("main", 1)}, Start: "main"})
	if again.Error != "" || again.Containers[0].Envs["STUB_DEVICES"] != "g1" {
		t.Fatalf("pod a again: %+v", again)
	}
	if n := count(p.Calls(), "Allocate"); n != 1 {
		t.Fatalf("Allocate called %d times, want once (the pod keeps its devices)", n)
	}
	if n := count(p.Calls(), "PreStartContainer"); n != 1 {
		t.Fatalf("PreStartContainer called %d times, want once", n)
	}

	rej := m.Allocate(t.Context(), podReq("b", ctr("main", 2)))
	want := "Allocate failed due to requested number of devices unavailable for example.com/gpu. Requested: 2, Available: 1, which is unexpected"
	if rej.Reason != ReasonUnexpectedAdmissionError || rej.Message != want {
		t.Fatalf("pod b: %+v, want %q", rej, want)
	}

	mu.Lock()
	delete(active, "a")
	mu.Unlock()
	res = m.Allocate(t.Context(), podReq("b", ctr("main", 2)))
	if res.Reason != "" || len(res.Containers) != 1 || res.Containers[0].Envs["STUB_DEVICES"] == "" {
		t.Fatalf("pod b after a went: %+v", res)
	}
}

// Init containers hand their devices on to the containers after them; a
// sidecar keeps its own.
func TestInitContainerDevicesReused(t *testing.T) {
	m, dir, _ := start(t, nil)
	p := deviceplugin.New("d0", "d1")
	if err := plugin(t, dir, "example.com/gpu", p); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "example.com/gpu", 2, 2)
	init := ctr("init", 2)
	init.Init = true
	res := m.Allocate(t.Context(), podReq("a", init, ctr("main", 2)))
	if res.Reason != "" || len(res.Containers) != 2 {
		t.Fatalf("init then main on the same two devices: %+v", res)
	}
	side := ctr("side", 1)
	side.Init, side.Restartable = true, true
	res = m.Allocate(t.Context(), podReq("b", side, ctr("main", 2)))
	if res.Reason != ReasonUnexpectedAdmissionError {
		t.Fatalf("a sidecar's device handed on: %+v", res)
	}
}

// The allocations survive a restart: a new manager on the checkpoint gives
// the pod the same answer without calling the plugin, and states the
// resource (its plugin not back yet) at 0 until the plugin registers again.
func TestCheckpointSurvivesRestart(t *testing.T) {
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m, _ := startIn(t, dir, nil)
	p := deviceplugin.New("d0", "d1")
	if err := plugin(t, dir, "example.com/gpu", p); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "example.com/gpu", 2, 2)
	first := m.Allocate(t.Context(), podReq("a", ctr("main", 1)))
	if first.Reason != "" || len(first.Containers) != 1 {
		t.Fatalf("allocation: %+v", first)
	}
	m.Stop()

	m2, _ := startIn(t, dir, nil)
	waitFor(t, m2, "example.com/gpu", 0, 0)
	calls := count(p.Calls(), "Allocate")
	again := m2.Allocate(t.Context(), podReq("a", ctr("main", 1)))
	if again.Reason != "" || len(again.Containers) != 1 || again.Containers[0].Envs["STUB_DEVICES"] != first.Containers[0].Envs["STUB_DEVICES"] {
		t.Fatalf("after a restart: %+v, want %+v", again, first)
	}
	if count(p.Calls(), "Allocate") != calls {
		t.Fatal("the plugin was asked again for devices the checkpoint holds")
	}
	if err := p.Register(t.Context(), dir, "example.com_gpu.sock", "example.com/gpu"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m2, "example.com/gpu", 2, 2)
	other := m2.Allocate(t.Context(), podReq("b", ctr("main", 2)))
	if other.Reason != ReasonUnexpectedAdmissionError {
		t.Fatalf("pod b got pod a's device after the restart: %+v", other)
	}
}

// consistently checks ok over d, failing with msg at the first false.
func consistently(t *testing.T, d time.Duration, ok func() bool, msg func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	_ = wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		if !ok() {
			t.Fatal(msg())
		}
		return false, nil
	})
}

func count(calls []string, name string) int {
	n := 0
	for _, c := range calls {
		if c == name {
			n++
		}
	}
	return n
}
