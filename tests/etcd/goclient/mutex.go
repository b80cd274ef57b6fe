package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

const (
	mutexPrefix  = "mutex/lock"
	mutexCounter = "mutex/counter"
)

// holding is one time a worker held the lock by its own view: from Lock's return to the
// call of its increment, a Txn guarded by the lock key's create revision (m.IsOwner()).
type holding struct {
	Worker     int    `json:"worker"`
	AcquiredNs int64  `json:"acquired_ns"`
	GuardNs    int64  `json:"guard_ns"`
	Outcome    string `json:"outcome"` // ok, lost (the guard failed), unknown
	Wrote      int64  `json:"wrote"`
}

type mutexResult struct {
	Holdings  []holding `json:"holdings"`
	Acked     int       `json:"acked"`
	Lost      int       `json:"lost"`
	Unknown   int       `json:"unknown"`
	LockFails int       `json:"lock_failures"`
	Final     int64     `json:"final_counter"`
	Violation string    `json:"violation"`
}

type mutexWorkload struct {
	mu      sync.Mutex
	res     mutexResult
	ttl     int
	timeout time.Duration
	errors  *errorCounts
}

func (w *mutexWorkload) record(h holding) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.res.Holdings = append(w.res.Holdings, h)
	switch h.Outcome {
	case "ok":
		w.res.Acked++
	case "lost":
		w.res.Lost++
	default:
		w.res.Unknown++
	}
}

func (w *mutexWorkload) lockFailed(err error) {
	w.errors.add("lock", err)
	w.mu.Lock()
	w.res.LockFails++
	w.mu.Unlock()
}

func (w *mutexWorkload) run(ctx context.Context, index int, cli *clientv3.Client) {
	var sess *concurrency.Session
	for ctx.Err() == nil {
		if sess == nil {
			s, err := newSession(ctx, cli, w.ttl, w.timeout)
			if err != nil {
				w.lockFailed(err)
				time.Sleep(backoff)
				continue
			}
			sess = s
		}
		if !w.holdOnce(ctx, index, cli, sess) {
			dropSession(cli, sess, w.timeout)
			sess = nil
			time.Sleep(backoff)
		}
	}
	if sess != nil {
		dropSession(cli, sess, w.timeout)
	}
}

// holdOnce locks, increments the counter under the lock and unlocks; false when the session
// should be replaced.
func (w *mutexWorkload) holdOnce(ctx context.Context, index int, cli *clientv3.Client,
	sess *concurrency.Session) bool {
	m := concurrency.NewMutex(sess, mutexPrefix)
	lctx, cancel := context.WithTimeout(ctx, 2*w.timeout)
	err := m.Lock(lctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil { // not the end of the run
			w.lockFailed(err)
		}
		return false
	}
	h := holding{Worker: index, AcquiredNs: monoNs()}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), w.timeout)
		_ = m.Unlock(uctx)
		cancel()
	}()
	gctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	got, err := cli.Get(gctx, mutexCounter)
	cancel()
	if err != nil {
		w.errors.add("counter-get", err)
		return false
	}
	var n int64
	if len(got.Kvs) > 0 {
		if n, err = strconv.ParseInt(string(got.Kvs[0].Value), 10, 64); err != nil {
			panic(fmt.Sprintf("counter %q: %v", got.Kvs[0].Value, err))
		}
	}
	h.Wrote = n + 1
	h.GuardNs = monoNs()
	tctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	resp, err := cli.Txn(tctx).If(m.IsOwner()).
		Then(clientv3.OpPut(mutexCounter, strconv.FormatInt(n+1, 10))).Commit()
	cancel()
	switch {
	case err != nil:
		w.errors.add("counter-txn", err)
		h.Outcome = "unknown"
	case resp.Succeeded:
		h.Outcome = "ok"
	default:
		h.Outcome = "lost"
	}
	w.record(h)
	return err == nil && resp.Succeeded
}

// check: the holdings whose guarded increment succeeded never overlap (each interval ends
// at the guard's call, before the lock could pass on), wrote increasing values, and the final
// counter lies between the acknowledged increments and those plus the unknown ones.
func (w *mutexWorkload) check(final int64) {
	w.res.Final = final
	var ok []holding
	for _, h := range w.res.Holdings {
		if h.Outcome == "ok" {
			ok = append(ok, h)
		}
	}
	sort.Slice(ok, func(i, j int) bool { return ok[i].AcquiredNs < ok[j].AcquiredNs })
	for i := 1; i < len(ok); i++ {
		if ok[i-1].GuardNs >= ok[i].AcquiredNs {
			w.res.Violation = fmt.Sprintf("holders overlap: %+v and %+v", ok[i-1], ok[i])
			return
		}
		if ok[i-1].Wrote >= ok[i].Wrote { // each read the counter after the one before
			w.res.Violation = fmt.Sprintf("increments out of order: %+v then %+v", ok[i-1], ok[i])
			return
		}
	}
	if final < int64(w.res.Acked) || final > int64(w.res.Acked+w.res.Unknown) {
		w.res.Violation = fmt.Sprintf("counter %d, %d increments acknowledged, %d unknown",
			final, w.res.Acked, w.res.Unknown)
	}
}
