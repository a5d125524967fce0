// Command e2esh is the /bin/sh of the busybox and agnhost test images. It
// runs busybox's ash, as the e2e suites' images do (specs match its
// messages, such as "/bin/sh: can't create /file: Read-only file system"),
// but the static bash beside it runs instead
//   - when the environment holds a variable whose name is not a shell name
//     (data-1): Debian's busybox 1.35 ash drops those from what it hands on,
//     where 1.37's keeps them;
//   - when a `-c` script names a command the image carries in place of a
//     busybox applet (nc, the agnhost image's e2enc): Debian's ash runs its
//     own applet for any name it has before it looks PATH up, where the
//     real images' shells find the image's program.
package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
)

const (
	busybox = "/bin/busybox"
	bash    = "/usr/libexec/e2esh/bash"
)

func main() {
	shell := busybox
	if otherNames(os.Environ()) || namesOwn(os.Args[1:]) {
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

// ownCommands are the commands an image may carry in place of busybox's
// applets of the same name.
var ownCommands = []string{"nc"}

// namesOwn says whether the shell's arguments hold a -c script that names
// one of ownCommands as a word.
func namesOwn(args []string) bool {
	for i, a := range args {
		if a != "-c" || i+1 >= len(args) {
			continue
		}
		words := strings.FieldsFunc(args[i+1], func(r rune) bool {
			return strings.ContainsRune(" \t\n;|&()`", r)
		})
		for _, w := range words {
			if slices.Contains(ownCommands, w) {
				return true
			}
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
