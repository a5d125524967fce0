// Package service is the podworkers stage's runner: it builds the runtime,
// the pod worker controller and the partition leases, and wires them to the
// bus (pod updates and probe results in; pod status, agent readiness and
// runtime requests out).
package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/messaging"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/containerenv"
	"github.com/splitlet/splitlet/libs/runtime/cri"
	"github.com/splitlet/splitlet/libs/runtime/gc"
	"github.com/splitlet/splitlet/libs/runtime/process"
	"github.com/splitlet/splitlet/libs/runtime/sim"
	"github.com/splitlet/splitlet/libs/tracing"
	"github.com/splitlet/splitlet/services/podworkers/internal/controller"
	"github.com/splitlet/splitlet/services/podworkers/internal/devices"
	"github.com/splitlet/splitlet/services/podworkers/internal/dns"
	"github.com/splitlet/splitlet/services/podworkers/internal/ownership"
	"github.com/splitlet/splitlet/services/podworkers/internal/podsync"
	"github.com/splitlet/splitlet/services/podworkers/internal/podworker"
	"github.com/splitlet/splitlet/services/podworkers/internal/statuspub"
	"github.com/splitlet/splitlet/services/podworkers/internal/volumes"
)

// Config holds the podworkers keys.
type Config struct {
	ReplicaID            string
	ResyncInterval       time.Duration
	BackOffPeriod        time.Duration
	ContainerBackOff     time.Duration
	ContainerBackOffMax  time.Duration
	Housekeeping         time.Duration
	FallbackAllocatable  string
	LeaseTTL             time.Duration
	LeaseRefresh         time.Duration
	StatusWindow         time.Duration
	LocalStorageInterval time.Duration
	SimStartLatency      time.Duration
	SimMaxStarts         int
	HostIP               string
	ReadinessInterval    time.Duration
	ProcessRecordsDir    string
	ProcessUIDRange      string
	ProcessUIDDir        string
	ProcessAllowRoot     bool
	ContainerEvents      config.Switch
	Volumes              config.Switch
	RootDir              string
	SeccompProfileRoot   string
	SeccompDefault       bool
	AllowedUnsafeSysctls []string
	SerializeImagePulls  bool
	MaxParallelPulls     int
	// CredentialProviderConfig and CredentialProviderBinDir: the image
	// credential provider plugins (cri runtime).
	CredentialProviderConfig string
	CredentialProviderBinDir string
	// DNS are the node's cluster DNS keys (cluster-dns, cluster-domain,
	// resolv-conf), which the pod workers apply (shared with nodehb).
	DNS config.DNS
	// GC are the node's garbage collection keys (dead containers, log
	// rotation, images), applied by the replica that owns partition 0.
	GC config.GC
	// Cgroups are the node's cgroup keys (cgroups-per-qos, cgroup-driver,
	// cgroup-root, pod-pids-limit, enforce-node-allocatable), which the
	// cri runtime applies (shared with nodehb); CgroupReconcile how often
	// the node-wide cgroup housekeeping runs.
	Cgroups         config.Cgroups
	CgroupReconcile time.Duration
	// fallback is FallbackAllocatable parsed, set by Validate.
	fallback corev1.ResourceList
	// hostIP is HostIP parsed, set by Validate.
	hostIP netip.Addr
	// processUIDs is ProcessUIDRange parsed, set by Validate.
	processUIDs process.UserRange
}

// RegisterFlags adds the podworkers keys ("podworkers.<key>") to fs.
func (c *Config) RegisterFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.ReplicaID, "podworkers.replica-id", DefaultReplicaID(), "this replica's name in the partition leases, stable across restarts so that a restarted replica resumes its own leases at once (letters, digits, '-', '_', '.'); default: $POD_NAME, else the host name; a replica that finds its id held by another live replica takes the id with a random suffix; empty: random")
	fs.DurationVar(&c.ResyncInterval, "podworkers.resync-interval", podworker.DefaultResyncInterval, "interval between syncs of a healthy pod (jittered)")
	fs.DurationVar(&c.BackOffPeriod, "podworkers.backoff-period", podworker.DefaultBackOffPeriod, "delay before a failed pod sync is retried (jittered)")
	fs.DurationVar(&c.ContainerBackOff, "podworkers.container-backoff", podsync.DefaultBackOffBase, "first crash-loop back-off of a restarting container; it doubles on each restart")
	fs.DurationVar(&c.ContainerBackOffMax, "podworkers.container-backoff-max", podsync.DefaultBackOffMax, "longest crash-loop back-off; it resets after twice this long without a restart")
	fs.DurationVar(&c.Housekeeping, "podworkers.housekeeping-interval", controller.DefaultHousekeeping, "interval of housekeeping (forgetting workers of pods no longer desired)")
	fs.StringVar(&c.FallbackAllocatable, "podworkers.fallback-allocatable", "cpu=4,memory=8Gi,ephemeral-storage=100Gi,pods=110", "allocatable resources used for admission until the Node object exists")
	fs.DurationVar(&c.LeaseTTL, "podworkers.lease-ttl", ownership.DefaultTTL, "a replica silent this long loses its partitions")
	fs.DurationVar(&c.LeaseRefresh, "podworkers.lease-refresh", ownership.DefaultRefresh, "how often a replica heartbeats its partition leases")
	fs.DurationVar(&c.StatusWindow, "podworkers.status-window", statuspub.DefaultWindow, "changes of pod status gathered this long go out as one message per pod")
	fs.DurationVar(&c.LocalStorageInterval, "podworkers.local-storage-check-interval", 10*time.Second, "how often each pod's emptyDir volumes are measured against their sizeLimit; a pod over it is evicted (the kubelet's eviction manager round)")
	fs.DurationVar(&c.SimStartLatency, "podworkers.sim-start-latency", 0, "start latency of a simulated container (runtime sim)")
	fs.IntVar(&c.SimMaxStarts, "podworkers.sim-max-concurrent-starts", 0, "containers this replica starts at once (runtime sim); 0: no limit")
	fs.StringVar(&c.HostIP, "podworkers.host-ip", "127.0.0.1", "host IP reported in pod status")
	fs.DurationVar(&c.ReadinessInterval, "podworkers.readiness-interval", 10*time.Second, "heartbeat interval of AgentReadiness on state.agent")
	fs.StringVar(&c.ProcessUIDRange, "podworkers.process-uid-range", process.DefaultUserRange.String(), "runtime process, when podworkers runs as root: the uids (and gids of the same numbers) pods run as, first-last; each pod gets one of its own, so that pods cannot read each other's files and environment nor the agent's credentials; a container asking for another uid (runAsUser) is refused")
	fs.StringVar(&c.ProcessUIDDir, "podworkers.process-uid-dir", "", "runtime process, when podworkers runs as root: where the pod workers of this host claim their pods' uids, one file per uid (shared by every node and replica of the host, so that no two pods share a uid; mode 0700, this user's); default <tmp>/splitlet-process-uids")
	fs.BoolVar(&c.ProcessAllowRoot, "podworkers.process-allow-root", false, "runtime process, when podworkers runs as root: run containers that ask for uid or gid 0 (runAsUser, runAsGroup) as root, which reads the agent's credentials and every pod's files; off: such a container is refused with CreateContainerConfigError")
	c.ContainerEvents, c.Volumes = config.SwitchAuto, config.SwitchAuto
	fs.Var(&c.ContainerEvents, "podworkers.container-events", "record the kubelet's container Events on pods (Created, Started, Failed, BackOff, Killing): on, off, or auto (on, but for the sim runtime, which is for scale tests: like kwok it records none, sparing the API server two writes a pod)")
	fs.Var(&c.Volumes, "podworkers.volumes", "set up pods' volumes (emptyDir, hostPath, configMap, secret, downwardAPI, projected with service account tokens) and mount them into containers: on, off, or auto (on, but for the sim runtime, which runs nothing that could read them)")
	fs.StringVar(&c.RootDir, "podworkers.root-dir", "", "where pods' volumes live, as <root-dir>/pods/<uid>/volumes/ (the kubelet's --root-dir layout); shared by the replicas of a node, and for the cri runtime the same path on the host; default <data-dir>/kubelet")
	fs.StringVar(&c.SeccompProfileRoot, "podworkers.seccomp-profile-root", "", "runtime cri: the directory of Localhost seccomp profiles (a pod's seccompProfile localhostProfile is a path under it; the kubelet's <root-dir>/seccomp), a path of the host containerd runs on; default <root-dir>/seccomp")
	fs.BoolVar(&c.SeccompDefault, "podworkers.seccomp-default", false, "runtime cri: run a container whose securityContext and pod name no seccomp profile with the runtime's default profile (RuntimeDefault) instead of unconfined (the kubelet's seccompDefault); the process runtime applies no seccomp profile and refuses to start with it on")
	fs.StringSliceVar(&c.AllowedUnsafeSysctls, "podworkers.allowed-unsafe-sysctls", nil, "unsafe sysctls pods may set besides the safe ones (the kubelet's --allowed-unsafe-sysctls): names or prefixes ending in '*', of the ipc or net namespace only (kernel.msg*, net.core.somaxconn); a pod setting any other is rejected with SysctlForbidden")
	fs.BoolVar(&c.SerializeImagePulls, "podworkers.serialize-image-pulls", true, "runtime cri: pull one image at a time (the kubelet's serializeImagePulls); off: pulls run in parallel, up to podworkers.max-parallel-image-pulls (the other runtimes pull nothing)")
	fs.IntVar(&c.MaxParallelPulls, "podworkers.max-parallel-image-pulls", 0, "runtime cri, with podworkers.serialize-image-pulls off: the most image pulls at once (the kubelet's maxParallelImagePulls); 0: no limit")
	fs.StringVar(&c.CredentialProviderConfig, "podworkers.image-credential-provider-config", "", "runtime cri: the kubelet's CredentialProviderConfig file (kubelet.config.k8s.io/v1, YAML or JSON) naming the exec plugins that give registry credentials for the images they match (the kubelet's --image-credential-provider-config); needs podworkers.image-credential-provider-bin-dir; tokenAttributes is refused")
	fs.StringVar(&c.CredentialProviderBinDir, "podworkers.image-credential-provider-bin-dir", "", "runtime cri: the directory of the credential provider plugins, each named as its provider (the kubelet's --image-credential-provider-bin-dir)")
	c.DNS.RegisterFlags(fs)
	c.GC.RegisterFlags(fs)
	c.Cgroups.RegisterFlags(fs)
	fs.DurationVar(&c.CgroupReconcile, "podworkers.cgroup-reconcile-interval", DefaultCgroupReconcile, "runtime cri with cgroups-per-qos: how often the replica that owns partition 0 makes the QoS cgroups again where missing, sizes them from the node's pods and removes the cgroups of pods that have no sandbox (found so twice in a row)")
	fs.StringVar(&c.ProcessRecordsDir, "podworkers.process-records-dir", "", "runtime process: where the replicas of this node on this host write down their containers' process groups, so that what a replica killed with SIGKILL leaves is killed by the next one (mode 0700, this user's); default <tmp>/splitlet-process-groups/<node>")
}

// Validate checks the values and names the key at fault.
func (c *Config) Validate() error {
	for key, d := range map[string]time.Duration{
		"podworkers.resync-interval": c.ResyncInterval, "podworkers.backoff-period": c.BackOffPeriod,
		"podworkers.container-backoff": c.ContainerBackOff, "podworkers.container-backoff-max": c.ContainerBackOffMax,
		"podworkers.housekeeping-interval": c.Housekeeping, "podworkers.lease-ttl": c.LeaseTTL,
		"podworkers.lease-refresh": c.LeaseRefresh, "podworkers.status-window": c.StatusWindow,
		"podworkers.readiness-interval": c.ReadinessInterval, "podworkers.local-storage-check-interval": c.LocalStorageInterval,
		"podworkers.cgroup-reconcile-interval": c.CgroupReconcile,
	} {
		if d <= 0 {
			return fmt.Errorf("invalid value %v for %s: must be positive", d, key)
		}
	}
	uids, err := process.ParseUserRange(c.ProcessUIDRange)
	if err != nil {
		return fmt.Errorf("invalid value %q for podworkers.process-uid-range: %w", c.ProcessUIDRange, err)
	}
	c.processUIDs = uids
	if c.SimMaxStarts < 0 {
		return fmt.Errorf("invalid value %d for podworkers.sim-max-concurrent-starts: negative", c.SimMaxStarts)
	}
	if c.MaxParallelPulls < 0 {
		return fmt.Errorf("invalid value %d for podworkers.max-parallel-image-pulls: negative", c.MaxParallelPulls)
	}
	if c.SerializeImagePulls && c.MaxParallelPulls > 1 {
		return fmt.Errorf("invalid value %d for podworkers.max-parallel-image-pulls: cannot be larger than 1 unless podworkers.serialize-image-pulls is off", c.MaxParallelPulls)
	}
	if (c.CredentialProviderConfig == "") != (c.CredentialProviderBinDir == "") {
		return errors.New("podworkers.image-credential-provider-config and podworkers.image-credential-provider-bin-dir go together: set both or neither")
	}
	if c.SimStartLatency < 0 {
		return fmt.Errorf("invalid value %v for podworkers.sim-start-latency: negative", c.SimStartLatency)
	}
	if c.LeaseRefresh*ownership.MinTTLRefreshes > c.LeaseTTL {
		return fmt.Errorf("invalid value %v for podworkers.lease-ttl: must be at least %d times podworkers.lease-refresh (%v)", c.LeaseTTL, ownership.MinTTLRefreshes, c.LeaseRefresh)
	}
	if c.ReplicaID != "" {
		if err := ownership.ValidID(c.ReplicaID); err != nil {
			return fmt.Errorf("invalid value for podworkers.replica-id: %w", err)
		}
	}
	hostIP, err := parseHostIP(c.HostIP)
	if err != nil {
		return fmt.Errorf("invalid value %q for podworkers.host-ip: %w", c.HostIP, err)
	}
	c.hostIP = hostIP
	fallback, err := kube.ParseResourceList(c.FallbackAllocatable)
	if err != nil {
		return fmt.Errorf("invalid value for podworkers.fallback-allocatable: %w", err)
	}
	c.fallback = fallback
	if _, err := kube.NewSysctlAllowlist(nil, c.AllowedUnsafeSysctls); err != nil {
		return fmt.Errorf("invalid value for podworkers.allowed-unsafe-sysctls: %w", err)
	}
	if err := c.GC.Validate(); err != nil {
		return err
	}
	return c.DNS.Validate()
}

// parseHostIP reads the host IP reported in pod status: one IPv4 or IPv6
// address that a node can have (not unspecified, no zone).
func parseHostIP(s string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return netip.Addr{}, errors.New("not an IP address")
	case ip.IsUnspecified():
		return netip.Addr{}, errors.New("an unspecified address cannot be a node's")
	case ip.Zone() != "":
		return netip.Addr{}, errors.New("an address with a zone cannot be a pod's hostIP")
	}
	return ip, nil
}

// DefaultReplicaID is the replica id a replica takes unless told: the
// POD_NAME environment variable (a Kubernetes pod's name, stable across
// container restarts), else the host name, with any character a lease key
// cannot hold replaced by '-'.
func DefaultReplicaID() string {
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	b := []byte(strings.Trim(name, "."))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '-'
		}
	}
	id := strings.ReplaceAll(string(b), "..", ".")
	if ownership.ValidID(id) != nil {
		return ""
	}
	return id
}

// Runner is the running stage.
type Runner struct {
	cfg    *Config
	common *config.Common
	log    *zap.Logger
	conn   *messaging.Conn
	// js is the stage's JetStream handle, which lists its consumers.
	js jetstream.JetStream
	cs kubernetes.Interface
	// Runtime, if set before Start, replaces the one --runtime names (tests).
	Runtime runtime.Runtime

	// id is guarded by mu: the id asked for until run claimed one (ClaimID).
	id       string
	baseLog  *zap.Logger
	subjects bus.Subjects
	loop     app.Background
	ready    chan struct{}

	mu    sync.Mutex
	rt    runtime.Runtime
	ctrl  *controller.Controller
	owner *ownership.Manager
	pub   *bus.Publisher
	sink  *statuspub.Publisher
	gc    *gc.Manager
	// vols are the pods' volumes (nil: none set up), measured for stats.
	vols  *volumes.Manager
	parts map[int]*partition
	// active partitions: owned and not being released; only their pods'
	// statuses are published.
	active map[int]bool
	// adopted partitions: active, and their desired pods handed to the
	// controller; only there may a pod the runtime holds be an orphan.
	adopted map[int]bool
	// gates[p] orders message handling against the release of p: a
	// message is applied only while p is active, never after its pods were
	// handed over.
	gates   []sync.RWMutex
	kick    chan struct{}
	metrics *metrics
	// busMetrics counts the stage's consumers, request handler panics and
	// new pods' time in the stage.
	busMetrics *bus.Metrics
	// tracer and traces: spans of the pods whose trace came on the bus
	// (nil with tracing off).
	tracer trace.Tracer
	traces *tracing.Pods
	// devices asks the node's device manager (set by run; nil in a
	// shadow, which allocates nothing).
	devices *devices.Client
	// nodePods is the admission view of the node's pods (set by run).
	nodePods *nodePodsView
	// snapshots puts SETs sent in parts back together.
	snapshots *bus.Snapshots
	// pressure is the node's pressure conditions (nodehb's NodePressure).
	pressure pressureView
	// allocatable is the Node's allocatable, kubepods' size (set by run).
	allocatable nodeAllocatable
}

// tracerName names the stage's spans' instrumentation scope.
const tracerName = "github.com/splitlet/splitlet/services/podworkers"

// partition is what runs for one owned partition.
type partition struct {
	// updates follows the partition's pod updates.
	updates *bus.Follower
	stops   []func()
	subs    []*nats.Subscription
	cancel  context.CancelFunc
	reqs    sync.WaitGroup
}

// New builds the stage.
func New(cfg *Config, common *config.Common, log *zap.Logger, conn *messaging.Conn, js jetstream.JetStream, cs kubernetes.Interface, reg prometheus.Registerer, bm *bus.Metrics, tp *tracing.Provider) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.checkCgroups(common.Runtime); err != nil {
		return nil, err
	}
	id := cfg.ReplicaID
	if id == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		id = hex.EncodeToString(b)
	}
	r := &Runner{
		cfg: cfg, common: common, conn: conn, js: js, cs: cs, id: id,
		log:      log.Named("podworkers").With(zap.String("replica", id)),
		baseLog:  log.Named("podworkers"),
		subjects: bus.For(common.NodeName),
		ready:    make(chan struct{}),
		parts:    map[int]*partition{},
		active:   map[int]bool{},
		adopted:  map[int]bool{},
		gates:    make([]sync.RWMutex, common.Partitions),
		kick:     make(chan struct{}, 1),

		snapshots:  bus.NewSnapshots(),
		busMetrics: bm,
	}
	if tp.Enabled() {
		r.tracer, r.traces = tp.Tracer(tracerName), tracing.NewPods()
	}
	m, err := newMetrics(reg, r)
	if err != nil {
		return nil, fmt.Errorf("podworkers metrics: %w", err)
	}
	r.metrics = m
	return r, nil
}

// ID is the replica's name.
func (r *Runner) ID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.id
}

// Source is the replica's source name on the bus.
// A shadow's is shadow-podworkers-<id>.
func (r *Runner) Source() string {
	if r.common.Shadow {
		return bus.ShadowIdentity("podworkers-" + r.ID())
	}
	return "podworkers-" + r.ID()
}

// Start returns at once; the stage's loops run in the background.
func (r *Runner) Start(context.Context) error {
	r.loop.Start(r.log, r.run)
	return nil
}

// Stop hands the partitions over, stops the workers and waits.
func (r *Runner) Stop(ctx context.Context) error {
	return r.loop.Stop(ctx)
}

// Ready is the readiness check: the replica runs and holds its leases.
func (r *Runner) Ready(context.Context) error {
	select {
	case <-r.ready:
		return nil
	default:
		return errors.New("podworkers: starting")
	}
}

// Controller exposes the pod worker controller (tests, embedding).
func (r *Runner) Controller() *controller.Controller {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctrl
}

// OwnedPartitions lists the partitions this replica owns.
func (r *Runner) OwnedPartitions() []int {
	r.mu.Lock()
	o := r.owner
	r.mu.Unlock()
	if o == nil {
		return nil
	}
	return o.OwnedList()
}

func (r *Runner) isActive(p int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active[p]
}

func (r *Runner) setActive(p int, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.active[p] = true
	} else {
		delete(r.active, p)
		delete(r.adopted, p)
	}
}

// setAdopted marks an active partition whose desired pods the controller
// now holds.
func (r *Runner) setAdopted(p int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.active[p] {
		r.adopted[p] = true
	}
}

// isAdopted says whether the pods the runtime holds in partition p and the
// controller does not are unwanted: p is active and its desired pods were
// handed over. Before that (a takeover replaying the partition) every pod
// of p is in the runtime and none in the controller yet.
func (r *Runner) isAdopted(p int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.adopted[p]
}

func (r *Runner) newRuntime(ctx context.Context) (runtime.Runtime, error) {
	if r.Runtime != nil {
		return r.Runtime, nil
	}
	if r.cfg.CredentialProviderConfig != "" && r.common.Runtime != config.RuntimeCRI {
		return nil, fmt.Errorf("podworkers.image-credential-provider-config is set, but the %s runtime pulls no images (use the cri runtime, or unset it)", r.common.Runtime)
	}
	switch r.common.Runtime {
	case config.RuntimeCRI:
		layout, err := r.newCgroups()
		if err != nil {
			return nil, err
		}
		if err := r.shareRootDir(); err != nil {
			return nil, err
		}
		var providers *cri.CredentialProviders
		if r.cfg.CredentialProviderConfig != "" {
			var err error
			if providers, err = cri.LoadCredentialProviders(r.cfg.CredentialProviderConfig, r.cfg.CredentialProviderBinDir, r.log.Named("cri")); err != nil {
				return nil, err
			}
		}
		return cri.New(ctx, cri.WithEndpoint(r.common.CRIEndpoint), cri.WithHostIP(r.cfg.hostIP.String()), cri.WithLogger(r.log.Named("cri")),
			cri.WithNode(r.common.NodeName), cri.WithClusterDomain(r.cfg.DNS.ClusterDomain),
			cri.WithSeccompProfileRoot(r.seccompRoot()), cri.WithSeccompDefault(r.cfg.SeccompDefault),
			cri.WithContainerPolicy(r.cfg.containerPolicy()), cri.WithCgroups(layout),
			cri.WithImagePulls(r.cfg.SerializeImagePulls, r.cfg.MaxParallelPulls),
			cri.WithPullRecordsDir(filepath.Join(r.rootDir(), "image_manager")), cri.WithCredentialProviders(providers))
	case config.RuntimeProcess:
		// the containers of a previous incarnation died with it: their
		// files are left over.
		root := filepath.Join(r.common.DataDir, "podworkers-"+r.ID())
		if err := os.RemoveAll(root); err != nil {
			return nil, fmt.Errorf("clearing %s: %w", root, err)
		}
		records := r.cfg.ProcessRecordsDir
		if records == "" {
			records = filepath.Join(os.TempDir(), "splitlet-process-groups", r.common.NodeName)
		}
		opts := []process.Option{process.WithRootDir(root), process.WithHostIP(r.cfg.hostIP.String()), process.WithLogger(r.log.Named("process")),
			process.WithRecordDir(records)}
		if os.Geteuid() == 0 {
			opts = append(opts, r.cfg.podUsers()...)
			if err := r.openWayForPods(root); err != nil {
				return nil, err
			}
		}
		rt, err := process.New(opts...)
		if err != nil {
			return nil, fmt.Errorf("%w (keys podworkers.process-records-dir, podworkers.process-uid-dir)", err)
		}
		return rt, nil
	default:
		r.logSimCgroups()
		opts := []sim.Option{sim.WithStartLatency(r.cfg.SimStartLatency)}
		if r.cfg.SimMaxStarts > 0 {
			opts = append(opts, sim.WithMaxConcurrentStarts(r.cfg.SimMaxStarts))
		}
		return sim.New(opts...), nil
	}
}

// run is the replica's life: claim an id, open the runtime, build the pod
// workers and their inputs, then serve until ctx ends.
func (r *Runner) run(ctx context.Context) error {
	if err := r.conn.StreamsReady(ctx); err != nil {
		return err
	}
	if r.common.Shadow {
		return r.runShadow(ctx)
	}
	node := r.common.NodeName
	kv, id, stopClaim, err := r.claimReplicaID(ctx)
	if err != nil {
		return err
	}
	claimHeld := true
	defer func() {
		if claimHeld {
			stopClaim()
		}
	}()
	rt, err := r.openRuntime(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = rt.Close() }()
	allocatable, thisNode, stopNode := r.watchNode(ctx)
	defer stopNode()
	r.devices = r.deviceClient(rt, thisNode)
	nodePods, err := r.watchNodePods(ctx)
	if err != nil {
		return err
	}
	defer nodePods.shutdown()

	recorder, stopRecorder := kube.NewRecorder(r.cs, node)
	defer stopRecorder()
	syncOpts, vols, stopSync := r.syncOptions(ctx, rt, recorder, allocatable, true)
	defer stopSync()
	pub := bus.NewPublisher(r.conn.NC, r.js, node, r.Source(), r.common.BusEncodingOption())

	var owned atomic.Pointer[ownership.Manager] // for admission, read before owner is set
	sink := statuspub.New(pub, r.common.Partitions, r.isActive, r.log.Named("status"))
	ctrl, err := r.newController(rt, sink, recorder, allocatable, thisNode, func(except types.UID) []*corev1.Pod {
		return nodePods.otherPods(owned.Load(), except)
	}, syncOpts)
	if err != nil {
		return err
	}
	defer owned.Store(nil)
	owner := r.newOwnership(kv, id)
	owned.Store(owner)

	r.mu.Lock()
	r.rt, r.ctrl, r.owner, r.pub, r.sink, r.vols = rt, ctrl, owner, pub, sink, vols
	r.mu.Unlock()

	return r.serve(ctx, rt, ctrl, sink, vols, owner, pub, func() {
		stopClaim()
		claimHeld = false
	})
}

// claimReplicaID opens the node's ownership bucket and claims this replica's
// id in it; a live replica with the same id (replicas sharing a host name)
// makes this one take another. stop ends the claim's heartbeat.
func (r *Runner) claimReplicaID(ctx context.Context) (kv jetstream.KeyValue, id string, stop func(), err error) {
	kv, err = ownership.CreateBucket(ctx, r.js, bus.NodeToken(r.common.NodeName), r.common.NATSReplicas)
	if err != nil {
		return nil, "", nil, err
	}
	id, stop, err = ownership.ClaimID(ctx, kv, r.ID(), r.cfg.LeaseRefresh, r.cfg.LeaseTTL, r.log)
	if err != nil {
		return nil, "", nil, err
	}
	if id != r.ID() {
		r.mu.Lock()
		r.id = id
		r.mu.Unlock()
		r.log = r.baseLog.With(zap.String("replica", id))
	}
	return kv, id, stop, nil
}

// openRuntime connects the configured container runtime and refuses one the
// security checks reject (closing it again).
func (r *Runner) openRuntime(ctx context.Context) (runtime.Runtime, error) {
	rt, err := r.newRuntime(ctx)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w", r.common.Runtime, err)
	}
	if err := r.checkSecurity(rt); err != nil {
		_ = rt.Close()
		return nil, err
	}
	return rt, nil
}

// watchNodePods starts the informer over the node's pods (admission sees the
// pods of partitions this replica does not own) and publishes it on r.
func (r *Runner) watchNodePods(ctx context.Context) (*nodePodsView, error) {
	nodePods, err := newNodePodsView(ctx, r.cs, r.common.NodeName, r.common.Partitions, r.log)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.nodePods = nodePods
	r.mu.Unlock()
	return nodePods, nil
}

// newOwnership builds the partition ownership manager for replica id; a
// change of the owned set kicks the readiness loop.
func (r *Runner) newOwnership(kv jetstream.KeyValue, id string) *ownership.Manager {
	return ownership.New(ownership.Options{
		KV: kv, ID: id, Partitions: r.common.Partitions, Refresh: r.cfg.LeaseRefresh, TTL: r.cfg.LeaseTTL,
		Log: r.log.Named("ownership"),
		Hooks: ownership.Hooks{
			Acquire: r.acquire,
			Release: r.release,
			Changed: func() {
				select {
				case r.kick <- struct{}{}:
				default:
				}
			},
		},
	})
}

// serve runs the workers, status sink, inputs, GC, ownership and readiness
// until ctx ends, then hands partitions over before stopping the workers and
// flushing the last statuses. releaseClaim hands the id's heartbeat to owner.
func (r *Runner) serve(ctx context.Context, rt runtime.Runtime, ctrl *controller.Controller, sink *statuspub.Publisher,
	vols *volumes.Manager, owner *ownership.Manager, pub *bus.Publisher, releaseClaim func()) error {
	var wg sync.WaitGroup
	ctrlCtx, stopCtrl := context.WithCancel(context.Background())
	defer stopCtrl()
	wg.Add(1)
	go func() { defer wg.Done(); ctrl.Run(ctrlCtx) }()
	if vols != nil {
		wg.Add(1)
		go func() { defer wg.Done(); r.localStorageLoop(ctrlCtx, ctrl, sink, vols, rt) }()
	}
	sinkCtx, stopSink := context.WithCancel(context.Background())
	defer stopSink()
	var sinkWG sync.WaitGroup
	sinkWG.Add(1)
	go func() { defer sinkWG.Done(); sink.Run(sinkCtx) }()

	stopInputs, err := r.watchInputs(ctx, ctrl)
	if err != nil {
		return err
	}
	defer stopInputs()

	gcDone := r.runGC(ctx, rt)
	ownerCtx, stopOwner := context.WithCancel(context.Background())
	ownerDone := make(chan struct{})
	go func() { defer close(ownerDone); owner.Run(ownerCtx) }()
	// the manager heartbeats the replica's key from its first round.
	releaseClaim()
	readyDone := make(chan struct{})
	go func() { defer close(readyDone); r.readinessLoop(ctx, owner, pub) }()
	cgroupsDone := make(chan struct{})
	go func() {
		defer close(cgroupsDone)
		r.cgroupLoop(ctx, rt, func() bool { return r.isActive(cgroupReconcilePartition) })
	}()
	defer func() { <-cgroupsDone }()
	close(r.ready)
	r.log.Info("pod workers running", zap.String("runtime", rt.Type()), zap.Int("partitions", r.common.Partitions))

	<-ctx.Done()
	<-gcDone
	// hand the partitions over first (consumers drained, pods stopped),
	// then stop the workers and flush the last statuses.
	stopOwner()
	<-ownerDone
	<-readyDone
	r.lastWord(owner, pub)
	stopCtrl()
	wg.Wait()
	stopSink()
	sinkWG.Wait()
	return nil
}

// watchNode follows the Node object (an informer on this one node): its
// allocatable for admission (the fallback until it has one), and the Node
// itself for the node predicates. An API server that does not answer only
// delays the start (at most 10 s).
func (r *Runner) watchNode(ctx context.Context) (allocatable func() corev1.ResourceList, thisNode func() *corev1.Node, stop func()) {
	node := r.common.NodeName
	fallback := r.cfg.fallback
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(r.cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
	}))
	nodeLister := nodeFactory.Core().V1().Nodes().Lister()
	nodeFactory.Start(ctx.Done())
	syncCtx, cancelSync := context.WithTimeout(ctx, 10*time.Second)
	nodeFactory.WaitForCacheSync(syncCtx.Done())
	cancelSync()
	allocatable = func() corev1.ResourceList {
		if n, err := nodeLister.Get(node); err == nil && len(n.Status.Allocatable) > 0 {
			return n.Status.Allocatable
		}
		return fallback
	}
	nodeAlloc := func() corev1.ResourceList {
		if n, err := nodeLister.Get(node); err == nil && len(n.Status.Allocatable) > 0 {
			return n.Status.Allocatable
		}
		return nil
	}
	r.allocatable.f.Store(&nodeAlloc)
	thisNode = func() *corev1.Node {
		if n, err := nodeLister.Get(node); err == nil {
			return n
		}
		return nil
	}
	return allocatable, thisNode, nodeFactory.Shutdown
}

// syncOptions are the pod syncer's options for runtime rt: back-off, the
// Events (through recorder, unless podworkers.container-events turns them
// off), DNS, pull secrets and, with setUp and podworkers.volumes on, the
// volume manager (returned, for the local storage checks). stop ends the
// informers they started.
func (r *Runner) syncOptions(ctx context.Context, rt runtime.Runtime, recorder record.EventRecorder, allocatable func() corev1.ResourceList, setUp bool) ([]podsync.Option, *volumes.Manager, func()) {
	syncOpts := []podsync.Option{podsync.WithBackOff(r.cfg.ContainerBackOff, r.cfg.ContainerBackOffMax), podsync.WithHostIP(r.cfg.hostIP.String()),
		podsync.WithStartObserver(r.metrics.started), podsync.WithBusMetrics(r.busMetrics)}
	var podRecorder record.EventRecorder // the pods' Events, nil when off
	syncOpts = append(syncOpts, securitySyncOptions(rt)...)
	if r.cfg.ContainerEvents.On(rt.Type() != sim.Type) {
		podRecorder = recorder
		syncOpts = append(syncOpts, podsync.WithRecorder(recorder))
	}
	syncOpts = append(syncOpts, podsync.WithDNS(r.dnsConfigurer(podRecorder)))
	if setUp && r.devices != nil {
		syncOpts = append(syncOpts, podsync.WithDevices(r.devices.Options))
	}
	stopClasses := func() {}
	if rt.Type() == cri.Type && setUp {
		// the pods' imagePullSecrets, for the runtime that pulls images, and
		// their RuntimeClasses' handlers, for the one that has handlers.
		syncOpts = append(syncOpts, podsync.WithPullSecrets(volumes.Client{CS: r.cs}))
		var lookup func(name string) (string, error)
		lookup, stopClasses = runtimeClasses(ctx, r.cs)
		syncOpts = append(syncOpts, podsync.WithRuntimeClasses(lookup))
	}
	if !setUp || !r.cfg.Volumes.On(rt.Type() != sim.Type) {
		return syncOpts, nil, stopClasses
	}
	root := r.rootDir()
	client := volumes.Client{CS: r.cs}
	volOpts := []volumes.Option{volumes.WithAllocatable(allocatable), volumes.WithLogger(r.log.Named("volumes"))}
	if users, ok := rt.(runtime.PodUsers); ok {
		volOpts = append(volOpts, volumes.WithPodUsers(users))
	}
	if iv, ok := rt.(runtime.ImageVolumes); ok {
		volOpts = append(volOpts, volumes.WithImageVolumes(iv))
	}
	vols := volumes.New(root, client, client, volOpts...)
	syncOpts = append(syncOpts, podsync.WithVolumes(vols))
	// the services whose variables containers get (kubelet: a services
	// informer of the whole cluster; the node may list them).
	svcFactory := informers.NewSharedInformerFactoryWithOptions(r.cs, 0, informers.WithTransform(kube.StripManagedFields))
	services := svcFactory.Core().V1().Services().Lister()
	svcFactory.Start(ctx.Done())
	syncCtx, cancelSync := context.WithTimeout(ctx, 10*time.Second)
	svcFactory.WaitForCacheSync(syncCtx.Done())
	cancelSync()
	syncOpts = append(syncOpts, podsync.WithServiceEnv(func(ns string, links bool) []string {
		return serviceEnv(services, ns, links)
	}))
	return syncOpts, vols, func() { svcFactory.Shutdown(); stopClasses() }
}

// newController builds the pod worker controller over rt, its statuses
// into sink, admitting against allocatable, the Node and otherPods (the
// pods other replicas hold).
func (r *Runner) newController(rt runtime.Runtime, sink *statuspub.Publisher, recorder record.EventRecorder, allocatable func() corev1.ResourceList,
	thisNode func() *corev1.Node, otherPods func(types.UID) []*corev1.Pod, syncOpts []podsync.Option) (*controller.Controller, error) {
	sysctls, err := kube.NewSysctlAllowlist(kube.SafeSysctls(kernelRelease()), r.cfg.AllowedUnsafeSysctls)
	if err != nil {
		return nil, err
	}
	sink.SetWindow(r.cfg.StatusWindow)
	sink.SetTraces(r.traces)
	return controller.New(controller.Config{
		Runtime:      rt,
		Sink:         sink,
		Admit:        append(admissionChain(rt, sysctls, allocatable, thisNode, r.pressure.Conditions), r.deviceAdmission()...),
		Recorder:     recorder,
		Partitions:   r.common.Partitions,
		Log:          r.log,
		OtherPods:    otherPods,
		Housekeeping: r.cfg.Housekeeping,
		ObserveSync:  r.metrics.observe,
		Active:       r.isAdopted,
		CaughtUp:     r.caughtUp,
		WorkerOpts:   []podworker.Option{podworker.WithResyncInterval(r.cfg.ResyncInterval), podworker.WithBackOffPeriod(r.cfg.BackOffPeriod)},
		SyncOpts:     syncOpts,
		Tracer:       r.tracer,
		Traces:       r.traces,
	}), nil
}

// partitionIndex indexes the node's pods by bus partition.
const partitionIndex = "partition"

func partitionIndexFunc(partitions int) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		uid := string(p.UID)
		if h := p.Annotations[mirrorAnnotation]; h != "" {
			uid = h // a mirror pod stands for its static pod's bus UID
		}
		return []string{strconv.Itoa(bus.Partition(uid, partitions))}, nil
	}
}

const mirrorAnnotation = "kubernetes.io/config.mirror"

// admissionView is the informer transform of the pods the replicas cache:
// the node's pods serve admission only (the requests and host ports of the
// pods other replicas admitted) and the partition index, so that is all
// that is kept of them, a fraction of a pod's weight at scale.
func admissionView(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName, Overhead: p.Spec.Overhead, Resources: p.Spec.Resources,
			InitContainers: admissionContainers(p.Spec.InitContainers), Containers: admissionContainers(p.Spec.Containers)},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}
	if h := p.Annotations[mirrorAnnotation]; h != "" {
		out.Annotations = map[string]string{mirrorAnnotation: h}
	}
	return out, nil
}

// admissionContainers keeps what admission reads of containers: their
// requests, host ports and restart policy (a sidecar's requests count as
// a regular container's).
func admissionContainers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, Resources: c.Resources, RestartPolicy: c.RestartPolicy}
		for _, port := range c.Ports {
			if port.HostPort > 0 {
				out[i].Ports = append(out[i].Ports, port)
			}
		}
	}
	return out
}

// nodePodsView is the node's pods as the API server lists them, for
// admission only: the requests and host ports of the pods other replicas
// admitted. Its watch starts the first time it is needed: a replica that
// owns every partition admits against its own pods alone (no other replica
// runs any), so a single replica never watches the node's pods here. Once
// started (a second replica came, or a restart took the partitions back one
// by one) it runs until the stage stops.
type nodePodsView struct {
	ctx        context.Context
	partitions int
	log        *zap.Logger
	factory    informers.SharedInformerFactory
	informer   cache.SharedIndexInformer
	once       sync.Once
	started    atomic.Bool
}

func newNodePodsView(ctx context.Context, cs kubernetes.Interface, node string, partitions int, log *zap.Logger) (*nodePodsView, error) {
	f := kube.NodePodsFactoryWith(cs, node, 0, admissionView)
	inf := f.Core().V1().Pods().Informer()
	if err := inf.AddIndexers(cache.Indexers{partitionIndex: partitionIndexFunc(partitions)}); err != nil {
		return nil, err
	}
	return &nodePodsView{ctx: ctx, partitions: partitions, log: log, factory: f, informer: inf}, nil
}

// indexer starts the watch on first use and waits (at most 10 s: an API
// server that does not answer delays admission, it does not stop it) for
// the first list.
func (v *nodePodsView) indexer() cache.Indexer {
	v.once.Do(func() {
		v.started.Store(true)
		v.log.Info("watching the node's pods for admission: other replicas may hold some")
		v.factory.Start(v.ctx.Done())
		sctx, cancel := context.WithTimeout(v.ctx, 10*time.Second)
		defer cancel()
		if !cache.WaitForCacheSync(sctx.Done(), v.informer.HasSynced) {
			v.log.Warn("the node's pods are not listed yet; admitting against what is known")
		}
	})
	return v.informer.GetIndexer()
}

func (v *nodePodsView) shutdown() { v.factory.Shutdown() }

// watching says whether the watch was started.
func (v *nodePodsView) watching() bool { return v != nil && v.started.Load() }

// otherPods lists the node's pods in the API server that hold resources and
// belong to partitions other replicas own (before ownership is known: all
// of them; when this replica owns every partition: none). Pods of this
// replica's partitions are counted by the running sum as they arrive, so a
// partition index keeps admission from walking every pod of the node for
// every pod it admits.
func (v *nodePodsView) otherPods(owner *ownership.Manager, except types.UID) []*corev1.Pod {
	if owner != nil && owner.OwnsAll() {
		return nil
	}
	idx := v.indexer()
	var out []*corev1.Pod
	for p := 0; p < v.partitions; p++ {
		if owner != nil && owner.Owned(p) {
			continue
		}
		objs, err := idx.ByIndex(partitionIndex, strconv.Itoa(p))
		if err != nil {
			continue
		}
		for _, o := range objs {
			pod, ok := o.(*corev1.Pod)
			if !ok || pod.UID == except || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
				continue
			}
			out = append(out, pod)
		}
	}
	return out
}

// watchInputs follows the sources' readiness and the node's pressure
// conditions until the returned stop is called.
func (r *Runner) watchInputs(ctx context.Context, ctrl *controller.Controller) (func(), error) {
	stopSources, err := r.watchSources(ctx, ctrl)
	if err != nil {
		return nil, err
	}
	stopPressure, err := r.watchPressure(ctx)
	if err != nil {
		stopSources()
		return nil, err
	}
	return func() { stopPressure(); stopSources() }, nil
}

// watchSources follows state.sources (every replica reads every value).
func (r *Runner) watchSources(ctx context.Context, ctrl *controller.Controller) (func(), error) {
	stream := bus.StreamName(r.common.NodeName, bus.StreamState)
	cons, err := r.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{r.subjects.SourcesReady()},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		NamePrefix:     bus.OrderedName("podworkers-sources"),
	})
	if err != nil {
		return nil, fmt.Errorf("state.sources consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		e, err := bus.Decode(m.Data())
		if err != nil {
			r.log.Warn("dropping malformed SourcesReady", zap.String("subject", m.Subject()), zap.Error(err))
			return
		}
		sr, err := bus.DecodeSourcesReady(e)
		if err != nil {
			r.log.Warn("dropping malformed SourcesReady", zap.String("subject", m.Subject()), zap.Error(err))
			return
		}
		ctrl.SetSourcesReady(sr.AllReady)
	})
	if err != nil {
		return nil, err
	}
	return cc.Stop, nil
}

// readinessLoop publishes AgentReadiness on change and as a heartbeat.
func (r *Runner) readinessLoop(ctx context.Context, owner *ownership.Manager, pub *bus.Publisher) {
	var last string
	var lastSent time.Time
	runtimeVersion := runtime.NodeVersion(r.rt)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		unowned, replicas := owner.Status()
		ar := &bus.AgentReadiness{Ready: len(unowned) == 0, Partitions: r.common.Partitions, Unowned: unowned, Replicas: prefixed(replicas), Runtime: runtimeVersion}
		if !ar.Ready {
			ar.Reason = "PartitionsUnowned"
			ar.Message = fmt.Sprintf("%d of %d partitions have no live pod worker", len(unowned), r.common.Partitions)
		}
		key := fmt.Sprint(ar.Ready, ar.Unowned, ar.Replicas)
		if key != last || time.Since(lastSent) >= r.cfg.ReadinessInterval {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := pub.Publish(pctx, r.subjects.AgentReady(), bus.KindAgentReadiness, "", ar)
			cancel()
			if err == nil {
				last, lastSent = key, time.Now()
			} else if ctx.Err() == nil {
				r.log.Warn("cannot publish agent readiness", zap.Error(err))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.kick:
		}
	}
}

// lastWord tells nodehb at once when the last replica stops, instead of
// letting the readiness heartbeat lapse; with others alive, they speak.
func (r *Runner) lastWord(owner *ownership.Manager, pub *bus.Publisher) {
	_, replicas := owner.Status()
	for _, id := range replicas {
		if id != r.ID() {
			return
		}
	}
	all := make([]int, r.common.Partitions)
	for i := range all {
		all[i] = i
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := pub.Publish(ctx, r.subjects.AgentReady(), bus.KindAgentReadiness, "", &bus.AgentReadiness{
		Ready: false, Partitions: r.common.Partitions, Unowned: all,
		Reason: "PodWorkersStopped", Message: "the last pod worker replica of the node stopped",
	})
	if err != nil {
		r.log.Warn("cannot publish the final agent readiness", zap.Error(err))
	}
}

func prefixed(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = "podworkers-" + id
	}
	return out
}

// serviceEnv are the service variables of a container in namespace ns
// (kubelet: getServiceEnvVarMap): the namespace's services when the pod
// has service links, and always the API server's own service,
// default/kubernetes, unless the namespace has one of that name.
func serviceEnv(lister corelisters.ServiceLister, ns string, links bool) []string {
	byName := map[string]*corev1.Service{}
	if links {
		list, _ := lister.Services(ns).List(labels.Everything())
		for _, svc := range list {
			byName[svc.Name] = svc
		}
	}
	if _, ok := byName[masterService]; !ok {
		if svc, err := lister.Services(metav1.NamespaceDefault).Get(masterService); err == nil {
			byName[masterService] = svc
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	list := make([]*corev1.Service, 0, len(names))
	for _, n := range names {
		list = append(list, byName[n])
	}
	return containerenv.ServiceVariables(list)
}

// masterService is the API server's service in namespace default.
const masterService = "kubernetes"

// kernelRelease is the node's kernel release (uname -r), which decides
// the safe sysctls; "" when it cannot be read.
func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// dnsConfigurer is the node's DNS configurer (kubelet: the DNS
// Configurer), its Events through rec; the host's resolver file is
// checked once as the replica starts, as a kubelet's sync loop does.
func (r *Runner) dnsConfigurer(rec record.EventRecorder) *dns.Configurer {
	var nodeIPs []net.IP
	if r.cfg.hostIP.IsValid() {
		nodeIPs = []net.IP{r.cfg.hostIP.AsSlice()}
	}
	c := dns.New(dns.Options{DNS: r.cfg.DNS, NodeIPs: nodeIPs, Node: r.common.NodeName, Recorder: rec, Log: r.log.Named("dns")})
	c.CheckResolvConf()
	return c
}
