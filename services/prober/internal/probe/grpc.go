package probe

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// GRPC calls grpc.health.v1.Health/Check on host:port for service (empty:
// the server as a whole), without TLS, within timeout. SERVING is healthy;
// anything else, or no answer, is a Failure.
func GRPC(ctx context.Context, host, service string, port int, timeout time.Duration) (Result, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	d := dialer()
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithUserAgent(UserAgent),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", a)
		}),
	)
	if err != nil {
		return Failure, fmt.Sprintf("error: failed to connect service at %q: %v", addr, err)
	}
	defer func() { _ = conn.Close() }()
	// Without WaitForReady a refused port fails at once with the dial error
	// instead of waiting out the timeout.
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		st, _ := status.FromError(err)
		switch st.Code() {
		case codes.Unimplemented:
			return Failure, "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): " + st.Message()
		case codes.DeadlineExceeded:
			return Failure, fmt.Sprintf("timeout: health rpc did not complete within %v", timeout)
		}
		return Failure, fmt.Sprintf("error: health rpc probe failed: %v", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return Failure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String())
	}
	return Success, "service healthy"
}
