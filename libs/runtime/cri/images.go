package cri

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// imageParts splits an image reference into whether it has a tag and a
// digest (name[:tag][@digest]; a colon before the last slash is a port).
func imageParts(image string) (hasTag bool, tag string, hasDigest bool) {
	name := image
	if i := strings.Index(name, "@"); i >= 0 {
		hasDigest = true
		name = name[:i]
	}
	last := name[strings.LastIndex(name, "/")+1:]
	if i := strings.LastIndex(last, ":"); i >= 0 {
		return true, last[i+1:], hasDigest
	}
	return false, "", hasDigest
}

// validImage rejects what cannot name an image at all.
func validImage(image string) error {
	switch {
	case image == "":
		return errors.New("the container names no image")
	case strings.ContainsAny(image, " \t\n\r"), strings.HasPrefix(image, "/"), strings.HasSuffix(image, ":"),
		strings.HasSuffix(image, "/"), strings.HasSuffix(image, "@"), strings.Contains(image, "//"):
		return fmt.Errorf("couldn't parse image name %q", image)
	}
	return nil
}

// PullPolicy is the container's imagePullPolicy, defaulted as the API
// server defaults it: Always for the tag latest or no tag (and no digest),
// IfNotPresent otherwise.
func PullPolicy(c *corev1.Container) corev1.PullPolicy {
	if c.ImagePullPolicy != "" {
		return c.ImagePullPolicy
	}
	hasTag, tag, hasDigest := imageParts(c.Image)
	if !hasDigest && (!hasTag || tag == "latest") {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// ensureImage makes sure the container's image is there as its pull
// policy says (kubelet: imageManager.EnsureImageExists), and returns the
// image reference to create the container from, or the kubelet's reason
// and message for why it cannot be.
//
// It tells event of what it does as the kubelet's image manager records it:
// Pulled when the image is there, Pulling and Pulled around a pull.
func (r *Runtime) ensureImage(ctx context.Context, p *corev1.Pod, c *corev1.Container, sb *runtimeapi.PodSandboxConfig, event func(eventType, reason, message string)) (ref, reason, msg string, err error) {
	if event == nil {
		event = func(string, string, string) {}
	}
	if err := validImage(c.Image); err != nil {
		return "", ReasonInvalidImageName, fmt.Sprintf("Failed to apply default image tag %q: %v", c.Image, err), err
	}
	image := c.Image
	// kubelet: a reference with neither tag nor digest gets :latest.
	if hasTag, _, hasDigest := imageParts(image); !hasTag && !hasDigest {
		image += ":latest"
	}
	policy := PullPolicy(c)
	spec := &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: c.Image}
	if policy != corev1.PullAlways {
		st, err := r.is.ImageStatus(ctx, spec, false)
		if err != nil {
			msg := fmt.Sprintf("Failed to inspect image %q: %v", image, grpcMessage(err))
			return "", ReasonImageInspectError, msg, err
		}
		if img := st.GetImage(); img != nil {
			event(corev1.EventTypeNormal, EventPulled, fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", c.Image))
			return img.GetId(), "", "", nil
		}
		if policy == corev1.PullNever {
			msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", c.Image)
			return "", ReasonErrImageNeverPull, msg, errors.New(msg)
		}
	}
	key := string(p.UID) + "_" + image
	now := r.imageBackOff.Clock.Now()
	if r.imageBackOff.IsInBackOffSinceUpdate(key, now) {
		msg := fmt.Sprintf("Back-off pulling image %q", image)
		r.pullMu.Lock()
		if prev, ok := r.pullErrs[key]; ok {
			msg += ": " + prev
		}
		r.pullMu.Unlock()
		return "", ReasonImagePullBackOff, msg, errors.New(msg)
	}
	r.pullMu.Lock()
	delete(r.pullErrs, key)
	r.pullMu.Unlock()
	r.log.Info("pulling image", podFields(p, "image", image)...)
	event(corev1.EventTypeNormal, EventPulling, fmt.Sprintf("Pulling image %q", image))
	began := time.Now()
	ref, err = r.is.PullImage(ctx, spec, nil, sb)
	if err != nil {
		if ctx.Err() != nil {
			return "", ReasonErrImagePull, grpcMessage(err), err
		}
		r.imageBackOff.Next(key, r.imageBackOff.Clock.Now())
		msg := grpcMessage(err)
		r.pullMu.Lock()
		r.pullErrs[key] = ReasonErrImagePull + ": " + msg
		r.pullMu.Unlock()
		r.log.Info("image pull failed", podFields(p, "image", image, "error", msg)...)
		return "", ReasonErrImagePull, msg, err
	}
	r.imageBackOff.GC()
	took := time.Since(began)
	var size uint64
	if st, err := r.is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ref}, false); err == nil {
		size = st.GetImage().GetSize()
	}
	event(corev1.EventTypeNormal, EventPulled, fmt.Sprintf("Successfully pulled image %q in %v (%v including waiting). Image size: %v bytes.", image, took, took, size))
	return ref, "", "", nil
}

// Image Events (kubelet's reasons).
const (
	EventPulling = "Pulling"
	EventPulled  = "Pulled"
)
