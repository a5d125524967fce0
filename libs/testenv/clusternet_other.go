//go:build !linux

package testenv

import (
	"context"
	"errors"
	"net/netip"
	"os"
)

var errClusterNetwork = errors.New("testenv: the cluster network needs Linux")

func ensureBridge(string, netip.Prefix) (bool, error) { return false, errClusterNetwork }
func delBridge(string) error                          { return errClusterNetwork }
func addBlackhole(netip.Prefix) error                 { return errClusterNetwork }
func delBlackhole(netip.Prefix) error                 { return errClusterNetwork }
func lockHost(context.Context) (*os.File, error)      { return nil, errClusterNetwork }
