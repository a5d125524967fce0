package workers

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// expandCommand replaces $(NAME) in each argument with the value of the
// container's env var NAME when it has a literal value; $$ is a literal $;
// a reference to an unknown name stays as written (kubelet:
// ExpandContainerCommandOnlyStatic).
func expandCommand(cmd []string, env []corev1.EnvVar) []string {
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
		out[i] = expandOne(a, vars)
	}
	return out
}

func expandOne(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
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
			if v, ok := vars[name]; ok {
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
