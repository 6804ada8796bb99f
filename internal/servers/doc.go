// Package servers starts the real servers siteops works with — kube-apiserver and etcd, Redis,
// Redis Sentinel, a git smart-HTTP remote and an S3 server — as local processes on free loopback
// ports. Tests use them through internal/testenv; `siteops dev up` and the demo use them directly.
package servers
