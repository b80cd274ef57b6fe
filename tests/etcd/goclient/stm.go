package main

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

const (
	stmPrefix  = "stm/"
	stmInitial = 100
)

type stmResult struct {
	Accounts  int `json:"accounts"`
	Committed int `json:"committed"` // prefetching both accounts
	Failed    int `json:"failed"`
	// Reading the accounts one after the other: the second read is at the first one's
	// revision (WithRev), which needs the store's history of that revision.
	SeparateCommitted int              `json:"separate_committed"`
	SeparateFailed    int              `json:"separate_failed"`
	Final             map[string]int64 `json:"final"`
	Total             int64            `json:"total"`
	Violation         string           `json:"violation"`
}

// stmWorkload transfers amounts between accounts with concurrency.NewSTM (its default
// isolation, serializable snapshot). A worker that prefetches reads both accounts in the
// STM's first read (concurrency.WithPrefetch); one that does not reads them one after the
// other, the second at the first one's revision.
type stmWorkload struct {
	mu      sync.Mutex
	res     stmResult
	timeout time.Duration
	errors  *errorCounts
}

func account(i int) string { return fmt.Sprintf("%sa%d", stmPrefix, i) }

// setup sets every account (and the mutex's counter) to its initial value.
func (w *stmWorkload) setup(ctx context.Context, cli *clientv3.Client) error {
	for ctx.Err() == nil {
		tctx, cancel := context.WithTimeout(ctx, w.timeout)
		ops := []clientv3.Op{clientv3.OpPut(mutexCounter, "0")}
		for i := 0; i < w.res.Accounts; i++ {
			ops = append(ops, clientv3.OpPut(account(i), strconv.Itoa(stmInitial)))
		}
		_, err := cli.Txn(tctx).Then(ops...).Commit()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(backoff)
	}
	return ctx.Err()
}

func (w *stmWorkload) run(ctx context.Context, cli *clientv3.Client, rng *rand.Rand, prefetch bool) {
	for ctx.Err() == nil {
		from := rng.Intn(w.res.Accounts)
		to := (from + 1 + rng.Intn(w.res.Accounts-1)) % w.res.Accounts
		amount := int64(1 + rng.Intn(20))
		apply := func(s concurrency.STM) error {
			a, b := balance(s.Get(account(from))), balance(s.Get(account(to)))
			if a < amount {
				return nil
			}
			s.Put(account(from), strconv.FormatInt(a-amount, 10))
			s.Put(account(to), strconv.FormatInt(b+amount, 10))
			return nil
		}
		tctx, cancel := context.WithTimeout(ctx, 2*w.timeout)
		var err error
		if prefetch {
			_, err = concurrency.NewSTM(cli, apply, concurrency.WithAbortContext(tctx),
				concurrency.WithPrefetch(account(from), account(to)))
		} else {
			_, err = concurrency.NewSTM(cli, apply, concurrency.WithAbortContext(tctx))
		}
		cancel()
		if ctx.Err() != nil {
			return // cut short by the end of the run: not counted
		}
		w.mu.Lock()
		switch {
		case prefetch && err == nil:
			w.res.Committed++
		case prefetch:
			w.res.Failed++
		case err == nil:
			w.res.SeparateCommitted++
		default:
			w.res.SeparateFailed++
		}
		w.mu.Unlock()
		if err != nil {
			w.errors.add(map[bool]string{true: "stm", false: "stm-separate"}[prefetch], err)
			time.Sleep(backoff)
		}
	}
}

func balance(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("balance %q: %v", v, err))
	}
	return n
}

// check: the total is conserved and no balance went negative.
func (w *stmWorkload) check(final map[string]int64) {
	w.res.Final = final
	for _, v := range final {
		w.res.Total += v
		if v < 0 {
			w.res.Violation = fmt.Sprintf("a negative balance: %v", final)
		}
	}
	if len(final) != w.res.Accounts || w.res.Total != int64(stmInitial*w.res.Accounts) {
		w.res.Violation = fmt.Sprintf("total %d of %d accounts, not %d: %v", w.res.Total,
			len(final), stmInitial*w.res.Accounts, final)
	}
}
