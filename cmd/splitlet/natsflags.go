package main

import (
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"

	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/libs/messaging"
)

// natsFlags are the connection keys of the `splitlet bus ...` and
// `splitlet status` commands (the environment gives their defaults, as for
// the stages).
type natsFlags struct {
	url, nkey, creds, tlsCA string
}

func (n *natsFlags) register(fs *pflag.FlagSet, who string) {
	fs.StringVar(&n.url, "nats-url", os.Getenv("SPLITLET_NATS_URL"), "NATS server URL(s), comma separated (env SPLITLET_NATS_URL)")
	fs.StringVar(&n.nkey, "nats-nkey", os.Getenv("SPLITLET_NATS_NKEY"), "file with the nkey seed of "+who+" (env SPLITLET_NATS_NKEY)")
	fs.StringVar(&n.creds, "nats-creds", os.Getenv("SPLITLET_NATS_CREDS"), "file with a user JWT and seed (env SPLITLET_NATS_CREDS)")
	fs.StringVar(&n.tlsCA, "nats-tls-ca", os.Getenv("SPLITLET_NATS_TLS_CA"), "CA file to verify the NATS servers' certificates, tls:// URLs (env SPLITLET_NATS_TLS_CA)")
}

// connect connects with the identity and TLS settings; errors name the key.
func (n *natsFlags) connect(name string) (*nats.Conn, error) {
	if n.url == "" {
		return nil, fmt.Errorf("--nats-url is required")
	}
	auth, err := messaging.AuthOptions(messaging.Options{NkeyFile: n.nkey, CredsFile: n.creds, TLSCA: n.tlsCA})
	if err != nil {
		return nil, err
	}
	opts := append([]nats.Option{nats.Name(name), nats.Timeout(10 * time.Second)}, auth...)
	nc, err := nats.Connect(n.url, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats-url %s: %w", logging.RedactURL(n.url), err)
	}
	return nc, nil
}

// jetStream connects and returns the connection with its JetStream handle.
func (n *natsFlags) jetStream(name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := n.connect(name)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}
