package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"
)

// script is a list of scripted answers to POST /v1/chat/completions, read
// from the JSON file --script (or $FAKEVLLM_SCRIPT) names, given in
// order, the last one again once they run out: what the extraction
// contracts' tests make a model reply.
type script struct {
	model string
	mu    sync.Mutex
	steps []step
	next  int
}

// step is one scripted answer: a chat completion whose message is
// Content, ending with FinishReason ("stop" when empty); or, with Status
// set, that HTTP status and a vLLM error body; or, with Body set, that
// body as it is (with Status, or 200). Delay ("2s") pauses first.
type step struct {
	Content      string `json:"content"`
	FinishReason string `json:"finish_reason"`
	Status       int    `json:"status"`
	Body         string `json:"body"`
	Delay        string `json:"delay"`
}

// scripted returns the handler of chat completions: the script at path,
// or plain when path is empty. A script that does not read ends the
// process.
func scripted(path, model string, plain http.HandlerFunc) http.HandlerFunc {
	if path == "" {
		return plain
	}
	data, err := os.ReadFile(path)
	s := &script{model: model}
	if err == nil {
		err = json.Unmarshal(data, &s.steps)
	}
	if err == nil && len(s.steps) == 0 {
		err = fmt.Errorf("no steps")
	}
	for _, st := range s.steps {
		if _, derr := time.ParseDuration(st.Delay); st.Delay != "" && derr != nil && err == nil {
			err = derr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakevllm: --script:", err)
		os.Exit(2)
	}
	return s.answer
}

// answer serves the next step.
func (s *script) answer(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	st := s.steps[min(s.next, len(s.steps)-1)]
	s.next++
	s.mu.Unlock()
	if d, _ := time.ParseDuration(st.Delay); d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	status := st.Status
	if status == 0 {
		status = http.StatusOK
	}
	switch {
	case st.Body != "":
		w.WriteHeader(status)
		_, _ = w.Write([]byte(st.Body))
		return
	case status != http.StatusOK:
		vllmError(w, status, "InternalServerError", "the fake model server was scripted to fail")
		return
	}
	finish := st.FinishReason
	if finish == "" {
		finish = "stop"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-script", "object": "chat.completion", "created": created,
		"model": s.model, "choices": []any{map[string]any{"index": 0, "finish_reason": finish, "logprobs": nil,
			"message": map[string]any{"role": "assistant", "content": st.Content}}},
		"usage": map[string]int{"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}})
}
