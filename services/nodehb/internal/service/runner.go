package service

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/certificate"

	"github.com/splitlet/splitlet/libs/app"
	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/config"
	"github.com/splitlet/splitlet/libs/health"
	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/messaging"
	"github.com/splitlet/splitlet/libs/nodecert"
	"github.com/splitlet/splitlet/libs/tracing"
	"github.com/splitlet/splitlet/services/nodehb/internal/devices"
	"github.com/splitlet/splitlet/services/nodehb/internal/eviction"
	"github.com/splitlet/splitlet/services/nodehb/internal/kubeletapi"
	"github.com/splitlet/splitlet/services/nodehb/internal/lease"
	"github.com/splitlet/splitlet/services/nodehb/internal/nodestatus"
	"github.com/splitlet/splitlet/services/nodehb/internal/readiness"
	"github.com/splitlet/splitlet/services/nodehb/internal/staticpods"
)

// Runner is the running stage.
type Runner struct {
	log          *zap.Logger
	node         string
	js           jetstream.JetStream
	streamsReady func(context.Context) error

	Gate   *readiness.Gate
	Static *staticpods.Index
	Status *nodestatus.Controller
	Lease  *lease.Controller
	API    *kubeletapi.Server
	// serving renews the kubelet API's certificate
	// (nodehb.rotate-server-certificates); nil: a given or self-signed one.
	serving certificate.Manager
	// Eviction is the node's eviction manager.
	Eviction *eviction.Loop
	// Devices is the device plugin manager (nil: none runs).
	Devices    *devices.Manager
	devicesSub *nats.Subscription
	nc         *nats.Conn
	pub        *bus.Publisher

	stopEvents  func()
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	startedOnce bool
}

// Clients are the stage's API clients. The heartbeat (Lease, Node status)
// and the kubelet API's reviews (TokenReview, SubjectAccessReview) each have
// a client and rate limiter of their own, so that a flood of requests with
// new tokens never holds up the heartbeat, nor the pod lookups of the
// kubelet API and the events on the process's shared client.
type Clients struct {
	Shared    kubernetes.Interface
	Heartbeat kubernetes.Interface
	Reviews   kubernetes.Interface
}

// NewClients builds the heartbeat client (unthrottled, each request bounded
// as the kubelet's) and the review client (base's QPS and burst on a limiter
// of its own) beside shared.
func (c *Config) NewClients(base *rest.Config, shared kubernetes.Interface) (Clients, error) {
	hb, err := kube.Clientset(kube.HeartbeatConfig(base, c.heartbeatTimeout()))
	if err != nil {
		return Clients{}, err
	}
	reviews, err := kube.Clientset(kube.OwnLimiterConfig(base))
	if err != nil {
		return Clients{}, err
	}
	return Clients{Shared: shared, Heartbeat: hb, Reviews: reviews}, nil
}

// New builds the stage from the process's parts (fx constructor).
func New(cfg *Config, common *config.Common, log *zap.Logger, cs kubernetes.Interface, restCfg *rest.Config, conn *messaging.Conn, js jetstream.JetStream, reg prometheus.Registerer, bm *bus.Metrics, tp *tracing.Provider) (*Runner, error) {
	clients, err := cfg.NewClients(restCfg, cs)
	if err != nil {
		return nil, err
	}
	r, err := Build(cfg, common, log, clients, conn.NC, js, conn.StreamsReady, bm, tp)
	if err != nil {
		return nil, err
	}
	// kubelet_node_name: the kubelet's metric that names its node (always 1).
	nodeName := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: "kubelet", Name: "node_name", Help: "The node's name. The count is always 1.",
	}, []string{"node"})
	nodeName.WithLabelValues(common.NodeName).Set(1)
	if _, err := health.Register(reg, nodeName); err != nil {
		return nil, err
	}
	if err := registerEvictionCost(reg, r.Eviction); err != nil {
		return nil, err
	}
	return r, nil
}

// registerEvictionCost exports what the eviction manager's rounds cost:
// their number, their goroutine's CPU time and their wall time.
func registerEvictionCost(reg prometheus.Registerer, l *eviction.Loop) error {
	rounds, err := health.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "splitlet_nodehb_eviction_rounds_total",
		Help: "Rounds of the eviction manager."}))
	if err != nil {
		return err
	}
	cpu, err := health.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "splitlet_nodehb_eviction_round_cpu_seconds_total",
		Help: "CPU time of the eviction manager's rounds (the round's own thread)."}))
	if err != nil {
		return err
	}
	wall, err := health.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "splitlet_nodehb_eviction_round_seconds_total",
		Help: "Wall time of the eviction manager's rounds."}))
	if err != nil {
		return err
	}
	l.SetRoundObserver(func(c eviction.RoundCost) {
		rounds.Inc()
		cpu.Add(c.CPU.Seconds())
		wall.Add(c.Wall.Seconds())
	})
	return nil
}

// Build builds the stage; every configuration error names its key. bm
// (nil: none) counts its bus metrics.
func Build(cfg *Config, common *config.Common, log *zap.Logger, clients Clients, nc *nats.Conn, js jetstream.JetStream, streamsReady func(context.Context) error,
	bm *bus.Metrics, tp *tracing.Provider) (_ *Runner, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log = log.Named("nodehb")
	info := nodestatus.SystemInfo(app.Version, common.Runtime, app.Version)
	desired, err := cfg.desired(common, info)
	if err != nil {
		return nil, err
	}
	cas, err := cfg.clientCAs()
	if err != nil {
		return nil, err
	}
	r := &Runner{log: log, node: common.NodeName, js: js, streamsReady: streamsReady, nc: nc}
	r.Static = staticpods.New(log.Named("static"), bm)
	r.Gate = readiness.New(readiness.WithTimeout(cfg.AgentTimeout), readiness.WithGrace(cfg.AgentGrace), readiness.WithLogger(log.Named("readiness")))
	recorder, stopEvents := kube.NewRecorder(clients.Shared, common.NodeName)
	r.stopEvents = stopEvents
	defer func() {
		if err != nil {
			stopEvents()
		}
	}()
	pub := bus.NewPublisher(nc, js, common.NodeName, "nodehb", common.BusEncodingOption())
	r.pub = pub
	evictor := &podsView{}
	if r.Eviction, err = cfg.evictionLoop(common, evictor, pub, recorder, log.Named("eviction")); err != nil {
		return nil, err
	}
	statusOpts := []nodestatus.Option{nodestatus.WithPressure(r.Eviction)}
	if r.Devices, err = cfg.deviceManager(common, apiPods{cs: clients.Shared, node: common.NodeName}, log.Named("devices")); err != nil {
		stopEvents()
		return nil, err
	}
	if r.Devices != nil {
		statusOpts = append(statusOpts, nodestatus.WithExtendedResources(r.Devices))
	}
	r.Status = nodestatus.New(clients.Heartbeat, desired, r.Gate, append(statusOpts,
		nodestatus.WithUpdateFrequency(cfg.StatusUpdate),
		nodestatus.WithReportFrequency(cfg.StatusReport),
		nodestatus.WithRecorder(recorder),
		nodestatus.WithLogger(log.Named("status")))...)
	r.Lease = lease.New(clients.Heartbeat, common.NodeName, r.Status.NodeUID,
		lease.WithDuration(cfg.LeaseDuration), lease.WithRenewInterval(cfg.LeaseRenew),
		lease.WithLogger(log.Named("lease")))
	if err = r.buildAPI(cfg, common, desired, cas, clients, pub, tp); err != nil {
		return nil, err
	}
	evictor.api = r.API
	return r, nil
}

// apiAuth is the kubelet API's authentication (client certificates of cas,
// bearer tokens through TokenReview when on) and authorization.
func (c *Config) apiAuth(cas *x509.CertPool, reviews kubernetes.Interface, log *zap.Logger) (kubeletapi.Union, kubeletapi.Authorizer, error) {
	var authn kubeletapi.Union
	if cas != nil {
		authn = append(authn, &kubeletapi.ClientCertAuthenticator{Roots: cas})
	}
	if c.TokenWebhook {
		failures := kubeletapi.NewFailureLimiter(c.AuthFailureQPS, c.AuthFailureBurst, FailureSources, log)
		tokens, err := kubeletapi.NewTokenReviewAuthenticator(reviews, nil, failures)
		if err != nil {
			return nil, nil, err
		}
		authn = append(authn, tokens)
	}
	var authz kubeletapi.Authorizer = kubeletapi.NewSubjectAccessReviewAuthorizer(reviews)
	if c.AuthzMode == AuthzAlwaysAllow {
		authz = kubeletapi.AlwaysAllow{}
	}
	return authn, authz, nil
}

// buildAPI builds the kubelet API server: its address, serving certificate
// (rotated when nodehb.rotate-server-certificates), authentication and
// /configz.
func (r *Runner) buildAPI(cfg *Config, common *config.Common, desired *nodestatus.Desired, cas *x509.CertPool, clients Clients, pub *bus.Publisher, tp *tracing.Provider) (err error) {
	log := r.log
	authn, authz, err := cfg.apiAuth(cas, clients.Reviews, log.Named("api"))
	if err != nil {
		return err
	}
	bind := cfg.BindAddress
	if bind == "" {
		bind = cfg.Address
	}
	configz, err := cfg.kubeletConfiguration(common, bind, desired.Taints)
	if err != nil {
		return err
	}
	hostnames, ips := []string{desired.Addresses[1].Address}, []net.IP{net.ParseIP(cfg.Address)}
	var getCert func() *tls.Certificate
	if cfg.RotateServerCert {
		if r.serving, err = nodecert.NewServerRotator(log.Named("serving"), common.CertDir, common.NodeName, hostnames, ips, clients.Shared); err != nil {
			return err
		}
		getCert = r.serving.Current
	}
	r.API, err = kubeletapi.New(kubeletapi.Config{
		Node:           common.NodeName,
		Addr:           net.JoinHostPort(bind, strconv.Itoa(cfg.Port)),
		Partitions:     common.Partitions,
		CertFile:       cfg.TLSCertFile,
		KeyFile:        cfg.TLSKeyFile,
		GetCertificate: getCert,
		Hostnames:      hostnames,
		IPs:            ips,
		ClientCAs:      cas,
		Anonymous:      cfg.AnonymousAuth,
		Authenticator:  authn,
		Authorizer:     authz,
		Pods:           apiPods{cs: clients.Shared, node: common.NodeName},
		Static:         r.Static,
		Bus:            pub,
		Log:            log.Named("api"),
		RequestTimeout: cfg.RequestTimeout,
		Configz:        func() any { return withStaticPodPath(configz, r.Static.Path()) },
		Trace:          tp.Handler,
		Observe:        r.Eviction.Observe,
		NodeUsage:      nodeUsage(common),
	})
	return err
}

// podsView gives the eviction manager the pods through the kubelet API's
// runtime requests (built after the loop).
type podsView struct{ api *kubeletapi.Server }

func (v *podsView) Stats(ctx context.Context) ([]bus.PodStats, int) { return v.api.PodStats(ctx) }
func (v *podsView) ImageFs(ctx context.Context) *bus.FsStats        { return v.api.ImageFs(ctx) }
func (v *podsView) Evict(ctx context.Context, p int, req *bus.EvictRequest) (*bus.EvictResult, error) {
	return v.api.Evict(ctx, p, req)
}

// nodeUsage reads the node's own CPU and memory where the node is the
// host (process and cri runtimes); the sim runtime's node is made up, and
// its figures are the sum of its pods'.
func nodeUsage(common *config.Common) func() (eviction.NodeUsage, error) {
	if common.Runtime != config.RuntimeProcess && common.Runtime != config.RuntimeCRI {
		return nil
	}
	return eviction.NewHost(common.DataDir).Usage
}

// evictionLoop builds the eviction manager. The sim runtime's node has no
// real resources (its capacity is made up), so there it observes no signal
// and evicts nothing; process and cri observe the host.
func (c *Config) evictionLoop(common *config.Common, pods eviction.Pods, pub *bus.Publisher, recorder record.EventRecorder, log *zap.Logger) (*eviction.Loop, error) {
	ts := c.parsed.thresholds
	observe := func(eviction.Observations) error { return nil }
	var reclaimer eviction.NodeReclaimer
	var nodeFsDevice uint64
	if common.Runtime == config.RuntimeProcess || common.Runtime == config.RuntimeCRI {
		host := eviction.NewHost(common.DataDir)
		observe, nodeFsDevice = host.Observe, host.NodeFsDevice()
		reclaimer = busReclaimer{pub: pub, subj: bus.For(common.NodeName)}
	}
	subject := bus.For(common.NodeName).NodePressure()
	publish := func(ctx context.Context, conds []corev1.NodeConditionType) error {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if conds == nil {
			conds = []corev1.NodeConditionType{}
		}
		return pub.Publish(pctx, subject, bus.KindNodePressure, "", &bus.NodePressure{Conditions: conds})
	}
	return eviction.NewLoop(eviction.Config{
		Thresholds: ts, Interval: c.Eviction.Interval, Transition: c.Eviction.Transition,
		MaxPodGrace: c.Eviction.MaxPodGrace, Partitions: common.Partitions, Node: common.NodeName, NodeFsDevice: nodeFsDevice,
	}, observe, pods, reclaimer, publish, recorder, log), nil
}

// Start returns at once; the stage's loops run in the background.
func (r *Runner) Start(context.Context) error {
	if r.startedOnce {
		return errors.New("nodehb: started twice")
	}
	r.startedOnce = true
	if err := r.API.Start(); err != nil {
		r.stopEvents()
		return err
	}
	if r.serving != nil {
		r.serving.Start()
	}
	r.startDevices(r.nc, r.pub)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(5)
	go func() {
		defer r.wg.Done()
		if r.streamsReady != nil {
			if err := r.streamsReady(ctx); err != nil {
				return
			}
		}
		r.Eviction.Run(ctx)
	}()
	for _, follow := range []func(context.Context, jetstream.JetStream, string){r.Gate.Run, r.Static.Run} {
		go func() {
			defer r.wg.Done()
			if r.streamsReady != nil {
				if err := r.streamsReady(ctx); err != nil {
					return
				}
			}
			follow(ctx, r.js, r.node)
		}()
	}
	go func() {
		defer r.wg.Done()
		r.Status.Run(ctx)
	}()
	go func() {
		defer r.wg.Done()
		// The Lease names its owner, so it follows the registration.
		select {
		case <-ctx.Done():
			return
		case <-r.Status.Registered():
		}
		r.Lease.Run(ctx)
	}()
	return nil
}

// Ready reports ready once the Node is registered.
func (r *Runner) Ready(context.Context) error {
	select {
	case <-r.Status.Registered():
		return nil
	default:
		return errors.New("node not registered yet")
	}
}

// Stop stops renewing and reporting, leaving the Node and Lease as they
// are (kubelet behaviour), and drains the API's requests.
func (r *Runner) Stop(ctx context.Context) error {
	if r.cancel == nil {
		r.stopEvents()
		return nil
	}
	err := r.API.Stop(ctx)
	if r.serving != nil {
		r.serving.Stop()
	}
	r.stopDevices()
	r.cancel()
	r.wg.Wait()
	r.stopEvents()
	return err
}

// apiPods reads the node's pods from the API server when a request needs
// them. The kubelet API is asked for pods a few times a minute at most, so
// a read then costs far less than an informer holding every pod of the node
// and decoding each of its changes (at 5000 pods: about 3 CPU-seconds and
// 50 MiB per create-to-delete cycle). resourceVersion 0 lets the API server
// answer from its watch cache.
type apiPods struct {
	cs   kubernetes.Interface
	node string
}

func (a apiPods) ListPods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := a.cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector:   kube.NodePodsSelector(a.node),
		ResourceVersion: "0",
	})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func (a apiPods) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	pod, err := a.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	if pod.Spec.NodeName != a.node {
		// A pod of another node is not this node's to serve (kubelet: its
		// pod manager holds only its own pods).
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	return pod, nil
}
