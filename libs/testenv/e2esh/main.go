// Command e2esh is the busybox test image's /bin/sh. It runs busybox's ash,
// as the e2e suites' busybox 1.37 image does (specs match its messages,
// such as "/bin/sh: can't create /file: Read-only file system"), but when
// the environment holds a variable whose name is not a shell name
// (data-1): Debian's busybox 1.35 ash drops those from what it hands on,
// where 1.37's keeps them, so then the static bash beside it runs instead.
package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

const (
	busybox = "/bin/busybox"
	bash    = "/usr/libexec/e2esh/bash"
)

func main() {
	shell := busybox
	if otherNames(os.Environ()) {
		shell = bash
	}
	// argv[0] stays the caller's: busybox picks its ash applet by it, and
	// both shells name themselves by it in their messages.
	err := syscall.Exec(shell, os.Args, os.Environ())
	fmt.Fprintf(os.Stderr, "%s: exec %s: %v\n", os.Args[0], shell, err)
	os.Exit(127)
}

// otherNames says whether a variable of env has a name that is not a shell
// name (a letter or underscore, then letters, digits and underscores).
func otherNames(env []string) bool {
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !shellName(name) {
			return true
		}
	}
	return false
}

func shellName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		letter := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
