package service

import (
	"context"
	"errors"
	"time"

	"github.com/splitlet/splitlet/libs/bus"
)

// reclaimTimeout bounds one node-level reclaim: removing dead containers and
// images may take a while on a loaded runtime.
const reclaimTimeout = 2 * time.Minute

// busReclaimer is the eviction manager's node-level reclaim: it asks the
// node's garbage collector, the pod worker that owns partition 0, on
// runtime.reclaim.0 (ReclaimRequest).
type busReclaimer struct {
	pub  *bus.Publisher
	subj bus.Subjects
}

// Reclaim implements eviction.NodeReclaimer.
func (b busReclaimer) Reclaim(ctx context.Context, signal string) error {
	rctx, cancel := context.WithTimeout(ctx, reclaimTimeout)
	defer cancel()
	e, err := b.pub.Request(rctx, b.subj.Reclaim(0), bus.KindReclaimRequest, &bus.ReclaimRequest{Signal: signal})
	if err != nil {
		return err
	}
	res, err := bus.DecodeReclaimResult(e)
	if err != nil {
		return err
	}
	if res.Error != "" {
		return errors.New(res.Error)
	}
	return nil
}
