//go:build !linux

package testenv

import "syscall"

func childAttrs() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
