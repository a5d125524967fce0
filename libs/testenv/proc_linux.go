package testenv

import "syscall"

// childAttrs has the kernel kill a child when the process that started it
// dies, so that a crashed test leaves no etcd or kube-apiserver behind.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
