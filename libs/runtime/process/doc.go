// Package process is the runtime whose containers are local child
// processes (Linux). The image is ignored; the rest of the container spec is
// followed the way the kubelet and a CRI runtime would.
//
// The containers are children of the pod worker's process and die with it:
// a restarted pod worker finds none and starts them again (the cri runtime's
// containers outlive it).
//
// # Command
//
// command replaces the image's entrypoint and args its cmd, as in the
// kubelet; since there is no image, the program run is command[0] with
// command[1:] and args as arguments, or, without a command, args[0] with
// args[1:]. With neither the start fails with reason ContainerCannotRun. A
// program without a slash is looked up in the PATH of the container's
// environment; $(VAR) references in command, args and env values are
// expanded as the kubelet expands them.
//
// # Environment and directory
//
// The environment is the base environment (WithBaseEnv; default: the
// runtime's own PATH, or a standard one), HOSTNAME (the pod's hostname), then
// the container's env in order. valueFrom supports the downward API fields
// metadata.name, metadata.namespace, metadata.uid, metadata.labels['k'],
// metadata.annotations['k'], spec.nodeName, spec.serviceAccountName,
// status.podIP(s) (the runtime's pod IP) and status.hostIP(s)
// (WithHostIP), and resourceFieldRef (an unset limit is the node's
// allocatable when the start options give it). ConfigMaps and Secrets are
// read through the start options' Sources; without them such a reference
// fails the start with reason CreateContainerConfigError, unless it is
// optional. Volume mounts are symbolic links at their mountPath under the
// container's directory, pointing at the volume on the host; a link the
// container planted on the way fails the start. The working directory is
// workingDir, which must exist, or the container's directory
// <root>/pods/<uid>/<container>; when the way there is closed to the
// container's user, it starts in / (the cwd of an image without a
// WORKDIR). Stdin is /dev/null.
//
// # What it isolates
//
// Processes of the host, with no namespace and no cgroup: pods share the
// host's network (every port on loopback, the agent's included), its
// process table (command lines), what any user of the host may read
// (world-readable files, /tmp, abstract sockets, System V IPC), and no
// CPU or memory limit is enforced. What keeps pods from each other and
// from the agent is the user they run as:
//
//   - With WithPodUsers and the runtime as root (podworkers as root), each
//     pod runs as a uid of its own from a range, and the gid of the same
//     number, with no supplementary groups: pods cannot read each other's
//     files or /proc/<pid>/environ, nor signal each other or the agent, nor
//     read the agent's files of mode 0600. The uid is claimed on disk in a
//     directory every runtime of the host shares (claims.go), so no two
//     pods share one, and a runtime started afresh (after a kill -9 too)
//     gives the pod the same; ReleasePodUser frees it once the pod's files
//     are gone. runAsUser or runAsGroup 0 is refused unless WithAllowRoot;
//     any other value than the pod's own is refused (it could be another
//     pod's); both with reason CreateContainerConfigError. runAsNonRoot is
//     checked with the kubelet's messages. PodUser tells the pod workers
//     the pod's user, whose its volumes are.
//   - A root runtime without WithPodUsers runs a container as the user it
//     asks for (runAsUser, runAsGroup), else as itself: root, which reads
//     and does anything the agent may.
//   - A runtime that is not root runs every container as itself and refuses
//     one asking for another uid.
//
// Exec runs as the container's user.
//
// # Files
//
// A pod's directory is <root>/pods/<uid>; with pod users it is root's, in
// the pod's group, mode 0750 (the pod enters, changes nothing, no other pod
// enters), and the container's directory in it is the pod's user's, 0700.
// Since the container may write its directory, the runtime makes, opens
// and removes everything beneath the pod's directory through no symbolic
// link (package safefs): a log or termination message file is made fresh
// (a link or hard link in its place is replaced, never written through),
// and logs and messages are read through no link.
//
// # Logs
//
// stdout and stderr go to <root>/pods/<uid>/<container>/<attempt>.log in the
// CRI log format (package crilog). Logs reads the newest instance of a
// container, or the one before it with Previous; the runtime keeps the
// newest two instances of each container name and deletes older ones' logs.
//
// # Process groups, stop and exit
//
// Each container is a process group of its own (Setpgid) whose leader dies
// with the runtime's process (Pdeathsig SIGKILL; children are forked from
// one thread kept for the life of the process, since the signal follows the
// forking thread). StopContainer sends
// SIGTERM to the group, then SIGKILL after the grace period. When the leader
// exits, on its own or not, the rest of the group is killed, as a container
// ends with its init process, and the runtime reaps what it can: the leader
// always, and orphans of the group that were reparented to it (it is their
// parent when it runs as PID 1, or with WithSubreaper). The exit code of a
// process killed by a signal is 128 + the signal; the reason is Completed
// for 0 and Error otherwise (OOMKilled is never known). A container with
// a terminationMessagePath gets an empty file there under its directory
// (as its mounts: /dev/termination-log is ./dev/termination-log), made
// afresh at each start; what it holds at the exit (4 KiB at most) is the
// Message. With terminationMessagePolicy FallbackToLogsOnError, a failed
// container whose file is empty gets the end of its log (80 lines, 2 KiB
// at most). Every exit is announced on Events.
//
// # Containers die with the replica
//
// Unlike sim and CRI containers, which outlive the pod worker that started
// them, a process container is a child of the replica: it dies when the
// replica's process ends, however it ends, and no other replica can adopt
// it. The runtime is a runtime.ProcessLocal: a replica that hands a
// partition over (scale-out, scale-in, shutdown) stops the partition's
// containers with a short grace. It is also a runtime.Restorer: the next
// owner is told what the pods last ran and holds it as a record, so that
// no restart is hidden. An instance that had exited keeps its exit code
// and is not run again; one that was running is over, with exit code 137
// and reason ContainerStatusUnknown (the kubelet's, for a container that
// can no longer be found), and is restarted as the restart policy says:
// new ID, restart count one higher, the lost instance as its last state.
// Under restartPolicy Never it is not run again, and the pod fails.
//
// Pdeathsig reaches only a group's leader: what the leader started (a
// background child in its group) would outlive a replica killed with
// SIGKILL. With WithRecordDir, each group is written down (its ID, its
// leader's start time, the owning process) while it lives, and every
// runtime on the same directory sweeps it at start and every few seconds:
// the groups of an owner that is no longer alive are killed. podworkers
// uses one directory per node and host (key podworkers.process-records-dir),
// so a restarted replica or a surviving one cleans up. A process that
// leaves its group (setsid, a daemon) escapes this, as it would escape a
// kubelet without cgroups.
//
// # Exec and stats
//
// Exec runs the command as a child process with the container's environment
// and working directory, in a process group of its own that is killed when
// the command exits or the timeout passes. A command that cannot be started
// (not found) or times out is an error; one that ran reports its exit code.
// Stats read /proc: CPU time (user + system, the group's members and
// the leader's waited-for children) and resident memory of the container's
// process group.
package process
