package cri

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/splitlet/splitlet/libs/runtime"
)

// The kubelet's /etc/hosts headers; tests and tools look for them.
const (
	hostsHeader            = "# Kubernetes-managed hosts file.\n"
	hostsHeaderHostNetwork = "# Kubernetes-managed hosts file (host network).\n"
	etcHosts               = "/etc/hosts"
	// maxTerminationMessage is the most of a termination message file read
	// (kubelet: 4 KiB).
	maxTerminationMessage = 4096
)

// hostsFile is the path of the node's own hosts file, which host-network
// pods get a copy of.
var hostsFile = "/etc/hosts"

// podFileMounts writes the files the kubelet manages for a container under
// the pod's directory (opts.PodDir) and returns their mounts (kubelet:
// makeMounts): /etc/hosts, unless the container mounts something there, and
// an empty file at its terminationMessagePath, which the container may
// write its termination message to. Without a pod directory there are none.
func podFileMounts(p *corev1.Pod, c *corev1.Container, attempt int, podIP, clusterDomain string, opts runtime.StartOptions) ([]*runtimeapi.Mount, error) {
	if opts.PodDir == "" {
		return nil, nil
	}
	var out []*runtimeapi.Mount
	ownHosts := false
	for _, m := range opts.Mounts {
		if filepath.Clean(m.ContainerPath) == etcHosts {
			ownHosts = true
		}
	}
	if !ownHosts && podIP != "" {
		content, err := hostsContent(p, podIP, clusterDomain)
		if err != nil {
			return nil, fmt.Errorf("/etc/hosts: %w", err)
		}
		path := filepath.Join(opts.PodDir, "etc-hosts")
		if err := os.MkdirAll(opts.PodDir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, content, 0o644); err != nil {
			return nil, err
		}
		out = append(out, &runtimeapi.Mount{ContainerPath: etcHosts, HostPath: path})
	}
	if c.TerminationMessagePath != "" {
		dir := filepath.Join(opts.PodDir, "containers", c.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		path := filepath.Join(dir, strconv.Itoa(attempt)+"-termination-log")
		if err := os.WriteFile(path, nil, 0o666); err != nil {
			return nil, err
		}
		// any user of the container may write its message (kubelet: 0666).
		if err := os.Chmod(path, 0o666); err != nil {
			return nil, err
		}
		out = append(out, &runtimeapi.Mount{ContainerPath: c.TerminationMessagePath, HostPath: path})
	}
	return out, nil
}

// hostsContent is the pod's /etc/hosts as the kubelet writes it: the
// node's own file for a host-network pod, otherwise localhost entries and
// the pod's IP with its host name (first its FQDN, with a subdomain in the
// cluster's domain); then the pod's hostAliases.
func hostsContent(p *corev1.Pod, podIP, clusterDomain string) ([]byte, error) {
	var b bytes.Buffer
	if p.Spec.HostNetwork {
		node, err := os.ReadFile(hostsFile)
		if err != nil {
			return nil, err
		}
		b.WriteString(hostsHeaderHostNetwork)
		b.Write(node)
	} else {
		b.WriteString(hostsHeader)
		b.WriteString("127.0.0.1\tlocalhost\n")
		b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
		b.WriteString("fe00::0\tip6-localnet\n")
		b.WriteString("fe00::0\tip6-mcastprefix\n")
		b.WriteString("fe00::1\tip6-allnodes\n")
		b.WriteString("fe00::2\tip6-allrouters\n")
		host, domain := podHostname(p, clusterDomain)
		if domain != "" {
			fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", podIP, host, domain, host)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", podIP, host)
		}
	}
	if len(p.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, a := range p.Spec.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
		}
	}
	return b.Bytes(), nil
}

// terminationMessage reads what an exited container wrote to its
// termination message file, found among its mounts.
func terminationMessage(s *runtimeapi.ContainerStatus, path string) string {
	if path == "" {
		return ""
	}
	for _, m := range s.GetMounts() {
		if m.GetContainerPath() != path {
			continue
		}
		f, err := os.Open(m.GetHostPath())
		if err != nil {
			return ""
		}
		defer f.Close()
		buf := make([]byte, maxTerminationMessage)
		n, _ := f.Read(buf)
		return string(buf[:n])
	}
	return ""
}
