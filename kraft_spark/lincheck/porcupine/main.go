// Command lincheck checks a recorded key-value history for linearizability with porcupine.
//
// Usage:
//
//	lincheck HISTORY.json [-timeout 60s] [-viz out.html]
//
// HISTORY.json is {"ops": [op, ...]}, each op:
//
//	{"client": int, "kind": "get"|"put"|"cas"|"delete", "key": str,
//	 "value": str|null, "expect_version": int|null,
//	 "call_ns": int, "return_ns": int|null,
//	 "ok": bool|null, "present": bool|null, "out_value": str|null, "out_version": int|null}
//
// By kind:
//
//   - get: the output is present / out_value / out_version (out_version 0 when absent).
//   - put: value is the new value; ok must be true (a put that failed without effect is left
//     out of the history).
//   - cas: expect_version n (0: the key must be absent), value v (null: a conditional delete);
//     ok true = the condition held and v was written, ok false = it did not (nothing written).
//   - delete: ok must be true.
//
// return_ns null (a write only): no answer came (timeout, connection error, 504). The op may
// have taken effect at any point after call_ns: its return time is past every timestamp of the
// history (porcupine's "infinite" return). With ok null too its outcome is unknown and the
// model lets it either apply or not; with ok given the outcome is known (from the log, say)
// but not when it happened.
//
// The model, per key: (present, value, version). A put sets present, value and version+1 (1
// after an absent state), a delete resets to absent with version 0, a get must see the state.
// The history is partitioned by key.
//
// Exit codes: 0 linearizable, 1 not linearizable (the visualization is written to -viz when
// given), 2 unknown (the check timed out), 3 bad usage or input.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

type rawOp struct {
	Client        int     `json:"client"`
	Kind          string  `json:"kind"`
	Key           string  `json:"key"`
	Value         *string `json:"value"`
	ExpectVersion *int    `json:"expect_version"`
	CallNs        *int64  `json:"call_ns"`
	ReturnNs      *int64  `json:"return_ns"`
	Ok            *bool   `json:"ok"`
	Present       *bool   `json:"present"`
	OutValue      *string `json:"out_value"`
	OutVersion    *int    `json:"out_version"`
}

type rawHistory struct {
	Ops []rawOp `json:"ops"`
}

type kvInput struct {
	Kind          string
	Key           string
	HasValue      bool // false: a delete (or a conditional delete)
	Value         string
	ExpectVersion int
}

type kvOutput struct {
	Unknown bool
	Ok      bool
	Present bool
	Value   string
	Version int
}

type kvState struct {
	Present bool
	Value   string
	Version int
}

func written(s kvState, in kvInput) kvState {
	if !in.HasValue {
		return kvState{}
	}
	return kvState{Present: true, Value: in.Value, Version: s.Version + 1}
}

// step returns every state the key can be in after the operation, none if the output is
// impossible from s.
func step(state, input, output interface{}) []interface{} {
	s := state.(kvState)
	in := input.(kvInput)
	out := output.(kvOutput)
	switch in.Kind {
	case "get":
		if out.Unknown {
			return []interface{}{s}
		}
		if out.Present != s.Present {
			return nil
		}
		if s.Present && (out.Value != s.Value || out.Version != s.Version) {
			return nil
		}
		if !s.Present && out.Version != 0 {
			return nil
		}
		return []interface{}{s}
	case "put", "delete":
		next := written(s, in)
		if out.Unknown {
			return []interface{}{s, next}
		}
		if !out.Ok {
			return nil
		}
		return []interface{}{next}
	case "cas":
		holds := s.Version == in.ExpectVersion // an absent key has version 0
		switch {
		case out.Unknown && holds:
			return []interface{}{s, written(s, in)}
		case out.Unknown, !out.Ok && !holds:
			return []interface{}{s}
		case out.Ok && holds:
			return []interface{}{written(s, in)}
		default:
			return nil
		}
	}
	return nil
}

func describeValue(present bool, value string, version int) string {
	if !present {
		return "absent"
	}
	return fmt.Sprintf("%q@v%d", value, version)
}

func describeOperation(input, output interface{}) string {
	in := input.(kvInput)
	out := output.(kvOutput)
	var call string
	newValue := "null"
	if in.HasValue {
		newValue = fmt.Sprintf("%q", in.Value)
	}
	switch in.Kind {
	case "get":
		call = fmt.Sprintf("get(%s)", in.Key)
	case "put":
		call = fmt.Sprintf("put(%s, %s)", in.Key, newValue)
	case "delete":
		call = fmt.Sprintf("delete(%s)", in.Key)
	case "cas":
		call = fmt.Sprintf("cas(%s, v%d -> %s)", in.Key, in.ExpectVersion, newValue)
	}
	switch {
	case out.Unknown:
		return call + " -> unknown"
	case in.Kind == "get":
		return call + " -> " + describeValue(out.Present, out.Value, out.Version)
	case out.Ok:
		return call + " -> ok"
	default:
		return call + " -> failed"
	}
}

func kvModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range history {
				key := op.Input.(kvInput).Key
				if _, seen := byKey[key]; !seen {
					keys = append(keys, key)
				}
				byKey[key] = append(byKey[key], op)
			}
			sort.Strings(keys)
			partitions := make([][]porcupine.Operation, 0, len(keys))
			for _, key := range keys {
				partitions = append(partitions, byKey[key])
			}
			return partitions
		},
		Init: func() []interface{} { return []interface{}{kvState{}} },
		Step: step,
		Hash: func(state interface{}) uint64 {
			s := state.(kvState)
			h := fnv.New64a()
			fmt.Fprintf(h, "%t\x00%d\x00%s", s.Present, s.Version, s.Value)
			return h.Sum64()
		},
		DescribeOperation: describeOperation,
		DescribeState: func(state interface{}) string {
			s := state.(kvState)
			return describeValue(s.Present, s.Value, s.Version)
		},
	}
	return nm.ToModel()
}

type counts struct {
	unanswered int // return_ns null
	unknown    int // and ok null too
}

func convert(ops []rawOp) ([]porcupine.Operation, counts, error) {
	var last int64
	for i, op := range ops {
		if op.CallNs == nil {
			return nil, counts{}, fmt.Errorf("op %d: call_ns is missing", i)
		}
		if *op.CallNs > last {
			last = *op.CallNs
		}
		if op.ReturnNs != nil && *op.ReturnNs > last {
			last = *op.ReturnNs
		}
	}
	infinity := last + 1 // later than every call: the op may take effect at any point after its call
	history := make([]porcupine.Operation, 0, len(ops))
	unanswered, unknown := 0, 0
	for i, op := range ops {
		in := kvInput{Kind: op.Kind, Key: op.Key}
		if op.Value != nil {
			in.HasValue, in.Value = true, *op.Value
		}
		// return_ns null with ok given: the outcome is known (say, from the log), not its time.
		out := kvOutput{Unknown: op.ReturnNs == nil && op.Ok == nil}
		ret := infinity
		metadata := fmt.Sprintf("op %d, client %d", i, op.Client)
		if op.ReturnNs != nil {
			ret = *op.ReturnNs
			if ret < *op.CallNs {
				return nil, counts{}, fmt.Errorf("op %d: return_ns %d before call_ns %d", i, ret, *op.CallNs)
			}
		} else {
			unanswered++
			metadata += ", no answer"
		}
		switch op.Kind {
		case "get":
			if op.ReturnNs == nil || op.Present == nil {
				return nil, counts{}, fmt.Errorf("op %d: a get needs return_ns and present (one without an answer had no effect: leave it out)", i)
			}
			out.Unknown, out.Present = false, *op.Present
			if out.Present {
				if op.OutValue == nil || op.OutVersion == nil {
					return nil, counts{}, fmt.Errorf("op %d: a get that found the key needs out_value and out_version", i)
				}
				out.Value, out.Version = *op.OutValue, *op.OutVersion
			} else if op.OutVersion != nil {
				out.Version = *op.OutVersion
			}
		case "put", "delete", "cas":
			if op.Kind == "put" && !in.HasValue {
				return nil, counts{}, fmt.Errorf("op %d: a put needs a value", i)
			}
			if op.Kind == "delete" {
				in.HasValue, in.Value = false, ""
			}
			if op.Kind == "cas" {
				if op.ExpectVersion == nil {
					return nil, counts{}, fmt.Errorf("op %d: a cas needs expect_version", i)
				}
				in.ExpectVersion = *op.ExpectVersion
			}
			if out.Unknown {
				unknown++
			} else {
				if op.Ok == nil {
					return nil, counts{}, fmt.Errorf("op %d: a %s with a known outcome needs ok", i, op.Kind)
				}
				out.Ok = *op.Ok
				if op.Kind != "cas" && !out.Ok {
					return nil, counts{}, fmt.Errorf("op %d: a %s cannot fail definitely (leave it out of the history)", i, op.Kind)
				}
			}
		default:
			return nil, counts{}, fmt.Errorf("op %d: unknown kind %q", i, op.Kind)
		}
		history = append(history, porcupine.Operation{
			ClientId: op.Client,
			Input:    in,
			Call:     *op.CallNs,
			Output:   out,
			Return:   ret,
			Metadata: metadata,
		})
	}
	return history, counts{unanswered, unknown}, nil
}

func main() {
	flags := flag.NewFlagSet("lincheck", flag.ContinueOnError)
	timeout := flags.Duration("timeout", 60*time.Second, "give up (exit 2) after this long")
	viz := flags.String("viz", "", "write porcupine's HTML visualization here on a violation")
	args := os.Args[1:]
	var path string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		path, args = args[0], args[1:]
	}
	if err := flags.Parse(args); err != nil {
		os.Exit(3)
	}
	if path == "" && flags.NArg() == 1 {
		path = flags.Arg(0)
	} else if flags.NArg() != 0 || path == "" {
		fmt.Fprintln(os.Stderr, "usage: lincheck HISTORY.json [-timeout 60s] [-viz out.html]")
		os.Exit(3)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lincheck:", err)
		os.Exit(3)
	}
	var raw rawHistory
	if err := json.Unmarshal(data, &raw); err != nil {
		fmt.Fprintf(os.Stderr, "lincheck: %s: %v\n", path, err)
		os.Exit(3)
	}
	history, count, err := convert(raw.Ops)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lincheck: %s: %v\n", path, err)
		os.Exit(3)
	}
	keys := map[string]bool{}
	for _, op := range history {
		keys[op.Input.(kvInput).Key] = true
	}
	model := kvModel()
	start := time.Now()
	result, info := porcupine.CheckOperationsVerbose(model, history, *timeout)
	elapsed := time.Since(start)
	summary := fmt.Sprintf("lincheck: %s: %d ops (%d without an answer, %d of unknown outcome), %d keys, checked in %.2fs",
		strings.ToLower(string(result)), len(history), count.unanswered, count.unknown, len(keys), elapsed.Seconds())
	switch result {
	case porcupine.Ok:
		fmt.Println(summary)
		os.Exit(0)
	case porcupine.Illegal:
		if *viz != "" {
			if err := porcupine.VisualizePath(model, info, *viz); err != nil {
				summary += fmt.Sprintf("; visualization failed: %v", err)
			} else {
				summary += "; visualization: " + *viz
			}
		}
		fmt.Println(summary)
		os.Exit(1)
	default:
		fmt.Println(summary + fmt.Sprintf(" (timed out after %s)", *timeout))
		os.Exit(2)
	}
}
