package devices

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/splitlet/splitlet/libs/bus"
)

// requestTimeout bounds one allocation (its plugin calls included).
const requestTimeout = 30 * time.Second

// Serve answers the pod workers' DeviceAllocateRequests on subject until
// the subscription is drained (Unsubscribe).
func (m *Manager) Serve(nc *nats.Conn, pub *bus.Publisher, subject string) (*nats.Subscription, error) {
	return nc.Subscribe(subject, func(msg *nats.Msg) {
		if msg.Reply == "" {
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			out := m.answer(msg)
			if err := pub.Send(msg.Reply, bus.KindDeviceAllocateResult, out); err != nil {
				m.log.Warn("cannot answer a device allocation", zap.String("subject", subject), zap.Error(err))
			}
		}()
	})
}

func (m *Manager) answer(msg *nats.Msg) *bus.DeviceAllocateResult {
	e, err := bus.DecodeMsg(msg.Header, msg.Data)
	var req *bus.DeviceAllocateRequest
	if err == nil {
		req, err = bus.DecodeDeviceAllocateRequest(e)
	}
	if err != nil {
		return &bus.DeviceAllocateResult{Error: err.Error()}
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	return m.Allocate(ctx, req)
}
