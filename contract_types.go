package berth

import (
	"encoding/json"
	"time"
)

// Extraction contracts (docs/contracts.md): the wire types of
// POST /v1/contracts/{name}, GET /v1/contracts and /api/v1/contracts.
// Package contract parses, stores and runs them.

// ContractRecord is an extraction contract stored through the API: its
// name and its document as posted (YAML or JSON).
type ContractRecord struct {
	Name      string    `json:"name"`
	Source    string    `json:"source"`
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// ContractInput is one text field of a contract's request.
type ContractInput struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Required fields must be given and not empty.
	Required bool `json:"required,omitempty"`
}

// ContractImages bounds the images of a contract's request.
type ContractImages struct {
	// Min is how many images a request must send at least.
	Min int `json:"min,omitempty"`
	// Max is how many it may send at most.
	Max int `json:"max,omitempty"`
	// MaxBytes is the largest image accepted, decoded from base64.
	MaxBytes Bytes `json:"max_bytes,omitempty"`
	// MaxSide, when not 0, is the longest side in pixels an image is sent
	// with: a larger one is scaled down (keeping its aspect) and
	// re-encoded in its format (PNG or JPEG) before the model sees it.
	MaxSide int `json:"max_side,omitempty"`
}

// ContractInfo is a contract as listed (GET /v1/contracts).
type ContractInfo struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Model       string          `json:"model"`
	Inputs      []ContractInput `json:"inputs"`
	Images      *ContractImages `json:"images,omitempty"`
	// Output is the JSON Schema of the output.
	Output  json.RawMessage `json:"output"`
	Timeout Duration        `json:"timeout"`
	// DefinedIn is "file" (the server's --contracts directory) or "api".
	DefinedIn string `json:"defined_in"`
}

// ContractList is GET /v1/contracts's answer.
type ContractList struct {
	Object string          `json:"object"` // "list"
	Data   []*ContractInfo `json:"data"`
}

// ContractRequest is a call of a contract: POST /v1/contracts/{name}'s
// body.
type ContractRequest struct {
	// Inputs are the text fields, by name.
	Inputs map[string]string `json:"inputs,omitempty"`
	// Images are data URLs (data:image/jpeg;base64,…) or bare base64.
	Images []string `json:"images,omitempty"`
}

// The types of a failed call of a contract (ContractFailure.Type).
const (
	// ContractInputRejected: the request broke the contract (an unknown
	// or missing input, too many images, one too large or not PNG/JPEG).
	ContractInputRejected = "input_rejected"
	// ContractUpstreamHTTPError: the model's server answered an HTTP
	// error, or no replica could take the request.
	ContractUpstreamHTTPError = "upstream_http_error"
	// ContractUpstreamTimeout: no reply within the contract's timeout.
	ContractUpstreamTimeout = "upstream_timeout"
	// ContractInvalidUpstreamJSON: the model's server answered 200 with a
	// body that is not an OpenAI chat completion.
	ContractInvalidUpstreamJSON = "invalid_upstream_json"
	// ContractParseFailed: the reply held no JSON object (from its first
	// '{' to its last '}').
	ContractParseFailed = "parse_failed"
	// ContractSchemaMismatch: the reply's JSON object broke the output
	// schema, on the retry too.
	ContractSchemaMismatch = "schema_mismatch"
)

// ContractResult is the answer to a call of a contract: the validated
// Output, or the Error; Raw is the model's last reply (or the upstream's
// body when that was at fault) either way.
type ContractResult struct {
	Contract string           `json:"contract"`
	Model    string           `json:"model"`
	Output   json.RawMessage  `json:"output,omitempty"`
	Error    *ContractFailure `json:"error,omitempty"`
	Raw      string           `json:"raw"`
	// Attempts is how many requests went to the model: 2 after a retry.
	Attempts int `json:"attempts"`
	// FinishReason is the last reply's finish_reason.
	FinishReason string `json:"finish_reason,omitempty"`
	// Usage sums the usage the model reported over the attempts.
	Usage *ContractUsage `json:"usage,omitempty"`
	// DurationMS is the call's time in milliseconds.
	DurationMS int64 `json:"duration_ms"`
}

// ContractFailure says why a call of a contract failed. Its JSON is
// shaped as an OpenAI error (type, code, message, param).
type ContractFailure struct {
	Type string `json:"type"`
	// Code repeats Type, for clients that read an error's code.
	Code    string `json:"code"`
	Message string `json:"message"`
	// Param names the input at fault (input_rejected): inputs.NAME,
	// images or images[i].
	Param string `json:"param,omitempty"`
	// UpstreamStatus is the model server's HTTP status
	// (upstream_http_error), 0 when none came back.
	UpstreamStatus int `json:"upstream_status,omitempty"`
	// RetryAfter is the model server's Retry-After, when it sent one;
	// the answer's Retry-After header.
	RetryAfter string `json:"-"`
}

// ContractUsage is an OpenAI reply's token counts.
type ContractUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}
