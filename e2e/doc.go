// Package e2e holds Splitlet's end-to-end tests: the docker compose stack of
// deploy/compose, brought up on a real Docker engine through
// testcontainers-go's compose module, checked from outside with client-go
// (as kubectl would) and NATS (the podworkers' ownership bucket).
//
// They need a running Docker engine and the images of `make images`
// (`make test` builds them first). The stack uses fixed ports on 127.0.0.1
// (16443, 12379/12380, 14222, 20250, and 18100-18199 for the test
// pods), so the tests run one stack at a time and a stack of your own must
// be down while they run. SPLITLET_E2E=skip skips them; SPLITLET_TAG runs
// images of another tag than dev (hack/images.sh with IMAGE_TAG).
package e2e
