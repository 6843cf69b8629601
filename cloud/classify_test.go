package cloud

import (
	"testing"

	"github.com/berth-dev/berth"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		where, text, want string
	}{
		{WhereStatusMsg, `Error response from daemon: could not select device driver "cdi" with capabilities: [[gpu]]`, berth.FailureInfraFatal},
		{WhereStatusMsg, "docker: Error response from daemon: Unresolvable CDI device nvidia.com/gpu=all", berth.FailureInfraFatal},
		{WhereStatusMsg, "failed to inject CDI devices: unresolvable", berth.FailureInfraFatal},
		{WhereStatusMsg, "OCI runtime create failed: runc create failed: unable to start container process", berth.FailureInfraFatal},
		{WhereStatusMsg, "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1", berth.FailureInfraFatal},
		{WhereStatusMsg, "pull access denied for vllm/nope, repository does not exist", berth.FailureWorkloadFatal},
		{WhereStatusMsg, "manifest for vllm/vllm-openai:v9 not found: manifest unknown", berth.FailureWorkloadFatal},
		{WhereStatusMsg, "Error: UNAUTHORIZED: authentication required", berth.FailureWorkloadFatal},
		{WhereStatusMsg, "success, running vllm/vllm-openai_latest/ssh", berth.FailureUnknown},
		{WhereStatusMsg, "", berth.FailureUnknown},
		{WhereGPU, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", berth.FailureInfraFatal},
		{WhereGPU, "Failed to initialize NVML: Driver/library version mismatch", berth.FailureInfraFatal},
		{WhereGPU, "No devices were found", berth.FailureInfraFatal},
		{WhereGPU, "Unable to determine the device handle for GPU0000:01:00.0: GPU has fallen off the bus.", berth.FailureInfraFatal},
		{WhereGPU, "bash: line 3: nvidia-smi: command not found", berth.FailureInfraFatal},
		{WhereGPU, "libcuda.so cannot found", berth.FailureInfraFatal},
		{WhereGPU, "some other failure", berth.FailureUnknown},
		{WhereSSH, "root@203.0.113.42: Permission denied (publickey).", berth.FailureInfraFatal},
		{WhereSSH, "ssh: handshake failed: ssh: unable to authenticate, attempted methods [none publickey], no supported methods remain", berth.FailureInfraFatal},
		{WhereSSH, "dial tcp 127.0.0.1:40022: connect: connection refused", berth.FailureWarmup},
		{WhereSSH, "dial tcp 127.0.0.1:40022: i/o timeout", berth.FailureWarmup},
		{WhereSSH, "kex_exchange_identification: read: Connection reset by peer", berth.FailureWarmup},
		{WhereSSH, "ssh: handshake failed: EOF", berth.FailureWarmup},
		{WhereSSH, "something odd", berth.FailureUnknown},
		{WhereProbe, "GET /health: 503 Service Unavailable", berth.FailureWorkloadFatal},
		{WhereProbe, "dial tcp 127.0.0.1:8000: connect: connection refused", berth.FailureWarmup},
		{WhereStatus, "offline", berth.FailureInfraFatal},
		{WhereStatus, "UNKNOWN", berth.FailureInfraFatal},
		{WhereStatus, "loading", berth.FailureUnknown},
		// The same words elsewhere mean something else, or nothing.
		{WhereSSH, "unauthorized", berth.FailureUnknown},
		{WhereStatusMsg, "permission denied (publickey)", berth.FailureUnknown},
		{WhereGPU, "connection refused", berth.FailureUnknown},
		{"elsewhere", "OCI runtime create failed", berth.FailureUnknown},
	}
	for _, tt := range tests {
		if got := Classify(tt.where, tt.text); got != tt.want {
			t.Errorf("Classify(%q, %q) = %q, want %q", tt.where, tt.text, got, tt.want)
		}
	}
}
