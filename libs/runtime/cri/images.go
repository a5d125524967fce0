package cri

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
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
	return imagePullPolicy(c.Image, c.ImagePullPolicy)
}

// imagePullPolicy is policy, or when empty the API server's default for
// the image (an image volume's pullPolicy defaults as a container's).
func imagePullPolicy(image string, policy corev1.PullPolicy) corev1.PullPolicy {
	if policy != "" {
		return policy
	}
	hasTag, tag, hasDigest := imageParts(image)
	if !hasDigest && (!hasTag || tag == "latest") {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

// ensureImage makes sure the image (a container's, or an image volume's)
// is there as its pull policy says (kubelet: imageManager.EnsureImageExists), and returns the
// image reference to create the container from, or the kubelet's reason
// and message for why it cannot be.
//
// It tells event of what it does as the kubelet's image manager records it:
// Pulled when the image is there, Pulling and Pulled around a pull.
func (r *Runtime) ensureImage(ctx context.Context, p *corev1.Pod, requested string, policy corev1.PullPolicy, sb *runtimeapi.PodSandboxConfig,
	pullSecrets []corev1.Secret, event func(eventType, reason, message string)) (ref, reason, msg string, err error) {
	if event == nil {
		event = func(string, string, string) {}
	}
	if err := validImage(requested); err != nil {
		return "", ReasonInvalidImageName, fmt.Sprintf("Failed to apply default image tag %q: %v", requested, err), err
	}
	image := requested
	// kubelet: a reference with neither tag nor digest gets :latest.
	if hasTag, _, hasDigest := imageParts(image); !hasTag && !hasDigest {
		image += ":latest"
	}
	spec := &runtimeapi.ImageSpec{Image: image, UserSpecifiedImage: requested}
	kr, err := newKeyring(pullSecrets)
	if err != nil {
		// kubelet: a pull secret that cannot be read fails the lookup.
		return "", ReasonErrImagePull, err.Error(), err
	}
	// the pod's secrets first, then the credential provider plugins
	// (kubelet: the pod's keyring before the node's), looked up once and
	// only when needed (a plugin is a process to run).
	auths := sync.OnceValue(func() []*runtimeapi.AuthConfig {
		return append(kr.lookup(image), r.opts.credProviders.lookup(ctx, image)...)
	})
	if policy != corev1.PullAlways {
		ref, reason, msg, err := r.presentImage(ctx, requested, spec, policy, auths)
		if ref != "" || err != nil {
			if err == nil {
				event(corev1.EventTypeNormal, EventPulled, fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", requested))
			}
			return ref, reason, msg, err
		}
	}
	return r.pullImage(ctx, p, requested, spec, sb, auths(), event)
}

// presentImage returns the image's ID when it is there and the pod may run
// it without a pull (its pull records: pulled anonymously, with one of the
// pod's credentials auths, or there before any pull), "" when it must be
// pulled; or why it cannot be.
func (r *Runtime) presentImage(ctx context.Context, requested string, spec *runtimeapi.ImageSpec, policy corev1.PullPolicy, auths func() []*runtimeapi.AuthConfig) (ref, reason, msg string, err error) {
	st, err := r.is.ImageStatus(ctx, spec, false)
	if err != nil {
		msg := fmt.Sprintf("Failed to inspect image %q: %v", spec.Image, grpcMessage(err))
		return "", ReasonImageInspectError, msg, err
	}
	if img := st.GetImage(); img != nil {
		must, err := r.records.mustPull(spec.Image, img.GetId(), auths)
		if err != nil {
			return "", ReasonErrImagePull, err.Error(), err
		}
		if !must {
			return img.GetId(), "", "", nil
		}
	}
	if policy == corev1.PullNever {
		msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", requested)
		return "", ReasonErrImageNeverPull, msg, errors.New(msg)
	}
	return "", "", "", nil
}

// pullImage pulls the image unless its pull is backing off, with the
// credentials of the pod's pull secrets that match it, each in turn until
// one works (none: an anonymous pull), and records Pulling and Pulled
// (kubelet: imageManager.pullImage). requested is the container's image
// as written, which the kubelet's messages and back-off name.
func (r *Runtime) pullImage(ctx context.Context, p *corev1.Pod, requested string, spec *runtimeapi.ImageSpec, sb *runtimeapi.PodSandboxConfig,
	auths []*runtimeapi.AuthConfig, event func(eventType, reason, message string)) (ref, reason, msg string, err error) {
	key := string(p.UID) + "_" + requested
	if r.imageBackOff.IsInBackOffSinceUpdate(key, r.imageBackOff.Clock.Now()) {
		msg := fmt.Sprintf("Back-off pulling image %q", requested)
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
	if err := r.records.intend(spec.Image); err != nil {
		return "", ReasonErrImagePull, fmt.Sprintf("Failed to record image pull intent for container image %q: %v", requested, err), err
	}
	r.log.Info("pulling image", podFields(p, "image", requested)...)
	event(corev1.EventTypeNormal, EventPulling, fmt.Sprintf("Pulling image %q", requested))
	began := time.Now()
	ref, used, size, pulled, err := r.pullWithCredentials(ctx, spec, auths, sb)
	// a pull cut short may have landed: its intent stays, so the next pod
	// pulls again rather than take the image for preloaded.
	if err == nil || ctx.Err() == nil {
		if rerr := r.records.done(spec.Image, ref, used); rerr != nil {
			r.log.Error("cannot record an image pull", podFields(p, "image", requested, "error", rerr.Error())...)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return "", ReasonErrImagePull, err.Error(), err
		}
		r.imageBackOff.Next(key, r.imageBackOff.Clock.Now())
		msg := err.Error()
		r.pullMu.Lock()
		r.pullErrs[key] = ReasonErrImagePull + ": " + msg
		r.pullMu.Unlock()
		r.log.Info("image pull failed", podFields(p, "image", requested, "error", msg)...)
		return "", ReasonErrImagePull, msg, err
	}
	r.imageBackOff.GC()
	waited := time.Since(began).Truncate(time.Millisecond)
	event(corev1.EventTypeNormal, EventPulled, fmt.Sprintf("Successfully pulled image %q in %v (%v including waiting). Image size: %v bytes.",
		requested, pulled.Truncate(time.Millisecond), waited, size))
	return ref, "", "", nil
}

// pullWithCredentials waits for a pull slot (serialize-image-pulls,
// max-parallel-image-pulls), then pulls with each of auths in turn until
// one works, or anonymously when there are none (kubelet: the runtime
// manager's PullImage); used is the credential that worked. took is the
// pull's own time, without the wait.
func (r *Runtime) pullWithCredentials(ctx context.Context, spec *runtimeapi.ImageSpec, auths []*runtimeapi.AuthConfig, sb *runtimeapi.PodSandboxConfig) (ref string, used *runtimeapi.AuthConfig, size uint64, took time.Duration, err error) {
	if r.pullSlots != nil {
		select {
		case r.pullSlots <- struct{}{}:
			defer func() { <-r.pullSlots }()
		case <-ctx.Done():
			return "", nil, 0, 0, ctx.Err()
		}
	}
	began := time.Now()
	if len(auths) == 0 {
		auths = []*runtimeapi.AuthConfig{nil}
	}
	var errs []error
	for _, auth := range auths {
		ref, err = r.is.PullImage(ctx, spec, auth, sb)
		if err == nil {
			used = auth
			break
		}
		errs = append(errs, err)
	}
	if ref == "" {
		if len(errs) == 1 {
			return "", nil, 0, 0, errs[0]
		}
		return "", nil, 0, 0, utilerrors.NewAggregate(errs)
	}
	if st, err := r.is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: ref}, false); err == nil {
		size = st.GetImage().GetSize()
	}
	return ref, used, size, time.Since(began), nil
}

// Image Events (kubelet's reasons).
const (
	EventPulling = "Pulling"
	EventPulled  = "Pulled"
)
