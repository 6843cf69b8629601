package wire

// A stream carries one `berth exec` or one connection of `berth
// port-forward` between a client and a running attempt, through the
// server. The server sends the attempt's agent a StreamOpen on its session;
// the agent then dials StreamPath(ID) on the same server with its own
// credential, and the server joins that WebSocket to the client's. Both
// are WebSockets of binary messages: the first byte of each is its channel
// (Stream*), the rest its data. The server relays messages one at a time
// in each direction, so a reader that falls behind slows its writer rather
// than filling memory anywhere on the way.

// Stream kinds (StreamOpen.Kind).
const (
	StreamExec = "exec" // run Command in the attempt's environment and working directory
	StreamPort = "port" // connect to 127.0.0.1:Port on the worker
)

// Stream channels: the first byte of every message of a stream.
const (
	// StreamStdin is client → agent: the command's stdin, or bytes for the
	// port; a message with no data ends it (stdin closed, or the
	// connection's write side shut down).
	StreamStdin byte = 0
	// StreamStdout is agent → client: the command's stdout, or bytes from
	// the port; a message with no data ends it (the port only).
	StreamStdout byte = 1
	// StreamStderr is agent → client: the command's stderr.
	StreamStderr byte = 2
	// StreamExit is agent → client, last: the command's exit code, in
	// decimal.
	StreamExit byte = 3
	// StreamError is agent → client, last: why the agent could not do what
	// the stream asked (the attempt is not running here, the port refused
	// the connection), as text.
	StreamError byte = 4
)

// MaxStreamMessage bounds the data of one stream message; a message is one
// byte of channel and at most this much data.
const MaxStreamMessage = 32 << 10

// StreamPath is the path, under the server's URL, on which an agent opens
// the stream id.
func StreamPath(id string) string { return "/api/v1/agent/streams/" + id }

// StreamOpen asks the agent to open stream ID into attempt AttemptID:
// Kind exec runs Command (argv, no shell) as the attempt's own command
// runs, with its environment and working directory; Kind port connects to
// 127.0.0.1:Port on the worker.
type StreamOpen struct {
	ID        string   `json:"id"`
	AttemptID string   `json:"attempt_id"`
	Kind      string   `json:"kind"`
	Command   []string `json:"command,omitempty"`
	Port      int      `json:"port,omitempty"`
}
