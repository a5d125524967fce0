// Package service wires the nodehb stage: its keys, and the runner that
// starts the Node status and Lease controllers, the readiness gate and the
// kubelet API.
package service

import (
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/services/nodehb/internal/devices"
	"github.com/splitlet/splitlet/services/nodehb/internal/eviction"
	"github.com/splitlet/splitlet/services/nodehb/internal/nodestatus"
	"github.com/splitlet/splitlet/services/nodehb/internal/readiness"
)

// Authorization modes of the kubelet API.
const (
	AuthzWebhook     = "webhook"
	AuthzAlwaysAllow = "always-allow"
)

// FailureSources is how many source addresses the kubelet API's limit on
// failed authentications remembers (least recently seen forgotten first).
const FailureSources = 4096

// MinHeartbeatTimeout is the least time a heartbeat request (Lease, Node
// status) is given: the kubelet's timeout, the shorter of the status update
// period and the lease duration, would cut off a slow but working API
// server when the periods are under a second (as in tests).
const MinHeartbeatTimeout = 5 * time.Second

// Config holds the nodehb keys.
type Config struct {
	Labels           map[string]string
	Taints           []string
	CPU              string
	Memory           string
	EphemeralStorage string
	Pods             string
	KubeReserved     string
	SystemReserved   string
	EvictionHard     string
	Eviction         EvictionConfig
	Address          string
	Hostname         string
	Port             int
	BindAddress      string
	TLSCertFile      string
	TLSKeyFile       string
	RotateServerCert bool
	ClientCAFile     string
	AnonymousAuth    bool
	TokenWebhook     bool
	AuthFailureQPS   float64
	AuthFailureBurst int
	AuthzMode        string
	StatusUpdate     time.Duration
	StatusReport     time.Duration
	LeaseDuration    time.Duration
	LeaseRenew       time.Duration
	AgentTimeout     time.Duration
	AgentGrace       time.Duration
	RequestTimeout   time.Duration
	// DevicePluginsDir is where the device plugin registration socket is
	// served (devices.go).
	DevicePluginsDir string
	// DNS are the node's cluster DNS keys, shared with the pod workers,
	// which apply them; nodehb states them in /configz.
	DNS config.DNS
	// Cgroups are the node's cgroup keys, shared with the pod workers,
	// which apply them; nodehb states them in /configz.
	Cgroups config.Cgroups
	// parsed are the keys above given as text, parsed by Validate.
	parsed parsedKeys
}

// RegisterFlags adds the nodehb keys ("nodehb.<key>") to fs.
func (c *Config) RegisterFlags(fs *pflag.FlagSet) {
	fs.StringToStringVar(&c.Labels, "nodehb.labels", nil, "extra Node labels, key=value[,key=value...] (kubelet --node-labels)")
	fs.StringSliceVar(&c.Taints, "nodehb.taints", nil, "Node taints at registration, key[=value]:Effect[,...] (kubelet --register-with-taints)")
	fs.StringVar(&c.CPU, "nodehb.cpu", "", "Node cpu capacity; empty: 1000 with the sim runtime, the host's CPUs with process or cri")
	fs.StringVar(&c.Memory, "nodehb.memory", "", "Node memory capacity; empty: 4Ti with sim, the host's memory with process or cri")
	fs.StringVar(&c.EphemeralStorage, "nodehb.ephemeral-storage", "", "Node ephemeral-storage capacity; empty: 10Ti with sim, the data dir's file system with process or cri")
	fs.StringVar(&c.Pods, "nodehb.pods", "", "Node pods capacity; empty: max-pods")
	fs.StringVar(&c.KubeReserved, "nodehb.kube-reserved", "", "resources kept for Kubernetes' own daemons, subtracted from allocatable: cpu=100m,memory=256Mi,ephemeral-storage=1Gi (kubelet --kube-reserved)")
	fs.StringVar(&c.SystemReserved, "nodehb.system-reserved", "", "resources kept for the operating system, subtracted from allocatable, in the same form (kubelet --system-reserved)")
	fs.StringVar(&c.EvictionHard, "nodehb.eviction-hard", nodestatus.DefaultEvictionHard, "hard eviction thresholds, signal<quantity or signal<percent% (memory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree, pid.available): a pod is evicted as soon as one is met; memory.available and nodefs.available are also subtracted from allocatable memory and ephemeral-storage (kubelet --eviction-hard and its default)")
	c.Eviction.RegisterFlags(fs)
	fs.StringVar(&c.Address, "nodehb.address", "127.0.0.1", "the Node's InternalIP, where kube-apiserver reaches the kubelet API")
	fs.StringVar(&c.Hostname, "nodehb.hostname", "", "the Node's Hostname address and kubernetes.io/hostname label; empty: the node name")
	fs.IntVar(&c.Port, "nodehb.port", 10250, "HTTPS port of the kubelet API (daemonEndpoints.kubeletEndpoint.Port)")
	fs.StringVar(&c.BindAddress, "nodehb.bind-address", "", "address the kubelet API listens on; empty: nodehb.address")
	fs.StringVar(&c.TLSCertFile, "nodehb.tls-cert-file", "", "serving certificate of the kubelet API; empty: a self-signed one made at start")
	fs.StringVar(&c.TLSKeyFile, "nodehb.tls-private-key-file", "", "key of nodehb.tls-cert-file")
	fs.BoolVar(&c.RotateServerCert, "nodehb.rotate-server-certificates", false, "request the kubelet API's serving certificate from the API server (a kubernetes.io/kubelet-serving CSR for the node's address and host name, kept in cert-dir) and renew it at 70 to 90 % of its lifetime, served at once without dropping connections (kubelet serverTLSBootstrap / --rotate-server-certificates); the cluster approves these CSRs (kube-controller-manager does not); excludes nodehb.tls-cert-file")
	fs.StringVar(&c.ClientCAFile, "nodehb.client-ca-file", "", "CA bundle that verifies client certificates (kube-apiserver's kubelet client); empty: client certificates are not accepted")
	fs.BoolVar(&c.AnonymousAuth, "nodehb.anonymous-auth", false, "admit requests without credentials as system:anonymous (then authorized as such)")
	fs.BoolVar(&c.TokenWebhook, "nodehb.authentication-token-webhook", true, "check bearer tokens with TokenReview")
	fs.Float64Var(&c.AuthFailureQPS, "nodehb.authentication-failure-qps", 1, fmt.Sprintf("per source address (an IPv6 /64), token reviews that do not authenticate per second on average; beyond them and the burst the kubelet API answers 429 without a review (%d sources remembered); 0: no limit", FailureSources))
	fs.IntVar(&c.AuthFailureBurst, "nodehb.authentication-failure-burst", 10, "per source address, token reviews that do not authenticate at once (see nodehb.authentication-failure-qps)")
	fs.Var(config.Enum(&c.AuthzMode, AuthzWebhook, AuthzWebhook, AuthzAlwaysAllow), "nodehb.authorization-mode", "webhook (SubjectAccessReview) or always-allow")
	fs.DurationVar(&c.StatusUpdate, "nodehb.node-status-update-frequency", 10*time.Second, "how often the Node status is computed")
	fs.DurationVar(&c.StatusReport, "nodehb.node-status-report-frequency", 5*time.Minute, "how often an unchanged Node status is written anyway")
	fs.DurationVar(&c.LeaseDuration, "nodehb.lease-duration", 40*time.Second, "the Lease's leaseDurationSeconds")
	fs.DurationVar(&c.LeaseRenew, "nodehb.lease-renew-interval", 10*time.Second, "how often the Lease is renewed")
	fs.DurationVar(&c.AgentTimeout, "nodehb.agent-ready-timeout", 40*time.Second, "silence of the pod workers' readiness heartbeat after which the Node is NotReady")
	fs.DurationVar(&c.AgentGrace, "nodehb.agent-not-ready-grace", readiness.DefaultGrace, "once the agent was ready, how long it may report not ready (a pod worker restarting, partitions handed over) before the Node is NotReady; 0: at once")
	fs.DurationVar(&c.RequestTimeout, "nodehb.runtime-request-timeout", 10*time.Second, "timeout of exec and stats requests to the pod workers")
	fs.StringVar(&c.DevicePluginsDir, "nodehb.device-plugins-dir", devices.DefaultDir, "directory of the device plugin registration socket (kubelet.sock) and the plugins' sockets, with the cri runtime (the kubelet's device plugin path); empty: no device plugins. Another runtime gives containers no devices: there only the default is accepted, and no socket is served")
	c.DNS.RegisterFlags(fs)
	c.Cgroups.RegisterFlags(fs)
}

// parsedKeys are the keys given as text, in their types.
type parsedKeys struct {
	labels map[string]string
	taints []corev1.Taint
	// capacity holds the figures given (nodehb.cpu, memory,
	// ephemeral-storage, pods), over the runtime's defaults.
	capacity   corev1.ResourceList
	reserved   []corev1.ResourceList
	thresholds []eviction.Threshold
}

// parse reads the keys given as text into c.parsed; every error names its
// key.
func (c *Config) parse() (err error) {
	var p parsedKeys
	if p.labels, err = nodestatus.ParseLabels("nodehb.labels", c.Labels); err != nil {
		return err
	}
	if p.taints, err = nodestatus.ParseTaints("nodehb.taints", c.Taints); err != nil {
		return err
	}
	if p.capacity, err = c.givenCapacity(); err != nil {
		return err
	}
	for _, r := range []struct{ key, v string }{{"nodehb.kube-reserved", c.KubeReserved}, {"nodehb.system-reserved", c.SystemReserved}} {
		l, err := kube.ParseResourceList(r.v)
		if err != nil {
			return fmt.Errorf("invalid value for %s: %w", r.key, err)
		}
		p.reserved = append(p.reserved, l)
	}
	if p.thresholds, err = eviction.Parse(c.EvictionHard, c.Eviction.Soft, c.Eviction.SoftGrace, c.Eviction.MinReclaim); err != nil {
		return fmt.Errorf("invalid value for nodehb.%w", err)
	}
	c.parsed = p
	return nil
}

// desired checks the keys and builds the Node the agent describes, from
// the keys Validate parsed. Every error names its key.
func (c *Config) desired(common *config.Common, nodeInfo corev1.NodeSystemInfo) (*nodestatus.Desired, error) {
	labels, taints := c.parsed.labels, c.parsed.taints
	if err := c.checkServing(); err != nil {
		return nil, err
	}
	if err := c.checkPeriods(); err != nil {
		return nil, err
	}
	hostname := c.Hostname
	if hostname == "" {
		hostname = common.NodeName
	}
	capacity, allocatable, err := c.resources(common)
	if err != nil {
		return nil, err
	}
	all := map[string]string{
		nodestatus.LabelHostname: hostname,
		nodestatus.LabelOS:       nodeInfo.OperatingSystem,
		nodestatus.LabelArch:     nodeInfo.Architecture,
	}
	for k, v := range labels {
		all[k] = v
	}
	if _, err := nodestatus.ParseLabels("nodehb.hostname", map[string]string{nodestatus.LabelHostname: hostname}); err != nil {
		return nil, err
	}
	return &nodestatus.Desired{
		Name:        common.NodeName,
		Labels:      all,
		Taints:      taints,
		Capacity:    capacity,
		Allocatable: allocatable,
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: c.Address},
			{Type: corev1.NodeHostName, Address: hostname},
		},
		Port:     int32(c.Port),
		NodeInfo: nodeInfo,
	}, nil
}

// checkServing checks the kubelet API's keys: port, addresses and the
// serving certificate's source.
func (c *Config) checkServing() error {
	if c.Port < 1 || c.Port > 65535 {
		return fmt.Errorf("invalid value %d for nodehb.port: must be 1 to 65535", c.Port)
	}
	if net.ParseIP(c.Address) == nil {
		return fmt.Errorf("invalid value %q for nodehb.address: not an IP address", c.Address)
	}
	if c.BindAddress != "" && net.ParseIP(c.BindAddress) == nil {
		return fmt.Errorf("invalid value %q for nodehb.bind-address: not an IP address", c.BindAddress)
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return fmt.Errorf("nodehb.tls-cert-file and nodehb.tls-private-key-file go together")
	}
	if c.RotateServerCert && c.TLSCertFile != "" {
		return fmt.Errorf("nodehb.rotate-server-certificates and nodehb.tls-cert-file exclude each other: the serving certificate is requested, or given")
	}
	return nil
}

// checkPeriods checks the status, Lease and agent periods and the limit on
// failed authentications.
func (c *Config) checkPeriods() error {
	if err := positive(
		durationKey{"nodehb.node-status-update-frequency", c.StatusUpdate}, durationKey{"nodehb.node-status-report-frequency", c.StatusReport},
		durationKey{"nodehb.lease-duration", c.LeaseDuration}, durationKey{"nodehb.lease-renew-interval", c.LeaseRenew},
		durationKey{"nodehb.agent-ready-timeout", c.AgentTimeout}, durationKey{"nodehb.runtime-request-timeout", c.RequestTimeout}); err != nil {
		return err
	}
	if !(c.AuthFailureQPS >= 0) {
		return fmt.Errorf("invalid value %v for nodehb.authentication-failure-qps: must not be negative", c.AuthFailureQPS)
	}
	if c.AuthFailureQPS > 0 && c.AuthFailureBurst < 1 {
		return fmt.Errorf("invalid value %d for nodehb.authentication-failure-burst: at least 1 (or nodehb.authentication-failure-qps 0: no limit)", c.AuthFailureBurst)
	}
	if c.AgentGrace < 0 {
		return fmt.Errorf("invalid value %v for nodehb.agent-not-ready-grace: must not be negative", c.AgentGrace)
	}
	if c.LeaseDuration < time.Second {
		return fmt.Errorf("invalid value %v for nodehb.lease-duration: at least 1s", c.LeaseDuration)
	}
	return nil
}

// durationKey is a duration key's name and value.
type durationKey struct {
	key string
	v   time.Duration
}

// positive fails on the first key whose value is not positive.
func positive(keys ...durationKey) error {
	for _, d := range keys {
		if d.v <= 0 {
			return fmt.Errorf("invalid value %v for %s: must be positive", d.v, d.key)
		}
	}
	return nil
}

// resources is the Node's capacity and its allocatable (capacity less the
// reservations and the hard eviction thresholds), with the eviction keys
// checked.
func (c *Config) resources(common *config.Common) (capacity, allocatable corev1.ResourceList, err error) {
	capacity = c.capacity(common)
	if err := positive(durationKey{"nodehb.eviction-monitoring-interval", c.Eviction.Interval},
		durationKey{"nodehb.eviction-pressure-transition-period", c.Eviction.Transition}); err != nil {
		return nil, nil, err
	}
	if c.Eviction.MaxPodGrace < 0 {
		return nil, nil, fmt.Errorf("invalid value %d for nodehb.eviction-max-pod-grace-period: must not be negative", c.Eviction.MaxPodGrace)
	}
	return capacity, nodestatus.Allocatable(capacity, c.parsed.thresholds, c.parsed.reserved...), nil
}

// EvictionConfig are the eviction manager's keys besides nodehb.eviction-hard.
type EvictionConfig struct {
	Soft        string
	SoftGrace   map[string]string
	MinReclaim  map[string]string
	MaxPodGrace int64
	Transition  time.Duration
	Interval    time.Duration
}

// RegisterFlags adds the eviction keys ("nodehb.eviction-*").
func (e *EvictionConfig) RegisterFlags(fs *pflag.FlagSet) {
	fs.StringVar(&e.Soft, "nodehb.eviction-soft", "", "soft eviction thresholds, in the form of nodehb.eviction-hard: a pod is evicted once one has been met for its grace period (kubelet --eviction-soft)")
	fs.StringToStringVar(&e.SoftGrace, "nodehb.eviction-soft-grace-period", nil, "grace period of each soft threshold, signal=duration[,...]; every soft threshold needs one (kubelet --eviction-soft-grace-period)")
	fs.StringToStringVar(&e.MinReclaim, "nodehb.eviction-minimum-reclaim", nil, "how far past its threshold a signal is reclaimed before the threshold counts as resolved, signal=quantity or signal=percent%[,...] (kubelet --eviction-minimum-reclaim)")
	fs.Int64Var(&e.MaxPodGrace, "nodehb.eviction-max-pod-grace-period", 0, "longest grace period, in seconds, of a pod evicted for a soft threshold; the pod's own when shorter (kubelet --eviction-max-pod-grace-period)")
	fs.DurationVar(&e.Transition, "nodehb.eviction-pressure-transition-period", 5*time.Minute, "how long a pressure condition stays true after its threshold was last met (kubelet --eviction-pressure-transition-period)")
	fs.DurationVar(&e.Interval, "nodehb.eviction-monitoring-interval", 10*time.Second, "how often the eviction manager observes the signals and evicts at most one pod (the kubelet's housekeeping interval)")
}

// capacity: the configured figures over the runtime's defaults.
func (c *Config) capacity(common *config.Common) corev1.ResourceList {
	var out corev1.ResourceList
	if common.Runtime == config.RuntimeProcess || common.Runtime == config.RuntimeCRI {
		out = nodestatus.HostCapacity(common.DataDir)
	} else {
		out = corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("1000"),
			corev1.ResourceMemory:           resource.MustParse("4Ti"),
			corev1.ResourceEphemeralStorage: resource.MustParse("10Ti"),
		}
	}
	out[corev1.ResourcePods] = *resource.NewQuantity(int64(common.PodCapacity()), resource.DecimalSI)
	maps.Copy(out, c.parsed.capacity)
	return out
}

// givenCapacity reads the capacity figures given.
func (c *Config) givenCapacity() (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for _, k := range []struct {
		key  string
		name corev1.ResourceName
		v    string
	}{{"nodehb.cpu", corev1.ResourceCPU, c.CPU}, {"nodehb.memory", corev1.ResourceMemory, c.Memory},
		{"nodehb.ephemeral-storage", corev1.ResourceEphemeralStorage, c.EphemeralStorage}, {"nodehb.pods", corev1.ResourcePods, c.Pods}} {
		if k.v == "" {
			continue
		}
		q, err := nodestatus.ParseQuantity(k.key, k.v)
		if err != nil {
			return nil, err
		}
		if k.name == corev1.ResourcePods {
			if _, err := strconv.ParseInt(k.v, 10, 64); err != nil {
				return nil, fmt.Errorf("invalid value %q for %s: must be a whole number", k.v, k.key)
			}
		}
		out[k.name] = q
	}
	return out, nil
}

// clientCAs reads the client CA bundle, nil when none is configured.
func (c *Config) clientCAs() (*x509.CertPool, error) {
	if c.ClientCAFile == "" {
		return nil, nil
	}
	data, err := os.ReadFile(c.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("invalid value for nodehb.client-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("invalid value %q for nodehb.client-ca-file: no PEM certificates in it", c.ClientCAFile)
	}
	return pool, nil
}

// Validate parses the keys given as text and checks every key that does
// not depend on the common ones, so a bad value stops the process before
// anything starts, naming the key.
func (c *Config) Validate() error {
	if err := c.parse(); err != nil {
		return err
	}
	common := &config.Common{NodeName: "validate", Runtime: config.RuntimeSim}
	if _, err := c.desired(common, nodestatus.SystemInfo("", config.RuntimeSim, "")); err != nil {
		return err
	}
	if _, err := c.clientCAs(); err != nil {
		return err
	}
	if err := c.Cgroups.Validate(); err != nil {
		return err
	}
	return c.DNS.Validate()
}

// heartbeatTimeout bounds each request of the heartbeat client (kubelet:
// the shorter of the status update period and the lease duration).
func (c *Config) heartbeatTimeout() time.Duration {
	return max(min(c.StatusUpdate, c.LeaseDuration), MinHeartbeatTimeout)
}
