package cri

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	containerdtypes "github.com/containerd/containerd/api/types"
	"github.com/moby/sys/mountinfo"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/runtime"
)

// Image volumes: the image is pulled through the CRI as a container's
// (ensureImage), then its filesystem is a read-only view snapshot of its
// layers in containerd's snapshotter, asked for through containerd's own
// snapshots service on the CRI's socket (the CRI's Mount.image is not
// honoured by every containerd), mounted read-only, nosuid and nodev on
// the volume's directory and bound into the container from there.
//
// The view's key names the pod and the volume (viewPrefix<uid>/<volume>),
// so that what a pod worker killed in between left is found and removed
// (sweepImageVolumes); its labels keep it from containerd's garbage
// collection (and with it the layers under it), name the image (which
// image GC then counts in use) and the directory it is mounted on.
const (
	// containerdNamespace is the namespace of the CRI's images and snapshots.
	containerdNamespace = "k8s.io"
	viewPrefix          = "splitlet.io/image-volume/"
	labelGCRoot         = "containerd.io/gc.root"
	labelViewImage      = "splitlet.io/image-volume.image"
	labelViewTarget     = "splitlet.io/image-volume.target"
	// defaultSnapshotter is containerd's default, when its CRI config
	// names none.
	defaultSnapshotter = "overlayfs"
)

var _ runtime.ImageVolumes = (*Runtime)(nil)

// imageVolumes holds the connection to containerd's snapshots service,
// made at the first use.
type imageVolumes struct {
	mu          sync.Mutex
	conn        *grpc.ClientConn
	snaps       snapshotsapi.SnapshotsClient
	snapshotter string
}

// snapshots is containerd's snapshots service and the CRI's snapshotter,
// connected on first use; a CRI runtime other than containerd has none.
func (r *Runtime) snapshots(ctx context.Context) (snapshotsapi.SnapshotsClient, string, error) {
	iv := &r.imageVols
	iv.mu.Lock()
	defer iv.mu.Unlock()
	if iv.snaps != nil {
		return iv.snaps, iv.snapshotter, nil
	}
	if r.name != "containerd" {
		return nil, "", fmt.Errorf("image volumes need containerd's snapshots service; the CRI runtime is %s", r.name)
	}
	path := strings.TrimPrefix(r.opts.endpoint, "unix://")
	conn, err := grpc.NewClient("passthrough:///containerd",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}))
	if err != nil {
		return nil, "", fmt.Errorf("containerd's snapshots service at %s: %w", path, err)
	}
	iv.conn = conn
	iv.snaps = snapshotsapi.NewSnapshotsClient(conn)
	iv.snapshotter = r.criSnapshotter(ctx)
	return iv.snaps, iv.snapshotter, nil
}

// closeImageVolumes closes the snapshots connection, if made.
func (r *Runtime) closeImageVolumes() {
	r.imageVols.mu.Lock()
	defer r.imageVols.mu.Unlock()
	if r.imageVols.conn != nil {
		_ = r.imageVols.conn.Close()
		r.imageVols.conn, r.imageVols.snaps = nil, nil
	}
}

// criSnapshotter is the snapshotter the CRI's configuration names.
func (r *Runtime) criSnapshotter(ctx context.Context) string {
	st, err := r.rs.Status(ctx, true)
	if err != nil {
		return defaultSnapshotter
	}
	var cfg struct {
		Containerd struct {
			Snapshotter string `json:"snapshotter"`
		} `json:"containerd"`
	}
	if raw, ok := st.GetInfo()["config"]; ok {
		_ = json.Unmarshal([]byte(raw), &cfg)
	}
	return or(cfg.Containerd.Snapshotter, defaultSnapshotter)
}

// nsCtx is ctx in the CRI's containerd namespace.
func nsCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "containerd-namespace", containerdNamespace)
}

func viewKey(uid types.UID, volume string) string {
	return viewPrefix + string(uid) + "/" + volume
}

// prepareImageVolumes makes the image of each of the container's image
// volume mounts present and mounted, and points the mounts at it (its
// subPath resolved). An image that cannot be made present fails with its
// reason and a *runtime.ImageVolumeError; anything else with
// CreateContainerError, as the CRI's CreateContainer fails for the kubelet.
func (r *Runtime) prepareImageVolumes(ctx context.Context, p *corev1.Pod, sb *sandbox, opts *runtime.StartOptions) (reason, msg string, err error) {
	mounts := make([]runtime.Mount, len(opts.Mounts))
	copy(mounts, opts.Mounts)
	ready := map[string]bool{} // a volume mounted twice is pulled once
	for i := range mounts {
		m := &mounts[i]
		if m.Image == nil {
			continue
		}
		if !ready[m.Volume] {
			ref, reason, msg, err := r.ensureImage(ctx, p, m.Image.Reference, imagePullPolicy(m.Image.Reference, m.Image.PullPolicy),
				sb.config, opts.PullSecrets, opts.PodImageEvent)
			if err != nil {
				return reason, msg, &runtime.ImageVolumeError{Volume: m.Volume, Image: m.Image.Reference, Err: err}
			}
			if err := r.mountImageVolume(ctx, p.UID, m.Volume, ref, m.HostPath); err != nil {
				return ReasonCreateError, fmt.Sprintf("failed to mount image volume %q: %v", m.Volume, err), err
			}
			ready[m.Volume] = true
		}
		host, err := imageSubPath(m.HostPath, m.Image.SubPath)
		if err != nil {
			return ReasonCreateError, fmt.Sprintf("failed to mount image volume %q: %v", m.Volume, err), err
		}
		m.HostPath, m.ReadOnly, m.Image = host, true, nil
	}
	opts.Mounts = mounts
	return "", "", nil
}

// mountImageVolume mounts the image (by its ID) on target unless it is
// there already: a view of the image's layers, made or reused.
func (r *Runtime) mountImageVolume(ctx context.Context, uid types.UID, volume, imageID, target string) error {
	snaps, snapshotter, err := r.snapshots(ctx)
	if err != nil {
		return err
	}
	chain, err := r.imageChainID(ctx, imageID)
	if err != nil {
		return err
	}
	r.imageVols.mu.Lock() // one mount at a time: two containers may share the volume
	defer r.imageVols.mu.Unlock()
	v := view{snaps: snaps, snapshotter: snapshotter, key: viewKey(uid, volume), chain: chain, image: imageID, target: target}
	mounts, err := v.mounts(nsCtx(ctx))
	if err != nil || mounts == nil {
		return err
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	return mountReadOnly(mounts, target)
}

// view is an image volume's view snapshot of an image's layers (chain).
type view struct {
	snaps                                  snapshotsapi.SnapshotsClient
	snapshotter, key, chain, image, target string
}

// mounts are the view's mounts, the view made unless there; nil when it
// is mounted on target already. A view of another image is released
// first (a pull of a moved tag): containers already running keep what
// they have mounted, new ones get the new image.
func (v view) mounts(ctx context.Context) ([]*containerdtypes.Mount, error) {
	st, err := v.snaps.Stat(ctx, &snapshotsapi.StatSnapshotRequest{Snapshotter: v.snapshotter, Key: v.key})
	switch {
	case err == nil && st.GetInfo().GetParent() == v.chain:
		if on, _ := mountinfo.Mounted(v.target); on {
			return nil, nil
		}
		resp, err := v.snaps.Mounts(ctx, &snapshotsapi.MountsRequest{Snapshotter: v.snapshotter, Key: v.key})
		if err != nil {
			return nil, fmt.Errorf("the mounts of snapshot %s: %s", v.key, grpcMessage(err))
		}
		return resp.GetMounts(), nil
	case err == nil:
		if err := releaseView(ctx, v.snaps, v.snapshotter, st.GetInfo()); err != nil {
			return nil, err
		}
	case !isNotFound(err):
		return nil, fmt.Errorf("snapshot %s: %s", v.key, grpcMessage(err))
	}
	if on, _ := mountinfo.Mounted(v.target); on {
		// a mount whose view is gone
		if err := unix.Unmount(v.target, unix.MNT_DETACH); err != nil {
			return nil, fmt.Errorf("unmount %s: %w", v.target, err)
		}
	}
	resp, err := v.snaps.View(ctx, &snapshotsapi.ViewSnapshotRequest{Snapshotter: v.snapshotter, Key: v.key, Parent: v.chain,
		Labels: map[string]string{labelGCRoot: time.Now().UTC().Format(time.RFC3339), labelViewImage: v.image, labelViewTarget: v.target}})
	if err != nil {
		return nil, fmt.Errorf("a view of image %s: %s", v.image, grpcMessage(err))
	}
	return resp.GetMounts(), nil
}

// imageChainID is the chain ID of the image's layers, the committed
// snapshot its filesystem is (containerd's CRI reports it in the image's
// verbose status; else it is computed from the config's diff IDs).
func (r *Runtime) imageChainID(ctx context.Context, imageID string) (string, error) {
	st, err := r.is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: imageID}, true)
	if err != nil {
		return "", fmt.Errorf("status of image %s: %s", imageID, grpcMessage(err))
	}
	var info struct {
		ChainID   string `json:"chainID"`
		ImageSpec struct {
			RootFS struct {
				DiffIDs []string `json:"diff_ids"`
			} `json:"rootfs"`
		} `json:"imageSpec"`
	}
	if raw, ok := st.GetInfo()["info"]; ok {
		_ = json.Unmarshal([]byte(raw), &info)
	}
	if info.ChainID != "" {
		return info.ChainID, nil
	}
	if len(info.ImageSpec.RootFS.DiffIDs) == 0 {
		return "", fmt.Errorf("image %s: the CRI runtime reports neither its chain ID nor its layers", imageID)
	}
	return chainID(info.ImageSpec.RootFS.DiffIDs), nil
}

// chainID is the OCI chain ID of layers' diff IDs.
func chainID(diffIDs []string) string {
	chain := diffIDs[0]
	for _, d := range diffIDs[1:] {
		sum := sha256.Sum256([]byte(chain + " " + d))
		chain = "sha256:" + hex.EncodeToString(sum[:])
	}
	return chain
}

// mountReadOnly mounts a snapshot's mounts (one: a bind of a single
// layer, or an overlay of several) read-only, nosuid and nodev on target.
func mountReadOnly(mounts []*containerdtypes.Mount, target string) error {
	if len(mounts) != 1 {
		return fmt.Errorf("the snapshot has %d mounts, want 1", len(mounts))
	}
	m := mounts[0]
	flags, data := mountOptions(m.GetOptions())
	const secure = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV
	if m.GetType() == "bind" || flags&unix.MS_BIND != 0 {
		// a bind takes its flags from a remount.
		if err := unix.Mount(m.GetSource(), target, "", flags&(unix.MS_BIND|unix.MS_REC)|unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", m.GetSource(), target, err)
		}
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|secure, ""); err != nil {
			_ = unix.Unmount(target, unix.MNT_DETACH)
			return fmt.Errorf("remount %s read-only: %w", target, err)
		}
		return nil
	}
	if len(data) >= unix.Getpagesize() {
		return fmt.Errorf("the image has too many layers to mount (%d bytes of options)", len(data))
	}
	if err := unix.Mount(m.GetSource(), target, m.GetType(), flags|secure, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", m.GetType(), target, err)
	}
	return nil
}

// mountOptions splits mount(8) options into flags and file system data.
func mountOptions(opts []string) (flags uintptr, data string) {
	known := map[string]uintptr{"ro": unix.MS_RDONLY, "bind": unix.MS_BIND, "rbind": unix.MS_BIND | unix.MS_REC,
		"nosuid": unix.MS_NOSUID, "nodev": unix.MS_NODEV, "noexec": unix.MS_NOEXEC, "rw": 0}
	var rest []string
	for _, o := range opts {
		if f, ok := known[o]; ok {
			flags |= f
			continue
		}
		rest = append(rest, o)
	}
	return flags, strings.Join(rest, ",")
}

// imageSubPath is sub inside the image mounted at root, resolved in the
// image (its links lead nowhere outside it); it must exist.
func imageSubPath(root, sub string) (string, error) {
	if sub == "" {
		return root, nil
	}
	dir, err := os.Open(root)
	if err != nil {
		return "", err
	}
	defer dir.Close()
	fd, err := unix.Openat2(int(dir.Fd()), sub, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
	if err != nil {
		return "", fmt.Errorf("subPath %q of the image: %w", sub, err)
	}
	defer unix.Close(fd)
	real, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return "", err
	}
	if root, err = filepath.EvalSymlinks(root); err != nil {
		return "", err
	}
	if real != root && !strings.HasPrefix(real, root+string(filepath.Separator)) {
		return "", fmt.Errorf("subPath %q is outside the image", sub)
	}
	return real, nil
}

// ReleaseImageVolumes implements runtime.ImageVolumes: the pod's image
// volumes are unmounted and their views removed.
func (r *Runtime) ReleaseImageVolumes(ctx context.Context, uid types.UID) error {
	views, err := r.imageVolumeViews(ctx, uid)
	if err != nil {
		return err
	}
	return r.releaseViews(ctx, views, func(u types.UID) bool { return u == uid })
}

// sweepImageVolumes releases the image volumes of pods the runtime holds
// nothing of (left by a pod worker killed before it tore them down). The
// views are listed before the relist: a view is made after its pod's
// sandbox, which the relist then sees, whichever replica made it.
func (r *Runtime) sweepImageVolumes(ctx context.Context) error {
	views, err := r.imageVolumeViews(ctx, "")
	if err != nil || len(views) == 0 {
		return err
	}
	if err := r.Relist(ctx); err != nil {
		return err
	}
	return r.releaseViews(ctx, views, func(u types.UID) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.pods[u] == nil
	})
}

// releaseViews unmounts and removes the views of the pods match selects.
func (r *Runtime) releaseViews(ctx context.Context, views []*snapshotsapi.Info, match func(types.UID) bool) error {
	if len(views) == 0 {
		return nil
	}
	snaps, snapshotter, err := r.snapshots(ctx)
	if err != nil {
		return err
	}
	r.imageVols.mu.Lock()
	defer r.imageVols.mu.Unlock()
	var errs []error
	for _, v := range views {
		uid, _, _ := strings.Cut(strings.TrimPrefix(v.GetName(), viewPrefix), "/")
		if !match(types.UID(uid)) {
			continue
		}
		if err := releaseView(nsCtx(ctx), snaps, snapshotter, v); err != nil {
			errs = append(errs, err)
			continue
		}
		r.log.Info("image volume released", zap.String("uid", uid), zap.String("view", v.GetName()))
	}
	return errors.Join(errs...)
}

// releaseView unmounts the view's directory, then removes the view.
func releaseView(ctx context.Context, snaps snapshotsapi.SnapshotsClient, snapshotter string, v *snapshotsapi.Info) error {
	if target := v.GetLabels()[labelViewTarget]; target != "" {
		if on, _ := mountinfo.Mounted(target); on {
			if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
				return fmt.Errorf("unmount %s: %w", target, err)
			}
		}
	}
	if _, err := snaps.Remove(ctx, &snapshotsapi.RemoveSnapshotRequest{Snapshotter: snapshotter, Key: v.GetName()}); err != nil && !isNotFound(err) {
		return fmt.Errorf("remove snapshot %s: %s", v.GetName(), grpcMessage(err))
	}
	return nil
}

// imageVolumeViews lists the image volume views of the pod uid, or of
// every pod when uid is empty (none without containerd). containerd picks
// them by name, so that removing a pod reads only its own views, not every
// snapshot of the node; the prefix is checked again here.
func (r *Runtime) imageVolumeViews(ctx context.Context, uid types.UID) ([]*snapshotsapi.Info, error) {
	if r.name != "containerd" {
		return nil, nil
	}
	snaps, snapshotter, err := r.snapshots(ctx)
	if err != nil {
		return nil, err
	}
	prefix := viewPrefix
	if uid != "" {
		prefix += string(uid) + "/"
	}
	stream, err := snaps.List(nsCtx(ctx), &snapshotsapi.ListSnapshotsRequest{Snapshotter: snapshotter, Filters: viewsFilters(prefix)})
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %s", grpcMessage(err))
	}
	var out []*snapshotsapi.Info
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list snapshots: %s", grpcMessage(err))
		}
		for _, in := range resp.GetInfo() {
			if strings.HasPrefix(in.GetName(), prefix) {
				out = append(out, in)
			}
		}
	}
}

// viewsFilters is the containerd filter of the snapshots whose names start
// with prefix: a regular expression with '.' and '_' each written as a
// class of its own, so that it needs no escape inside the filter's quotes.
// A prefix of any other character gets no filter (every view is listed and
// the prefix checked here).
func viewsFilters(prefix string) []string {
	var b strings.Builder
	b.WriteString(`name~="^`)
	for _, c := range prefix {
		switch {
		case c == '-' || c == '/' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9':
			b.WriteRune(c)
		case c == '.' || c == '_':
			b.WriteString("[" + string(c) + "]")
		default:
			return nil
		}
	}
	b.WriteString(`"`)
	return []string{b.String()}
}
