package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/spf13/pflag"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/libs/logging"
	"github.com/splitlet/splitlet/services/podworkers"
)

const busUsage = `usage:
  splitlet bus identities --node-name N --dir D   an nkey per stage (and admin) in D, and D/auth.conf for nats-server
  splitlet bus init --node-name N --nats-url U [--nats-nkey D/admin.nk] [--nats-replicas R]
                                                   make the node's streams and lease bucket (admin identity)
`

// runBus is `splitlet bus ...`; it returns the exit code.
func runBus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, busUsage)
		return 2
	}
	var err error
	switch args[0] {
	case "identities":
		err = busIdentities(args[1:], stdout)
	case "init":
		err = busInit(ctx, args[1:], stdout)
	default:
		fmt.Fprint(stderr, busUsage)
		return 2
	}
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "splitlet bus %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// busIdentities writes an nkey seed per identity (admin and each stage)
// into dir, mode 0600, keeping seeds that are there, and the nats-server
// authorization block of their public keys with each stage's permissions
// (docs/bus.md's table) as dir/auth.conf. A stage gets its seed file with
// --nats-nkey; the seed is never printed.
func busIdentities(args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("bus identities", pflag.ContinueOnError)
	node := fs.String("node-name", "", "the node the identities are for")
	dir := fs.String("dir", "", "directory for the seeds and auth.conf")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *node == "" || *dir == "" {
		return errors.New("--node-name and --dir are required")
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	keys := map[string]string{}
	for _, id := range append([]string{"admin"}, bus.Stages...) {
		pub, err := ensureSeed(filepath.Join(*dir, id+".nk"))
		if err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		keys[id] = pub
	}
	conf, err := bus.AuthorizationConfig(*node, keys)
	if err != nil {
		return err
	}
	authPath := filepath.Join(*dir, "auth.conf")
	if err := os.WriteFile(authPath, []byte(conf), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "identities of node %s in %s: admin.nk and one <stage>.nk per stage (seeds, 0600); %s for nats-server (include it)\n", *node, *dir, authPath)
	return nil
}

// ensureSeed returns the public key of the user seed in path, making the
// seed when there is none.
func ensureSeed(path string) (string, error) {
	seed, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return "", err
		}
		if seed, err = kp.Seed(); err != nil {
			return "", err
		}
		if err := os.WriteFile(path, seed, 0o600); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", err
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return "", fmt.Errorf("%s: not an nkey seed: %w", path, err)
	}
	return kp.PublicKey()
}

// busInit makes the node's streams (at --nats-replicas) and the pod
// workers' lease bucket, with an identity that may (the admin's).
func busInit(ctx context.Context, args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("bus init", pflag.ContinueOnError)
	node := fs.String("node-name", "", "the node whose streams to make")
	url := fs.String("nats-url", "", "NATS server URL(s), comma separated")
	nkey := fs.String("nats-nkey", "", "file with the admin identity's nkey seed")
	replicas := fs.Int("nats-replicas", 1, "replicas of the streams and the bucket (3 on a three-server cluster)")
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for the servers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *node == "" || *url == "" {
		return errors.New("--node-name and --nats-url are required")
	}
	if *replicas < 1 || *replicas > 5 {
		return fmt.Errorf("invalid value %d for --nats-replicas: must be 1 to 5", *replicas)
	}
	opts := []nats.Option{nats.Name("splitlet-bus-init"), nats.Timeout(10 * time.Second)}
	if *nkey != "" {
		o, err := nats.NkeyOptionFromSeed(*nkey)
		if err != nil {
			return fmt.Errorf("--nats-nkey: %w", err)
		}
		opts = append(opts, o)
	}
	nc, err := nats.Connect(*url, opts...)
	if err != nil {
		return fmt.Errorf("nats-url %s: %w", logging.RedactURL(*url), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := bus.EnsureStreamsReplicas(ctx, js, *node, *replicas); err != nil {
		return err
	}
	if err := podworkers.EnsureLeaseBucket(ctx, js, *node, *replicas); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "streams and lease bucket of node %s ready (%d replicas)\n", *node, *replicas)
	return nil
}
