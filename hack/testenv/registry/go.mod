module github.com/splitlet/splitlet/hack/testenv/registry

// Build-only module: pins the CNCF distribution registry the image pull
// tests push to and pull from (htpasswd auth, on 127.0.0.1).

go 1.26.0

require github.com/distribution/distribution/v3 v3.0.0
