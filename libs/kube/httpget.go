package kube

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Release is the Kubernetes minor release whose kubelet Splitlet follows,
// as its User-Agents name it (kube-probe/<release>, kube-lifecycle/<release>).
const Release = "1.36"

// The GET of an httpGet action, shared by probes and lifecycle hooks as in
// the kubelet (httpprobe.NewRequestForHTTPGetAction).

// ResolvePort turns an action's port (a number, or the name of one of the
// container's ports) into a port number.
func ResolvePort(port intstr.IntOrString, c *corev1.Container) (int, error) {
	n := -1
	switch port.Type {
	case intstr.Int:
		n = port.IntValue()
	case intstr.String:
		found := false
		for _, p := range c.Ports {
			if p.Name == port.StrVal {
				n, found = int(p.ContainerPort), true
				break
			}
		}
		if !found {
			// kubelet rule: a name that matches no port may still be a number.
			v, err := strconv.Atoi(port.StrVal)
			if err != nil {
				return -1, fmt.Errorf("port %q not found in container %q", port.StrVal, c.Name)
			}
			n = v
		}
	default:
		return -1, fmt.Errorf("port has no type: %+v", port)
	}
	if n < 1 || n > 65535 {
		return n, fmt.Errorf("invalid port number: %d", n)
	}
	return n, nil
}

// HTTPGetRequest builds the GET request of an httpGet action: the scheme (default
// http), host (default the pod IP), port (number or container port name),
// path and headers, with the kubelet's User-Agent and Accept unless the
// action sets them.
func HTTPGetRequest(action *corev1.HTTPGetAction, c *corev1.Container, podIP, userAgent string) (*http.Request, error) {
	scheme := strings.ToLower(string(action.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	host := action.Host
	if host == "" {
		host = podIP
	}
	port, err := ResolvePort(action.Port, c)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(action.Path)
	if err != nil {
		u = &url.URL{Path: action.Path}
	}
	u.Scheme = scheme
	u.Host = net.JoinHostPort(host, strconv.Itoa(port))
	req, err := http.NewRequest(http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	h := make(http.Header, len(action.HTTPHeaders)+2)
	for _, hd := range action.HTTPHeaders {
		h.Add(hd.Name, hd.Value)
	}
	if _, ok := h["User-Agent"]; !ok {
		h.Set("User-Agent", userAgent)
	}
	// kubelet rule: an Accept header given empty removes the default.
	if _, ok := h["Accept"]; !ok {
		h.Set("Accept", "*/*")
	} else if h.Get("Accept") == "" {
		h.Del("Accept")
	}
	req.Header = h
	req.Host = h.Get("Host")
	return req, nil
}
