package config

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
)

// GC holds the node's garbage collection keys, the kubelet's: dead
// containers, container log rotation and unused images. They are
// node-wide keys without a stage's prefix, registered by the stage that
// runs the containers (podworkers).
type GC struct {
	// MinContainerTTL: a dead container created less than this long ago
	// stays.
	MinContainerTTL time.Duration
	// MaxDeadPerContainer dead instances of each container of a pod stay
	// besides its newest instance; negative: no limit.
	MaxDeadPerContainer int
	// ContainerPeriod is the interval of container GC passes.
	ContainerPeriod time.Duration

	// ContainerLogMaxSize is the size a running container's log is rotated
	// at, in bytes; ContainerLogMaxFiles how many files of it stay (the
	// live one included).
	ContainerLogMaxSize  int64
	ContainerLogMaxFiles int
	// ContainerLogMonitorInterval is the interval of log rotation passes;
	// ContainerLogMaxWorkers rotate logs at once.
	ContainerLogMonitorInterval time.Duration
	ContainerLogMaxWorkers      int

	// ImageGCHigh and ImageGCLow are percents of the image filesystem
	// used: above High unused images go until at most Low is used.
	ImageGCHigh, ImageGCLow int
	// ImageMinAge: an image first seen less than this long ago stays;
	// ImageMaxAge > 0: an image unused this long goes whatever the usage.
	ImageMinAge, ImageMaxAge time.Duration
	// ImagePeriod is the interval of image GC passes.
	ImagePeriod time.Duration

	logMaxSize string
}

// RegisterFlags adds the garbage collection keys to fs.
func (g *GC) RegisterFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&g.MinContainerTTL, "minimum-container-ttl-duration", 0, "runtime cri: a dead container created less than this long ago is not removed by container GC (the kubelet's --minimum-container-ttl-duration)")
	fs.IntVar(&g.MaxDeadPerContainer, "maximum-dead-containers-per-container", 1, "runtime cri: dead instances of each container of a pod kept besides its newest instance, the newest ones (for kubectl logs --previous; the kubelet's --maximum-dead-containers-per-container); negative: no limit")
	fs.DurationVar(&g.ContainerPeriod, "container-gc-period", time.Minute, "runtime cri: interval of container garbage collection (the kubelet's is a minute)")
	fs.StringVar(&g.logMaxSize, "container-log-max-size", "10Mi", "runtime cri: a running container's log is rotated once it is this large, a quantity (10Mi, 1Gi; the kubelet's containerLogMaxSize)")
	fs.IntVar(&g.ContainerLogMaxFiles, "container-log-max-files", 5, "runtime cri: log files kept per container, the live one included, at least 2 (the kubelet's containerLogMaxFiles); rotated files but the newest are gzipped")
	fs.DurationVar(&g.ContainerLogMonitorInterval, "container-log-monitor-interval", 10*time.Second, "runtime cri: interval at which containers' logs are checked for rotation, at least 3s (the kubelet's containerLogMonitorInterval)")
	fs.IntVar(&g.ContainerLogMaxWorkers, "container-log-max-workers", 1, "runtime cri: containers' logs rotated at once, at least 1 (the kubelet's containerLogMaxWorkers)")
	fs.IntVar(&g.ImageGCHigh, "image-gc-high-threshold", 85, "runtime cri: percent of the image filesystem used above which image GC removes unused images, 0-100; 100: never (the kubelet's --image-gc-high-threshold)")
	fs.IntVar(&g.ImageGCLow, "image-gc-low-threshold", 80, "runtime cri: percent of the image filesystem used image GC frees space down to, 0-100, at most image-gc-high-threshold (the kubelet's --image-gc-low-threshold)")
	fs.DurationVar(&g.ImageMinAge, "image-minimum-gc-age", 2*time.Minute, "runtime cri: an image first seen less than this long ago is not removed (the kubelet's --image-minimum-gc-age)")
	fs.DurationVar(&g.ImageMaxAge, "image-maximum-gc-age", 0, "runtime cri: an image unused this long is removed whatever the disk usage; 0: off (the kubelet's imageMaximumGCAge)")
	fs.DurationVar(&g.ImagePeriod, "image-gc-period", 5*time.Minute, "runtime cri: interval of image garbage collection (the kubelet's is five minutes)")
}

// Validate parses container-log-max-size and checks the values as the
// kubelet checks its own, naming the key at fault.
func (g *GC) Validate() error {
	q, err := resource.ParseQuantity(g.logMaxSize)
	if err != nil {
		return fmt.Errorf("invalid value %q for container-log-max-size: %w", g.logMaxSize, err)
	}
	if g.ContainerLogMaxSize = q.Value(); g.ContainerLogMaxSize <= 0 {
		return fmt.Errorf("invalid value %q for container-log-max-size: must be positive", g.logMaxSize)
	}
	switch {
	case g.ContainerLogMaxFiles < 2:
		return fmt.Errorf("invalid value %d for container-log-max-files: must be at least 2", g.ContainerLogMaxFiles)
	case g.ContainerLogMonitorInterval < 3*time.Second:
		return fmt.Errorf("invalid value %v for container-log-monitor-interval: must be at least 3s", g.ContainerLogMonitorInterval)
	case g.ContainerLogMaxWorkers < 1:
		return fmt.Errorf("invalid value %d for container-log-max-workers: must be at least 1", g.ContainerLogMaxWorkers)
	case g.ImageGCHigh < 0 || g.ImageGCHigh > 100:
		return fmt.Errorf("invalid value %d for image-gc-high-threshold: must be 0-100", g.ImageGCHigh)
	case g.ImageGCLow < 0 || g.ImageGCLow > 100:
		return fmt.Errorf("invalid value %d for image-gc-low-threshold: must be 0-100", g.ImageGCLow)
	case g.ImageGCLow > g.ImageGCHigh:
		return fmt.Errorf("invalid value %d for image-gc-low-threshold: must be at most image-gc-high-threshold (%d)", g.ImageGCLow, g.ImageGCHigh)
	case g.MinContainerTTL < 0:
		return fmt.Errorf("invalid value %v for minimum-container-ttl-duration: negative", g.MinContainerTTL)
	case g.ImageMinAge < 0:
		return fmt.Errorf("invalid value %v for image-minimum-gc-age: negative", g.ImageMinAge)
	case g.ImageMaxAge != 0 && g.ImageMaxAge <= g.ImageMinAge:
		return fmt.Errorf("invalid value %v for image-maximum-gc-age: must be 0 (off) or more than image-minimum-gc-age (%v)", g.ImageMaxAge, g.ImageMinAge)
	case g.ContainerPeriod <= 0:
		return fmt.Errorf("invalid value %v for container-gc-period: must be positive", g.ContainerPeriod)
	case g.ImagePeriod <= 0:
		return fmt.Errorf("invalid value %v for image-gc-period: must be positive", g.ImagePeriod)
	}
	return nil
}
