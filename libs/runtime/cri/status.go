package cri

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/periodic"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/crilog"
)

// stateOf maps a CRI container state.
func stateOf(s runtimeapi.ContainerState) runtime.State {
	switch s {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return runtime.StateCreated
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return runtime.StateRunning
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return runtime.StateExited
	}
	return runtime.StateUnknown
}

// rank orders states: a container only moves forward (an exited container
// never runs again), so an older reading never replaces a newer one.
func rank(s runtime.State) int {
	switch s {
	case runtime.StateCreated:
		return 0
	case runtime.StateExited:
		return 2
	}
	return 1
}

// convert turns a CRI container status into the runtime's, from the
// kubelet's labels and annotations; ok is false for a container that is
// not a pod's.
func (r *Runtime) convert(ctx context.Context, s *runtimeapi.ContainerStatus) (runtime.ContainerStatus, bool) {
	uid := s.GetLabels()[labelPodUID]
	if uid == "" {
		return runtime.ContainerStatus{}, false
	}
	ann := s.GetAnnotations()
	st := runtime.ContainerStatus{
		ID:      r.containerID(s.GetId()),
		PodUID:  types.UID(uid),
		Name:    s.GetLabels()[labelContainerName],
		Attempt: int(s.GetMetadata().GetAttempt()),
		State:   stateOf(s.GetState()),
		Image:   s.GetImage().GetUserSpecifiedImage(),
		ImageID: s.GetImageId(),
		LogPath: s.GetLogPath(),
	}
	if st.Name == "" {
		st.Name = s.GetMetadata().GetName()
	}
	if st.Image == "" {
		st.Image = s.GetImage().GetImage()
	}
	if st.ImageID == "" {
		// kubelet: ImageId is newer; older runtimes report only ImageRef.
		st.ImageID = s.GetImageRef()
	}
	if n, err := strconv.Atoi(ann[annotationRestartCount]); err == nil {
		st.Attempt = n
	}
	if h, err := strconv.ParseUint(ann[annotationHash], 16, 64); err == nil {
		st.Hash = h
	}
	if data := ann[annotationResources]; data != "" {
		var res corev1.ResourceRequirements
		if json.Unmarshal([]byte(data), &res) == nil {
			st.Resources = &res
		}
	}
	r.mu.Lock()
	if res, ok := r.resized[s.GetId()]; ok {
		st.Resources = &res
	}
	r.mu.Unlock()
	if s.GetCreatedAt() > 0 {
		st.CreatedAt = time.Unix(0, s.GetCreatedAt())
	}
	if s.GetState() != runtimeapi.ContainerState_CONTAINER_CREATED && s.GetStartedAt() > 0 {
		st.StartedAt = time.Unix(0, s.GetStartedAt())
	}
	if st.State == runtime.StateExited {
		st.ExitCode = int(s.GetExitCode())
		st.Reason, st.Message = s.GetReason(), s.GetMessage()
		if s.GetFinishedAt() > 0 {
			st.FinishedAt = time.Unix(0, s.GetFinishedAt())
		}
		// kubelet: the message is what the container wrote to its
		// termination message file; with FallbackToLogsOnError a failed
		// container that wrote none has the end of its log (not one that
		// never ran: it has no log). Either follows the runtime's own.
		msg := terminationMessage(s, ann[annotationTerminationMessagePath])
		if msg == "" && corev1.TerminationMessagePolicy(ann[annotationTerminationMessagePolicy]) == corev1.TerminationMessageFallbackToLogsOnError &&
			st.ExitCode != 0 && st.Reason != "ContainerCannotRun" && st.LogPath != "" {
			msg = lastLog(ctx, st.LogPath)
		}
		if msg != "" {
			if st.Message != "" {
				st.Message += ": "
			}
			st.Message += msg
		}
		if cutShort(st) {
			// It never ran: its start was cancelled by the caller (a pod
			// worker killed mid-start). It counts as created, and is
			// started again (kubelet: a container that never started is
			// always started again), not as a failure of the container.
			st.State, st.ExitCode, st.Reason, st.Message, st.FinishedAt = runtime.StateCreated, 0, "", "", time.Time{}
		}
	}
	return st, true
}

// cutShort: containerd's report of a start the caller cancelled.
func cutShort(st runtime.ContainerStatus) bool {
	return st.Reason == "StartError" && st.StartedAt.IsZero() &&
		(strings.Contains(st.Message, "context canceled") || strings.Contains(st.Message, "context deadline exceeded"))
}

// lastLog is the end of a log: 80 lines, 2 KiB at most (kubelet's limits for
// a termination message taken from the log).
func lastLog(ctx context.Context, path string) string {
	var b bytes.Buffer
	_ = crilog.ReadFile(ctx, path, runtime.LogOptions{TailLines: maxTerminationLogLines}, nil, &b)
	msg := b.Bytes()
	if len(msg) > maxTerminationLogBytes {
		msg = msg[len(msg)-maxTerminationLogBytes:]
	}
	return string(msg)
}

// apply records a reading of instance id taken at seen, unless the cache
// holds a later state already, and announces a container that exited. It
// returns what the cache holds then.
func (r *Runtime) apply(id string, st runtime.ContainerStatus, seen time.Time) runtime.ContainerStatus {
	r.mu.Lock()
	in := r.byID[id]
	announce := false
	switch {
	case in == nil:
		in = &instance{id: id, status: st, seen: seen}
		r.byID[id] = in
		r.podLocked(st.PodUID).instances[id] = in
	case rank(st.State) < rank(in.status.State):
		// an older reading
	default:
		announce = in.status.State != runtime.StateExited && st.State == runtime.StateExited && !in.failedStart
		in.status = st
		if seen.After(in.seen) {
			in.seen = seen
		}
	}
	out := in.status
	r.mu.Unlock()
	if announce {
		r.events.Push(runtime.Event{PodUID: out.PodUID, ContainerID: out.ID, State: runtime.StateExited})
		r.log.Debug("container exited", zap.String("uid", string(out.PodUID)), zap.String("container", out.Name),
			zap.String("id", out.ID), zap.Int("exitCode", out.ExitCode), zap.String("reason", out.Reason))
	}
	return out
}

// loop relists every poll interval until Close.
func (r *Runtime) loop() {
	defer close(r.done)
	failing := false
	periodic.Run(wait.ContextForChannel(r.stop), r.opts.poll, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err := r.relist(ctx)
		switch {
		case err != nil && !failing:
			r.log.Warn("cannot relist the CRI runtime's containers", zap.Error(err))
			failing = true
		case err == nil && failing:
			r.log.Info("relisting the CRI runtime's containers again")
			failing = false
		}
	})
}

// listNode lists the node's sandboxes and containers.
func (r *Runtime) listNode(ctx context.Context) ([]*runtimeapi.PodSandbox, []*runtimeapi.Container, error) {
	sel := r.nodeLabels(map[string]string{})
	sbs, err := r.rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: sel})
	if err != nil {
		return nil, nil, err
	}
	cs, err := r.rs.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: sel})
	if err != nil {
		return nil, nil, err
	}
	return sbs, cs, nil
}

// relist reads the runtime's sandboxes and containers into the cache
// (kubelet: the generic PLEG's relist): ContainerStatus only for a
// container that is new or whose state changed.
func (r *Runtime) relist(ctx context.Context) error {
	r.relistMu.Lock()
	defer r.relistMu.Unlock()
	begun := time.Now()
	sbs, cs, err := r.listNode(ctx)
	if err != nil {
		return err
	}
	chosen := chooseSandboxes(sbs)
	r.fetchSandboxIPs(ctx, r.applySandboxes(chosen, begun))
	listed, err := r.refreshListed(ctx, cs, begun)
	if err != nil {
		return err
	}
	r.dropUnlisted(listed, begun)
	r.forgetIdle(chosen)
	return nil
}

// sandboxChoice is a pod's newest ready sandbox and its highest attempt.
type sandboxChoice struct {
	id              string
	created         int64
	attempt         uint32
	namespace, name string
}

// chooseSandboxes picks each pod's newest ready sandbox and highest attempt.
func chooseSandboxes(sbs []*runtimeapi.PodSandbox) map[types.UID]*sandboxChoice {
	chosen := map[types.UID]*sandboxChoice{}
	for _, sb := range sbs {
		uid := types.UID(sb.GetLabels()[labelPodUID])
		if uid == "" {
			continue
		}
		ch := chosen[uid]
		if ch == nil {
			ch = &sandboxChoice{}
			chosen[uid] = ch
		}
		if a := sb.GetMetadata().GetAttempt(); a > ch.attempt {
			ch.attempt = a
		}
		ch.namespace, ch.name = sb.GetMetadata().GetNamespace(), sb.GetMetadata().GetName()
		if sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY && sb.GetCreatedAt() >= ch.created {
			ch.id, ch.created = sb.GetId(), sb.GetCreatedAt()
		}
	}
	return chosen
}

// applySandboxes records the chosen sandboxes in the pods not changed since
// the relist began, clears the sandbox of those with none, and returns the
// sandboxes whose IP is not known yet.
func (r *Runtime) applySandboxes(chosen map[types.UID]*sandboxChoice, begun time.Time) []string {
	var needIP []string
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, ch := range chosen {
		pd := r.podLocked(uid)
		pd.hasSandbox = true
		if pd.name == "" {
			pd.namespace, pd.name = ch.namespace, ch.name
		}
		if pd.sandboxAt.Before(begun) {
			pd.sandboxID = ch.id
		}
		if ch.attempt > pd.sandboxAttempt {
			pd.sandboxAttempt = ch.attempt
		}
		if _, ok := r.sandboxIPs[ch.id]; ch.id != "" && !ok {
			needIP = append(needIP, ch.id)
		}
	}
	for uid, pd := range r.pods {
		if _, ok := chosen[uid]; !ok && pd.sandboxAt.Before(begun) {
			pd.sandboxID = ""
		}
	}
	return needIP
}

// fetchSandboxIPs asks the runtime for the IPs of the sandboxes given.
func (r *Runtime) fetchSandboxIPs(ctx context.Context, ids []string) {
	for _, id := range ids {
		if resp, err := r.rs.PodSandboxStatus(ctx, id, false); err == nil {
			r.mu.Lock()
			r.sandboxIPs[id] = resp.GetStatus().GetNetwork().GetIp()
			r.mu.Unlock()
		}
	}
}

// refreshListed asks ContainerStatus of the listed containers that are new
// or changed state, and returns the IDs listed.
func (r *Runtime) refreshListed(ctx context.Context, cs []*runtimeapi.Container, begun time.Time) (map[string]bool, error) {
	listed := make(map[string]bool, len(cs))
	for _, c := range cs {
		uid := types.UID(c.GetLabels()[labelPodUID])
		if uid == "" {
			continue
		}
		listed[c.GetId()] = true
		r.mu.Lock()
		if pd := r.pods[uid]; pd != nil && pd.name == "" {
			pd.namespace, pd.name = c.GetLabels()[labelPodNamespace], c.GetLabels()[labelPodName]
		}
		in := r.byID[c.GetId()]
		same := in != nil && in.status.State == stateOf(c.GetState())
		r.mu.Unlock()
		if same {
			continue
		}
		if _, err := r.refresh(ctx, c.GetId(), begun); err != nil && !isNotFound(err) {
			return nil, err
		}
	}
	return listed, nil
}

// dropUnlisted drops the cached containers the runtime no longer lists and
// nobody touched since the relist began.
func (r *Runtime) dropUnlisted(listed map[string]bool, begun time.Time) {
	type gone struct {
		uid types.UID
		id  string
	}
	var drop []gone
	r.mu.Lock()
	for id, in := range r.byID {
		if !listed[id] && in.seen.Before(begun) {
			drop = append(drop, gone{in.status.PodUID, id})
		}
	}
	r.mu.Unlock()
	for _, g := range drop {
		r.gone(g.uid, g.id)
	}
}

// forgetIdle forgets the pods with no container, no sandbox and no call in
// flight, and the IPs of sandboxes no pod uses.
func (r *Runtime) forgetIdle(chosen map[types.UID]*sandboxChoice) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for uid, pd := range r.pods {
		if len(pd.instances) == 0 && pd.sandboxID == "" && pd.busy == 0 {
			if _, ok := chosen[uid]; !ok {
				delete(r.pods, uid)
			}
		}
	}
	inUse := map[string]bool{}
	for _, pd := range r.pods {
		inUse[pd.sandboxID] = true
	}
	for id := range r.sandboxIPs {
		if !inUse[id] {
			delete(r.sandboxIPs, id)
		}
	}
}
