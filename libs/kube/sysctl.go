package kube

import (
	"fmt"
	"strconv"
	"strings"
)

// Sysctl namespaces: a sysctl of the ipc or net namespace is the pod's own
// unless the pod shares that namespace with the host.
const (
	SysctlIPC = "ipc"
	SysctlNet = "net"
)

// NormalizeSysctl writes a sysctl name with dots as separators (kubelet:
// a name whose first separator is '/' uses '/' between its parts and may
// hold '.' inside one, so the two swap: kernel/shm_rmid_forced,
// net/ipv4/conf/eno2.100/rp_filter).
func NormalizeSysctl(name string) string {
	i := strings.IndexAny(name, "./")
	if i < 0 || name[i] == '.' {
		return name
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '/':
			return '.'
		case '.':
			return '/'
		}
		return r
	}, name)
}

// SysctlNamespace is the namespace a sysctl lives in (SysctlIPC,
// SysctlNet), or "" for one the node shares with every pod.
func SysctlNamespace(name string) string {
	name = NormalizeSysctl(name)
	switch {
	case strings.HasPrefix(name, "net."):
		return SysctlNet
	case name == "kernel.sem", strings.HasPrefix(name, "kernel.shm"), strings.HasPrefix(name, "kernel.msg"), strings.HasPrefix(name, "fs.mqueue."):
		return SysctlIPC
	}
	return ""
}

// safeSysctl is a sysctl every pod may set (the kubelet's safe set): it is
// namespaced and cannot starve the node. since is the first kernel whose
// namespace holds it ("" for any).
type safeSysctl struct {
	name, since string
}

var safeSysctls = []safeSysctl{
	{"kernel.shm_rmid_forced", ""},
	{"net.ipv4.ip_local_port_range", ""},
	{"net.ipv4.tcp_syncookies", ""},
	{"net.ipv4.ping_group_range", ""},
	{"net.ipv4.ip_unprivileged_port_start", ""},
	{"net.ipv4.ip_local_reserved_ports", "3.16"},
	{"net.ipv4.tcp_keepalive_time", "4.5"},
	{"net.ipv4.tcp_fin_timeout", "4.6"},
	{"net.ipv4.tcp_keepalive_intvl", "4.5"},
	{"net.ipv4.tcp_keepalive_probes", "4.5"},
	{"net.ipv4.tcp_rmem", "4.15"},
	{"net.ipv4.tcp_wmem", "4.15"},
}

// SafeSysctls are the names of the safe sysctls a node on the given kernel
// release (uname -r: "6.1.0-18-amd64") allows; an unreadable release
// allows those that need no particular kernel.
func SafeSysctls(release string) []string {
	major, minor, ok := kernelVersion(release)
	var out []string
	for _, s := range safeSysctls {
		if s.since != "" {
			m, n, _ := kernelVersion(s.since)
			if !ok || major < m || major == m && minor < n {
				continue
			}
		}
		out = append(out, s.name)
	}
	return out
}

// kernelVersion reads the major and minor numbers of a kernel release.
func kernelVersion(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	end := strings.IndexFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	if end >= 0 {
		parts[1] = parts[1][:end]
	}
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// SysctlAllowlist is what a node lets pods set: the safe sysctls and the
// unsafe ones its administrator allows (kubelet --allowed-unsafe-sysctls:
// names, or prefixes ending in '*').
type SysctlAllowlist struct {
	names    map[string]bool
	prefixes []string
}

// NewSysctlAllowlist builds the allowlist of safe plus allowed; an allowed
// pattern must be a sysctl of a pod's own namespace (ipc or net), since
// any other would reach the node.
func NewSysctlAllowlist(safe, allowed []string) (*SysctlAllowlist, error) {
	w := &SysctlAllowlist{names: map[string]bool{}}
	for _, n := range safe {
		w.names[NormalizeSysctl(n)] = true
	}
	for _, p := range allowed {
		p = NormalizeSysctl(strings.TrimSpace(p))
		if p == "" {
			continue
		}
		if SysctlNamespace(strings.TrimSuffix(p, "*")) == "" {
			return nil, fmt.Errorf("sysctl %q is not in a namespace a pod owns (ipc or net); it would change the node", p)
		}
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			w.prefixes = append(w.prefixes, prefix)
			continue
		}
		w.names[p] = true
	}
	return w, nil
}

// Check says why a pod may not set the sysctl, or nil: it is not on the
// list, or it is a sysctl of a namespace the pod shares with the host
// (kubelet's messages).
func (w *SysctlAllowlist) Check(name string, hostNetwork, hostIPC bool) error {
	name = NormalizeSysctl(name)
	listed := w.names[name]
	for _, p := range w.prefixes {
		listed = listed || strings.HasPrefix(name, p)
	}
	if !listed {
		return fmt.Errorf("%q not allowlisted", name)
	}
	switch ns := SysctlNamespace(name); {
	case ns == SysctlIPC && hostIPC, ns == SysctlNet && hostNetwork:
		return fmt.Errorf("%q not allowed with host %s enabled", name, ns)
	}
	return nil
}
