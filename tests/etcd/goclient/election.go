package main

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

const electionPrefix = "election/"

// win is one term a candidate won by its own view: from Campaign's return to the call of its
// Proclaim (a Txn guarded by its key's create revision).
type win struct {
	Term       string `json:"term"`
	WonNs      int64  `json:"won_ns"`
	ProclaimNs int64  `json:"proclaim_ns"`
	Outcome    string `json:"outcome"` // ok, lost (not the leader any more), unknown
}

// seen is one leader an observer was told of.
type seen struct {
	Term      string `json:"term"` // the campaign's value without the "/p" of a proclamation
	Value     string `json:"value"`
	CreateRev int64  `json:"create_revision"` // 0 when a watch event did not carry it
}

type electionResult struct {
	Wins      []win    `json:"wins"`
	Observed  [][]seen `json:"observed"`
	Campaigns int      `json:"campaigns"`
	Failed    int      `json:"campaign_failures"`
	Violation string   `json:"violation"`
}

type electionWorkload struct {
	mu      sync.Mutex
	res     electionResult
	terms   map[string]bool // every value a candidate campaigned with
	ttl     int
	timeout time.Duration
	errors  *errorCounts
}

func (w *electionWorkload) candidate(ctx context.Context, index int, cli *clientv3.Client,
	rng *rand.Rand) {
	var sess *concurrency.Session
	for n := 1; ctx.Err() == nil; n++ {
		if sess == nil {
			s, err := newSession(ctx, cli, w.ttl, w.timeout)
			if err != nil {
				w.failed(err)
				time.Sleep(backoff)
				continue
			}
			sess = s
		}
		term := fmt.Sprintf("e%d-%d", index, n)
		if !w.term(ctx, cli, sess, term, rng) {
			dropSession(cli, sess, w.timeout)
			sess = nil
			time.Sleep(backoff)
		}
	}
	if sess != nil {
		dropSession(cli, sess, w.timeout)
	}
}

func (w *electionWorkload) failed(err error) {
	w.errors.add("campaign", err)
	w.mu.Lock()
	w.res.Failed++
	w.mu.Unlock()
}

// term campaigns, proclaims once leader, then resigns; false when the session should go.
func (w *electionWorkload) term(ctx context.Context, cli *clientv3.Client,
	sess *concurrency.Session, term string, rng *rand.Rand) bool {
	e := concurrency.NewElection(sess, electionPrefix)
	w.mu.Lock()
	w.terms[term] = true
	w.res.Campaigns++
	w.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 2*w.timeout)
	err := e.Campaign(cctx, term)
	cancel()
	if err != nil {
		if ctx.Err() == nil { // not the end of the run
			w.failed(err)
		}
		return false
	}
	won := win{Term: term, WonNs: monoNs()}
	time.Sleep(time.Duration(20+rng.Intn(80)) * time.Millisecond)
	won.ProclaimNs = monoNs()
	pctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	err = e.Proclaim(pctx, term+"/p")
	cancel()
	switch {
	case err == nil:
		won.Outcome = "ok"
	case err == concurrency.ErrElectionNotLeader:
		won.Outcome = "lost"
	default:
		w.errors.add("proclaim", err)
		won.Outcome = "unknown"
	}
	w.mu.Lock()
	w.res.Wins = append(w.res.Wins, won)
	w.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	err = e.Resign(rctx)
	cancel()
	return won.Outcome == "ok" && err == nil
}

// observer follows the leader with Observe (again after its channel closes) until ctx ends.
func (w *electionWorkload) observer(ctx context.Context, cli *clientv3.Client) []seen {
	var out []seen
	var sess *concurrency.Session
	for sess == nil && ctx.Err() == nil {
		s, err := newSession(ctx, cli, w.ttl, w.timeout)
		if err != nil {
			w.errors.add("observe-session", err)
			time.Sleep(backoff)
			continue
		}
		sess = s
	}
	if sess == nil {
		return out
	}
	defer dropSession(cli, sess, w.timeout)
	e := concurrency.NewElection(sess, electionPrefix)
	for ctx.Err() == nil {
		for resp := range e.Observe(ctx) {
			kv := resp.Kvs[0]
			value := string(kv.Value)
			s := seen{Term: strings.TrimSuffix(value, "/p"), Value: value, CreateRev: kv.CreateRevision}
			if n := len(out); n == 0 || out[n-1] != s {
				out = append(out, s)
			}
		}
		time.Sleep(backoff) // the channel closed: a read failed, or ctx ended
	}
	return out
}

// check: each observer saw terms one after another (none again after it was left, create
// revisions increasing where known), all observers in one order, only campaigned values;
// and the wins whose proclamation succeeded never overlap by their own views.
func (w *electionWorkload) check() {
	before := map[[2]string]bool{} // (a, b): a term seen before b
	for i, obs := range w.res.Observed {
		left := map[string]bool{}
		var last seen
		var lastRev int64
		for j, s := range obs {
			if !w.terms[s.Term] {
				w.res.Violation = fmt.Sprintf("observer %d saw %q, which no candidate campaigned with", i, s.Value)
				return
			}
			if j > 0 && s.Term != last.Term {
				if left[s.Term] {
					w.res.Violation = fmt.Sprintf("observer %d saw %s again after it was left: %v", i, s.Term, obs)
					return
				}
				left[last.Term] = true
				for t := range left {
					before[[2]string{t, s.Term}] = true
				}
			}
			if s.CreateRev != 0 {
				if s.CreateRev < lastRev || (s.CreateRev == lastRev && j > 0 && s.Term != last.Term) {
					w.res.Violation = fmt.Sprintf("observer %d: leader create revisions go back: %v", i, obs)
					return
				}
				lastRev = s.CreateRev
			}
			last = s
		}
	}
	for pair := range before {
		if before[[2]string{pair[1], pair[0]}] {
			w.res.Violation = fmt.Sprintf("observers disagree on the order of %s and %s", pair[0], pair[1])
			return
		}
	}
	var ok []win
	for _, x := range w.res.Wins {
		if x.Outcome == "ok" {
			ok = append(ok, x)
		}
	}
	sort.Slice(ok, func(i, j int) bool { return ok[i].WonNs < ok[j].WonNs })
	for i := 1; i < len(ok); i++ {
		if ok[i-1].ProclaimNs >= ok[i].WonNs {
			w.res.Violation = fmt.Sprintf("two leaders at once: %+v and %+v", ok[i-1], ok[i])
			return
		}
	}
}
