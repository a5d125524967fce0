package cri

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/runtime/gc"
)

var _ gc.ImageRuntime = (*Runtime)(nil)

// Images implements gc.ImageRuntime: the CRI runtime's images; the sandbox
// image of its configuration and the images it pins are Pinned.
func (r *Runtime) Images(ctx context.Context) ([]gc.Image, error) {
	list, err := r.is.ListImages(ctx, &runtimeapi.ImageFilter{})
	if err != nil {
		return nil, err
	}
	sandbox := r.sandboxImage(ctx)
	out := make([]gc.Image, 0, len(list))
	for _, img := range list {
		out = append(out, gc.Image{
			ID:     img.GetId(),
			Tags:   img.GetRepoTags(),
			Size:   int64(img.GetSize()),
			Pinned: img.GetPinned() || sandbox != "" && slices.Contains(img.GetRepoTags(), sandbox),
		})
	}
	return out, nil
}

// sandboxImage is the sandbox (pause) image the CRI runtime's
// configuration names, "" when it says none.
func (r *Runtime) sandboxImage(ctx context.Context) string {
	st, err := r.rs.Status(ctx, true)
	if err != nil {
		return ""
	}
	var cfg struct {
		SandboxImage string `json:"sandboxImage"`
	}
	if raw, ok := st.GetInfo()["config"]; ok {
		_ = json.Unmarshal([]byte(raw), &cfg)
	}
	return cfg.SandboxImage
}

// ImagesInUse implements gc.ImageRuntime: the images of every container of
// the CRI runtime, running or not, whichever node or program made it.
func (r *Runtime) ImagesInUse(ctx context.Context) (map[string]bool, error) {
	cs, err := r.rs.ListContainers(ctx, &runtimeapi.ContainerFilter{})
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, c := range cs {
		for _, ref := range []string{c.GetImageRef(), c.GetImageId(), c.GetImage().GetImage()} {
			if ref != "" {
				used[ref] = true
			}
		}
	}
	// an image volume's image is in use while it is mounted (kubelet: the
	// image GC counts image volumes).
	views, err := r.imageVolumeViews(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, v := range views {
		if id := v.GetLabels()[labelViewImage]; id != "" {
			used[id] = true
		}
	}
	// a name in use stands for the image it names
	list, err := r.is.ListImages(ctx, &runtimeapi.ImageFilter{})
	if err != nil {
		return nil, err
	}
	for _, img := range list {
		for _, name := range append(img.GetRepoTags(), img.GetRepoDigests()...) {
			if used[name] {
				used[img.GetId()] = true
			}
		}
	}
	return used, nil
}

// RemoveImage implements gc.ImageRuntime.
func (r *Runtime) RemoveImage(ctx context.Context, id string) error {
	if err := r.is.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: id}); err != nil && !isNotFound(err) {
		return errors.New(grpcMessage(err))
	}
	return nil
}

// ImageFsUsage implements gc.ImageRuntime: the filesystem the CRI
// runtime's ImageFsInfo names, as statfs reports it.
func (r *Runtime) ImageFsUsage(ctx context.Context) (gc.FsUsage, error) {
	resp, err := r.is.ImageFsInfo(ctx)
	if err != nil {
		return gc.FsUsage{}, err
	}
	fss := resp.GetImageFilesystems()
	if len(fss) == 0 || fss[0].GetFsId().GetMountpoint() == "" {
		return gc.FsUsage{}, errors.New("the CRI runtime names no image filesystem")
	}
	mount := fss[0].GetFsId().GetMountpoint()
	var st unix.Statfs_t
	if err := unix.Statfs(mount, &st); err != nil {
		return gc.FsUsage{}, fmt.Errorf("statfs %s: %w", mount, err)
	}
	return gc.FsUsage{Capacity: int64(st.Blocks) * st.Bsize, Available: int64(st.Bavail) * st.Bsize}, nil
}
