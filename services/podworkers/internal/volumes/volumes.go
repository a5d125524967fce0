// Package volumes is the pod workers' volume manager: before a pod's
// containers start, and again on every sync of the pod, it sets up the
// volumes a node agent serves itself, and it tells the runtime where each
// container's volumeMounts are on the host (kubelet: the volume manager and
// the volume plugins of the same kinds, with makeMounts).
//
// # Where volumes live
//
// A pod's volumes are directories under <root>/pods/<uid>/volumes/, one
// directory per plugin as in the kubelet ("kubernetes.io~empty-dir",
// "kubernetes.io~configmap", "kubernetes.io~secret",
// "kubernetes.io~downward-api", "kubernetes.io~projected"), then one per
// volume. A hostPath volume is the host's path itself. The directories
// outlive the pod worker, as the containers that mount them do: a restarted
// or another replica sets them up again in place, which changes nothing
// that has not changed.
//
// # Kinds
//
//   - emptyDir: an empty directory, mode 0777; medium Memory is a tmpfs
//     (sizeLimit as its size), which needs the right to mount.
//   - configMap, secret, downwardAPI, projected: the payload is written by
//     an atomic writer (writePayload) and rewritten on every sync when it
//     changed, so an update of the ConfigMap, Secret or the pod's labels
//     reaches running containers within a resync (a minute). They are
//     mounted read-only. Secret and projected volumes are a tmpfs when the
//     agent may mount one, so that secrets never reach the disk; otherwise
//     a plain directory (logged once).
//   - projected serviceAccountToken: a token of the pod's service account
//     bound to the pod, from the TokenRequest API, requested again when 80 %
//     of its life has passed or it is 24 hours old (kubelet: the token
//     manager's rule).
//   - hostPath: the path, checked against its type (DirectoryOrCreate and
//     FileOrCreate create it).
//   - image: an empty directory here; the runtime (an
//     runtime.ImageVolumes, cri) pulls the image and mounts its filesystem
//     read-only there when a container that mounts the volume starts, and
//     Teardown has it unmount and let go of it first.
//
// Any other kind fails the setup: the pod's containers wait in
// ContainerCreating and the pod gets a FailedMount Event, as on a kubelet
// without that plugin.
//
// # Readers
//
// ConfigMaps, Secrets and tokens are read from the API server when a sync
// needs them. Run as the node (system:node:<name>), the Node authorizer
// lets the pod workers read only the objects that pods bound to the node
// name, which is why podworkers runs with the node identity.
package volumes

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"go.uber.org/zap"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/containerenv"
	"github.com/splitlet/splitlet/libs/safefs"
)

// Plugin directory names (kubelet: the plugins' escaped names).
const (
	dirEmptyDir  = "kubernetes.io~empty-dir"
	dirConfigMap = "kubernetes.io~configmap"
	dirSecret    = "kubernetes.io~secret"
	dirDownward  = "kubernetes.io~downward-api"
	dirProjected = "kubernetes.io~projected"
	dirImage     = "kubernetes.io~image"
)

// Default modes (kubelet: the API's defaults for defaultMode, and
// emptyDir's directory mode).
const (
	defaultFileMode fs.FileMode = 0o644
	emptyDirMode    fs.FileMode = 0o777
)

// Token lifetimes (kubelet: the token manager's refresh rule).
const (
	tokenRefreshFraction = 0.8
	tokenMaxAge          = 24 * time.Hour
)

// Volume is a set-up volume of a pod.
type Volume struct {
	// Path on the host.
	Path string
	// ReadOnly volumes are mounted read-only whatever the mount asks.
	ReadOnly bool
	// Image is an image volume's source: the runtime mounts the image at
	// Path when a container that mounts it starts.
	Image *corev1.ImageVolumeSource
}

// Tokens requests service account tokens (the TokenRequest API).
type Tokens interface {
	CreateToken(ctx context.Context, namespace, serviceAccount string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
}

// SetupError is the failure to set up one volume; its message is the
// kubelet's FailedMount message.
type SetupError struct {
	Volume string
	Err    error
}

func (e *SetupError) Error() string {
	return fmt.Sprintf("MountVolume.SetUp failed for volume %q : %v", e.Volume, e.Err)
}

func (e *SetupError) Unwrap() error { return e.Err }

// Manager sets up and tears down pods' volumes.
type Manager struct {
	root        string
	sources     runtime.Sources
	tokens      Tokens
	users       runtime.PodUsers
	allocatable func() corev1.ResourceList
	images      runtime.ImageVolumes
	log         *zap.Logger

	mu sync.Mutex
	// tok caches tokens by pod and request.
	tok map[tokenKey]token
	// noTmpfs: a tmpfs could not be mounted (the agent may not), logged once.
	noTmpfs bool
}

type tokenKey struct {
	uid                    types.UID
	account, audience, vol string
	expirationSeconds      int64
}

type token struct {
	value           string
	issued, expires time.Time
}

// Option configures a Manager.
type Option func(*Manager)

// WithLogger sets the logger.
func WithLogger(l *zap.Logger) Option { return func(m *Manager) { m.log = l } }

// WithPodUsers gives each pod's volumes to the user the runtime runs the
// pod as (package documentation, "Owners").
func WithPodUsers(u runtime.PodUsers) Option { return func(m *Manager) { m.users = u } }

// WithImageVolumes names the runtime that mounts image volumes; Teardown
// has it unmount them first.
func WithImageVolumes(iv runtime.ImageVolumes) Option { return func(m *Manager) { m.images = iv } }

// WithAllocatable gives the node's allocatable, the default of a
// resourceFieldRef limit the container does not set.
func WithAllocatable(f func() corev1.ResourceList) Option {
	return func(m *Manager) { m.allocatable = f }
}

// New returns a Manager keeping volumes under root, reading ConfigMaps and
// Secrets through sources and tokens through tokens.
func New(root string, sources runtime.Sources, tokens Tokens, opts ...Option) *Manager {
	m := &Manager{root: root, sources: sources, tokens: tokens, log: zap.NewNop(),
		allocatable: func() corev1.ResourceList { return nil }, tok: map[tokenKey]token{}}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Sources is what the manager reads ConfigMaps and Secrets with (for the
// containers' environment too).
func (m *Manager) Sources() runtime.Sources { return m.sources }

// Allocatable is the node's allocatable as the manager knows it.
func (m *Manager) Allocatable() corev1.ResourceList { return m.allocatable() }

func (m *Manager) podDir(uid types.UID) string {
	return filepath.Join(m.root, "pods", string(uid))
}

// PodDir is the pod's directory, where the runtime keeps the files the
// kubelet manages for it (/etc/hosts, termination message files); Teardown
// removes it.
func (m *Manager) PodDir(uid types.UID) string {
	if !safeUID(uid) {
		return ""
	}
	return m.podDir(uid)
}

// safeUID: the UID can name a directory (it comes from the bus).
func safeUID(uid types.UID) bool {
	return uid != "" && uid != "." && uid != ".." && !strings.ContainsAny(string(uid), "/\x00")
}

// Setup sets up (or refreshes) every volume of the pod and returns them by
// name. It stops at the first volume that fails, with a *SetupError.
func (m *Manager) Setup(ctx context.Context, pod *corev1.Pod) (map[string]Volume, error) {
	if len(pod.Spec.Volumes) == 0 {
		return nil, nil
	}
	if !safeUID(pod.UID) {
		return nil, fmt.Errorf("pod UID %q cannot name a directory", pod.UID)
	}
	own, err := m.owner(pod)
	if err != nil {
		return nil, fmt.Errorf("the pod's user: %w", err)
	}
	out := make(map[string]Volume, len(pod.Spec.Volumes))
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		vol, err := m.setup(ctx, pod, v, own)
		if err != nil {
			return out, &SetupError{Volume: v.Name, Err: err}
		}
		out[v.Name] = vol
	}
	return out, nil
}

func (m *Manager) setup(ctx context.Context, pod *corev1.Pod, v *corev1.Volume, own *owner) (Volume, error) {
	if strings.ContainsAny(v.Name, "/\x00") || v.Name == "" || v.Name == "." || v.Name == ".." {
		return Volume{}, fmt.Errorf("volume name %q cannot name a directory", v.Name)
	}
	var dirErr error
	dir := func(plugin string) string {
		d := filepath.Join(m.podDir(pod.UID), "volumes", plugin, v.Name)
		dirErr = m.restrict(pod.UID, filepath.Dir(d), own)
		return d
	}
	if own != nil {
		own.fileGID = own.gid
		if g := fsGroup(pod); g != nil {
			own.fileGID = int(*g)
		}
	}
	vol, err := m.setupKind(ctx, pod, v, dir, own)
	if dirErr != nil {
		return Volume{}, dirErr
	}
	return vol, err
}

func (m *Manager) setupKind(ctx context.Context, pod *corev1.Pod, v *corev1.Volume, dir func(string) string, own *owner) (Volume, error) {
	src := v.VolumeSource
	switch {
	case src.EmptyDir != nil:
		v, err := m.emptyDir(dir(dirEmptyDir), src.EmptyDir)
		if err == nil {
			err = ownDir(v.Path, fsGroup(pod))
		}
		return v, err
	case src.HostPath != nil:
		return hostPath(src.HostPath)
	case src.ConfigMap != nil:
		payload, err := m.configMapPayload(ctx, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, src.ConfigMap.Optional, modeOr(src.ConfigMap.DefaultMode))
		if err != nil {
			return Volume{}, err
		}
		return m.payloadVolume(dir(dirConfigMap), payload, false, fsGroup(pod), own)
	case src.Secret != nil:
		payload, err := m.secretPayload(ctx, pod.Namespace, src.Secret.SecretName, src.Secret.Items, src.Secret.Optional, modeOr(src.Secret.DefaultMode))
		if err != nil {
			return Volume{}, err
		}
		return m.payloadVolume(dir(dirSecret), payload, true, fsGroup(pod), own)
	case src.DownwardAPI != nil:
		payload, err := m.downwardPayload(pod, src.DownwardAPI.Items, modeOr(src.DownwardAPI.DefaultMode))
		if err != nil {
			return Volume{}, err
		}
		return m.payloadVolume(dir(dirDownward), payload, false, fsGroup(pod), own)
	case src.Projected != nil:
		payload, err := m.projectedPayload(ctx, pod, v.Name, src.Projected)
		if err != nil {
			return Volume{}, err
		}
		return m.payloadVolume(dir(dirProjected), payload, true, fsGroup(pod), own)
	case src.Image != nil:
		d := dir(dirImage)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Volume{}, err
		}
		return Volume{Path: d, ReadOnly: true, Image: src.Image}, nil
	}
	return Volume{}, fmt.Errorf("volume kind not supported by this node (supported: emptyDir, hostPath, configMap, secret, downwardAPI, projected, image)")
}

func modeOr(mode *int32) fs.FileMode {
	if mode == nil {
		return defaultFileMode
	}
	return fs.FileMode(*mode) & fs.ModePerm
}

func itemMode(mode *int32, def fs.FileMode) fs.FileMode {
	if mode == nil {
		return def
	}
	return fs.FileMode(*mode) & fs.ModePerm
}

// emptyDir makes the directory, a tmpfs for medium Memory.
func (m *Manager) emptyDir(dir string, src *corev1.EmptyDirVolumeSource) (Volume, error) {
	if err := os.MkdirAll(dir, emptyDirMode); err != nil {
		return Volume{}, err
	}
	if src.Medium == corev1.StorageMediumMemory {
		size := ""
		if src.SizeLimit != nil && !src.SizeLimit.IsZero() {
			size = strconv.FormatInt(src.SizeLimit.Value(), 10)
		}
		// kubelet: the tmpfs's root keeps the mode tmpfs gives it, 1777
		// (sticky), which a subPath inside it inherits.
		if err := mountTmpfs(dir, "1777", size); err != nil {
			return Volume{}, fmt.Errorf("mounting a tmpfs for medium Memory: %w", err)
		}
		return Volume{Path: dir}, nil
	}
	// kubelet: an emptyDir is open to every user of the pod.
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != emptyDirMode {
		if err := os.Chmod(dir, emptyDirMode); err != nil {
			return Volume{}, err
		}
	}
	return Volume{Path: dir}, nil
}

// fsGroup is the pod's securityContext.fsGroup, if set.
func fsGroup(pod *corev1.Pod) *int64 {
	if pod.Spec.SecurityContext == nil {
		return nil
	}
	return pod.Spec.SecurityContext.FSGroup
}

// ownDir gives an emptyDir to the pod's fsGroup (kubelet: volume
// ownership): the group owns it, and it is set-group-ID so that what the
// containers create there is the group's too.
func ownDir(dir string, gid *int64) error {
	if gid == nil {
		return nil
	}
	if err := os.Lchown(dir, -1, int(*gid)); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	return os.Chmod(dir, fi.Mode()&(fs.ModePerm|fs.ModeSticky)|0o660|0o110|fs.ModeSetgid)
}

// payloadVolume writes a payload into dir, a tmpfs first when secret. With
// an fsGroup, the files are the group's and readable by it (kubelet: the
// read-only ownership rule adds 0440).
func (m *Manager) payloadVolume(dir string, payload map[string]File, secret bool, gid *int64, own *owner) (Volume, error) {
	for k, f := range payload {
		if secret && own != nil {
			f.Mode &= 0o700 // the pod's user's alone
		}
		if gid != nil {
			f.Mode |= 0o440
		}
		payload[k] = f
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Volume{}, err
	}
	if secret {
		if err := mountTmpfs(dir, own.dirMode(), ""); err != nil {
			m.mu.Lock()
			first := !m.noTmpfs
			m.noTmpfs = true
			m.mu.Unlock()
			if first {
				m.log.Warn("cannot mount a tmpfs for Secret and projected volumes; they are plain directories", zap.Error(err))
			}
		}
	}
	if err := own.restrictDir(dir); err != nil {
		return Volume{}, err
	}
	changed, err := writePayload(dir, payload, own)
	if err != nil {
		return Volume{}, err
	}
	if changed && gid != nil && own == nil {
		if err := chownTree(dir, int(*gid)); err != nil {
			return Volume{}, err
		}
	}
	return Volume{Path: dir, ReadOnly: true}, nil
}

// chownTree gives every file and directory under dir to group gid, links
// included (not what they point at).
func chownTree(dir string, gid int) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, -1, gid)
	})
}

// mountTmpfs mounts a tmpfs of the given octal mode on dir unless one is
// there already (a restarted pod worker finds the mounts of the one
// before).
func mountTmpfs(dir, mode, size string) error {
	if mounted, err := isMountPoint(dir); err != nil || mounted {
		return err
	}
	opts := "mode=" + mode
	if size != "" && size != "0" {
		opts += ",size=" + size
	}
	return syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts)
}

// isMountPoint says whether dir is on another device than its parent.
func isMountPoint(dir string) (bool, error) {
	var st, parent syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return false, err
	}
	if err := syscall.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}

// mounted says whether dir is a mount point, a bind mount of the same
// file system too.
func mounted(dir string) bool {
	if m, _ := isMountPoint(dir); m {
		return true
	}
	m, _ := mountinfo.Mounted(dir)
	return m
}

// hostPath checks the path against its type (kubelet: the hostPath type
// checker's messages).
func hostPath(src *corev1.HostPathVolumeSource) (Volume, error) {
	p := src.Path
	typ := corev1.HostPathUnset
	if src.Type != nil {
		typ = *src.Type
	}
	fi, statErr := os.Stat(p)
	switch typ {
	case corev1.HostPathUnset:
	case corev1.HostPathDirectoryOrCreate:
		if os.IsNotExist(statErr) {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return Volume{}, err
			}
			return Volume{Path: p}, nil
		}
		if statErr == nil && !fi.IsDir() {
			return Volume{}, fmt.Errorf("hostPath type check failed: %s is not a directory", p)
		}
	case corev1.HostPathDirectory:
		if statErr != nil || !fi.IsDir() {
			return Volume{}, fmt.Errorf("hostPath type check failed: %s is not a directory", p)
		}
	case corev1.HostPathFileOrCreate:
		if os.IsNotExist(statErr) {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return Volume{}, err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return Volume{}, err
			}
			_ = f.Close()
			return Volume{Path: p}, nil
		}
		if statErr == nil && !fi.Mode().IsRegular() {
			return Volume{}, fmt.Errorf("hostPath type check failed: %s is not a file", p)
		}
	case corev1.HostPathFile:
		if statErr != nil || !fi.Mode().IsRegular() {
			return Volume{}, fmt.Errorf("hostPath type check failed: %s is not a file", p)
		}
	case corev1.HostPathSocket:
		if statErr != nil || fi.Mode()&fs.ModeSocket == 0 {
			return Volume{}, fmt.Errorf("hostPath type check failed: %s is not a socket file", p)
		}
	case corev1.HostPathCharDev:
		if statErr != nil || fi.Mode()&fs.ModeCharDevice == 0 {
			return Volume{}, fmt.Errorf("hostPath type check failed: %s is not a character device", p)
		}
	case corev1.HostPathBlockDev:
		if statErr != nil || fi.Mode()&fs.ModeDevice == 0 || fi.Mode()&fs.ModeCharDevice != 0 {
			return Volume{}, fmt.Errorf("hostPath type check failed: %s is not a block device", p)
		}
	default:
		return Volume{}, fmt.Errorf("hostPath type %q is not supported", typ)
	}
	return Volume{Path: p}, nil
}

// configMapPayload is a ConfigMap's data as files: every key, or the items
// (kubelet: the configMap plugin's payload rules).
func (m *Manager) configMapPayload(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional *bool, mode fs.FileMode) (map[string]File, error) {
	if m.sources == nil {
		return nil, errors.New("this node cannot read ConfigMaps")
	}
	cm, err := m.sources.ConfigMap(ctx, ns, name)
	if err != nil {
		if apierrors.IsNotFound(err) && optional != nil && *optional {
			return map[string]File{}, nil
		}
		return nil, err
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keysPayload(data, items, optional, mode, "configmap references non-existent config key: %s")
}

// secretPayload is a Secret's data as files.
func (m *Manager) secretPayload(ctx context.Context, ns, name string, items []corev1.KeyToPath, optional *bool, mode fs.FileMode) (map[string]File, error) {
	if m.sources == nil {
		return nil, errors.New("this node cannot read Secrets")
	}
	sec, err := m.sources.Secret(ctx, ns, name)
	if err != nil {
		if apierrors.IsNotFound(err) && optional != nil && *optional {
			return map[string]File{}, nil
		}
		return nil, err
	}
	return keysPayload(sec.Data, items, optional, mode, "references non-existent secret key: %s")
}

// keysPayload maps data to files: each key under its own name, or only the
// items, each at its path; a missing item key fails unless optional.
func keysPayload(data map[string][]byte, items []corev1.KeyToPath, optional *bool, mode fs.FileMode, missing string) (map[string]File, error) {
	out := map[string]File{}
	if len(items) == 0 {
		for k, v := range data {
			out[k] = File{Data: v, Mode: mode}
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional != nil && *optional {
				continue
			}
			return nil, fmt.Errorf(missing, it.Key)
		}
		out[it.Path] = File{Data: v, Mode: itemMode(it.Mode, mode)}
	}
	return out, nil
}

// downwardPayload is the downward API's items as files.
func (m *Manager) downwardPayload(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, mode fs.FileMode) (map[string]File, error) {
	out := map[string]File{}
	for _, it := range items {
		var v string
		var err error
		switch {
		case it.FieldRef != nil:
			v, err = fieldValue(pod, it.FieldRef.FieldPath)
		case it.ResourceFieldRef != nil:
			v, err = m.resourceValue(pod, it.ResourceFieldRef)
		default:
			err = fmt.Errorf("item %q has no source", it.Path)
		}
		if err != nil {
			return nil, err
		}
		out[it.Path] = File{Data: []byte(v), Mode: itemMode(it.Mode, mode)}
	}
	return out, nil
}

func (m *Manager) resourceValue(pod *corev1.Pod, ref *corev1.ResourceFieldSelector) (string, error) {
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == ref.ContainerName {
				return containerenv.ResourceValue(&list[i], ref, m.allocatable(), "node")
			}
		}
	}
	return "", fmt.Errorf("resourceFieldRef: container %q not found in the pod", ref.ContainerName)
}

// fieldValue is a downward API volume's field: the pod's metadata.
func fieldValue(pod *corev1.Pod, path string) (string, error) {
	if v, ok := containerenv.MetadataField(pod, path); ok {
		return v, nil
	}
	return "", fmt.Errorf("fieldRef %q is not supported in a downward API volume", path)
}

// projectedPayload merges the sources of a projected volume, in order.
func (m *Manager) projectedPayload(ctx context.Context, pod *corev1.Pod, volName string, src *corev1.ProjectedVolumeSource) (map[string]File, error) {
	mode := modeOr(src.DefaultMode)
	out := map[string]File{}
	merge := func(p map[string]File) {
		for k, v := range p {
			out[k] = v
		}
	}
	for _, s := range src.Sources {
		switch {
		case s.ConfigMap != nil:
			p, err := m.configMapPayload(ctx, pod.Namespace, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional, mode)
			if err != nil {
				return nil, err
			}
			merge(p)
		case s.Secret != nil:
			p, err := m.secretPayload(ctx, pod.Namespace, s.Secret.Name, s.Secret.Items, s.Secret.Optional, mode)
			if err != nil {
				return nil, err
			}
			merge(p)
		case s.DownwardAPI != nil:
			p, err := m.downwardPayload(pod, s.DownwardAPI.Items, mode)
			if err != nil {
				return nil, err
			}
			merge(p)
		case s.ServiceAccountToken != nil:
			tok, err := m.token(ctx, pod, volName, s.ServiceAccountToken)
			if err != nil {
				return nil, err
			}
			out[s.ServiceAccountToken.Path] = File{Data: []byte(tok), Mode: mode}
		default:
			return nil, errors.New("projected volume source not supported by this node (supported: configMap, secret, downwardAPI, serviceAccountToken)")
		}
	}
	return out, nil
}

// token returns a token of the pod's service account for the projection,
// the cached one while it is fresh.
func (m *Manager) token(ctx context.Context, pod *corev1.Pod, volName string, p *corev1.ServiceAccountTokenProjection) (string, error) {
	if m.tokens == nil {
		return "", errors.New("this node cannot request service account tokens")
	}
	account := pod.Spec.ServiceAccountName
	if account == "" {
		account = "default"
	}
	exp := int64(3600)
	if p.ExpirationSeconds != nil {
		exp = *p.ExpirationSeconds
	}
	key := tokenKey{uid: pod.UID, account: account, audience: p.Audience, vol: volName, expirationSeconds: exp}
	now := time.Now()
	m.mu.Lock()
	t, ok := m.tok[key]
	m.mu.Unlock()
	if ok && !needsRefresh(t, now) {
		return t.value, nil
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
	}}
	if p.Audience != "" {
		req.Spec.Audiences = []string{p.Audience}
	}
	got, err := m.tokens.CreateToken(ctx, pod.Namespace, account, req)
	if err != nil {
		if ok && now.Before(t.expires) {
			// kubelet: a token still valid is kept while a refresh fails.
			m.log.Warn("cannot refresh a service account token; keeping the current one", append(kubePod(pod), zap.Error(err))...)
			return t.value, nil
		}
		return "", fmt.Errorf("failed to fetch token: %w", err)
	}
	expires := got.Status.ExpirationTimestamp.Time
	if expires.IsZero() {
		expires = now.Add(time.Duration(exp) * time.Second)
	}
	m.mu.Lock()
	m.tok[key] = token{value: got.Status.Token, issued: now, expires: expires}
	m.mu.Unlock()
	return got.Status.Token, nil
}

func needsRefresh(t token, now time.Time) bool {
	life := t.expires.Sub(t.issued)
	return now.After(t.issued.Add(time.Duration(float64(life)*tokenRefreshFraction))) || now.Sub(t.issued) > tokenMaxAge
}

func kubePod(pod *corev1.Pod) []zap.Field {
	return []zap.Field{zap.String("pod", pod.Namespace+"/"+pod.Name), zap.String("uid", string(pod.UID))}
}

// Teardown removes the pod's volumes: releases its image volumes,
// unmounts its tmpfs mounts and removes its directory (hostPath volumes
// are the host's and stay). The pod's containers must have stopped.
func (m *Manager) Teardown(uid types.UID) error { return m.teardown(uid, true) }

// TeardownPod is Teardown of a pod whose spec is at hand: the runtime is
// asked for image volumes only when the spec has one (a pod's volumes
// never change), which saves a pod without any a lookup in containerd.
func (m *Manager) TeardownPod(pod *corev1.Pod) error {
	return m.teardown(pod.UID, hasImageVolume(pod))
}

func hasImageVolume(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Image != nil {
			return true
		}
	}
	return false
}

// TeardownAfterRemove is Teardown once the runtime's RemovePod has
// succeeded, which released the image volumes already (ImageVolumes):
// they are not looked up again.
func (m *Manager) TeardownAfterRemove(uid types.UID) error { return m.teardown(uid, false) }

func (m *Manager) teardown(uid types.UID, releaseImages bool) error {
	m.mu.Lock()
	for k := range m.tok {
		if k.uid == uid {
			delete(m.tok, k)
		}
	}
	m.mu.Unlock()
	if !safeUID(uid) {
		return nil
	}
	if m.images != nil && releaseImages {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := m.images.ReleaseImageVolumes(ctx, uid)
		cancel()
		if err != nil {
			// never remove through an image still mounted.
			return fmt.Errorf("releasing the image volumes: %w", err)
		}
	}
	base := filepath.Join(m.podDir(uid), "volumes")
	plugins, err := os.ReadDir(base)
	if err != nil {
		if os.IsNotExist(err) {
			return os.RemoveAll(m.podDir(uid))
		}
		return err
	}
	var errs []error
	for _, pl := range plugins {
		vols, _ := os.ReadDir(filepath.Join(base, pl.Name()))
		for _, v := range vols {
			dir := filepath.Join(base, pl.Name(), v.Name())
			if mounted(dir) {
				if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
					errs = append(errs, fmt.Errorf("unmount %s: %w", dir, err))
				}
			}
		}
	}
	if len(errs) > 0 {
		// never remove through a mount still in place.
		return errors.Join(errs...)
	}
	return os.RemoveAll(m.podDir(uid))
}

// Mounts resolves the container's volumeMounts against the pod's volumes
// (kubelet: makeMounts): subPath and subPathExpr (expanded against the
// container's environment, env as "KEY=value") name a path inside the
// volume, created if missing with the volume's own mode.
func Mounts(pod *corev1.Pod, c *corev1.Container, vols map[string]Volume, env []string) ([]runtime.Mount, error) {
	var out []runtime.Mount
	for _, vm := range c.VolumeMounts {
		v, ok := vols[vm.Name]
		if !ok {
			return nil, fmt.Errorf("cannot find volume %q to mount into container %q", vm.Name, c.Name)
		}
		host := v.Path
		sub := vm.SubPath
		if vm.SubPathExpr != "" {
			vars := map[string]string{}
			for _, kv := range env {
				k, val, _ := strings.Cut(kv, "=")
				vars[k] = val
			}
			sub = kube.Expand(vm.SubPathExpr, func(n string) (string, bool) { val, ok := vars[n]; return val, ok })
		}
		if v.Image != nil {
			// the runtime mounts the image, then resolves sub in it.
			if err := checkSubPath(sub); err != nil {
				return nil, fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q: %w", vm.Name, c.Name, err)
			}
			out = append(out, runtime.Mount{ContainerPath: vm.MountPath, HostPath: v.Path, ReadOnly: true,
				Propagation: propagation(vm.MountPropagation), Volume: vm.Name, RecursiveReadOnly: vm.RecursiveReadOnly,
				Image: &runtime.ImageMount{Reference: v.Image.Reference, PullPolicy: v.Image.PullPolicy, SubPath: sub}})
			continue
		}
		if sub != "" {
			p, err := subPath(v.Path, sub)
			if err != nil {
				return nil, fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q: %w", vm.Name, c.Name, err)
			}
			host = p
		}
		out = append(out, runtime.Mount{ContainerPath: vm.MountPath, HostPath: host,
			ReadOnly: vm.ReadOnly || v.ReadOnly, Propagation: propagation(vm.MountPropagation),
			Volume: vm.Name, RecursiveReadOnly: vm.RecursiveReadOnly})
	}
	return out, nil
}

func propagation(p *corev1.MountPropagationMode) corev1.MountPropagationMode {
	if p == nil {
		return corev1.MountPropagationNone
	}
	return *p
}

// subPath resolves sub inside the volume at root, refusing a path that
// leaves it (by "..", or through a symbolic link), and creates it when
// missing, through no link (a pod may have put links in its volume).
func subPath(root, sub string) (string, error) {
	if err := checkSubPath(sub); err != nil {
		return "", err
	}
	p := filepath.Join(root, sub)
	if _, err := os.Lstat(p); os.IsNotExist(err) {
		// kubelet: a subPath made here gets its volume's mode, with the
		// set-group-ID and sticky bits (an fsGroup's tmpfs: dgtrwxrwxrwx).
		mode := fs.FileMode(0o755)
		if fi, err := os.Stat(root); err == nil {
			mode = fi.Mode() & (fs.ModePerm | fs.ModeSetgid | fs.ModeSticky)
		}
		if err := makeSubPath(root, sub, mode); err != nil {
			return "", err
		}
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	if real != realRoot && !strings.HasPrefix(real, realRoot+string(filepath.Separator)) {
		return "", fmt.Errorf("subPath %q is outside the volume", sub)
	}
	return p, nil
}

// checkSubPath refuses a subPath that is absolute or steps back.
func checkSubPath(sub string) error {
	if filepath.IsAbs(sub) {
		return fmt.Errorf("subPath %q must be relative", sub)
	}
	for _, el := range strings.Split(sub, "/") {
		if el == ".." {
			return fmt.Errorf("subPath %q must not contain '..'", sub)
		}
	}
	return nil
}

// makeSubPath makes sub under the volume at root with the volume's mode,
// through no symbolic link.
func makeSubPath(root, sub string, mode fs.FileMode) error {
	d, err := safefs.OpenDir(root)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.MkdirAll(sub, mode); err != nil {
		return err
	}
	return d.Chmod(sub, mode)
}

// Client reads ConfigMaps and Secrets and requests tokens through a
// clientset: a runtime.Sources and a Tokens.
type Client struct{ CS kubernetes.Interface }

// ConfigMap implements runtime.Sources.
func (c Client) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	cm, err := c.CS.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	return cm, kubeletNotFound(err, "configmap", name)
}

// Secret implements runtime.Sources.
func (c Client) Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	sec, err := c.CS.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	return sec, kubeletNotFound(err, "secret", name)
}

// kubeletNotFound words a NotFound as the kubelet does (`configmap "x" not
// found`: its managers name the kind in the singular), which tools match.
func kubeletNotFound(err error, kind, name string) error {
	if apierrors.IsNotFound(err) {
		return apierrors.NewNotFound(schema.GroupResource{Resource: kind}, name)
	}
	return err
}

// CreateToken implements Tokens.
func (c Client) CreateToken(ctx context.Context, namespace, account string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return c.CS.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, account, req, metav1.CreateOptions{})
}

// EmptyDirUsage is the space the pod's emptyDir volume name takes, as du
// counts it (allocated blocks, each inode once; kubelet: the volume's
// usedBytes). A volume not set up counts 0.
func (m *Manager) EmptyDirUsage(uid types.UID, name string) (int64, error) {
	used, _, err := m.EmptyDirFsUsage(uid, name)
	return used, err
}

// EmptyDirFsUsage is EmptyDirUsage and the inodes the volume takes (kubelet:
// the volume's inodesUsed).
func (m *Manager) EmptyDirFsUsage(uid types.UID, name string) (used, inodes int64, err error) {
	if !safeUID(uid) || strings.ContainsAny(name, "/\x00") || name == "" || name == "." || name == ".." {
		return 0, 0, fmt.Errorf("volume %q of pod %q cannot name a directory", name, uid)
	}
	root := filepath.Join(m.podDir(uid), "volumes", dirEmptyDir, name)
	seen := map[uint64]bool{}
	err = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || seen[st.Ino] {
			return nil
		}
		seen[st.Ino] = true
		used += st.Blocks * 512
		return nil
	})
	return used, int64(len(seen)), err
}
