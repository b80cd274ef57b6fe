package main

import (
	"context"
	"fmt"
	"math/rand"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// kvWorker runs put / get (linearizable) / compare-and-set / delete on a few keys until ctx
// ends, recording each into hist. A write without an answer (timeout, unavailable, any
// error) is of unknown outcome: porcupine lets it take effect or not, at any point after its
// call, and the worker goes on as a new porcupine client (its ops must not overlap).
type kvWorker struct {
	index, clients, generation int
	cli                        *clientv3.Client
	keys                       []string
	hist                       *history
	rng                        *rand.Rand
	seen                       map[string]int64 // key -> version this worker last learned
	writes                     int
	timeout                    time.Duration
	errors                     *errorCounts
}

func (w *kvWorker) clientID() int { return w.index + w.clients*w.generation }

func (w *kvWorker) run(ctx context.Context) {
	for ctx.Err() == nil {
		key := w.keys[w.rng.Intn(len(w.keys))]
		switch roll := w.rng.Float64(); {
		case roll < 0.35:
			w.get(key)
		case roll < 0.55:
			w.put(key)
		case roll < 0.9:
			if _, ok := w.seen[key]; !ok || w.rng.Float64() < 0.3 {
				w.get(key)
			}
			w.cas(key)
		default:
			w.del(key)
		}
	}
}

func (w *kvWorker) get(key string) {
	o := &op{Client: w.clientID(), Kind: "get", Key: key, CallNs: monoNs()}
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	resp, err := w.cli.Get(ctx, key)
	cancel()
	if err != nil { // a read that failed had no effect: left out
		w.errors.add("get", err)
		time.Sleep(backoff)
		return
	}
	o.ReturnNs = ptr(monoNs())
	if len(resp.Kvs) == 0 {
		o.Present, o.OutVersion = ptr(false), ptr(int64(0))
		w.seen[key] = 0
	} else {
		kv := resp.Kvs[0]
		o.Present, o.OutValue, o.OutVersion = ptr(true), ptr(string(kv.Value)), ptr(kv.Version)
		w.seen[key] = kv.Version
	}
	w.hist.add(o)
}

func (w *kvWorker) value() string {
	w.writes++
	return fmt.Sprintf("c%d-%d", w.index, w.writes)
}

// unknown records o without an answer and moves to a new porcupine client id.
func (w *kvWorker) unknown(o *op, err error) {
	w.errors.add(o.Kind, err)
	w.hist.add(o)
	w.generation++
	delete(w.seen, o.Key)
	time.Sleep(backoff)
}

func (w *kvWorker) put(key string) {
	v := w.value()
	o := &op{Client: w.clientID(), Kind: "put", Key: key, Value: &v, CallNs: monoNs()}
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	_, err := w.cli.Put(ctx, key, v)
	cancel()
	if err != nil {
		w.unknown(o, err)
		return
	}
	o.ReturnNs, o.Ok = ptr(monoNs()), ptr(true)
	w.hist.add(o)
	delete(w.seen, key) // its version is not in Put's answer
}

func (w *kvWorker) del(key string) {
	o := &op{Client: w.clientID(), Kind: "delete", Key: key, CallNs: monoNs()}
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	_, err := w.cli.Delete(ctx, key)
	cancel()
	if err != nil {
		w.unknown(o, err)
		return
	}
	o.ReturnNs, o.Ok = ptr(monoNs()), ptr(true)
	w.hist.add(o)
	w.seen[key] = 0
}

// cas writes a new value if the key has the version this worker last saw (0: absent); the
// Else branch reads the key to learn its version.
func (w *kvWorker) cas(key string) {
	expect, ok := w.seen[key]
	if !ok {
		expect = int64(w.rng.Intn(3))
	}
	v := w.value()
	o := &op{Client: w.clientID(), Kind: "cas", Key: key, Value: &v, ExpectVersion: &expect,
		CallNs: monoNs()}
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	resp, err := w.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Version(key), "=", expect)).
		Then(clientv3.OpPut(key, v)).
		Else(clientv3.OpGet(key)).
		Commit()
	cancel()
	if err != nil {
		w.unknown(o, err)
		return
	}
	o.ReturnNs, o.Ok = ptr(monoNs()), ptr(resp.Succeeded)
	w.hist.add(o)
	if resp.Succeeded {
		w.seen[key] = expect + 1
		return
	}
	w.seen[key] = 0
	if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
		w.seen[key] = rr.Kvs[0].Version
	}
}
