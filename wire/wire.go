// Package wire defines the messages between agents and the server on the
// agent WebSocket (/api/v1/agent). A frame is one or more JSON Envelopes,
// one per line (newline-delimited JSON; an encoded envelope never contains
// a newline); the vocabulary is seed 003's. Version is checked at register.
package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/berth-dev/berth"
)

// Version is the protocol version this build speaks.
const Version = 1

// Message types.
const (
	// Agent → server.
	TypeRegister     = "register"
	TypeHeartbeat    = "heartbeat"
	TypeReadyForWork = "ready_for_work"
	TypeJobAccepted  = "job_accepted"
	TypeJobResult    = "job_result"
	TypeLog          = "log"
	TypeProgress     = "progress"
	// TypeServiceStatus reports a service attempt's readiness phase.
	TypeServiceStatus = "service_status"
	// Server → agent.
	TypeJobAssign = "job_assign"
	TypeJobCancel = "job_cancel"
	TypeNoWork    = "no_work"
	TypeAck       = "ack"
	TypeControl   = "control"
	// TypePrewarmHint tells an agent which model jobs are about to need.
	TypePrewarmHint = "prewarm_hint"
	// TypeStreamOpen asks an agent to open a stream into a running
	// attempt (stream.go).
	TypeStreamOpen = "stream_open"
)

// Envelope is one frame.
type Envelope struct {
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// kind is what the package knows of one message type: the start of its
// envelope as AppendFrame writes it, a new payload to decode into, and
// its fast decoder if it has one (fast.go).
type kind struct {
	name string
	head []byte // {"type":"NAME","payload":
	new  func() any
	fast func([]byte) (any, bool)
}

// kinds are the message types, by name.
var kinds = func() map[string]kind {
	news := map[string]func() any{
		TypeRegister:      func() any { return &Register{} },
		TypeHeartbeat:     func() any { return &Heartbeat{} },
		TypeReadyForWork:  func() any { return &ReadyForWork{} },
		TypeJobAccepted:   func() any { return &JobAccepted{} },
		TypeJobResult:     func() any { return &JobResult{} },
		TypeLog:           func() any { return &Log{} },
		TypeProgress:      func() any { return &Progress{} },
		TypeServiceStatus: func() any { return &ServiceStatus{} },
		TypeControl:       func() any { return &Control{} },
		TypeJobAssign:     func() any { return &JobAssign{} },
		TypeJobCancel:     func() any { return &JobCancel{} },
		TypeNoWork:        func() any { return &NoWork{} },
		TypeAck:           func() any { return &Ack{} },
		TypePrewarmHint:   func() any { return &PrewarmHint{} },
		TypeStreamOpen:    func() any { return &StreamOpen{} },
	}
	m := make(map[string]kind, len(news))
	for name, fn := range news {
		m[name] = kind{name: name, head: []byte(envelopeHead + name + envelopeMid), new: fn, fast: fastDecoders[name]}
	}
	return m
}()

// The envelope as AppendFrame writes it: envelopeHead, the type,
// envelopeMid, the payload, "}". Message type names need no escaping.
const (
	envelopeHead = `{"type":"`
	envelopeMid  = `","payload":`
)

// Encode returns the frame of one message.
func Encode(typ string, payload any) ([]byte, error) {
	return AppendFrame(nil, typ, payload)
}

// AppendFrame appends the envelope of one message to frame, on a line of
// its own after any envelopes already there. An unknown type is an error.
func AppendFrame(frame []byte, typ string, payload any) ([]byte, error) {
	k, ok := kinds[typ]
	if !ok {
		return frame, fmt.Errorf("encode %s: unknown message type", typ)
	}
	start := len(frame)
	if start > 0 {
		frame = append(frame, '\n')
	}
	frame = append(frame, k.head...)
	if f, ok := appendFast(frame, payload); ok {
		return append(f, '}'), nil
	}
	p, err := json.Marshal(payload)
	if err != nil {
		return frame[:start], fmt.Errorf("encode %s: %w", typ, err)
	}
	frame = append(frame, p...)
	return append(frame, '}'), nil
}

// Message is one decoded envelope: its type and a pointer to the payload
// struct for that type.
type Message struct {
	Type string
	Body any
}

// DecodeFrame parses every envelope of a frame, in order. A frame with no
// envelope, or any malformed one, is an error and returns no message.
func DecodeFrame(frame []byte) ([]Message, error) {
	var msgs []Message
	for len(frame) > 0 {
		line := frame
		if i := bytes.IndexByte(frame, '\n'); i >= 0 {
			line, frame = frame[:i], frame[i+1:]
		} else {
			frame = nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		typ, body, err := Decode(line)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, Message{Type: typ, Body: body})
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("decode frame: no message")
	}
	return msgs, nil
}

// FrameBuffer reads frames into one buffer, reused from frame to frame:
// a busy session reads thousands of frames a second, and DecodeFrame
// keeps nothing of the frame it decodes. The zero value is ready to use;
// it is not safe for concurrent use.
type FrameBuffer struct{ buf bytes.Buffer }

// maxKeptFrame is the largest buffer a FrameBuffer keeps for the next
// frame; a larger frame's buffer is left to the garbage collector.
const maxKeptFrame = 1 << 20

// Read reads a whole frame from r (a WebSocket message's reader). The
// frame is valid until the next Read.
func (f *FrameBuffer) Read(r io.Reader) ([]byte, error) {
	if f.buf.Cap() > maxKeptFrame {
		f.buf = bytes.Buffer{}
	}
	f.buf.Reset()
	if _, err := f.buf.ReadFrom(r); err != nil {
		return nil, err
	}
	return f.buf.Bytes(), nil
}

// Decode parses a frame of one envelope into its type and payload value (a
// pointer to the struct for that type). Unknown types and malformed
// payloads are errors.
//
// An envelope spelled as AppendFrame writes it is decoded in one pass over
// its payload; any other spelling of the same JSON (keys in another order,
// spaces, escapes, extra keys) is parsed in full, with the same result.
func Decode(frame []byte) (string, any, error) {
	if k, payload, ok := splitEnvelope(frame); ok {
		if k.fast != nil {
			if v, ok := k.fast(payload); ok {
				return k.name, v, nil
			}
		}
		v := k.new()
		if json.Unmarshal(payload, v) == nil {
			return k.name, v, nil
		}
	}
	return decodeEnvelope(frame)
}

// decodeEnvelope is Decode for any spelling of an envelope.
func decodeEnvelope(frame []byte) (string, any, error) {
	var env Envelope
	if err := json.Unmarshal(frame, &env); err != nil {
		return "", nil, fmt.Errorf("decode frame: %w", err)
	}
	k, ok := kinds[env.Type]
	if !ok {
		return "", nil, fmt.Errorf("decode frame: unknown message type %q", env.Type)
	}
	v := k.new()
	if len(env.Payload) > 0 {
		if err := json.Unmarshal(env.Payload, v); err != nil {
			return "", nil, fmt.Errorf("decode %s: %w", env.Type, err)
		}
	}
	return k.name, v, nil
}

// splitEnvelope returns the kind and the payload of an envelope spelled
// exactly as AppendFrame writes it, and false for any other frame. The
// payload is not checked: a frame whose payload does not decode alone
// (say `{"type":"ack","payload":{},"x":1}`) is left to the full parse.
func splitEnvelope(frame []byte) (kind, []byte, bool) {
	rest, ok := bytes.CutPrefix(frame, []byte(envelopeHead))
	if !ok || len(rest) == 0 || rest[len(rest)-1] != '}' {
		return kind{}, nil, false
	}
	name, rest, ok := bytes.Cut(rest, []byte(envelopeMid))
	if !ok {
		return kind{}, nil, false
	}
	k, ok := kinds[string(name)]
	return k, rest[:len(rest)-1], ok
}

// Register is the first message of a session. Running lists the attempts
// the agent still supervises (after a reconnect); the server answers with
// an Ack saying which to keep and which to kill.
type Register struct {
	Version  int               `json:"version"`
	WorkerID string            `json:"worker_id"`
	Host     string            `json:"host"`
	Queues   []string          `json:"queues,omitempty"`
	GPUs     []berth.GPU       `json:"gpus,omitempty"`
	CPUs     float64           `json:"cpus"`
	Memory   berth.Bytes       `json:"memory"`
	Slots    int               `json:"slots"`
	Labels   map[string]string `json:"labels,omitempty"`
	Running  []string          `json:"running,omitempty"`
	Finished []string          `json:"finished,omitempty"` // ended, result not yet acknowledged
	Agent    string            `json:"agent,omitempty"`    // build version
	// Isolation is how the agent confines its attempts
	// (berth.Isolation*).
	Isolation string `json:"isolation,omitempty"`
	// Models are the models warm on this worker (their weights are cached
	// here), sorted.
	Models []string `json:"models,omitempty"`

	// Advertise is the address others reach the worker at (an IP or a
	// host name, berth.ValidAdvertise); empty: the host label.
	Advertise string `json:"advertise,omitempty"`
}

// Heartbeat renews the worker's lease and the leases of Running attempts.
// FaultyGPUs lists the indexes of GPUs the agent's health check found
// missing or faulted; the server places nothing more on them. Models are
// the models warm on the worker now, sorted, as in Register.
type Heartbeat struct {
	Running    []string `json:"running,omitempty"`
	FaultyGPUs []int    `json:"faulty_gpus,omitempty"`
	Models     []string `json:"models,omitempty"`
	// GPUStats is the GPUs' load as nvidia-smi last read it (none for
	// declared GPUs).
	GPUStats []berth.GPUStat `json:"gpu_stats,omitempty"`
}

// ReadyForWork tells the server the agent can take assignments.
type ReadyForWork struct{}

// NoWork answers ReadyForWork when nothing is queued for the worker.
type NoWork struct{}

// JobAssign starts an attempt on the agent.
type JobAssign struct {
	AttemptID  string `json:"attempt_id"`
	JobID      string `json:"job_id"`
	TaskIndex  int    `json:"task_index"`
	ArrayIndex *int   `json:"array_index,omitempty"`
	// JobName and User are the job's name and its submitter's; Attempt
	// counts the job's attempts, this one included (a gang's members share
	// it), as its retries count them.
	JobName string            `json:"job_name,omitempty"`
	User    string            `json:"user,omitempty"`
	Attempt int               `json:"attempt,omitempty"`
	Queue   string            `json:"queue"`
	Command []string          `json:"command"`
	Env     map[string]string `json:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	GPUs    []int             `json:"gpus,omitempty"`
	// GPUMilli, for a fraction of one GPU (GPUs then names that one GPU,
	// shared), is the job's share in milli-GPUs (resources.gpu_milli):
	// BERTH_GPU_FRACTION, and with MPS its thread percentage; GPUMemory
	// is its resources.gpu_memory (MPS's pinned memory limit; 0: its share
	// of the GPU's memory). 0 for whole GPUs.
	GPUMilli  int         `json:"gpu_milli,omitempty"`
	GPUMemory berth.Bytes `json:"gpu_memory,omitempty"`
	// CPUs and Memory are the job's resources.cpus and resources.memory,
	// which the agent enforces where it can (a cgroup per attempt); 0:
	// no limit.
	CPUs       float64       `json:"cpus,omitempty"`
	Memory     berth.Bytes   `json:"memory,omitempty"`
	MaxRuntime time.Duration `json:"max_runtime,omitempty"`
	// StallTimeout ends the attempt (cause stall) when it writes no output
	// and reports no progress for this long; 0: never.
	StallTimeout time.Duration `json:"stall_timeout,omitempty"`
	Grace        time.Duration `json:"grace,omitempty"` // SIGTERM → SIGKILL
	// RendezvousPort, set for rank 0 of a gang, is its MASTER_PORT: the
	// agent starts the attempt only if nothing on the machine listens on
	// it, and otherwise ends it unstarted with berth.CausePortBusy.
	RendezvousPort int `json:"rendezvous_port,omitempty"`
	// Model is the job's model: once the attempt succeeds, the agent
	// reports it warm.
	Model string `json:"model,omitempty"`
	// Service is set for a service job's attempt.
	Service *Service `json:"service,omitempty"`
	// Secrets holds the values of the secrets the command, env and workdir
	// reference as {{SECRET:NAME}}, by name; the agent substitutes them
	// just before it starts the process and redacts them from what it
	// ships back. Never logged or stored.
	Secrets map[string]string `json:"secrets,omitempty"`
}

// JobAccepted says the attempt's process has started.
type JobAccepted struct {
	AttemptID string `json:"attempt_id"`
}

// JobResult says the attempt has ended. LogSize is the full size of its
// output; every byte of it was shipped before the result.
// Cause, when set, is why the agent ended the attempt itself (a watchdog,
// or a hard stop the server asked for); ExitCode is then the cause's code.
type JobResult struct {
	AttemptID string             `json:"attempt_id"`
	State     berth.AttemptState `json:"state"` // succeeded, failed or cancelled
	ExitCode  *int               `json:"exit_code,omitempty"`
	Reason    string             `json:"reason,omitempty"`
	Cause     string             `json:"cause,omitempty"` // berth.Cause*
	LogSize   int64              `json:"log_size"`
	// Class is the failure class (berth.Failure*) of a service attempt
	// the agent ended because it did not become ready, or oom for an
	// attempt killed at its memory limit.
	Class string `json:"class,omitempty"`
}

// ServiceStatus is a service attempt's readiness: its phase
// (berth.Phase*), the port it serves on, and when it failed the class of
// the failure; Marker is the last startup marker seen in its output.
type ServiceStatus struct {
	AttemptID string `json:"attempt_id"`
	Phase     string `json:"phase"`
	Port      int    `json:"port,omitempty"`
	Class     string `json:"class,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Marker    string `json:"marker,omitempty"`
}

// Service is how an agent runs a service attempt: whether it needs a port
// ({{SERVICE_PORT}}), where weights are cached, and when it is ready.
type Service struct {
	NeedsPort bool       `json:"needs_port,omitempty"`
	Model     string     `json:"model,omitempty"` // {{MODEL_NAME}}
	Readiness *Readiness `json:"readiness,omitempty"`
}

// Readiness is a service's readiness check (seed 004 §6–8): a probe, the
// budgets of its phases, the log markers that count as progress and the
// log lines that classify a failure.
type Readiness struct {
	Probe        Probe          `json:"probe"`
	Infra        time.Duration  `json:"infra,omitempty"`
	Warmup       time.Duration  `json:"warmup,omitempty"`
	Stall        time.Duration  `json:"stall,omitempty"`
	Markers      []string       `json:"markers,omitempty"`
	Fatal        []FatalPattern `json:"fatal,omitempty"`
	Liveness     Probe          `json:"liveness"`
	LiveEvery    time.Duration  `json:"live_every,omitempty"`
	LiveFailures int            `json:"live_failures,omitempty"`
}

// Probe checks a service: "tcp" (the port accepts connections) or "http"
// (Path answers Status and, with ModelIn, lists that model id in an
// OpenAI-style model list).
type Probe struct {
	Kind    string `json:"kind"`
	Path    string `json:"path,omitempty"`
	Status  int    `json:"status,omitempty"`
	ModelIn string `json:"model_in,omitempty"`
}

// FatalPattern is a log substring that classifies a failure.
type FatalPattern struct {
	Substring string `json:"substring"`
	Class     string `json:"class"`
}

// Progress is the latest progress an attempt reported (a BERTH_PROGRESS
// line or a call to the agent's progress endpoint): a fraction such as
// "0.42" or a short message.
type Progress struct {
	AttemptID string `json:"attempt_id"`
	Progress  string `json:"progress"`
}

// Log is a chunk of an attempt's output at Offset: its stdout and stderr
// in one sequence, in the order the agent read them. Stream is the stream
// the chunk was written to: berth.StreamStderr, or empty for stdout (and
// for output whose streams the agent does not tell apart, such as a
// service's).
type Log struct {
	AttemptID string `json:"attempt_id"`
	Offset    int64  `json:"offset"`
	Data      []byte `json:"data"`
	Stream    string `json:"stream,omitempty"`
}

// JobCancel stops an attempt: SIGTERM to its process group, then SIGKILL
// after the grace period.
// Cause set to berth.CauseOperator makes it a hard stop: the attempt ends
// with that cause's exit code once its processes are gone, and the agent
// confirms its GPU memory was released.
type JobCancel struct {
	AttemptID string `json:"attempt_id"`
	Reason    string `json:"reason,omitempty"`
	Cause     string `json:"cause,omitempty"`
}

// PrewarmHint says the server expects jobs for Model, which no worker has
// warm. An agent with a prewarm command loads the model (caches its
// weights) with it, then reports the model warm; others ignore the hint.
type PrewarmHint struct {
	Model string `json:"model"`
}

// Control is the desired state of the agent's worker: the queues turned
// off on its host, with their stop policies. The server sends it after the
// register ack, on every change, and with every heartbeat ack (a safety
// reconciliation: the agent stops any attempt of a queue off with the
// hard policy that is still running). On lists queues turned on by name
// while "*" is off. Parked is true when no queue the worker serves takes
// work.
type Control struct {
	Off    []QueueOff `json:"off,omitempty"`
	On     []string   `json:"on,omitempty"`
	Parked bool       `json:"parked"`
}

// OffFor returns the control that turns queue off, and false when the
// queue is on: a control naming the queue wins over "*".
func (c *Control) OffFor(queue string) (QueueOff, bool) {
	var all *QueueOff
	for i, o := range c.Off {
		switch o.Queue {
		case queue:
			return o, true
		case berth.AllQueues:
			all = &c.Off[i]
		}
	}
	if all == nil || slices.Contains(c.On, queue) {
		return QueueOff{}, false
	}
	return *all, true
}

// QueueOff is one queue turned off ("*": every queue), by whom and with
// which stop policy.
type QueueOff struct {
	Queue       string `json:"queue"`
	Policy      string `json:"policy"`
	RequestedBy string `json:"requested_by,omitempty"`
}

// Ack types (Ack.Of).
const (
	AckRegister  = "register"
	AckHeartbeat = "heartbeat"
	AckResult    = "job_result"
	AckLog       = "log"
)

// Ack answers Register (Keep, Kill, lease settings), Heartbeat (Kill),
// JobResult (the result is durable; AttemptID) and Log (Offset is the next
// byte the server expects for AttemptID; the agent resends from there).
type Ack struct {
	Of        string        `json:"of"`
	AttemptID string        `json:"attempt_id,omitempty"`
	Offset    int64         `json:"offset,omitempty"`
	Keep      []string      `json:"keep,omitempty"`
	Kill      []string      `json:"kill,omitempty"`
	Lease     time.Duration `json:"lease,omitempty"`
	Heartbeat time.Duration `json:"heartbeat,omitempty"`
	Resend    bool          `json:"resend,omitempty"`  // log: the server lacks bytes from Offset
	Control   *Control      `json:"control,omitempty"` // heartbeat: the desired state, again
	Error     string        `json:"error,omitempty"`   // register refused
}
