package nodecert

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"

	"github.com/splitlet/splitlet/libs/periodic"
)

// DefaultReloadPeriod is how often a Follower reads the certificate files
// again. A pair is renewed when at least 10 % of its lifetime is left, so
// this must stay well under that (the shortest lifetime a signer of
// kube-controller-manager gives, --cluster-signing-duration aside, is
// 10 minutes).
const DefaultReloadPeriod = 5 * time.Second

// maxDrain bounds how long the connections of a replaced pair keep serving
// the requests they carry (watches) before they are closed; the requests
// that follow a reload go over new connections at once.
const maxDrain = time.Minute

// Follower is the client transport of a process whose kubeconfig names its
// client certificate and key by file (client-certificate, client-key): it
// reads the files again every period and, when the certificate changed,
// sends every new request over new connections that present it, while
// the connections of the old pair finish what they carry and are closed
// before it expires. A file missing or half written (a rotation under
// way, a writer killed) keeps the pair in use.
type Follower struct {
	certFile, keyFile string
	base              *tls.Config
	log               *zap.Logger
	period            time.Duration
	cur               atomic.Pointer[generation]
	cancel            context.CancelFunc
	done              chan struct{}
	mu                sync.Mutex
	draining          []*time.Timer
}

// generation is the transport of one certificate pair.
type generation struct {
	rt       *http.Transport
	dialer   *connrotation.Dialer
	leaf     []byte
	notAfter time.Time
}

// FollowCertFiles returns cfg with a Follower as its transport when cfg
// authenticates with certificate files; otherwise cfg itself and a nil
// Follower. cfg is not changed.
func FollowCertFiles(cfg *rest.Config, log *zap.Logger, period time.Duration) (*rest.Config, *Follower, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" || len(cfg.CertData) > 0 || cfg.Transport != nil {
		return cfg, nil, nil
	}
	tlsOnly := rest.CopyConfig(cfg)
	tlsOnly.CertFile, tlsOnly.KeyFile = "", ""
	base, err := rest.TLSConfigFor(tlsOnly)
	if err != nil {
		return nil, nil, err
	}
	if base == nil {
		return nil, nil, errors.New("kubeconfig: a client certificate needs an https server")
	}
	f := &Follower{certFile: cfg.CertFile, keyFile: cfg.KeyFile, base: base, log: log, period: period, done: make(chan struct{})}
	pair, err := f.load()
	if err != nil {
		return nil, nil, err
	}
	f.cur.Store(f.newGeneration(pair))
	out := rest.CopyConfig(cfg)
	out.TLSClientConfig = rest.TLSClientConfig{}
	out.Transport = f
	return out, f, nil
}

// RoundTrip sends req over the connections of the current pair.
func (f *Follower) RoundTrip(req *http.Request) (*http.Response, error) {
	return f.cur.Load().rt.RoundTrip(req)
}

// Current is the certificate new requests present.
func (f *Follower) Current() []byte { return f.cur.Load().leaf }

// Start reads the files every period until Stop.
func (f *Follower) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go func() {
		defer close(f.done)
		periodic.Run(ctx, f.period, func(context.Context) { f.Reload() })
	}()
}

// Stop ends the reloads.
func (f *Follower) Stop() {
	if f.cancel != nil {
		f.cancel()
		<-f.done
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.draining {
		t.Stop()
	}
}

// Reload reads the files and switches to their pair when it changed.
func (f *Follower) Reload() {
	pair, err := f.load()
	if err != nil {
		f.log.Debug("client certificate not reloaded; the current one stays", zap.String("file", f.certFile), zap.Error(err))
		return
	}
	old := f.cur.Load()
	if bytes.Equal(pair.Certificate[0], old.leaf) {
		return
	}
	f.cur.Store(f.newGeneration(pair))
	f.log.Info("client certificate reloaded", zap.String("file", f.certFile), zap.String("subject", pair.Leaf.Subject.CommonName), zap.Time("notAfter", pair.Leaf.NotAfter))
	old.rt.CloseIdleConnections()
	drain := min(maxDrain, time.Until(old.notAfter)-5*time.Second)
	f.mu.Lock()
	f.draining = append(f.draining, time.AfterFunc(max(drain, 0), func() {
		old.dialer.CloseAll()
		old.rt.CloseIdleConnections()
	}))
	f.mu.Unlock()
}

func (f *Follower) load() (*tls.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return nil, err
	}
	return &pair, nil
}

// newGeneration is a transport whose connections present pair.
func (f *Follower) newGeneration(pair *tls.Certificate) *generation {
	tc := f.base.Clone()
	tc.Certificates = []tls.Certificate{*pair}
	d := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	rt := utilnet.SetTransportDefaults(&http.Transport{
		TLSClientConfig:     tc,
		DialContext:         d.DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 25,
		IdleConnTimeout:     90 * time.Second,
	})
	return &generation{rt: rt, dialer: d, leaf: pair.Certificate[0], notAfter: pair.Leaf.NotAfter}
}
