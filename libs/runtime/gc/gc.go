// Package gc is the node's garbage collection on a container runtime, as
// the kubelet does it: dead containers and sandboxes (kubelet: container
// GC, every minute), unused images when the image filesystem fills
// (kubelet: image GC, every five minutes) and the rotation of running
// containers' logs (kubelet: the container log manager).
//
// The runtime does the work it alone can (which instance is dead, how a log
// is reopened); this package holds the policies, the image bookkeeping
// (when each image was first seen and last used) and the loops. Collection
// is node-wide: one Manager per node runs it, while Active says so (the pod
// worker replica that owns partition 0).
//
// Collector is what node-level reclaim (eviction) calls before it evicts
// pods.
package gc

import (
	"context"
	"time"
)

// Collector frees disk space on demand (kubelet: what the eviction
// manager's node-level reclaim calls before evicting pods).
type Collector interface {
	// DeleteUnusedImages removes every image no container uses, but the
	// sandbox image and images first seen less than the minimum age ago;
	// freed is the sum of their sizes.
	DeleteUnusedImages(ctx context.Context) (freed int64, err error)
	// DeleteAllUnusedContainers removes every dead container instance
	// but the newest of each container (which holds the container's
	// current state), and the dead sandboxes of the node's pods but the
	// newest of each.
	DeleteAllUnusedContainers(ctx context.Context) error
}

// ContainerPolicy is the dead container policy (kubelet:
// ContainerGCPolicy).
type ContainerPolicy struct {
	// MinAge: a dead instance created less than this long ago stays.
	MinAge time.Duration
	// MaxPerPodContainer is how many dead instances of each container of a
	// pod stay, besides its newest instance; negative: no limit.
	MaxPerPodContainer int
}

// ContainerRuntime removes dead containers and sandboxes.
type ContainerRuntime interface {
	// CollectContainers removes, of the node's live pods, the dead
	// instances of each container beyond the policy (all of them but the
	// newest instance with all), and dead sandboxes that are not a pod's
	// newest and hold no container. The pods no source wants are removed
	// whole by the pod workers (RemovePod), not here.
	CollectContainers(ctx context.Context, p ContainerPolicy, all bool) error
}

// LogPolicy is the container log rotation policy (kubelet:
// LogRotatePolicy).
type LogPolicy struct {
	// MaxSize is the size at which a running container's log is rotated.
	MaxSize int64
	// MaxFiles is how many files of a container's log are kept, the
	// live one included.
	MaxFiles int
	// Workers rotate logs of different containers at once.
	Workers int
}

// LogRotator rotates running containers' logs.
type LogRotator interface {
	RotateLogs(ctx context.Context, p LogPolicy) error
}

// Image is one image of the runtime.
type Image struct {
	// ID is the runtime's image ID, what a container's ImageID names.
	ID   string
	Tags []string
	Size int64
	// Pinned images are never removed (the sandbox image, images the
	// runtime pins).
	Pinned bool
}

// FsUsage is the state of the filesystem images live on.
type FsUsage struct {
	Capacity, Available int64
}

// ImageRuntime lists, uses and removes images.
type ImageRuntime interface {
	Images(ctx context.Context) ([]Image, error)
	// ImagesInUse are the IDs of the images containers (running or dead)
	// and sandboxes of the runtime are made from, whichever node made
	// them.
	ImagesInUse(ctx context.Context) (map[string]bool, error)
	RemoveImage(ctx context.Context, id string) error
	ImageFsUsage(ctx context.Context) (FsUsage, error)
}
