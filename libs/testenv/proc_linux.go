package testenv

import "syscall"

// childAttrs has the kernel kill a child when the process that started it
// dies, so that a crashed test leaves no etcd or kube-apiserver behind. The
// child gets a process group of its own: a terminal's Ctrl-C reaches only
// the program that started it, which stops its children in order (the
// agent before the API server it talks to).
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
