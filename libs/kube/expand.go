package kube

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Expand replaces $(NAME) in s with the value lookup finds, as the kubelet
// expands command, args and env values: $$ is a literal $, and a reference
// that lookup does not know, or that is not closed, stays as written.
func Expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok && name != "" {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// ExpandCommandStatic replaces $(NAME) in each argument of cmd with the
// value of the container's env var NAME when it has a literal value (not
// valueFrom), as the kubelet expands an exec probe's command; $$ is a
// literal $ and an unknown reference stays as written.
func ExpandCommandStatic(cmd []string, env []corev1.EnvVar) []string {
	vars := map[string]string{}
	for _, e := range env {
		if e.ValueFrom == nil {
			vars[e.Name] = e.Value
		}
	}
	if len(vars) == 0 {
		return cmd
	}
	out := make([]string, len(cmd))
	for i, a := range cmd {
		out[i] = Expand(a, func(name string) (string, bool) { v, ok := vars[name]; return v, ok })
	}
	return out
}
