// Package cri is the runtime whose containers are real containers of a
// Container Runtime Interface runtime (containerd's CRI plugin), driven
// through k8s.io/cri-client the way the kubelet's kuberuntime manager drives
// it.
//
// # Sandboxes and containers
//
// Each pod gets one sandbox (RunPodSandbox) at the first StartContainer of
// the pod; later containers join it. The sandbox has the pod's name,
// namespace and UID as metadata and labels, the host's network namespace
// for hostNetwork pods (NamespaceMode NODE) and a network namespace of its
// own otherwise (set up by the runtime's CNI configuration), the port
// mappings of its regular containers (hostPort, for the CNI portmap
// plugin), the pod's host
// name (off the host network), the DNS configuration StartOptions.DNS
// computes (the runtime writes it as the pod's /etc/resolv.conf), and the log
// directory <log-root>/<namespace>_<name>_<uid>. A sandbox that is no longer
// ready is replaced by a new one (next attempt) at the next start. A
// container is created from the image with command, args, env (package
// containerenv; $(VAR) references expanded), working directory, CPU and
// memory limits, and its log at <container>/<attempt>.log in the sandbox's
// log directory, then started; once it runs, its log is linked from
// /var/log/containers/<pod>_<namespace>_<container>-<id>.log
// (WithContainerLogDir), as the kubelet links it for log shippers, and the
// link goes when the container is removed (with an older instance or with
// the pod). Its labels and annotations are the
// kubelet's: io.kubernetes.pod.{uid,name,namespace} and
// io.kubernetes.container.name as labels; io.kubernetes.container.hash
// (runtime.ContainerHash), io.kubernetes.container.restartCount (the
// attempt), the termination message path and policy and the pod's grace
// periods as annotations.
//
// # Cgroups
//
// With WithCgroups each sandbox's CgroupParent is its pod's cgroup in the
// kubelet's layout (package cgroups): kubepods, its burstable and
// besteffort cgroups, pod<uid> (systemd: the matching slices). Before a
// pod's first sandbox the QoS cgroups are made where missing and sized
// (the burstable one from the Burstable pods' CPU requests, which each
// sandbox carries as annotations), then the pod's cgroup with its CPU
// shares, CFS quota, memory and pids limits; each later container start
// and each resize write the pod's values again; RemovePod removes the
// pod's cgroup after its sandboxes. ReconcileCgroups, which one pod worker
// of the node runs, makes deleted QoS cgroups again and removes the
// cgroups of pods that have no sandbox.
//
// # Security settings
//
// The security context goes to the CRI as the kubelet sends it
// (security.go): user, group and supplemental groups (fsGroup included)
// of the sandbox and the containers, capabilities, privileged,
// no_new_privs (allowPrivilegeEscalation false), a read-only root
// filesystem, the kubelet's masked and read-only /proc paths, SELinux
// options (the container's over the pod's), the supplemental groups
// policy, the pod's sysctls on the sandbox. The seccomp profile is the
// container's, else the pod's, else RuntimeDefault with WithSeccompDefault
// and Unconfined without; a Localhost profile is a file under
// WithSeccompProfileRoot, read by the CRI runtime when it creates the
// container (a missing one fails the creation, CreateContainerError). The
// sandbox runs RuntimeDefault. AppArmor profiles (fields and the deprecated
// annotations) are passed on where the host has AppArmor; where it has not
// (AppArmor), a container asking for one is not created
// (CreateContainerConfigError, "Cannot enforce AppArmor: ..."), never run
// unconfined. What the runtime cannot give is refused rather than dropped:
// hostUsers false (no sandbox: no user namespaces are mapped, and
// containerd 1.6 reports none), procMount Unmasked
// (CreateContainerConfigError). SupplementalGroupsPolicy reports whether
// the CRI runtime applies Strict (its status; containerd 1.6 does not), for
// admission to refuse it.
//
// # Reading back
//
// Everything the runtime reports is read from the CRI runtime, so that a
// new Runtime on the same containerd (a restarted pod worker) sees the
// containers an earlier one started, with the same IDs
// ("containerd://<id>"), attempts and hashes. A cache per pod holds the
// containers' statuses; New fills it, StartContainer and StopContainer
// update it, and a relist every poll interval (default 1 s, as the kubelet's
// generic PLEG) refreshes it: ListContainers, then ContainerStatus only for
// containers whose state changed. (containerd 1.6 has no
// GetContainerEvents, the evented PLEG's stream; 1.7 added it.) A container seen going from running to
// exited is announced on Events once. Exit codes and reasons are
// containerd's (Completed, Error, OOMKilled, StartError...); with
// terminationMessagePolicy FallbackToLogsOnError a failed container's
// message is the end of its log. Of each container name the newest
// instance stays, and of the older dead ones as many as the container
// policy keeps (WithContainerPolicy; one by default, the previous, for
// `logs -p`): a start removes the others with their logs.
//
// # Garbage collection
//
// The runtime does the runtime's side of package gc's collections (gc.go,
// logrotate.go, imagegc.go): CollectContainers removes dead instances beyond
// the policy and dead sandboxes no container is in but each pod's newest;
// RotateLogs renames a running container's full log to
// <log>.<YYYYMMDD-hhmmss>, has the CRI runtime reopen it
// (ReopenContainerLog), gzips the rotated files but the newest and keeps
// at most the policy's files; Images, ImagesInUse, RemoveImage and
// ImageFsUsage serve image GC (the sandbox image of the CRI runtime's
// configuration is pinned; an image is in use when any container of the
// CRI runtime is made from it).
//
// Relist (runtime.Relister) reads the CRI runtime at once: a pod worker
// that takes pods over from another replica calls it first, so that it
// adopts the containers and the sandbox the other one made since the last
// poll instead of making them again. Pods (runtime.PodLister) lists every
// pod with a sandbox or a container, with the namespace and name of their
// labels, whoever made them: the pod workers remove those no source wants.
//
// # Images
//
// imagePullPolicy is honoured, defaulted as the API server does (Always for
// the tag latest or no tag, else IfNotPresent). An image that is absent
// under Never fails the start with ErrImageNeverPull; a failed pull with
// ErrImagePull, and a start within the pull back-off after it (10 s
// doubling to 5 min per pod and image, the kubelet's) with
// ImagePullBackOff. Those failures leave no container instance: the
// returned status has no ID, its Reason and Message say why.
//
// # Pod IP
//
// A hostNetwork pod has the host IP (WithHostIP). Another pod has the IP
// PodSandboxStatus reports for its sandbox, or the host IP when it reports
// none (a loopback-only network namespace has no address of its own).
//
// # Logs, exec, stats
//
// Logs read the CRI log files containerd writes (package crilog), the
// live file of a rotated log; Follow polls the file until the container
// has exited, and reads on across a rotation. Exec runs ExecSync
// (probes, kubectl exec without stdin); a command given stdin goes through
// the streaming Exec endpoint of the runtime (SPDY), without a terminal.
// RemovePod keeps the interface's contract: it refuses while a container
// runs, then stops and removes the sandboxes.
// Stats come from ListContainerStats; CPU usage in nano cores is computed
// from two samples when the runtime does not report it.
package cri
