// Package sim is the simulated container runtime: containers run nothing
// and cost a few hundred bytes each, so one replica can hold 10,000 pods.
// There is no goroutine per container: a container's planned exit is a
// runtime timer (time.AfterFunc), and only starts and stops wait, in the
// caller's goroutine.
//
// # Behaviour
//
// StartContainer waits the start latency (WithStartLatency), holding one of
// the replica's start slots (WithMaxConcurrentStarts), then the container
// runs. Container IDs are "sim://<hex>", unique across runtimes. Every pod
// gets the same IP (WithPodIP, default 127.0.0.1).
//
// A running container stays running until StopContainer, unless its pod's
// annotations plan an exit. StopContainer ends it at once with exit code 0
// (reason Completed), as a process that handles SIGTERM would; with the
// ignore-sigterm annotation it waits the whole grace period and then ends
// it with exit code 137 (reason Error), as SIGKILL would. Every exit, planned
// or caused by StopContainer, is announced once on Events.
//
// The runtime keeps the newest two instances of each container name of a
// pod (the current one and the previous one, for `logs --previous`); older
// exited instances are forgotten when a new attempt starts.
//
// Logs are synthetic: one stdout line when the container started and one
// when it exited. Exec needs a running container; it runs nothing and
// answers what the exec annotations say (default: exit code 0, no output).
// Stats report running containers with zero CPU, memory and disk; the
// process count of a pod is its running containers, one process each.
//
// # Restore
//
// The simulated containers live in the replica's memory only. So that pods
// outlive their pod worker as they would in a real runtime, the runtime is
// a runtime.Restorer: when a replica takes pods over (its own start after a
// crash, or a handover) the pod workers restore each pod from the last
// status it reported on the bus, and the instances go on with their IDs,
// attempts, states, exit codes, times and spec hashes; a planned exit keeps
// its time counted from the instance's start. A replica that hands pods over
// forgets them (Forget) without stopping them. It is also a
// runtime.PodLister.
//
// # Annotations
//
// Each annotation exists in two forms: "<name>.<container>" applies to one
// container, "<name>" to every container of the pod; the per-container form
// wins. They are read when a container starts (Exec reads the values seen at
// the start of the container it runs in). A bad value makes StartContainer
// fail with reason CreateContainerConfigError and a message naming the
// annotation.
//
//	sim.splitlet.io/exit-code      exit code (0-255) of a planned exit
//	sim.splitlet.io/exit-after     Go duration after the start at which the
//	                               container exits; with only exit-code set
//	                               the exit is immediate, with only
//	                               exit-after the code is 0
//	sim.splitlet.io/start-error    a message: the start fails with reason
//	                               ContainerCannotRun and exit code 128
//	sim.splitlet.io/ignore-sigterm "true": StopContainer waits the whole
//	                               grace period, then kills (exit code 137)
//	sim.splitlet.io/exec-exit-code exit code Exec returns
//	sim.splitlet.io/exec-stdout    stdout Exec returns
//	sim.splitlet.io/exec-after     Go duration: before the container has
//	                               run this long, Exec answers exit code 0
//	                               and no output (a liveness probe that
//	                               starts failing after a while)
//
// For example, a container "app" that fails with code 1 two seconds after
// each start:
//
//	metadata:
//	  annotations:
//	    sim.splitlet.io/exit-code.app: "1"
//	    sim.splitlet.io/exit-after.app: "2s"
package sim
