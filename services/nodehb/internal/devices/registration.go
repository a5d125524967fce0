package devices

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/splitlet/splitlet/libs/kube"
)

// dialTimeout bounds the connection to a registering plugin (kubelet: 10 s).
const dialTimeout = 10 * time.Second

// endpoint is the connection to one registered plugin.
type endpoint struct {
	resource string
	conn     *grpc.ClientConn
	client   pluginapi.DevicePluginClient
	options  *pluginapi.DevicePluginOptions
}

// registration is the Registration service of the socket.
type registration struct {
	pluginapi.UnimplementedRegistrationServer
	m   *Manager
	ctx context.Context
}

// Start serves the registration socket, <dir>/kubelet.sock, and reads the
// checkpoint. A socket file left by an agent killed is replaced; one another
// agent answers on is not taken.
func (m *Manager) Start() error {
	if err := os.MkdirAll(m.cfg.Dir, 0o750); err != nil {
		return fmt.Errorf("device plugins: %w", err)
	}
	m.load()
	sock := filepath.Join(m.cfg.Dir, SocketName)
	if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
		_ = c.Close()
		return fmt.Errorf("device plugins: another agent serves %s", sock)
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("device plugins: %w", err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("device plugins: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.server = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(m.server, &registration{m: m, ctx: ctx})
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if err := m.server.Serve(lis); err != nil {
			m.log.Error("device plugin registration server stopped", zap.Error(err))
		}
	}()
	m.log.Info("device plugin registration socket served", zap.String("path", sock))
	return nil
}

// Stop stops the socket and the plugins' streams; the socket file goes.
func (m *Manager) Stop() {
	if m.server == nil {
		return
	}
	m.cancel()
	m.server.Stop()
	m.mu.Lock()
	for _, r := range m.res {
		if r.ep != nil {
			_ = r.ep.conn.Close()
		}
	}
	m.mu.Unlock()
	m.wg.Wait()
	_ = os.Remove(filepath.Join(m.cfg.Dir, SocketName))
}

// Register checks a plugin's registration as the kubelet does, connects to
// its endpoint, asks its options and follows its devices.
func (g *registration) Register(ctx context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	m := g.m
	log := m.log.With(zap.String("resource", r.ResourceName), zap.String("endpoint", r.Endpoint))
	log.Info("device plugin registration")
	if err := validateRegistration(r); err != nil {
		log.Warn("device plugin registration refused", zap.Error(err))
		return &pluginapi.Empty{}, err
	}
	ep, err := m.connect(ctx, r.ResourceName, filepath.Join(m.cfg.Dir, r.Endpoint))
	if err != nil {
		log.Warn("device plugin registration failed", zap.Error(err))
		return &pluginapi.Empty{}, err
	}
	m.install(ep)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.listAndWatch(g.ctx, ep)
	}()
	return &pluginapi.Empty{}, nil
}

// validateRegistration: a supported version, an extended resource name and
// a socket file name in the directory.
func validateRegistration(r *pluginapi.RegisterRequest) error {
	if !slices.Contains(pluginapi.SupportedVersions[:], r.Version) {
		return fmt.Errorf("requested API version %q is not supported by kubelet. Supported version is %q", r.Version, pluginapi.SupportedVersions)
	}
	if !kube.IsExtendedResourceName(r.ResourceName) {
		return fmt.Errorf("the ResourceName %q is invalid", r.ResourceName)
	}
	if r.Endpoint == "" || r.Endpoint != filepath.Base(r.Endpoint) || r.Endpoint == SocketName || r.Endpoint == "." || r.Endpoint == ".." {
		return fmt.Errorf("invalid endpoint %q: must be the name of a socket in the device plugin directory", r.Endpoint)
	}
	return nil
}

// connect dials the plugin's socket and reads its options (kubelet:
// client.Connect and PluginConnected).
func (m *Manager) connect(ctx context.Context, name, sock string) (*endpoint, error) {
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(dctx, "unix", sock)
	if err != nil {
		return nil, fmt.Errorf("failed to dial device plugin: %v", err)
	}
	_ = c.Close()
	conn, err := grpc.NewClient("passthrough:///"+sock,
		grpc.WithAuthority("localhost"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}))
	if err != nil {
		return nil, fmt.Errorf("failed to dial device plugin: %v", err)
	}
	ep := &endpoint{resource: name, conn: conn, client: pluginapi.NewDevicePluginClient(conn)}
	ep.options, err = ep.client.GetDevicePluginOptions(dctx, &pluginapi.Empty{})
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("failed to get device plugin options: %v", err)
	}
	return ep, nil
}

// install makes ep the resource's endpoint; a previous one is closed, and
// the devices it listed stay until ep lists its own.
func (m *Manager) install(ep *endpoint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.removed, ep.resource)
	r := m.res[ep.resource]
	if r == nil {
		r = &resourceState{devices: map[string]bool{}}
		m.res[ep.resource] = r
	}
	old := r.ep
	r.ep, r.stopped = ep, time.Time{}
	if old != nil {
		_ = old.conn.Close()
	}
}

// listAndWatch follows the plugin's devices until its stream ends, then
// marks them unhealthy; it never calls again (kubelet: the plugin must
// register again).
func (m *Manager) listAndWatch(ctx context.Context, ep *endpoint) {
	log := m.log.With(zap.String("resource", ep.resource))
	defer m.endpointStopped(ep.resource, ep)
	stream, err := ep.client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		log.Warn("ListAndWatch ended unexpectedly for device plugin", zap.Error(err))
		return
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("ListAndWatch ended unexpectedly for device plugin", zap.Error(err))
			}
			return
		}
		log.Debug("device plugin listed its devices", zap.Int("devices", len(resp.GetDevices())))
		m.setDevices(ep.resource, ep, resp.GetDevices())
	}
}
