package service

import (
	"time"

	"github.com/berth-dev/berth"
)

// vllmMarkers are vLLM's startup log lines, in order ("Uvicorn running on"
// is what older versions print instead of "Application startup complete").
var vllmMarkers = []string{
	"vLLM API server version",
	"Resolved architecture",
	"Loading safetensors checkpoint shards",
	"Loading weights took",
	"Model loading took",
	"Available KV cache memory",
	"GPU KV cache size",
	"Capturing CUDA graph",
	"Graph capturing finished",
	"init engine (profile, create kv cache, warmup model) took",
	"Starting vLLM API server",
	"Application startup complete",
	"Uvicorn running on",
}

var vllmFatal = []FatalPattern{
	{"CUDA out of memory", ClassWorkloadFatal},
	{"EngineDeadError", ClassWorkloadFatal},
	{"cannot find -lcuda", ClassInfraFatal},
	{"libcuda.so cannot found", ClassInfraFatal},
}

// Builtin returns the built-in templates by name: vllm, jupyterlab and
// notebook. Each call returns fresh values that the caller may change. It
// never fails.
func Builtin() map[string]*Template {
	return map[string]*Template{
		"vllm": {
			Name:        "vllm",
			Description: "vLLM OpenAI-compatible inference server",
			Command: berth.Argv{"vllm", "serve", "{{MODEL_NAME}}",
				"--port", "{{SERVICE_PORT}}", "--host", "0.0.0.0",
				"--served-model-name", "{{MODEL_NAME}}",
				"--tensor-parallel-size", "{{GPU_COUNT}}",
				"--gpu-memory-utilization", "{{GPU_MEMORY_UTILIZATION}}",
				"--max-model-len", "{{MAX_MODEL_LEN}}",
				"{{EXTRA_ARGS}}"},
			Env:  map[string]string{"HF_HOME": "{{MODEL_CACHE}}"},
			Port: true,
			Vars: []Var{
				{Name: "MODEL_NAME", Required: true, Description: "model to serve (Hugging Face id or path); also its served name"},
				{Name: "MAX_MODEL_LEN", Default: "8192", Description: "context length in tokens"},
				{Name: "EXTRA_ARGS", Args: true, Description: "more vllm serve arguments, separated by spaces"},
			},
			Readiness: Readiness{
				Probe:    Probe{Kind: ProbeHTTP, Path: "/v1/models", Status: 200, ModelIn: "{{MODEL_NAME}}"},
				Markers:  append([]string(nil), vllmMarkers...),
				Fatal:    append([]FatalPattern(nil), vllmFatal...),
				Liveness: Probe{Kind: ProbeHTTP, Path: "/health", Status: 200},
			},
		},
		"jupyterlab": {
			Name:        "jupyterlab",
			Description: "JupyterLab",
			Command: berth.Argv{"jupyter", "lab", "--ip", "0.0.0.0", "--port", "{{SERVICE_PORT}}",
				"--no-browser", "--notebook-dir", "{{WORKSPACE}}"},
			Port: true,
			Readiness: Readiness{
				Probe:  Probe{Kind: ProbeHTTP, Path: "/api", Status: 200},
				Warmup: berth.Duration(5 * time.Minute),
			},
		},
		"notebook": {
			Name:        "notebook",
			Description: "classic Jupyter Notebook",
			Command: berth.Argv{"jupyter", "notebook", "--ip", "0.0.0.0", "--port", "{{SERVICE_PORT}}",
				"--no-browser", "--notebook-dir", "{{WORKSPACE}}"},
			Port: true,
			Readiness: Readiness{
				Probe:  Probe{Kind: ProbeTCP},
				Warmup: berth.Duration(5 * time.Minute),
			},
		},
	}
}
