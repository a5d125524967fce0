package cri

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/kube"
	"github.com/splitlet/splitlet/libs/machine"
	"github.com/splitlet/splitlet/libs/runtime"
	"github.com/splitlet/splitlet/libs/runtime/containerenv"
)

// NodeLabel names the Splitlet node whose pod a sandbox or container is,
// so that nodes sharing one runtime (local stacks, tests) each see and
// clean up only their own pods (a kubelet owns its runtime alone).
const NodeLabel = "io.splitlet.node"

// The kubelet's labels and annotations on sandboxes and containers
// (kuberuntime/labels.go and k8s.io/kubelet/pkg/types): what a restarted
// agent reads its pods back from.
const (
	labelPodName       = "io.kubernetes.pod.name"
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"

	annotationHash                     = "io.kubernetes.container.hash"
	annotationRestartCount             = "io.kubernetes.container.restartCount"
	annotationTerminationMessagePath   = "io.kubernetes.container.terminationMessagePath"
	annotationTerminationMessagePolicy = "io.kubernetes.container.terminationMessagePolicy"
	annotationDeletionGracePeriod      = "io.kubernetes.pod.deletionGracePeriod"
	annotationTerminationGracePeriod   = "io.kubernetes.pod.terminationGracePeriod"
	// annotationResources: the CPU and memory the container started with
	// (JSON), read back after a restart of the pod workers.
	annotationResources = "io.splitlet.container.resources"
)

// kubelet's CPU share and quota arithmetic (cm: MilliCPUToShares/Quota).
const (
	minShares     = 2
	maxShares     = 262144
	sharesPerCPU  = 1024
	milliPerCPU   = 1000
	quotaPeriodUs = 100000
	minQuotaUs    = 1000
)

// PodLogDir is a pod's log directory under root (kubelet:
// BuildPodLogsDirectory).
func PodLogDir(root string, p *corev1.Pod) string {
	return podLogDir(root, p.Namespace, p.Name, p.UID)
}

func podLogDir(root, namespace, name string, uid types.UID) string {
	return filepath.Join(root, namespace+"_"+name+"_"+string(uid))
}

// namespaces are the pod's Linux namespace modes (kubelet:
// NamespacesForPod).
func namespaces(p *corev1.Pod) *runtimeapi.NamespaceOption {
	ns := &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_POD,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
	if p.Spec.HostNetwork {
		ns.Network = runtimeapi.NamespaceMode_NODE
	}
	if p.Spec.HostIPC {
		ns.Ipc = runtimeapi.NamespaceMode_NODE
	}
	switch {
	case p.Spec.HostPID:
		ns.Pid = runtimeapi.NamespaceMode_NODE
	case p.Spec.ShareProcessNamespace != nil && *p.Spec.ShareProcessNamespace:
		ns.Pid = runtimeapi.NamespaceMode_POD
	}
	return ns
}

func privileged(c *corev1.Container) bool {
	return c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
}

// sandboxConfig is the pod's PodSandboxConfig (kubelet:
// generatePodSandboxConfig, without its DNS configuration, which
// ensureSandbox adds to a new sandbox, or pod-level resources).
func (r *Runtime) sandboxConfig(p *corev1.Pod, attempt uint32) *runtimeapi.PodSandboxConfig {
	labels := make(map[string]string, len(p.Labels)+3)
	for k, v := range p.Labels {
		labels[k] = v
	}
	labels[labelPodName], labels[labelPodNamespace], labels[labelPodUID] = p.Name, p.Namespace, string(p.UID)
	if r.opts.node != "" {
		labels[NodeLabel] = r.opts.node
	}
	anyPrivileged := false
	for i := range p.Spec.InitContainers {
		anyPrivileged = anyPrivileged || privileged(&p.Spec.InitContainers[i])
	}
	for i := range p.Spec.Containers {
		anyPrivileged = anyPrivileged || privileged(&p.Spec.Containers[i])
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: p.Name, Namespace: p.Namespace, Uid: string(p.UID), Attempt: attempt},
		Labels:       labels,
		Annotations:  r.sandboxAnnotations(p),
		LogDirectory: PodLogDir(r.opts.logRoot, p),
		PortMappings: portMappings(p),
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: r.cgroupParent(p),
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: namespaces(p),
				Privileged:       anyPrivileged,
			},
		},
	}
	r.opts.security.sandbox(p, cfg.Linux.SecurityContext)
	if !p.Spec.HostNetwork {
		// (an FQDN too long: ensureSandbox refuses the pod before this)
		cfg.Hostname, _ = kernelHostname(p, r.opts.domain())
	}
	if sc := p.Spec.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			cfg.Linux.SecurityContext.RunAsUser = &runtimeapi.Int64Value{Value: *sc.RunAsUser}
		}
		if sc.RunAsGroup != nil {
			cfg.Linux.SecurityContext.RunAsGroup = &runtimeapi.Int64Value{Value: *sc.RunAsGroup}
		}
		if len(sc.Sysctls) > 0 {
			cfg.Linux.Sysctls = map[string]string{}
			for _, s := range sc.Sysctls {
				// kubelet: the runtime gets dotted names (kernel/shm_rmid_forced
				// is kernel.shm_rmid_forced).
				cfg.Linux.Sysctls[kube.NormalizeSysctl(s.Name)] = s.Value
			}
		}
	}
	return cfg
}

// sandbox is a pod's ready sandbox.
type sandbox struct {
	id     string
	config *runtimeapi.PodSandboxConfig
	ip     string
}

// ensureSandbox returns the pod's ready sandbox, creating one when it has
// none (kubelet: createPodSandbox, a new attempt after a sandbox that
// stopped) with the resolver configuration and runtime handler opts give.
func (r *Runtime) ensureSandbox(ctx context.Context, p *corev1.Pod, pd *pod, opts runtime.StartOptions) (*sandbox, error) {
	pd.sandboxMu.Lock()
	defer pd.sandboxMu.Unlock()
	r.mu.Lock()
	id, had, attempt := pd.sandboxID, pd.hasSandbox, pd.sandboxAttempt
	r.mu.Unlock()
	if id != "" {
		resp, err := r.rs.PodSandboxStatus(ctx, id, false)
		switch {
		case err == nil && resp.GetStatus().GetState() == runtimeapi.PodSandboxState_SANDBOX_READY:
			ip := resp.GetStatus().GetNetwork().GetIp()
			r.mu.Lock()
			r.sandboxIPs[id] = ip
			r.mu.Unlock()
			// the pod's cgroup follows its resources (a resize).
			if err := r.ensurePodCgroup(ctx, p, false); err != nil {
				r.log.Warn("cannot update the pod's cgroup", append(podFields(p), zap.Error(err))...)
			}
			return &sandbox{id: id, config: r.sandboxConfig(p, resp.GetStatus().GetMetadata().GetAttempt()), ip: ip}, nil
		case err != nil && !isNotFound(err):
			return nil, err
		}
	}
	if had || id != "" {
		attempt++
	}
	if err := r.opts.security.checkSandbox(p); err != nil {
		return nil, err
	}
	if !p.Spec.HostNetwork {
		if _, err := kernelHostname(p, r.opts.domain()); err != nil {
			return nil, err
		}
	}
	cfg := r.sandboxConfig(p, attempt)
	var err error
	if cfg.DnsConfig, err = sandboxDNS(p, opts.DNS); err != nil {
		return nil, fmt.Errorf("the pod's DNS configuration: %w", err)
	}
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return nil, fmt.Errorf("create the pod's log directory: %w", err)
	}
	if err := r.ensurePodCgroup(ctx, p, true); err != nil {
		return nil, err
	}
	handler := ""
	if opts.RuntimeHandler != nil {
		if handler, err = opts.RuntimeHandler(); err != nil {
			return nil, err
		}
	}
	id, err = r.rs.RunPodSandbox(ctx, cfg, handler)
	if err != nil {
		return nil, err
	}
	ip := ""
	if resp, err := r.rs.PodSandboxStatus(ctx, id, false); err == nil {
		ip = resp.GetStatus().GetNetwork().GetIp()
	}
	r.mu.Lock()
	pd.sandboxID, pd.sandboxAt, pd.hasSandbox, pd.sandboxAttempt = id, time.Now(), true, attempt
	r.sandboxIPs[id] = ip
	r.mu.Unlock()
	r.log.Debug("pod sandbox created", podFields(p, "sandbox", id, "runtimeHandler", handler)...)
	return &sandbox{id: id, config: cfg, ip: ip}, nil
}

// containerConfig is the ContainerConfig of attempt n of c (kubelet:
// generateContainerConfig, without volumes and devices).
func (r *Runtime) containerConfig(ctx context.Context, p *corev1.Pod, c *corev1.Container, attempt int, imageRef, podIP string, opts runtime.StartOptions) (*runtimeapi.ContainerConfig, error) {
	if podIP == "" || p.Spec.HostNetwork {
		podIP = r.PodIP(p)
	}
	env, err := containerenv.Build(ctx, p, c, containerenv.Options{PodIP: podIP, HostIP: r.opts.hostIP, Runtime: Type,
		Sources: opts.Sources, Allocatable: opts.Allocatable, ServiceEnv: opts.ServiceEnv, VolumePaths: opts.VolumePaths})
	if err != nil {
		return nil, err
	}
	ann := map[string]string{
		annotationHash:                     strconv.FormatUint(runtime.ContainerHash(c), 16),
		annotationRestartCount:             strconv.Itoa(attempt),
		annotationTerminationMessagePath:   c.TerminationMessagePath,
		annotationTerminationMessagePolicy: string(c.TerminationMessagePolicy),
	}
	if res := runtime.StartResources(c); res != nil {
		if data, err := json.Marshal(res); err == nil {
			ann[annotationResources] = string(data)
		}
	}
	if p.DeletionGracePeriodSeconds != nil {
		ann[annotationDeletionGracePeriod] = strconv.FormatInt(*p.DeletionGracePeriodSeconds, 10)
	}
	if p.Spec.TerminationGracePeriodSeconds != nil {
		ann[annotationTerminationGracePeriod] = strconv.FormatInt(*p.Spec.TerminationGracePeriodSeconds, 10)
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: c.Name, Attempt: uint32(attempt)},
		Image:    &runtimeapi.ImageSpec{Image: imageRef, UserSpecifiedImage: c.Image},
		// kubelet: $(VAR) in command and args expand against the env.
		Command:     containerenv.Expand(c.Command, env),
		Args:        containerenv.Expand(c.Args, env),
		WorkingDir:  c.WorkingDir,
		Labels:      r.nodeLabels(map[string]string{labelPodName: p.Name, labelPodNamespace: p.Namespace, labelPodUID: string(p.UID), labelContainerName: c.Name}),
		Annotations: ann,
		LogPath:     filepath.Join(c.Name, strconv.Itoa(attempt)+".log"),
		Stdin:       c.Stdin,
		StdinOnce:   c.StdinOnce,
		Tty:         c.TTY,
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       resources(c),
			SecurityContext: securityContext(p, c),
		},
	}
	if err := r.opts.security.container(p, c, cfg.Linux.SecurityContext); err != nil {
		return nil, err
	}
	// kubelet: the OOM killer takes best-effort containers first and
	// guaranteed ones last.
	cfg.Linux.Resources.OomScoreAdj = kube.OOMScoreAdj(p, c, memoryCapacity())
	if ns := cfg.Linux.SecurityContext.NamespaceOptions; opts.TargetContainer != "" && ns.Pid == runtimeapi.NamespaceMode_CONTAINER {
		// kubelet: an ephemeral container with a target shares the
		// target's process namespace (it sees and may debug its
		// processes), when the pod shares none.
		if id := r.runningID(p.UID, opts.TargetContainer); id != "" {
			ns.Pid, ns.TargetId = runtimeapi.NamespaceMode_TARGET, r.rawID(id)
		}
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		cfg.Envs = append(cfg.Envs, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
	}
	supportsRRO := r.RecursiveReadOnlyMounts(opts.RuntimeHandler)
	for _, m := range opts.Mounts {
		rro, err := runtime.ResolveRecursiveReadOnly(m, supportsRRO)
		if err != nil {
			return nil, fmt.Errorf("failed to resolve recursive read-only mode: %w", err)
		}
		cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath,
			Readonly: m.ReadOnly, RecursiveReadOnly: rro, Propagation: propagation(m.Propagation)})
	}
	files, err := podFileMounts(p, c, attempt, podIP, r.opts.domain(), opts)
	if err != nil {
		return nil, err
	}
	cfg.Mounts = append(cfg.Mounts, files...)
	applyDevices(cfg, opts.Devices)
	return cfg, nil
}

// propagation is the CRI's name of a mount propagation mode (kubelet:
// translateMountPropagation).
func propagation(p corev1.MountPropagationMode) runtimeapi.MountPropagation {
	switch p {
	case corev1.MountPropagationHostToContainer:
		return runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER
	case corev1.MountPropagationBidirectional:
		return runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL
	}
	return runtimeapi.MountPropagation_PROPAGATION_PRIVATE
}

// memoryCapacity is the host's memory, read once: the OOM score of a
// burstable container is its share of it.
var memoryCapacity = sync.OnceValue(machine.MemoryCapacity)

// resources are the container's CPU and memory limits (kubelet:
// calculateLinuxResources).
func resources(c *corev1.Container) *runtimeapi.LinuxContainerResources {
	res := &runtimeapi.LinuxContainerResources{}
	cpuReq, cpuLim := c.Resources.Requests.Cpu(), c.Resources.Limits.Cpu()
	milli := cpuReq.MilliValue()
	if cpuReq.IsZero() && !cpuLim.IsZero() {
		milli = cpuLim.MilliValue()
	}
	shares := milli * sharesPerCPU / milliPerCPU
	if shares < minShares {
		shares = minShares
	}
	if shares > maxShares {
		shares = maxShares
	}
	res.CpuShares = shares
	if !cpuLim.IsZero() {
		quota := cpuLim.MilliValue() * quotaPeriodUs / milliPerCPU
		if quota < minQuotaUs {
			quota = minQuotaUs
		}
		res.CpuQuota, res.CpuPeriod = quota, quotaPeriodUs
	}
	if mem := c.Resources.Limits.Memory(); !mem.IsZero() {
		res.MemoryLimitInBytes = mem.Value()
	}
	return res
}

// securityContext is the part of the container's security context a
// runtime here applies (kubelet: determineEffectiveSecurityContext).
func securityContext(p *corev1.Pod, c *corev1.Container) *runtimeapi.LinuxContainerSecurityContext {
	sc := &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: namespaces(p), Privileged: privileged(c)}
	if ps := p.Spec.SecurityContext; ps != nil {
		if ps.RunAsUser != nil {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: *ps.RunAsUser}
		}
		if ps.RunAsGroup != nil {
			sc.RunAsGroup = &runtimeapi.Int64Value{Value: *ps.RunAsGroup}
		}
		for _, g := range ps.SupplementalGroups {
			sc.SupplementalGroups = append(sc.SupplementalGroups, g)
		}
		// kubelet: the fsGroup is one of the container's groups, so that
		// it may use the volumes given to it.
		if ps.FSGroup != nil {
			sc.SupplementalGroups = append(sc.SupplementalGroups, *ps.FSGroup)
		}
	}
	if cs := c.SecurityContext; cs != nil {
		if cs.RunAsUser != nil {
			sc.RunAsUser = &runtimeapi.Int64Value{Value: *cs.RunAsUser}
		}
		if cs.RunAsGroup != nil {
			sc.RunAsGroup = &runtimeapi.Int64Value{Value: *cs.RunAsGroup}
		}
		if cs.ReadOnlyRootFilesystem != nil {
			sc.ReadonlyRootfs = *cs.ReadOnlyRootFilesystem
		}
		// kubelet: no_new_privs exactly when privilege escalation is
		// explicitly refused.
		if cs.AllowPrivilegeEscalation != nil {
			sc.NoNewPrivs = !*cs.AllowPrivilegeEscalation
		}
		if caps := cs.Capabilities; caps != nil {
			sc.Capabilities = &runtimeapi.Capability{}
			for _, a := range caps.Add {
				sc.Capabilities.AddCapabilities = append(sc.Capabilities.AddCapabilities, string(a))
			}
			for _, d := range caps.Drop {
				sc.Capabilities.DropCapabilities = append(sc.Capabilities.DropCapabilities, string(d))
			}
		}
	}
	return sc
}

// verifyNonRoot enforces runAsNonRoot (the container's over the pod's)
// against the user the container will run as: its runAsUser, else the
// image's user, root when the image names none (kubelet:
// verifyRunAsNonRoot, with its messages).
func verifyNonRoot(p *corev1.Pod, c *corev1.Container, imageUID *int64, imageUser string) error {
	nonRoot, user := false, (*int64)(nil)
	if ps := p.Spec.SecurityContext; ps != nil {
		if ps.RunAsNonRoot != nil {
			nonRoot = *ps.RunAsNonRoot
		}
		user = ps.RunAsUser
	}
	if cs := c.SecurityContext; cs != nil {
		if cs.RunAsNonRoot != nil {
			nonRoot = *cs.RunAsNonRoot
		}
		if cs.RunAsUser != nil {
			user = cs.RunAsUser
		}
	}
	if !nonRoot {
		return nil
	}
	desc := fmt.Sprintf("%s_%s(%s)", p.Name, p.Namespace, p.UID)
	if user != nil {
		if *user == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", desc, c.Name)
		}
		return nil
	}
	switch {
	case imageUID != nil && *imageUID == 0, imageUID == nil && imageUser == "":
		return fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", desc, c.Name)
	case imageUID == nil:
		return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)", imageUser, desc, c.Name)
	}
	return nil
}

// runsAsNonRoot says whether runAsNonRoot applies to the container.
func runsAsNonRoot(p *corev1.Pod, c *corev1.Container) bool {
	if c.SecurityContext != nil && c.SecurityContext.RunAsNonRoot != nil {
		return *c.SecurityContext.RunAsNonRoot
	}
	return p.Spec.SecurityContext != nil && p.Spec.SecurityContext.RunAsNonRoot != nil && *p.Spec.SecurityContext.RunAsNonRoot
}
