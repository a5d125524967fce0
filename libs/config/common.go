package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/splitlet/splitlet/libs/bus"
)

// Runtimes a pod worker can run pods with.
const (
	RuntimeSim     = "sim"
	RuntimeProcess = "process"
	RuntimeCRI     = "cri"
)

// DefaultCRIEndpoint is containerd's CRI socket.
const DefaultCRIEndpoint = "unix:///run/containerd/containerd.sock"

// Encodings of the API server client (kube-api-content-type), as
// apimachinery names them.
const (
	ContentProtobuf = runtime.ContentTypeProtobuf
	ContentJSON     = runtime.ContentTypeJSON
)

// Common holds the keys every Splitlet binary takes.
type Common struct {
	ConfigFile string
	NodeName   string
	Kubeconfig string
	// BootstrapKubeconfig, RotateCertificates and CertDir are the kubelet's
	// TLS bootstrap keys (libs/nodecert): the process that runs nodehb
	// asks for the node's client certificate and keeps it in CertDir.
	BootstrapKubeconfig string
	RotateCertificates  bool
	CertDir             string
	KubeAPIQPS          float32
	KubeAPIBurst        int
	KubeAPIContent      string
	NATSURL             string
	NATSListen          string
	NATSReplicas        int
	NATSNkey            string
	NATSCreds           string
	NATSTLSCA           string
	NATSTLSCert         string
	NATSTLSKey          string
	Runtime             string
	CRIEndpoint         string
	DataDir             string
	HTTPAddr            string
	DebugPprof          bool
	LogLevel            string
	LogFormat           string
	Partitions          int
	ShutdownTimeout     time.Duration
	Tracing             TracingKeys
	MemoryLimit         MemoryLimit
	// MaxPods is the node's pod capacity (the kubelet's --max-pods); 0: by
	// runtime (PodCapacity).
	MaxPods int
	// BusEncoding is the form this process's stages write on the bus:
	// protobuf or json (docs/bus.md, "Encodings").
	BusEncoding string
	// Shadow runs the process's stages as shadows of the live ones
	// (docs/bus.md, "Shadow stages"): their own consumers of the live
	// inputs, their outputs under the node's shadow prefix, no write to
	// the API server or the runtime.
	Shadow bool
}

// The bus-encoding values.
const (
	BusEncodingProtobuf = "protobuf"
	BusEncodingJSON     = "json"
)

// TracingKeys turn OpenTelemetry tracing on (libs/tracing).
type TracingKeys struct {
	Endpoint   string
	SampleRate float64
}

// The API client's limits by runtime: the kubelet's defaults where pods are
// real (process, cri); on sim, whose pods are simulated for scale tests,
// limits that let a node start thousands of pods at the API server's pace
// (kwok, the peer for that use, does not limit itself to the kubelet's).
const (
	kubeletQPS   float32 = 50
	kubeletBurst         = 100
	simQPS       float32 = 1000
	simBurst             = 2000
)

// RegisterFlags adds the common keys to fs.
func (c *Common) RegisterFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.ConfigFile, FileKey, "", "YAML file with any of these keys (flags and "+EnvPrefix+"* variables win over it)")
	fs.StringVar(&c.NodeName, "node-name", defaultNodeName(), "name of the Node this agent runs")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty: KUBECONFIG, in-cluster, then ~/.kube/config, as kubectl does")
	fs.StringVar(&c.BootstrapKubeconfig, "bootstrap-kubeconfig", "", "kubeconfig with a bootstrap token (kubelet --bootstrap-kubeconfig): when the node has no valid client certificate, the process that runs nodehb asks for one, system:node:<node-name> in system:nodes, by CertificateSigningRequest, keeps it in cert-dir and writes kubeconfig (default <data-dir>/kubeconfig) to use it; only a process that runs nodehb takes it")
	fs.BoolVar(&c.RotateCertificates, "rotate-certificates", false, "renew the node's client certificate in cert-dir at 70 to 90 % of its lifetime, without a restart (kubelet --rotate-certificates); needs bootstrap-kubeconfig")
	fs.StringVar(&c.CertDir, "cert-dir", "", "directory of the node's certificate pairs (kubelet --cert-dir); empty: <data-dir>/pki")
	fs.Float32Var(&c.KubeAPIQPS, "kube-api-qps", 0, fmt.Sprintf("queries per second to the API server; 0: by runtime, %v on process and cri (the kubelet's default), %v on sim (simulated pods are for scale tests)", kubeletQPS, simQPS))
	fs.IntVar(&c.KubeAPIBurst, "kube-api-burst", 0, fmt.Sprintf("burst of queries to the API server; 0: by runtime, %d on process and cri (the kubelet's default), %d on sim", kubeletBurst, simBurst))
	fs.Var(newEnum(&c.KubeAPIContent, ContentProtobuf, ContentProtobuf, ContentJSON), "kube-api-content-type", "encoding of requests to the API server: "+ContentProtobuf+" (kubelet default) or "+ContentJSON)
	fs.StringVar(&c.NATSURL, "nats-url", "", "NATS server URL(s), comma separated, credentials in the URL; empty: run an embedded server")
	fs.IntVar(&c.NATSReplicas, "nats-replicas", 1, "replicas of the node's streams and of the pod workers' lease bucket: 1, or 3 (or 5) on a NATS cluster of that many servers, so that losing a server loses nothing; every stage of a node must agree")
	fs.StringVar(&c.NATSNkey, "nats-nkey", "", "file with this stage's NATS nkey seed (its bus identity; `splitlet bus identities` makes one per stage); the seed never appears on a command line")
	fs.StringVar(&c.NATSCreds, "nats-creds", "", "NATS credentials file (user JWT and nkey seed, for servers with decentralized auth)")
	fs.StringVar(&c.NATSTLSCA, "nats-tls-ca", "", "CA file to verify the NATS servers' certificates (TLS to NATS)")
	fs.StringVar(&c.NATSTLSCert, "nats-tls-cert", "", "client certificate file for TLS to NATS (with nats-tls-key)")
	fs.StringVar(&c.NATSTLSKey, "nats-tls-key", "", "client key file for TLS to NATS")
	fs.StringVar(&c.NATSListen, "nats-listen", "", "with an embedded server: also listen for other processes on this host:port (empty: in-process only)")
	fs.Var(newEnum(&c.Runtime, RuntimeSim, RuntimeSim, RuntimeProcess, RuntimeCRI), "runtime", "container runtime of the pod workers: sim (simulated containers; pods outlive a pod worker restart or handover, restored from the bus), process (local child processes; they die with the replica and are restarted by the next owner, each restart counted in restartCount) or cri (real containers of a CRI runtime such as containerd, read back by a restarted pod worker)")
	fs.StringVar(&c.CRIEndpoint, "cri-endpoint", DefaultCRIEndpoint, "CRI runtime endpoint of --runtime=cri (unix:// socket)")
	fs.StringVar(&c.DataDir, "data-dir", "", "directory for state (embedded NATS store, logs); empty: <tmp>/splitlet/<node-name>")
	fs.StringVar(&c.HTTPAddr, "http-addr", "127.0.0.1:0", "address of /healthz, /readyz, /metrics (and /debug/pprof with debug-pprof); port 0 picks a free one")
	fs.BoolVar(&c.DebugPprof, "debug-pprof", false, "serve /debug/pprof on http-addr (unauthenticated: keep http-addr on loopback when on)")
	fs.Var(newEnum(&c.LogLevel, "info", "debug", "info", "warn", "error"), "log-level", "debug, info, warn or error")
	fs.Var(newEnum(&c.LogFormat, "json", "json", "console"), "log-format", "json or console")
	fs.IntVar(&c.Partitions, "partitions", 16, "bus partitions of the node's pods; every stage of a node must agree")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long shutdown may take to drain in-flight work")
	c.MemoryLimit = MemoryLimit{}
	fs.Var(&c.MemoryLimit, "memory-limit", "the Go runtime's soft memory limit (GOMEMLIMIT) of this process: a quantity (512Mi), none, or auto: 90% of the container's memory limit (cgroup memory.max) when it has one, else the budget of the process's stages for max-pods pods (docs/bench.md, \"Memory\"); a GOMEMLIMIT in the environment wins")
	fs.IntVar(&c.MaxPods, "max-pods", 0, fmt.Sprintf("the node's pod capacity (the kubelet's --max-pods), which the Node reports and the stages' memory budgets assume; 0: by runtime, %d on process and cri (the kubelet's default), %d on sim", kubeletMaxPods, simMaxPods))
	fs.Var(newEnum(&c.BusEncoding, BusEncodingProtobuf, BusEncodingProtobuf, BusEncodingJSON), "bus-encoding", "form of the messages this process's stages write on the bus: protobuf (Kubernetes' protobuf for the pods in them) or json (for a node with a stage that reads only JSON); every stage reads both")
	fs.StringVar(&c.Tracing.Endpoint, "tracing-endpoint", "", "OTLP/HTTP collector for traces of each pod across the stages (http://127.0.0.1:4318, or host:port); empty: tracing off")
	fs.BoolVar(&c.Shadow, "shadow", false, "run the stages as shadows of the live ones on the live bus (nats-url): they read what the live stages read through consumers of their own, publish under splitlet.v1.<node>.shadow.<stage>, and write nothing to the API server or the runtime (docs/experiments.md, \"Shadow a candidate\")")
	fs.Float64Var(&c.Tracing.SampleRate, "tracing-sample-rate", 1, "share of pods traced when tracing-endpoint is set, 0 to 1 (traces begun elsewhere follow their parent's decision)")
}

// The node's pod capacity by runtime: the kubelet's default where pods are
// real, a node as large as the bench's largest case on sim.
const (
	kubeletMaxPods = 110
	simMaxPods     = 20000
)

// PodCapacity is the node's pod capacity: max-pods, or its runtime's
// default.
func (c *Common) PodCapacity() int {
	switch {
	case c.MaxPods > 0:
		return c.MaxPods
	case c.Runtime == RuntimeSim:
		return simMaxPods
	}
	return kubeletMaxPods
}

// Complete fills derived defaults and checks the values.
func (c *Common) Complete() error {
	if errs := validation.IsDNS1123Subdomain(c.NodeName); len(errs) > 0 {
		return fmt.Errorf("invalid value %q for node-name: %s", c.NodeName, strings.Join(errs, "; "))
	}
	if c.Partitions < 1 || c.Partitions > 1024 {
		return fmt.Errorf("invalid value %d for partitions: must be 1 to 1024", c.Partitions)
	}
	if c.MaxPods < 0 {
		return fmt.Errorf("invalid value %d for max-pods: must be positive (or 0: by runtime)", c.MaxPods)
	}
	if c.KubeAPIQPS < 0 || c.KubeAPIBurst < 0 {
		return fmt.Errorf("invalid kube-api-qps/kube-api-burst %v/%d: must be positive (or 0: by runtime)", c.KubeAPIQPS, c.KubeAPIBurst)
	}
	if c.KubeAPIQPS == 0 {
		c.KubeAPIQPS = kubeletQPS
		if c.Runtime == RuntimeSim {
			c.KubeAPIQPS = simQPS
		}
	}
	if c.KubeAPIBurst == 0 {
		c.KubeAPIBurst = kubeletBurst
		if c.Runtime == RuntimeSim {
			c.KubeAPIBurst = simBurst
		}
	}
	if c.NATSReplicas < 1 || c.NATSReplicas > 5 {
		return fmt.Errorf("invalid value %d for nats-replicas: must be 1 to 5", c.NATSReplicas)
	}
	if (c.NATSTLSCert == "") != (c.NATSTLSKey == "") {
		return fmt.Errorf("nats-tls-cert and nats-tls-key go together")
	}
	if c.NATSNkey != "" && c.NATSCreds != "" {
		return fmt.Errorf("nats-nkey and nats-creds exclude each other")
	}
	if c.NATSReplicas > 1 && c.NATSURL == "" {
		return fmt.Errorf("invalid value %d for nats-replicas: the embedded server (nats-url empty) is a single server; replicas need a NATS cluster", c.NATSReplicas)
	}
	if c.Shadow && c.NATSURL == "" {
		return fmt.Errorf("invalid value true for shadow: a shadow reads the live node's bus, so nats-url is required (the embedded server carries no live traffic)")
	}
	if c.ShutdownTimeout <= 0 {
		return fmt.Errorf("invalid value %v for shutdown-timeout: must be positive", c.ShutdownTimeout)
	}
	if c.Runtime == RuntimeCRI && !strings.HasPrefix(c.CRIEndpoint, "unix://") && !strings.HasPrefix(c.CRIEndpoint, "/") {
		return fmt.Errorf("invalid value %q for cri-endpoint: must be a unix:// socket", c.CRIEndpoint)
	}
	if c.Tracing.SampleRate < 0 || c.Tracing.SampleRate > 1 {
		return fmt.Errorf("invalid value %v for tracing-sample-rate: must be 0 to 1", c.Tracing.SampleRate)
	}
	if c.DataDir == "" {
		c.DataDir = filepath.Join(os.TempDir(), "splitlet", c.NodeName)
	}
	if c.CertDir == "" {
		c.CertDir = filepath.Join(c.DataDir, "pki")
	}
	if c.RotateCertificates && c.BootstrapKubeconfig == "" {
		return fmt.Errorf("rotate-certificates needs bootstrap-kubeconfig (the pair it renews is the one TLS bootstrap keeps in cert-dir, and its credentials are the fallback once that pair expired)")
	}
	if c.BootstrapKubeconfig != "" && c.Kubeconfig == "" {
		c.Kubeconfig = filepath.Join(c.DataDir, "kubeconfig")
	}
	return nil
}

func defaultNodeName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "splitlet-node"
	}
	return strings.ToLower(h)
}

// enum is a flag value limited to a set of words.
type enum struct {
	target  *string
	allowed []string
}

func newEnum(target *string, def string, allowed ...string) *enum {
	*target = def
	return &enum{target: target, allowed: allowed}
}

func (e *enum) String() string { return *e.target }
func (e *enum) Type() string   { return "string" }
func (e *enum) Set(v string) error {
	for _, a := range e.allowed {
		if v == a {
			*e.target = v
			return nil
		}
	}
	return fmt.Errorf("must be one of %s", strings.Join(e.allowed, ", "))
}

// Enum is a flag value limited to the allowed words, with a default.
func Enum(target *string, def string, allowed ...string) pflag.Value {
	return newEnum(target, def, allowed...)
}

// BusEncodingOption is the encoding the bus-encoding key names, as a publisher
// option.
func (c *Common) BusEncodingOption() bus.PublisherOption {
	if c.BusEncoding == BusEncodingJSON {
		return bus.WithEncoding(bus.EncodingJSON)
	}
	return bus.WithEncoding(bus.EncodingProtobuf)
}
