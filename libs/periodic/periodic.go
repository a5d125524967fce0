// Package periodic runs a function on a period until its context ends, the
// first time one period from the start. (A loop that runs at once and then
// on a period is apimachinery's wait.NonSlidingUntilWithContext.)
package periodic

import (
	"context"
	"time"
)

// Run calls f every period, the first time one period from now, until ctx
// ends; it returns then. A call that outlasts the period delays the next
// one (calls never pile up or overlap), and f is not called once ctx has
// ended.
func Run(ctx context.Context, period time.Duration, f func(context.Context)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ctx.Err() != nil {
			return
		}
		f(ctx)
	}
}
