package testenv

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ensureBridge makes the bridge named with addr on it and up, unless a link
// of that name exists (the CNI bridge plugin made it: it puts the gateway
// address on it itself); made says whether this call made it.
func ensureBridge(name string, addr netip.Prefix) (made bool, err error) {
	if _, err := netlink.LinkByName(name); err == nil {
		return false, nil
	} else if !errors.As(err, new(netlink.LinkNotFoundError)) {
		return false, err
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
	if err := netlink.LinkAdd(br); err != nil {
		return false, err
	}
	ipn := &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), 32)}
	if err := netlink.AddrAdd(br, &netlink.Addr{IPNet: ipn}); err != nil {
		return true, err
	}
	return true, netlink.LinkSetUp(br)
}

// delBridge removes the bridge named.
func delBridge(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkDel(link)
}

// blackhole is the route that drops every packet to dst on the host.
func blackhole(dst netip.Prefix) *netlink.Route {
	return &netlink.Route{
		Dst:  &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())},
		Type: unix.RTN_BLACKHOLE,
	}
}

// addBlackhole adds (or keeps) the blackhole route for dst.
func addBlackhole(dst netip.Prefix) error { return netlink.RouteReplace(blackhole(dst)) }

// delBlackhole removes it.
func delBlackhole(dst netip.Prefix) error { return netlink.RouteDel(blackhole(dst)) }

// hostLockPath is the lock one cluster network at a time holds: the
// blackhole route and kube-proxy's chains are the host's, not a test's.
const hostLockPath = "/tmp/splitlet-clusternet.lock"

// lockHost waits (until ctx ends) for the host's cluster network lock and
// holds it until the file returned is closed.
func lockHost(ctx context.Context) (*os.File, error) {
	f, err := os.OpenFile(hostLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, errors.New("testenv: another cluster network holds " + hostLockPath + ": " + ctx.Err().Error())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
