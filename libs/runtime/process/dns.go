package process

import "github.com/splitlet/splitlet/libs/runtime"

var _ runtime.HostDNS = (*Runtime)(nil)

// HostDNS says that the containers resolve names through the host's own
// /etc/resolv.conf and /etc/hosts: they share the host's filesystem and
// network, and the runtime has no mount namespace to give them others.
func (r *Runtime) HostDNS() {}
