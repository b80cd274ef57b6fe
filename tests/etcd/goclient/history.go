package main

import (
	"encoding/json"
	"os"
	"sync"
)

// op is one operation of the key-value history, in the format of
// kraft_spark/lincheck/checker.py (and its porcupine program): ReturnNs nil = no answer.
type op struct {
	Client        int     `json:"client"`
	Kind          string  `json:"kind"`
	Key           string  `json:"key"`
	Value         *string `json:"value"`
	ExpectVersion *int64  `json:"expect_version"`
	CallNs        int64   `json:"call_ns"`
	ReturnNs      *int64  `json:"return_ns"`
	Ok            *bool   `json:"ok"`
	Present       *bool   `json:"present"`
	OutValue      *string `json:"out_value"`
	OutVersion    *int64  `json:"out_version"`
}

// history collects finished operations and writes them as JSON lines.
type history struct {
	mu  sync.Mutex
	ops []*op
}

func (h *history) add(o *op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, o)
}

func (h *history) write(path string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, o := range h.ops {
		if err := enc.Encode(o); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func ptr[T any](v T) *T { return &v }
