package main

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"
)

// openai answers the OpenAI-compatible routes as vLLM does, with
// deterministic bodies (fixed ids and times), so that a test can compare
// what a client received through the gateway with the replica's own
// answer byte for byte. The system_fingerprint names the replica
// (fakevllm-PORT).
type openai struct {
	model, fingerprint string
	status             int           // != 0: every answer is this status
	streamDelay, delay time.Duration // before each stream event; before an answer not streamed
	reply              string
}

// created is the fixed "created" time of every answer.
const created = 1764115200

// completionRequest is what the fake reads of a request.
type completionRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []struct {
		Content any `json:"content"`
	} `json:"messages"`
	Prompt         any    `json:"prompt"`
	Input          any    `json:"input"`
	EncodingFormat string `json:"encoding_format"`
}

// words counts the words of a prompt: text, or the texts in a list of
// strings or of content parts.
func words(v any) int {
	switch v := v.(type) {
	case string:
		return len(strings.Fields(v))
	case []any:
		n := 0
		for _, e := range v {
			n += words(e)
		}
		return n
	case map[string]any:
		return words(v["text"])
	}
	return 0
}

// read decodes the request and checks its model; it answers the errors
// vLLM would and returns false.
func (o *openai) read(w http.ResponseWriter, r *http.Request) (*completionRequest, bool) {
	var req completionRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		vllmError(w, http.StatusBadRequest, "BadRequestError", "invalid JSON: "+err.Error())
		return nil, false
	}
	if req.Model != o.model {
		vllmError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return nil, false
	}
	if o.status != 0 {
		vllmError(w, o.status, "InternalServerError", "the fake model server was told to fail")
		return nil, false
	}
	return &req, true
}

func vllmError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "error", "message": msg, "type": typ, "param": nil, "code": status})
}

// complete answers /v1/chat/completions and /v1/completions.
func (o *openai) complete(w http.ResponseWriter, r *http.Request) {
	req, ok := o.read(w, r)
	if !ok {
		return
	}
	chat := strings.HasSuffix(r.URL.Path, "/chat/completions")
	prompt := words(req.Prompt)
	for _, m := range req.Messages {
		prompt += words(m.Content)
	}
	tokens := strings.Fields(o.reply)
	usage := map[string]int{"prompt_tokens": prompt, "completion_tokens": len(tokens), "total_tokens": prompt + len(tokens)}
	id, object := "cmpl-fake", "text_completion"
	if chat {
		id, object = "chatcmpl-fake", "chat.completion"
	}
	if !req.Stream {
		time.Sleep(o.delay)
		choice := map[string]any{"index": 0, "finish_reason": "stop", "logprobs": nil}
		if chat {
			choice["message"] = map[string]any{"role": "assistant", "content": o.reply}
		} else {
			choice["text"] = o.reply
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "object": object, "created": created, "model": o.model,
			"system_fingerprint": o.fingerprint, "choices": []any{choice}, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	flusher := w.(http.Flusher)
	if chat {
		object = "chat.completion.chunk"
	}
	event := func(v any) bool {
		time.Sleep(o.streamDelay)
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		flusher.Flush()
		return true
	}
	chunk := func(text string, finish any) map[string]any {
		choice := map[string]any{"index": 0, "finish_reason": finish, "logprobs": nil}
		if chat {
			choice["delta"] = map[string]any{"content": text}
		} else {
			choice["text"] = text
		}
		return map[string]any{"id": id, "object": object, "created": created, "model": o.model,
			"system_fingerprint": o.fingerprint, "choices": []any{choice}}
	}
	for i, tok := range tokens {
		if i > 0 {
			tok = " " + tok
		}
		if !event(chunk(tok, nil)) {
			return
		}
	}
	if !event(chunk("", "stop")) {
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		if !event(map[string]any{"id": id, "object": object, "created": created, "model": o.model,
			"system_fingerprint": o.fingerprint, "choices": []any{}, "usage": usage}) {
			return
		}
	}
	time.Sleep(o.streamDelay)
	fmt.Fprint(w, "data: [DONE]\n\n")
	flusher.Flush()
}

// embed answers /v1/embeddings: a 4-dimensional vector per input.
func (o *openai) embed(w http.ResponseWriter, r *http.Request) {
	req, ok := o.read(w, r)
	if !ok {
		return
	}
	inputs := []any{req.Input}
	if list, ok := req.Input.([]any); ok {
		inputs = list
	}
	data := make([]any, len(inputs))
	for i := range inputs {
		vec := []float32{0.1, 0.2, 0.3, float32(i)}
		var embedding any = vec
		if req.EncodingFormat == "base64" { // little-endian float32s, as vLLM and OpenAI send them
			raw := make([]byte, 0, 4*len(vec))
			for _, f := range vec {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
			}
			embedding = base64.StdEncoding.EncodeToString(raw)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": embedding}
	}
	n := words(req.Input)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "model": o.model, "data": data,
		"usage": map[string]int{"prompt_tokens": n, "total_tokens": n}})
}
