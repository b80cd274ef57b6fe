package main

import (
	"sync"

	"google.golang.org/grpc/status"
)

// errorCounts counts errors by operation and gRPC code, keeping one message of each.
type errorCounts struct {
	mu     sync.Mutex
	counts map[string]int
	sample map[string]string
}

func newErrorCounts() *errorCounts {
	return &errorCounts{counts: map[string]int{}, sample: map[string]string{}}
}

func (e *errorCounts) add(what string, err error) {
	key := what + ": " + status.Code(err).String()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.counts[key]++
	if _, ok := e.sample[key]; !ok {
		e.sample[key] = err.Error()
	}
}
