package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/splitlet/splitlet/libs/bus"
	"github.com/splitlet/splitlet/services/podworkers"
)

const busUsage = `usage:
  splitlet bus identities --node-name N --dir D
                                                   an nkey per stage (and admin) in D, and D/auth.conf for nats-server
  splitlet bus init --node-name N --nats-url U [--nats-nkey D/admin.nk] [--nats-tls-ca F] [--nats-replicas R]
                                                   make the node's streams and lease bucket (admin identity)
  splitlet bus record --node-name N --nats-url U [--stage S] [--since D] [--for D] [--out F]
                                                   what crossed the node's streams (all, or stage S's inputs), as JSON lines
  splitlet bus replay --node-name N --nats-url U --in F --stage S [--pace recorded|fast] [--out F]
                                                   feed a recording to stage S on a private server, record what S published
  splitlet bus diff A B [--ignore k,k]             what two runs published, pod by pod; exit 1 when they differ
  splitlet bus diff --live S --node-name N --nats-url U [--for D] [--json]
                                                   stage S's live outputs against its shadow's, as they come;
                                                   with --for, exit 1 when they differ
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
	case "record":
		err = busRecord(ctx, args[1:], stdout)
	case "replay":
		err = busReplay(ctx, args[1:], stdout)
	case "diff":
		err = busDiff(ctx, args[1:], stdout)
		if errors.Is(err, errDiffer) {
			return 1
		}
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
	conf, err := bus.WriteIdentities(*node, func(id string) string { return filepath.Join(*dir, id+".nk") })
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

// busInit makes the node's streams (at --nats-replicas) and the pod
// workers' lease bucket, with an identity that may (the admin's).
func busInit(ctx context.Context, args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("bus init", pflag.ContinueOnError)
	node := fs.String("node-name", "", "the node whose streams to make")
	var conn natsFlags
	conn.register(fs, "the admin identity")
	replicas := fs.Int("nats-replicas", 1, "replicas of the streams and the bucket (3 on a three-server cluster)")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for the servers and for JetStream to answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *node == "" {
		return errors.New("--node-name is required")
	}
	if *replicas < 1 || *replicas > 5 {
		return fmt.Errorf("invalid value %d for --nats-replicas: must be 1 to 5", *replicas)
	}
	nc, js, err := conn.jetStream("splitlet-bus-init")
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	// A cluster that has just started may not have elected its JetStream
	// leader yet, and a request sent before then goes unanswered: each
	// attempt gets a bounded time, and the next follows until the timeout.
	for attempt := 1; ; attempt++ {
		actx, cancelAttempt := context.WithTimeout(ctx, 10*time.Second)
		err = bus.EnsureStreamsReplicas(actx, js, *node, *replicas)
		if err == nil {
			// the shadow stages' outputs (docs/bus.md, "Shadow stages").
			err = bus.EnsureShadowStream(actx, js, *node, *replicas)
		}
		if err == nil {
			err = podworkers.EnsureLeaseBucket(actx, js, *node, *replicas)
		}
		cancelAttempt()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("not within %v: %w", *timeout, err)
		}
		fmt.Fprintf(stdout, "streams not made yet (attempt %d): %v; retrying\n", attempt, err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("not within %v: %w", *timeout, err)
		case <-time.After(time.Second):
		}
	}
	fmt.Fprintf(stdout, "streams and lease bucket of node %s ready (%d replicas)\n", *node, *replicas)
	n, err := bus.RemoveRetiredConsumers(ctx, js, *node)
	if err != nil {
		return err
	}
	if n > 0 {
		fmt.Fprintf(stdout, "removed %d durable consumers no stage reads\n", n)
	}
	return nil
}
