// Command etcd-linearizability writes and reads keys through etcd's client API while the test
// around it makes etcd change its membership (leadership hand-off, learner join and promotion,
// a member's leave, restarts, a rejoin), records the history, and checks it with porcupine
// against a key-value register per key, as etcd's own robustness tests do. It is the outside
// check of kube-anchor's membership steps: nothing in it is kube-anchor's code.
//
//	etcd-linearizability --endpoints URL,URL --cacert CA --cert CRT --key KEY [--history FILE]
//	    records until its standard input closes (or SIGTERM), then checks and reports;
//	etcd-linearizability --check FILE
//	    checks a history written by --history (or made by hand).
//
// The report is one JSON object on standard output. Exit status: 0 linearizable, 1 not (or
// the check timed out), 2 a usage or setup error.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/anishathalye/porcupine"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Op is one request as the client saw it. Times are nanoseconds since the recording started.
// A put that failed is ambiguous (it may have been applied), so it stays in the history; a
// get that failed changed nothing and is left out.
type Op struct {
	Client int    `json:"client"`
	Kind   string `json:"kind"` // "put" or "get"
	Key    string `json:"key"`
	// The value put, or the value read ("" when the key was absent).
	Value  string `json:"value"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	OK     bool   `json:"ok"`
}

// Report is what one recording (or one --check) found.
type Report struct {
	Result          string  `json:"result"`
	Operations      int     `json:"operations"`
	PutsOK          int     `json:"putsOk"`
	PutsFailed      int     `json:"putsFailed"`
	GetsOK          int     `json:"getsOk"`
	GetsFailed      int     `json:"getsFailed"`
	LongestStallSec float64 `json:"longestWriteStallSeconds"`
	DurationSec     float64 `json:"durationSeconds"`
	CheckSec        float64 `json:"checkSeconds"`
}

func main() {
	endpoints := flag.String("endpoints", "", "etcd client URLs, comma-separated")
	cacert := flag.String("cacert", "", "CA bundle that verifies the members")
	cert := flag.String("cert", "", "client certificate")
	key := flag.String("key", "", "client key")
	clients := flag.Int("clients", 4, "concurrent clients, each with every endpoint (rotated)")
	keys := flag.Int("keys", 4, "keys written and read")
	interval := flag.Duration("interval", 20*time.Millisecond, "pause between one client's requests")
	timeout := flag.Duration("request-timeout", 2*time.Second, "deadline of each request")
	historyOut := flag.String("history", "", "write the recorded history here (JSON)")
	check := flag.String("check", "", "check this history file instead of recording")
	visualize := flag.String("visualize", "", "on a violation, write porcupine's HTML view here")
	checkTimeout := flag.Duration("check-timeout", 2*time.Minute, "bound on the linearizability search")
	flag.Parse()

	var history []Op
	var duration time.Duration
	var getsFailed int
	if *check != "" {
		raw, err := os.ReadFile(*check)
		if err != nil {
			fail(2, "%v", err)
		}
		if err := json.Unmarshal(raw, &history); err != nil {
			fail(2, "%s: %v", *check, err)
		}
		for _, op := range history {
			duration = max(duration, time.Duration(op.Return))
		}
	} else {
		if *endpoints == "" || *cacert == "" || *cert == "" || *key == "" {
			fail(2, "--endpoints, --cacert, --cert and --key are needed to record (or --check FILE)")
		}
		tlsConfig, err := transport.TLSInfo{TrustedCAFile: *cacert, CertFile: *cert, KeyFile: *key}.ClientConfig()
		if err != nil {
			fail(2, "TLS: %v", err)
		}
		history, getsFailed, duration = record(strings.Split(*endpoints, ","), tlsConfig, *clients, *keys, *interval, *timeout)
		if *historyOut != "" {
			raw, _ := json.Marshal(history)
			if err := os.WriteFile(*historyOut, raw, 0o600); err != nil {
				fail(2, "%v", err)
			}
		}
	}

	report := Report{GetsFailed: getsFailed, DurationSec: duration.Seconds()}
	for _, op := range history {
		switch {
		case op.Kind == "put" && op.OK:
			report.PutsOK++
		case op.Kind == "put":
			report.PutsFailed++
		default:
			report.GetsOK++
		}
	}
	report.Operations = len(history) + getsFailed
	report.LongestStallSec = longestStall(history, duration).Seconds()

	start := time.Now()
	result, info := porcupine.CheckOperationsVerbose(registers, operations(history), *checkTimeout)
	report.CheckSec = time.Since(start).Seconds()
	report.Result = string(result)
	if result != porcupine.Ok && *visualize != "" {
		if err := porcupine.VisualizePath(registers, info, *visualize); err != nil {
			fmt.Fprintf(os.Stderr, "visualize: %v\n", err)
		}
	}
	out, _ := json.Marshal(report)
	fmt.Println(string(out))
	if result != porcupine.Ok {
		os.Exit(1)
	}
}

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "etcd-linearizability: "+format+"\n", args...)
	os.Exit(code)
}

// record runs the clients until standard input closes or SIGTERM arrives.
func record(endpoints []string, tlsConfig *tls.Config, clients, keys int, interval, timeout time.Duration) ([]Op, int, time.Duration) {
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		select {
		case <-stop:
		default:
			close(stop)
		}
	}()

	// One run's keys are its own, so every key starts absent.
	prefix := fmt.Sprintf("/etcd-linearizability/%d-%d/", time.Now().UnixNano(), os.Getpid())
	start := time.Now()
	since := func() int64 { return time.Since(start).Nanoseconds() }
	var mu sync.Mutex
	var history []Op
	getsFailed := 0
	var wg sync.WaitGroup
	for c := range clients {
		// Each client lists the endpoints from a different one, so requests reach every member.
		rotated := append(append([]string{}, endpoints[c%len(endpoints):]...), endpoints[:c%len(endpoints)]...)
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   rotated,
			TLS:         tlsConfig,
			DialTimeout: timeout,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			fail(2, "client: %v", err)
		}
		wg.Add(1)
		go func(c int, cli *clientv3.Client) {
			defer wg.Done()
			defer cli.Close()
			// An ambiguous put may still be applied after this client moved on, so the client
			// takes a new identity after one: porcupine's clients issue one request at a time.
			id := c
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				k := prefix + fmt.Sprintf("k%d", (c+seq)%keys)
				op := Op{Client: id, Key: k}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				op.Call = since()
				if seq%2 == 0 {
					op.Kind = "put"
					op.Value = fmt.Sprintf("c%d-%d", c, seq)
					_, err := cli.Put(ctx, k, op.Value)
					op.Return, op.OK = since(), err == nil
				} else {
					op.Kind = "get"
					resp, err := cli.Get(ctx, k)
					op.Return, op.OK = since(), err == nil
					if err == nil && len(resp.Kvs) > 0 {
						op.Value = string(resp.Kvs[0].Value)
					}
				}
				cancel()
				mu.Lock()
				if op.OK || op.Kind == "put" {
					history = append(history, op)
				} else {
					getsFailed++
				}
				mu.Unlock()
				if op.Kind == "put" && !op.OK {
					id += clients
				}
				select {
				case <-stop:
					return
				case <-time.After(interval):
				}
			}
		}(c, cli)
	}
	wg.Wait()
	return history, getsFailed, time.Since(start)
}

// longestStall is the longest time with no put answered, from the start to the end.
func longestStall(history []Op, duration time.Duration) time.Duration {
	var done []int64
	for _, op := range history {
		if op.Kind == "put" && op.OK {
			done = append(done, op.Return)
		}
	}
	sort.Slice(done, func(i, j int) bool { return done[i] < done[j] })
	last, longest := int64(0), int64(0)
	for _, t := range append(done, duration.Nanoseconds()) {
		longest = max(longest, t-last)
		last = t
	}
	return time.Duration(longest)
}

type input struct {
	put   bool
	key   string
	value string
}

// operations turns the history into porcupine's. A failed put is ambiguous: if no get ever read
// its (unique) value it is dropped (applied or not, nothing observed it, so a linearization
// exists with or without it); otherwise it must have taken effect before the first get that
// read it returned, so that return bounds it, as etcd's robustness tests patch such puts.
func operations(history []Op) []porcupine.Operation {
	observed := map[string]int64{}
	for _, op := range history {
		if op.Kind == "get" && op.Value != "" {
			if t, seen := observed[op.Value]; !seen || op.Return < t {
				observed[op.Value] = op.Return
			}
		}
	}
	var ops []porcupine.Operation
	for _, op := range history {
		ret := op.Return
		if op.Kind == "put" && !op.OK {
			t, seen := observed[op.Value]
			if !seen {
				continue
			}
			ret = t
		}
		ops = append(ops, porcupine.Operation{
			ClientId: op.Client,
			Input:    input{put: op.Kind == "put", key: op.Key, value: op.Value},
			Call:     op.Call,
			Output:   op.Value,
			Return:   ret,
		})
	}
	return ops
}

// registers is one register per key, absent ("") at first.
var registers = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			k := op.Input.(input).key
			if _, seen := byKey[k]; !seen {
				order = append(order, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		parts := make([][]porcupine.Operation, 0, len(order))
		for _, k := range order {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() interface{} { return "" },
	Step: func(state, in, out interface{}) (bool, interface{}) {
		i := in.(input)
		if i.put {
			return true, i.value
		}
		return out.(string) == state.(string), state
	},
	DescribeOperation: func(in, out interface{}) string {
		i := in.(input)
		if i.put {
			return fmt.Sprintf("put(%s, %q)", i.key, i.value)
		}
		return fmt.Sprintf("get(%s) -> %q", i.key, out.(string))
	},
	DescribeState: func(state interface{}) string { return fmt.Sprintf("%q", state) },
}
