package workers

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/splitlet/splitlet/libs/kube"
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
	return kube.Expand(s, func(name string) (string, bool) { v, ok := vars[name]; return v, ok })
}
