package service

import "github.com/splitlet/splitlet/libs/bus"

// SetConsumerHook has the runner's consumers made with hook, which may
// change their options and wrap their handlers (before Start).
func SetConsumerHook(r *Runner, hook func(*bus.ConsumerOptions, bus.Handler) bus.Handler) {
	r.consumerHook = hook
}
