// Command fakevllm is a stand-in for vLLM's OpenAI-compatible server in
// the agent's readiness tests: it prints vLLM's startup markers (with ANSI
// colours and process prefixes, as vLLM does) over a warm-up, then listens
// and serves GET /health and GET /v1/models. Flags make it stall, crash
// with CUDA out of memory, list the wrong model id, or have /health fail
// after it is ready.
//
// Called as vLLM's own command line (as the fake marketplace's machines
// run it for a bare vLLM node),
//
//	fakevllm serve MODEL --port P [--host H] [--served-model-name NAME] [--max-model-len N] [--tensor-parallel-size N] [--gpu-memory-utilization F]
//
// it prints the markers over a warm-up of FAKEVLLM_WARMUP (default 1s),
// listens on loopback whatever --host says (the fake machine is this one),
// and serves NAME (default MODEL); with FAKEVLLM_OOM set it prints its
// first markers and then crashes with CUDA out of memory.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// markers are vLLM's startup log lines, in order; the last two are printed
// once the port is bound.
var markers = []string{
	"vLLM API server version 0.10.1",
	"Resolved architecture: Qwen2ForCausalLM",
	"Loading safetensors checkpoint shards: 100% Completed | 4/4",
	"Loading weights took 3.21 seconds",
	"Model loading took 14.99 GiB and 4.05 seconds",
	"Available KV cache memory: 50.31 GiB",
	"GPU KV cache size: 941,616 tokens",
	"Capturing CUDA graph shapes: 100%|██████████| 67/67",
	"Graph capturing finished in 12 secs, took 0.52 GiB",
	"init engine (profile, create kv cache, warmup model) took 40.12 seconds",
	"Starting vLLM API server 0 on http://%s",
	"Application startup complete.",
}

const bound = 2 // markers printed after binding

func main() {
	if len(os.Args) > 2 && os.Args[1] == "serve" {
		os.Args = serveArgs(os.Args[2], os.Args[3:])
	}
	host := flag.String("host", "127.0.0.1", "address to listen on")
	port := flag.Int("port", 8000, "port to listen on")
	model := flag.String("model", "Qwen/Qwen2-VL-7B-Instruct", "the model served")
	warmup := flag.Duration("warmup", 0, "time before the port is bound")
	printMarkers := flag.Bool("markers", false, "print the startup markers over the warm-up")
	serveID := flag.String("serve-id", "", "the id /v1/models lists; empty: --model")
	crashAfter := flag.Duration("crash-after", 0, "print CUDA out of memory and exit 1 after this long; 0: never")
	stall := flag.Bool("stall", false, "print two markers, then only noise, and never bind")
	healthFailAfter := flag.Duration("health-fail-after", 0, "/health answers 503 this long after ready; 0: never")
	flag.Parse()
	if *serveID == "" {
		*serveID = *model
	}
	addr := net.JoinHostPort(*host, strconv.Itoa(*port))
	pid := os.Getpid()
	say := func(proc, file, msg string) {
		fmt.Printf("\x1b[1;36m(%s pid=%d)\x1b[0;0m INFO %s [%s] %s\n", proc, pid, time.Now().Format("01-02 15:04:05"), file, msg)
	}
	noise := func() { say("EngineCore_0", "core.py:88", "waiting for the engine core to report") }

	if *crashAfter > 0 {
		time.AfterFunc(*crashAfter, func() {
			fmt.Fprintln(os.Stderr, "\x1b[1;31mERROR\x1b[0m [core.py:700] EngineCore failed to start.")
			fmt.Fprintln(os.Stderr, "Traceback (most recent call last):")
			fmt.Fprintln(os.Stderr, `  File "/usr/lib/python3/site-packages/vllm/v1/worker/gpu_model_runner.py", line 1990, in load_model`)
			fmt.Fprintln(os.Stderr, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.55 GiB of which 1.21 GiB is free.")
			os.Exit(1)
		})
	}

	say("APIServer", "utils.py:326", "non-default args: {'model': '"+*model+"'}")
	if *stall {
		say("APIServer", "api_server.py:1805", markers[0])
		say("APIServer", "config.py:721", markers[1])
		for {
			time.Sleep(50 * time.Millisecond)
			noise()
		}
	}
	if *printMarkers {
		early := markers[:len(markers)-bound]
		gap := *warmup / time.Duration(len(early))
		for i, m := range early {
			if i == 2 { // a tqdm progress bar: carriage returns, no newline until done
				fmt.Print("Loading safetensors checkpoint shards:   0% Completed | 0/4\r")
				fmt.Print("Loading safetensors checkpoint shards:  50% Completed | 2/4\r")
			}
			say("EngineCore_0", "loader.py:262", m)
			noise()
			time.Sleep(gap)
		}
	} else {
		time.Sleep(*warmup)
	}

	l, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ERROR", err)
		os.Exit(1)
	}
	if *printMarkers {
		say("APIServer", "api_server.py:1857", fmt.Sprintf(markers[len(markers)-2], addr))
		say("APIServer", "on.py:62", markers[len(markers)-1])
	}
	ready := time.Now()
	var dead atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if dead.Load() || (*healthFailAfter > 0 && time.Since(ready) >= *healthFailAfter) {
			if !dead.Swap(true) {
				fmt.Println("ERROR [async_llm.py:420] EngineCore encountered an issue. See stack trace above.")
			}
			http.Error(w, "EngineDeadError: EngineCore encountered an issue.", http.StatusServiceUnavailable)
			return
		}
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"object": "list",
			"data": []map[string]any{{
				"id": *serveID, "object": "model", "owned_by": "vllm",
				"root": *model, "max_model_len": 32768,
			}},
		})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"detail":"Not Found"}`, http.StatusNotFound)
	})
	err = http.Serve(l, mux)
	fmt.Fprintln(os.Stderr, "ERROR", strings.TrimSpace(err.Error()))
	os.Exit(1)
}

// serveArgs turns vLLM's command line, vllm serve MODEL [flags], into
// fakevllm's flags: the flags fakevllm shares with vLLM are kept
// (--served-model-name is --serve-id), those it has no use for
// (--max-model-len, --tensor-parallel-size, --gpu-memory-utilization) dropped, and the markers
// printed over FAKEVLLM_WARMUP; FAKEVLLM_OOM crashes it.
func serveArgs(model string, rest []string) []string {
	warmup := os.Getenv("FAKEVLLM_WARMUP")
	if warmup == "" {
		warmup = "1s"
	}
	args := []string{os.Args[0], "--model", model, "--markers", "--warmup", warmup}
	if os.Getenv("FAKEVLLM_OOM") != "" {
		args = append(args, "--crash-after", "300ms")
	}
	for i := 0; i < len(rest); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(rest[i], "-"), "=")
		if !hasValue && i+1 < len(rest) {
			i++
			value = rest[i]
		}
		switch name {
		case "port":
			args = append(args, "--port", value)
		case "served-model-name":
			args = append(args, "--serve-id", value)
		case "host", "max-model-len", "tensor-parallel-size", "gpu-memory-utilization": // loopback; nothing to size
		default:
			fmt.Fprintf(os.Stderr, "fakevllm serve: unknown argument %q\n", rest[i])
			os.Exit(2)
		}
	}
	return args
}
