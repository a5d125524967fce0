// Package kubeletapi serves the kubelet's HTTPS API (port 10250) for the
// agent: /healthz, /pods, /containerLogs, /run, /exec, /attach,
// /stats/summary, /metrics/resource and /configz, with the kubelet's webhook
// authentication and authorization (answers cached in bounded LRUs, failed
// authentications limited per source address). Logs, exec and stats are
// answered by the pod workers over the bus (runtime.logs|exec|stats.<p>);
// interactive exec, attach and port-forward are proxied to the runtime's
// streaming server, whose URL the pod workers give (runtime.stream.<p>).
package kubeletapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/services/nodehb/internal/eviction"
)

// PodSource gives the pods bound to the node. GetPod returns an error for
// which apierrors.IsNotFound holds when the node has no such pod.
type PodSource interface {
	ListPods(ctx context.Context) ([]corev1.Pod, error)
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// StaticPods gives the node's static pods by full name, as podconfig holds
// them (state.static).
type StaticPods interface {
	// UID is the UID of the static pod namespace/name; ok is false when
	// there is none.
	UID(namespace, name string) (uid types.UID, ok bool)
}

// Config of a Server.
type Config struct {
	Node       string
	Addr       string // host:port to listen on
	Partitions int
	// CertFile and KeyFile serve TLS; both empty: a self-signed
	// certificate is made at start for Hostnames and IPs.
	CertFile, KeyFile string
	// GetCertificate, when set, gives the serving certificate at each
	// handshake (a renewed pair is served at once and open connections
	// are kept); CertFile and KeyFile are then unused.
	GetCertificate func() *tls.Certificate
	Hostnames      []string
	IPs            []net.IP
	// ClientCAs verify client certificates; nil: none accepted.
	ClientCAs *x509.CertPool
	// Anonymous admits requests without credentials as system:anonymous.
	Anonymous     bool
	Authenticator Authenticator
	Authorizer    Authorizer
	Pods          PodSource
	// Static resolves mirror pods; nil: no static pods, so every mirror pod
	// stands for none.
	Static StaticPods
	Bus    *bus.Publisher
	Log    *zap.Logger
	// RequestTimeout bounds exec and stats requests on the bus.
	RequestTimeout time.Duration
	// Configz gives the node's KubeletConfiguration as /configz states it
	// (under "kubeletconfig") at each request; nil: /configz is not served.
	Configz func() any
	// Trace, if set, wraps the handler: a request that carries a trace
	// context (an API server that traces, proxying logs or exec)
	// continues it, down to the pod workers' runtime call.
	Trace func(h http.Handler, operation string) http.Handler
	// Observe, if set, adds the node's own figures (the eviction
	// manager's signals) to /stats/summary's node: memory available and
	// working set, the node file system, the process limit; nil: the node's
	// memory is the sum of its pods'.
	Observe func(eviction.Observations) error
	// NodeUsage, if set, gives the node's own CPU and memory (the root
	// cgroup) for the summary's and /metrics/resource's node; nil: the
	// node's CPU and memory are the sum of its pods' (a simulated node).
	NodeUsage func() (eviction.NodeUsage, error)
}

// Server is the running kubelet API.
type Server struct {
	cfg    Config
	log    *zap.Logger
	srv    *http.Server
	ln     net.Listener
	wg     sync.WaitGroup
	subj   bus.Subjects
	mux    *http.ServeMux
	reqTTL time.Duration
	// base is the parent of every request's context; Stop cancels it
	// after a short grace so that followed logs end.
	base       context.Context
	cancelBase context.CancelFunc
	// cpu turns the node's cumulative CPU into a rate (nodeCPU).
	cpu cpuRate
}

// New builds the server; Start listens.
func New(cfg Config) (*Server, error) {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Partitions < 1 {
		return nil, errors.New("kubeletapi: partitions must be at least 1")
	}
	if cfg.Authorizer == nil {
		return nil, errors.New("kubeletapi: no authorizer")
	}
	s := &Server{cfg: cfg, log: cfg.Log, subj: bus.For(cfg.Node), mux: http.NewServeMux(), reqTTL: cfg.RequestTimeout}
	if s.reqTTL <= 0 {
		s.reqTTL = 10 * time.Second
	}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	s.routes()
	tlsConfig, err := servingTLS(cfg)
	if err != nil {
		return nil, err
	}
	s.srv = &http.Server{
		Handler:           s.traced(s.withAuth(s.mux)),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return s.base },
		ErrorLog:          zap.NewStdLog(cfg.Log.Named("http")),
	}
	return s, nil
}

// servingTLS is the server's TLS configuration: the certificate of
// GetCertificate at each handshake, else that of CertFile and KeyFile, else
// a self-signed one.
func servingTLS(cfg Config) (*tls.Config, error) {
	tc := &tls.Config{
		// Verified by the authenticator, so that a bad certificate is a
		// 401 rather than a failed handshake (kubelet behaviour).
		ClientAuth: tls.RequestClientCert,
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
	}
	switch {
	case cfg.GetCertificate != nil:
		tc.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := cfg.GetCertificate(); c != nil {
				return c, nil
			}
			return nil, errors.New("no serving certificate available for the kubelet")
		}
	case cfg.CertFile != "" || cfg.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kubeletapi: serving certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	default:
		cert, err := selfSigned(cfg.Node, cfg.Hostnames, cfg.IPs)
		if err != nil {
			return nil, fmt.Errorf("kubeletapi: self-signed certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Handler is the whole API with authentication (for tests and embedding).
func (s *Server) Handler() http.Handler { return s.srv.Handler }

// Start listens and serves in the background.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("kubeletapi: listen %s: %w", s.cfg.Addr, err)
	}
	s.ln = ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("kubelet API server stopped", zap.Error(err))
		}
	}()
	s.log.Info("kubelet API serving", zap.String("addr", ln.Addr().String()))
	return nil
}

// Addr is the listening address.
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// StopGrace is how long Stop lets requests finish before it cancels them:
// a followed log or a long exec would otherwise hold shutdown to its limit.
const StopGrace = 2 * time.Second

// Stop drains requests for StopGrace, then cancels what is left and waits
// for it until ctx ends.
func (s *Server) Stop(ctx context.Context) error {
	grace, cancel := context.WithTimeout(ctx, StopGrace)
	err := s.srv.Shutdown(grace)
	cancel()
	if err != nil {
		s.cancelBase()
		if err = s.srv.Shutdown(ctx); err != nil {
			_ = s.srv.Close()
		}
	}
	s.cancelBase()
	s.wg.Wait()
	return err
}

// withAuth authenticates and authorizes every request as the kubelet does:
// no credentials -> 401 (unless anonymous is allowed), not allowed -> 403;
// a source whose failed authentications are spent -> 429 (FailureLimiter).
func (s *Server) withAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var user User
		ok := false
		var err error
		if s.cfg.Authenticator != nil {
			user, ok, err = s.cfg.Authenticator.Authenticate(r)
		}
		if !ok {
			var throttled *ThrottledError
			if errors.As(err, &throttled) {
				// Logged by the limiter, once per source and episode.
				w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(throttled.RetryAfter.Seconds())))))
				http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)
				return
			}
			if err != nil && r.Context().Err() == nil {
				// A client that went away is not worth a line (a flood
				// leaves many).
				s.log.Info("authentication failed", zap.String("path", r.URL.Path), zap.Error(err))
			}
			if !s.cfg.Anonymous || err != nil {
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
				return
			}
			user = Anonymous
		}
		attrs := attributesFor(s.cfg.Node, r)
		subs := make([]string, 0, len(attrs))
		for _, a := range attrs {
			subs = append(subs, a.Subresource)
			allowed, _, err := s.cfg.Authorizer.Authorize(r.Context(), user, a)
			if err != nil {
				s.log.Warn("authorization failed", zap.String("user", user.Name), zap.String("path", r.URL.Path), zap.Error(err))
				http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=nodes, subresource=%s)", user.Name, a.Verb, a.Subresource), http.StatusInternalServerError)
				return
			}
			if allowed {
				next.ServeHTTP(w, r)
				return
			}
		}
		msg := fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource(s)=%v)", user.Name, attrs[0].Verb, subs)
		http.Error(w, msg, http.StatusForbidden)
	})
}

func (s *Server) routes() {
	s.mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	s.mux.HandleFunc("GET /pods", s.handlePods)
	s.mux.HandleFunc("GET /pods/{$}", s.handlePods)
	s.mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", s.handleLogs)
	s.mux.HandleFunc("POST /run/{namespace}/{pod}/{container}", s.handleRun)
	s.mux.HandleFunc("POST /run/{namespace}/{pod}/{uid}/{container}", s.handleRun)
	s.mux.HandleFunc("/exec/{namespace}/{pod}/{container}", s.handleExec)
	s.mux.HandleFunc("/exec/{namespace}/{pod}/{uid}/{container}", s.handleExec)
	s.mux.HandleFunc("/attach/{namespace}/{pod}/{container}", s.handleAttach)
	s.mux.HandleFunc("/attach/{namespace}/{pod}/{uid}/{container}", s.handleAttach)
	s.mux.HandleFunc("/portForward/{namespace}/{pod}", s.handlePortForward)
	s.mux.HandleFunc("/portForward/{namespace}/{pod}/{uid}", s.handlePortForward)
	s.mux.HandleFunc("GET /stats/summary", s.handleSummary)
	s.mux.HandleFunc("GET /metrics/resource", s.handleResourceMetrics)
	if s.cfg.Configz != nil {
		s.mux.HandleFunc("GET /configz", s.handleConfigz)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		// The header is out; nothing more to tell the client.
		return
	}
}

func (s *Server) handlePods(w http.ResponseWriter, r *http.Request) {
	pods, err := s.cfg.Pods.ListPods(r.Context())
	if err != nil {
		s.cfg.Log.Warn("listing the node's pods", zap.String("node", s.cfg.Node), zap.Error(err))
		http.Error(w, "listing the node's pods: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if pods == nil {
		pods = []corev1.Pod{}
	}
	writeJSON(w, &corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: pods})
}

// handleConfigz answers the node's configuration as the kubelet's /configz
// does: {"kubeletconfig": <KubeletConfiguration>}.
func (s *Server) handleConfigz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, map[string]any{"kubeletconfig": s.cfg.Configz()})
}

// MirrorAnnotation on a mirror pod holds the static pod's UID, its identity
// on the bus (kubelet: kubetypes.ConfigMirrorAnnotationKey).
const MirrorAnnotation = "kubernetes.io/config.mirror"

// busUID is the identity on the bus of an API pod of the node, resolved by
// full name as the kubelet's pod manager resolves it: a pod's own UID; for a
// mirror pod (one with the annotation, whatever its value), the UID of the
// static pod of the same namespace and name, when the annotation is that
// UID. A mirror pod of no such static pod stands for no pod (ok false): the
// annotation, which anyone who creates a pod may set, never selects another.
func (s *Server) busUID(p *corev1.Pod) (uid string, ok bool) {
	h, mirror := p.Annotations[MirrorAnnotation]
	if !mirror {
		return string(p.UID), true
	}
	if s.cfg.Static == nil {
		return "", false
	}
	static, ok := s.cfg.Static.UID(p.Namespace, p.Name)
	if !ok || string(static) != h {
		return "", false
	}
	return h, true
}

// containerTTY is the tty of the named container's spec.
func containerTTY(p *corev1.Pod, name string) bool {
	for _, c := range p.Spec.Containers {
		if c.Name == name {
			return c.TTY
		}
	}
	for _, c := range p.Spec.InitContainers {
		if c.Name == name {
			return c.TTY
		}
	}
	for _, c := range p.Spec.EphemeralContainers {
		if c.Name == name {
			return c.TTY
		}
	}
	return false
}

func hasContainer(p *corev1.Pod, name string) bool {
	for _, c := range p.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range p.Spec.InitContainers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range p.Spec.EphemeralContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// resolved is the pod and container a request names: the API pod, its
// identity on the bus (busUID) and the container.
type resolved struct {
	pod       *corev1.Pod
	uid       string
	container string
}

// lookup finds the pod and container named in the path, the pod by
// namespace and name alone; it has written the error when ok is false.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) (resolved, bool) {
	tg, ok := s.lookupPod(w, r)
	if !ok {
		return resolved{}, false
	}
	container := r.PathValue("container")
	if !hasContainer(tg.pod, container) {
		http.Error(w, fmt.Sprintf("container %q not found in pod %q", container, tg.pod.Namespace+"/"+tg.pod.Name), http.StatusNotFound)
		return resolved{}, false
	}
	tg.container = container
	return tg, true
}

// lookupPod finds the pod named in the path by namespace and name, of the
// UID the path names if it names one; it has written the error when ok is
// false.
func (s *Server) lookupPod(w http.ResponseWriter, r *http.Request) (resolved, bool) {
	ns, name := r.PathValue("namespace"), r.PathValue("pod")
	pod, err := s.cfg.Pods.GetPod(r.Context(), ns, name)
	if apierrors.IsNotFound(err) {
		http.Error(w, fmt.Sprintf("pod %q not found on node %q", ns+"/"+name, s.cfg.Node), http.StatusNotFound)
		return resolved{}, false
	}
	if err != nil {
		s.cfg.Log.Warn("looking up a pod", zap.String("pod", ns+"/"+name), zap.String("node", s.cfg.Node), zap.Error(err))
		http.Error(w, fmt.Sprintf("looking up pod %q: %v", ns+"/"+name, err), http.StatusServiceUnavailable)
		return resolved{}, false
	}
	uid, ok := s.busUID(pod)
	if !ok {
		// kubelet: a mirror pod without its static pod is not in the pod
		// manager's pods, so GetPodByName finds nothing.
		s.cfg.Log.Info("a mirror pod of no static pod of its name; refused",
			append(logging.Pod(ns, name, string(pod.UID)), zap.String("mirror", pod.Annotations[MirrorAnnotation]))...)
		http.Error(w, fmt.Sprintf("pod %q does not exist", name), http.StatusNotFound)
		return resolved{}, false
	}
	if uid := r.PathValue("uid"); uid != "" && uid != string(pod.UID) {
		http.Error(w, fmt.Sprintf("pod %q with UID %s not found", ns+"/"+name, uid), http.StatusNotFound)
		return resolved{}, false
	}
	return resolved{pod: pod, uid: uid}, true
}

func (s *Server) partition(uid string) int { return bus.Partition(uid, s.cfg.Partitions) }

// selfSigned makes a serving certificate for the node, valid a year (kubelet:
// a self-signed certificate when none is configured).
func selfSigned(node string, hosts []string, ips []net.IP) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: node + "@" + fmt.Sprint(now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              append([]string{node}, hosts...),
		IPAddresses:           append([]net.IP{net.ParseIP("127.0.0.1")}, ips...),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func (s *Server) traced(h http.Handler) http.Handler {
	if s.cfg.Trace == nil {
		return h
	}
	return s.cfg.Trace(h, "nodehb")
}
