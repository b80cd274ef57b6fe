// Command goclient runs etcd's own Go client (go.etcd.io/etcd/client/v3) against a
// kraft-spark quorum for a while: concurrent put / get / compare-and-set / delete recorded as
// a history for porcupine (kraft_spark/lincheck), and concurrency.NewMutex,
// concurrency.NewElection and concurrency.NewSTM workloads whose invariants it checks itself.
//
// Usage:
//
//	goclient -endpoints h:p,h:p -user admin:TOKEN -duration 15s -history h.jsonl
//
// It prints one JSON object (counts, the invariants' results, errors by kind) on stdout and
// exits 0 unless it could not run; a violated invariant is in the object, for the caller.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

const backoff = 200 * time.Millisecond

type summary struct {
	KvOps    int               `json:"kv_ops"`
	Mutex    *mutexResult      `json:"mutex"`
	Election *electionResult   `json:"election"`
	STM      *stmResult        `json:"stm"`
	Errors   map[string]int    `json:"errors"`
	Samples  map[string]string `json:"error_samples"`
}

func main() {
	endpoints := flag.String("endpoints", "", "comma-separated etcd addresses of every node")
	user := flag.String("user", "", "NAME:TOKEN (a credential of <data-dir>/http-credentials)")
	duration := flag.Duration("duration", 15*time.Second, "how long the workloads run")
	historyPath := flag.String("history", "history.jsonl", "the key-value history (JSON lines)")
	kvClients := flag.Int("kv-clients", 4, "key-value clients")
	seed := flag.Int64("seed", time.Now().UnixNano(), "random choices")
	timeout := flag.Duration("timeout", 2*time.Second, "one request's timeout")
	ttl := flag.Int("ttl", 2, "the sessions' lease TTL (seconds)")
	flag.Parse()
	name, token, found := strings.Cut(*user, ":")
	if *endpoints == "" || !found {
		fmt.Fprintln(os.Stderr, "usage: goclient -endpoints h:p,... -user NAME:TOKEN [-duration 15s]")
		os.Exit(3)
	}
	cfg := clientv3.Config{
		Endpoints: strings.Split(*endpoints, ","), Username: name, Password: token,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
	}
	newClient := func() *clientv3.Client {
		cli, err := clientv3.New(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "goclient:", err)
			os.Exit(2)
		}
		return cli
	}
	errs := newErrorCounts()
	hist := &history{}
	mw := &mutexWorkload{ttl: *ttl, timeout: *timeout, errors: errs}
	ew := &electionWorkload{terms: map[string]bool{}, ttl: *ttl, timeout: *timeout, errors: errs}
	sw := &stmWorkload{res: stmResult{Accounts: 4}, timeout: *timeout, errors: errs}

	setup := newClient()
	defer setup.Close()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := sw.setup(sctx, setup); err != nil {
		fmt.Fprintln(os.Stderr, "goclient: cannot set the accounts up:", err)
		os.Exit(2)
	}
	cancel()

	ctx, stop := context.WithTimeout(context.Background(), *duration)
	defer stop()
	var wg sync.WaitGroup
	spawn := func(f func(cli *clientv3.Client, rng *rand.Rand)) {
		cli := newClient()
		rng := rand.New(rand.NewSource(*seed))
		*seed++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cli.Close()
			f(cli, rng)
		}()
	}
	keys := []string{"kv/k0", "kv/k1", "kv/k2", "kv/k3"}
	for i := 0; i < *kvClients; i++ {
		w := &kvWorker{index: i, clients: *kvClients, keys: keys, hist: hist,
			seen: map[string]int64{}, timeout: *timeout, errors: errs}
		spawn(func(cli *clientv3.Client, rng *rand.Rand) { w.cli, w.rng = cli, rng; w.run(ctx) })
	}
	for i := 0; i < 3; i++ {
		spawn(func(cli *clientv3.Client, _ *rand.Rand) { mw.run(ctx, i, cli) })
		spawn(func(cli *clientv3.Client, rng *rand.Rand) { ew.candidate(ctx, i, cli, rng) })
	}
	var obsMu sync.Mutex
	for i := 0; i < 2; i++ {
		spawn(func(cli *clientv3.Client, _ *rand.Rand) {
			seen := ew.observer(ctx, cli)
			obsMu.Lock()
			ew.res.Observed = append(ew.res.Observed, seen)
			obsMu.Unlock()
		})
	}
	for _, prefetch := range []bool{true, true, false} {
		spawn(func(cli *clientv3.Client, rng *rand.Rand) { sw.run(ctx, cli, rng, prefetch) })
	}
	wg.Wait()

	if err := hist.write(*historyPath); err != nil {
		fmt.Fprintln(os.Stderr, "goclient:", err)
		os.Exit(2)
	}
	counter, accounts, err := finalReads(setup, *timeout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "goclient: the final reads failed:", err)
		os.Exit(2)
	}
	mw.check(counter)
	ew.check()
	sw.check(accounts)
	out := summary{KvOps: len(hist.ops), Mutex: &mw.res, Election: &ew.res, STM: &sw.res,
		Errors: errs.counts, Samples: errs.sample}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(2)
	}
}

// finalReads reads the mutex's counter and the accounts once the workloads are over
// (linearizable reads, retried for up to 30 s).
func finalReads(cli *clientv3.Client, timeout time.Duration) (int64, map[string]int64, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		resp, err := cli.Txn(ctx).Then(clientv3.OpGet(mutexCounter),
			clientv3.OpGet(stmPrefix, clientv3.WithPrefix())).Commit()
		cancel()
		if err == nil {
			var counter int64
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				counter = balance(string(kvs[0].Value))
			}
			accounts := map[string]int64{}
			for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
				accounts[string(kv.Key)] = balance(string(kv.Value))
			}
			return counter, accounts, nil
		}
		if time.Now().After(deadline) {
			return 0, nil, err
		}
		time.Sleep(backoff)
	}
}
