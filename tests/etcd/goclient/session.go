package main

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// newSession grants a lease of ttl seconds with a timeout, then makes a session of it kept
// alive until ctx ends (concurrency.NewSession would grant without one).
func newSession(ctx context.Context, cli *clientv3.Client, ttl int, timeout time.Duration,
) (*concurrency.Session, error) {
	gctx, cancel := context.WithTimeout(ctx, timeout)
	lease, err := cli.Grant(gctx, int64(ttl))
	cancel()
	if err != nil {
		return nil, err
	}
	return concurrency.NewSession(cli, concurrency.WithLease(lease.ID),
		concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
}

// dropSession stops a session's keep-alive and revokes its lease (best effort: it may be
// gone, or the quorum may not answer; then the lease expires by itself).
func dropSession(cli *clientv3.Client, s *concurrency.Session, timeout time.Duration) {
	s.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, _ = cli.Revoke(ctx, s.Lease())
}
