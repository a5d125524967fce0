package cgroups

import (
	"errors"
	"fmt"
	"path"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/kube"
)

// Config is the node's cgroup keys.
type Config struct {
	// PerQOS lays out kubepods, the QoS cgroups and the pod cgroups
	// (cgroups-per-qos); off, sandboxes get the root as their parent.
	PerQOS bool
	// Driver names the cgroups (cgroup-driver).
	Driver Driver
	// Root is the cgroup the layout is under (cgroup-root), in the
	// driver's form.
	Root string
	// PodPidsLimit is each pod cgroup's pids.max (pod-pids-limit); <= 0
	// none.
	PodPidsLimit int64
	// EnforcePods sizes kubepods to the node's allocatable
	// (enforce-node-allocatable has pods).
	EnforcePods bool
}

// Node is the node's cgroup layout on a host.
type Node struct {
	cfg  Config
	fs   *FS
	root Name
	// Allocatable, if set, is the node's allocatable (nil while unknown):
	// kubepods' size when pods are held to it.
	allocatable func() corev1.ResourceList
	// mu serialises the writes of the shared QoS cgroups.
	mu sync.Mutex
}

// NewNode checks cfg and lays it out on fsys (nil: the host's, DetectFS).
func NewNode(cfg Config, fsys *FS, allocatable func() corev1.ResourceList) (*Node, error) {
	switch cfg.Driver {
	case DriverCgroupfs, DriverSystemd:
	default:
		return nil, fmt.Errorf("cgroup driver %q: want cgroupfs or systemd", cfg.Driver)
	}
	root, err := ParseRoot(cfg.Root, cfg.Driver)
	if err != nil {
		return nil, err
	}
	if fsys == nil {
		if fsys, err = DetectFS(); err != nil {
			return nil, err
		}
	}
	if allocatable == nil {
		allocatable = func() corev1.ResourceList { return nil }
	}
	return &Node{cfg: cfg, fs: fsys, root: root, allocatable: allocatable}, nil
}

// FS is the host's cgroup file system the layout is written to.
func (n *Node) FS() *FS { return n.fs }

// Config is the layout's keys.
func (n *Node) Config() Config { return n.cfg }

// Kubepods is the cgroup of every pod.
func (n *Node) Kubepods() Name { return n.root.Child(KubepodsName) }

// QoS is the cgroup of the pods of a QoS class (kubepods for Guaranteed).
func (n *Node) QoS(class corev1.PodQOSClass) Name {
	switch class {
	case corev1.PodQOSBurstable:
		return n.Kubepods().Child(BurstableName)
	case corev1.PodQOSBestEffort:
		return n.Kubepods().Child(BestEffortName)
	}
	return n.Kubepods()
}

// PodName is the pod's cgroup; without PerQOS, the root.
func (n *Node) PodName(p *corev1.Pod) Name {
	if !n.cfg.PerQOS {
		return n.root
	}
	return n.QoS(kube.QOSClass(p)).Child(podPart(string(p.UID)))
}

// Parent is the CgroupParent of the pod's sandbox: its cgroup in the
// driver's form (kubelet: GetPodCgroupParent).
func (n *Node) Parent(p *corev1.Pod) string { return n.PodName(p).Path(n.cfg.Driver) }

// Path is a cgroup's path in the driver's form.
func (n *Node) Path(name Name) string { return name.Path(n.cfg.Driver) }

// EnsureQoS creates kubepods and the QoS cgroups where missing and writes
// their values: kubepods sized to allocatable (EnforcePods), burstable
// the shares of burstableMilli (the summed CPU requests of the node's
// burstable pods), besteffort the least shares (kubelet: the QoS
// container manager's Start and UpdateCgroups).
func (n *Node) EnsureQoS(burstableMilli int64) error {
	if !n.cfg.PerQOS {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return errors.Join(
		n.fs.Ensure(n.Path(n.Kubepods()), KubepodsResources(n.allocatable(), n.cfg.EnforcePods)),
		n.fs.Ensure(n.Path(n.QoS(corev1.PodQOSBurstable)), BurstableResources(burstableMilli)),
		n.fs.Ensure(n.Path(n.QoS(corev1.PodQOSBestEffort)), BestEffortResources()))
}

// QoSExists says whether kubepods and the QoS cgroups exist in every
// hierarchy (true without per-QoS cgroups: there is nothing to make).
func (n *Node) QoSExists() bool {
	if !n.cfg.PerQOS {
		return true
	}
	for _, name := range []Name{n.Kubepods(), n.QoS(corev1.PodQOSBurstable), n.QoS(corev1.PodQOSBestEffort)} {
		if !n.fs.Exists(n.Path(name)) {
			return false
		}
	}
	return true
}

// EnsurePod creates the pod's cgroup where missing and writes its values
// (PodResources); kubelet: the pod container manager's EnsureExists,
// with its values kept up to date as a resize would.
func (n *Node) EnsurePod(p *corev1.Pod) error {
	if !n.cfg.PerQOS {
		return nil
	}
	return n.fs.Ensure(n.Parent(p), PodResources(p, n.cfg.PodPidsLimit))
}

// ResizePod writes r into the pod's cgroup where it exists (a resize;
// Looser of the old and new values first, then the new ones).
func (n *Node) ResizePod(p *corev1.Pod, r Resources) error {
	if !n.cfg.PerQOS || !n.fs.Exists(n.Parent(p)) {
		return nil
	}
	return n.fs.Set(n.Parent(p), r)
}

// PodCgroups are the pod cgroups on the host, by pod UID, as paths.
func (n *Node) PodCgroups() (map[types.UID]string, error) {
	out := map[types.UID]string{}
	if !n.cfg.PerQOS {
		return out, nil
	}
	var errs []error
	for _, parent := range []Name{n.Kubepods(), n.QoS(corev1.PodQOSBurstable), n.QoS(corev1.PodQOSBestEffort)} {
		dir := n.Path(parent)
		names, err := n.fs.Children(dir)
		errs = append(errs, err)
		for _, name := range names {
			if uid := podUID(name, n.cfg.Driver); uid != "" {
				out[types.UID(uid)] = path.Join(dir, name)
			}
		}
	}
	return out, errors.Join(errs...)
}

// RemovePod removes the pod's cgroup wherever it is (its QoS class may
// have changed since; kubelet: the pod container manager's Destroy,
// without killing what is left in it).
func (n *Node) RemovePod(uid types.UID) error {
	if !n.cfg.PerQOS {
		return nil
	}
	var errs []error
	for _, class := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
		errs = append(errs, n.fs.Remove(n.Path(n.QoS(class).Child(podPart(string(uid))))))
	}
	return errors.Join(errs...)
}
