// Package messaging connects a process to NATS: to the servers named by
// --nats-url, or, when that is empty, to a nats-server embedded in the
// process (JetStream on, its store under the data dir). It also makes sure
// the node's streams exist.
package messaging

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
)

// Options for Connect.
type Options struct {
	// URL of the servers; empty embeds a server.
	URL string
	// Listen, with an embedded server, also accepts other processes there.
	Listen string
	// StoreDir of an embedded server's JetStream files.
	StoreDir string
	// Node whose streams to ensure.
	Node string
	// Replicas of the node's streams (0: keep what exists, else 1).
	Replicas int
	// NkeyFile holds the nkey seed of this identity; CredsFile a user JWT
	// and seed. TLSCA, TLSCert and TLSKey are files for TLS to the servers.
	NkeyFile, CredsFile    string
	TLSCA, TLSCert, TLSKey string
	// Name of this connection, as the server shows it.
	Name string
	// Identity is the bus identity the process connects as (a stage's
	// name), when it runs one stage: its inboxes are then
	// bus.InboxPrefix(Identity), the only ones it may subscribe to.
	// Empty keeps nats.go's _INBOX.
	Identity string
	Log      *zap.Logger
}

// Conn is a process's NATS connection, its JetStream handle and, when
// embedded, the server.
type Conn struct {
	NC       *nats.Conn
	JS       jetstream.JetStream
	server   *server.Server
	log      *zap.Logger
	node     string
	replicas int
	streams  atomic.Bool
	cancel   context.CancelFunc
	streamsC chan struct{}
}

// Connect connects without blocking on an unreachable server: the client
// keeps reconnecting forever with back-off and logs every change of state.
// The node's streams are created in the background once connected; wait for
// them with StreamsReady.
func Connect(opts Options) (*Conn, error) {
	log := opts.Log
	if log == nil {
		log = zap.NewNop()
	}
	c := &Conn{log: log, node: opts.Node, replicas: opts.Replicas, streamsC: make(chan struct{})}
	url := opts.URL
	natsOpts := []nats.Option{
		nats.Name(opts.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.CustomReconnectDelay(backoff),
		nats.RetryOnFailedConnect(true),
		nats.ConnectHandler(func(nc *nats.Conn) {
			log.Info("nats connected", zap.String("server", nc.ConnectedUrlRedacted()))
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("nats disconnected", zap.Error(err))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", zap.String("server", nc.ConnectedUrlRedacted()))
		}),
		nats.ClosedHandler(func(*nats.Conn) { log.Info("nats connection closed") }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			f := []zap.Field{zap.Error(err)}
			if sub != nil {
				f = append(f, zap.String("subject", sub.Subject))
			}
			log.Warn("nats error", f...)
		}),
	}
	auth, err := AuthOptions(opts)
	if err != nil {
		return nil, err
	}
	natsOpts = append(natsOpts, auth...)
	if opts.Identity != "" {
		natsOpts = append(natsOpts, nats.CustomInboxPrefix(bus.InboxPrefix(opts.Identity)))
	}
	if url == "" {
		ns, err := Embedded(opts.StoreDir, opts.Listen)
		if err != nil {
			return nil, err
		}
		c.server = ns
		url = ns.ClientURL()
		natsOpts = append(natsOpts, nats.InProcessServer(ns))
		log.Info("embedded nats-server started", zap.String("store", opts.StoreDir), zap.String("listen", opts.Listen))
	}
	nc, err := nats.Connect(url, natsOpts...)
	if err != nil {
		c.shutdownServer()
		return nil, fmt.Errorf("nats-url %s: %w", logging.RedactURL(url), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		c.shutdownServer()
		return nil, err
	}
	c.NC, c.JS = nc, js
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.ensureStreams(ctx)
	return c, nil
}

// AuthOptions are the client options of the identity and TLS settings of
// opts (NkeyFile, CredsFile, TLSCA, TLSCert, TLSKey); every error names its
// key. The `splitlet bus` and `splitlet status` commands connect with them
// too.
func AuthOptions(opts Options) ([]nats.Option, error) {
	var out []nats.Option
	if opts.NkeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(opts.NkeyFile)
		if err != nil {
			return nil, fmt.Errorf("nats-nkey %s: %w", opts.NkeyFile, err)
		}
		out = append(out, o)
	}
	if opts.CredsFile != "" {
		if _, err := os.Stat(opts.CredsFile); err != nil {
			return nil, fmt.Errorf("nats-creds: %w", err)
		}
		out = append(out, nats.UserCredentials(opts.CredsFile))
	}
	if opts.TLSCA != "" {
		if _, err := os.Stat(opts.TLSCA); err != nil {
			return nil, fmt.Errorf("nats-tls-ca: %w", err)
		}
		out = append(out, nats.RootCAs(opts.TLSCA))
	}
	if opts.TLSCert != "" {
		for key, f := range map[string]string{"nats-tls-cert": opts.TLSCert, "nats-tls-key": opts.TLSKey} {
			if _, err := os.Stat(f); err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
		}
		out = append(out, nats.ClientCert(opts.TLSCert, opts.TLSKey))
	}
	return out, nil
}

// backoff is the delay before reconnect attempt n: 250 ms doubling to 5 s.
func backoff(attempts int) time.Duration {
	d := 250 * time.Millisecond
	for i := 1; i < attempts && d < 5*time.Second; i++ {
		d *= 2
	}
	return min(d, 5*time.Second)
}

func (c *Conn) ensureStreams(ctx context.Context) {
	for attempt := 1; ; attempt++ {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := bus.EnsureStreamsReplicas(sctx, c.JS, c.node, c.replicas)
		cancel()
		if err == nil {
			c.streams.Store(true)
			close(c.streamsC)
			c.log.Info("bus streams ready")
			c.removeRetiredConsumers(ctx)
			return
		}
		if ctx.Err() != nil {
			return
		}
		c.log.Warn("bus streams not ready, retrying", zap.Int("attempt", attempt), zap.Error(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff(attempt)):
		}
	}
}

// StreamsReady waits until the node's streams exist.
func (c *Conn) StreamsReady(ctx context.Context) error {
	select {
	case <-c.streamsC:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Check is a readiness check: connected and streams in place.
func (c *Conn) Check(context.Context) error {
	if !c.NC.IsConnected() {
		return fmt.Errorf("nats %s", c.NC.Status())
	}
	if !c.streams.Load() {
		return errors.New("bus streams not created yet")
	}
	return nil
}

// Embedded reports whether the server runs in this process.
func (c *Conn) Embedded() *server.Server { return c.server }

// Close drains the connection (subscriptions finish what they hold) and
// stops an embedded server.
func (c *Conn) Close(ctx context.Context) error {
	c.cancel()
	done := make(chan struct{})
	if err := c.NC.Drain(); err != nil {
		c.NC.Close()
	}
	go func() {
		for c.NC.IsDraining() {
			select {
			case <-ctx.Done():
				c.NC.Close()
			case <-time.After(10 * time.Millisecond):
			}
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		c.NC.Close()
	}
	c.shutdownServer()
	return nil
}

func (c *Conn) shutdownServer() {
	if c.server != nil {
		c.server.Shutdown()
		c.server.WaitForShutdown()
	}
}

// Embedded starts a nats-server in this process with JetStream storing under
// storeDir. With listen empty it accepts in-process connections only.
func Embedded(storeDir, listen string) (*server.Server, error) {
	opts := &server.Options{
		ServerName: "splitlet-embedded",
		JetStream:  true,
		StoreDir:   filepath.Clean(storeDir),
		NoSigs:     true,
		NoLog:      true,
	}
	if listen == "" {
		opts.DontListen = true
	} else {
		host, port, err := net.SplitHostPort(listen)
		if err != nil {
			return nil, fmt.Errorf("nats-listen %q: %w", listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("nats-listen %q: bad port", listen)
		}
		if p == 0 {
			p = server.RANDOM_PORT
		}
		opts.Host, opts.Port = host, p
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded nats-server did not become ready in 30s")
	}
	return ns, nil
}

// removeRetiredConsumers deletes, on an embedded server (this process has
// every right there), the durable consumers the contract does not define
// (bus.RemoveRetiredConsumers); on any other server `splitlet bus init`
// does.
func (c *Conn) removeRetiredConsumers(ctx context.Context) {
	if c.server == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := bus.RemoveRetiredConsumers(rctx, c.JS, c.node)
	if err != nil {
		c.log.Warn("cannot remove retired durable consumers", zap.Error(err))
		return
	}
	if n > 0 {
		c.log.Info("removed durable consumers no stage reads", zap.Int("consumers", n))
	}
}
