package contract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/berth-dev/berth"
)

// Models sends chat completion requests to whatever serves a model: the
// gateway's router, which picks a ready replica.
type Models interface {
	// ChatCompletion sends body, an OpenAI chat completion request
	// (POST /v1/chat/completions, not streamed) for model, and returns
	// the answer, whatever its status. No answer is an error: an
	// *UpstreamError when the router refused (an unknown model, one not
	// ready), or any error once ctx has ended.
	ChatCompletion(ctx context.Context, model string, body []byte) (*Reply, error)
}

// Reply is a model server's whole answer.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
}

// UpstreamError is a router's refusal to send a request: no replica of
// the model could take it. Status is the HTTP status it stands for (404
// an unknown model, 503 one warming or swapping, 502 none reachable).
type UpstreamError struct {
	Status     int
	RetryAfter string // seconds, when the router suggests a wait
	Message    string
}

func (e *UpstreamError) Error() string { return e.Message }

// Result is the answer to a call of a contract.
type Result berth.ContractResult

// Status is the HTTP status of r: 200 with an output; 400 for rejected
// input; 504 for a timeout; 503 when the model's server said 503 (a
// model warming or swapping); 502 for any other failure of the model.
func (r *Result) Status() int {
	if r.Error == nil {
		return http.StatusOK
	}
	switch r.Error.Type {
	case berth.ContractInputRejected:
		return http.StatusBadRequest
	case berth.ContractUpstreamTimeout:
		return http.StatusGatewayTimeout
	case berth.ContractUpstreamHTTPError:
		if r.Error.UpstreamStatus == http.StatusServiceUnavailable {
			return http.StatusServiceUnavailable
		}
	}
	return http.StatusBadGateway
}

// message is one chat message; Content is a string or content parts.
type message struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

// part is one content part: text or an image URL.
type part struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	ImageURL *imageURL `json:"image_url,omitempty"`
}

type imageURL struct {
	URL string `json:"url"`
}

// chatRequest is the chat completion request a call sends.
type chatRequest struct {
	Model       string    `json:"model"`
	Messages    []message `json:"messages"`
	MaxTokens   int       `json:"max_tokens,omitempty"`
	Temperature *float64  `json:"temperature,omitempty"`
}

// chatResponse is what a call reads of a chat completion.
type chatResponse struct {
	Choices []struct {
		Message struct {
			Content json.RawMessage `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *berth.ContractUsage `json:"usage"`
}

// Run calls contract c with req through models: it checks the inputs and
// images against the contract, renders the prompt, sends the request,
// reduces the reply to one JSON object and validates it against the
// output schema. When the object breaks the schema, or the reply was cut
// off (finish_reason "length") and yields no valid object, it asks once
// more, with its reply and what was wrong appended. The whole call is
// bounded by the contract's timeout. Run always returns a Result: a
// failure is its Error.
func (c *Contract) Run(ctx context.Context, models Models, req *berth.ContractRequest) *Result {
	start := time.Now()
	res := &Result{Contract: c.Name, Model: c.Model}
	defer func() { res.DurationMS = time.Since(start).Milliseconds() }()
	msgs, err := c.messages(req)
	if err != nil {
		res.Error = &berth.ContractFailure{Type: berth.ContractInputRejected, Code: berth.ContractInputRejected, Message: err.Error()}
		if be := (*berth.Error)(nil); errors.As(err, &be) {
			res.Error.Message, res.Error.Param = be.Text(), be.Field
		}
		return res
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(c.Timeout))
	defer cancel()
	for res.Attempts < 2 {
		res.Attempts++
		reply, retry := c.attempt(ctx, models, msgs, res)
		if res.Error == nil || retry == "" || res.Attempts == 2 {
			break
		}
		res.Error = nil
		msgs = append(msgs, message{Role: "assistant", Content: reply}, message{Role: "user", Content: retry})
	}
	return res
}

// attempt sends msgs once and fills res from the reply: its Output, or
// its Error. When the failure is one a retry may mend, it returns the
// message to ask again with; reply is the model's reply text.
func (c *Contract) attempt(ctx context.Context, models Models, msgs []message, res *Result) (reply, retry string) {
	body, err := json.Marshal(chatRequest{Model: c.Model, Messages: msgs, MaxTokens: c.MaxTokens, Temperature: c.Temperature})
	if err != nil {
		res.Error = &berth.ContractFailure{Type: berth.ContractInvalidUpstreamJSON, Code: berth.ContractInvalidUpstreamJSON, Message: fmt.Sprintf("encode the request: %v", err)}
		return "", ""
	}
	fail := func(typ, raw string, format string, args ...any) {
		res.Raw = raw
		res.Error = &berth.ContractFailure{Type: typ, Code: typ, Message: fmt.Sprintf(format, args...)}
	}
	rep, err := models.ChatCompletion(ctx, c.Model, body)
	var ue *UpstreamError
	switch {
	case err != nil && ctx.Err() != nil:
		fail(berth.ContractUpstreamTimeout, "", "no reply from model %s within the contract's timeout of %v", c.Model, time.Duration(c.Timeout))
		return "", ""
	case errors.As(err, &ue):
		fail(berth.ContractUpstreamHTTPError, "", "model %s: %s", c.Model, ue.Message)
		res.Error.UpstreamStatus, res.Error.RetryAfter = ue.Status, ue.RetryAfter
		return "", ""
	case err != nil:
		fail(berth.ContractUpstreamHTTPError, "", "model %s: %v", c.Model, err)
		return "", ""
	}
	data := rep.Body
	if rep.Status != http.StatusOK {
		fail(berth.ContractUpstreamHTTPError, string(data), "model %s answered HTTP %d", c.Model, rep.Status)
		res.Error.UpstreamStatus, res.Error.RetryAfter = rep.Status, rep.Header.Get("Retry-After")
		return "", ""
	}
	var cr chatResponse
	if err := json.Unmarshal(data, &cr); err != nil || len(cr.Choices) == 0 {
		why := "no choices"
		if err != nil {
			why = err.Error()
		}
		fail(berth.ContractInvalidUpstreamJSON, string(data), "model %s answered 200 with a body that is not a chat completion: %s", c.Model, why)
		return "", ""
	}
	addUsage(res, cr.Usage)
	choice := cr.Choices[0]
	res.FinishReason = choice.FinishReason
	reply, ok := contentText(choice.Message.Content)
	if !ok {
		fail(berth.ContractInvalidUpstreamJSON, string(data), "model %s answered a message whose content is not text", c.Model)
		return "", ""
	}
	res.Raw = reply
	cut := choice.FinishReason == "length"
	obj, err := Reduce(reply)
	if err != nil {
		fail(berth.ContractParseFailed, reply, "%v", err)
		if cut {
			return reply, "Your reply was cut off before it ended (" + err.Error() + "). Reply again, shorter, with only the JSON object."
		}
		return reply, ""
	}
	if err := c.Validate(obj); err != nil {
		fail(berth.ContractSchemaMismatch, reply, "the reply's JSON object does not match the output schema: %v", err)
		return reply, "Your reply's JSON object does not match the required JSON Schema:\n" + err.Error() +
			"\nReply again with only one JSON object that matches this schema:\n" + c.schemaText
	}
	res.Output = obj
	return reply, ""
}

// contentText returns a message's content as text: a JSON string, or
// the text of its text parts.
func contentText(raw json.RawMessage) (string, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true
	}
	var parts []part
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", false
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), true
}

func addUsage(res *Result, u *berth.ContractUsage) {
	if u == nil {
		return
	}
	if res.Usage == nil {
		res.Usage = &berth.ContractUsage{}
	}
	res.Usage.PromptTokens += u.PromptTokens
	res.Usage.CompletionTokens += u.CompletionTokens
	res.Usage.TotalTokens += u.TotalTokens
}

// messages checks req against the contract and returns the chat messages
// it makes: the system message if the contract has one, and the user
// message, the rendered prompt followed by the images as image_url parts.
// A request that breaks the contract is an invalid *berth.Error naming
// the field.
func (c *Contract) messages(req *berth.ContractRequest) ([]message, error) {
	inputs := make(map[string]string, len(c.Inputs))
	for _, in := range c.Inputs {
		v := req.Inputs[in.Name]
		if in.Required && strings.TrimSpace(v) == "" {
			return nil, berth.Invalidf("inputs."+in.Name, "required by contract %s", c.Name)
		}
		inputs[in.Name] = v
	}
	names := make([]string, 0, len(req.Inputs))
	for name := range req.Inputs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if _, ok := inputs[name]; !ok {
			return nil, berth.Invalidf("inputs."+name, "contract %s has no input %q (it takes: %s)", c.Name, name, c.inputNames())
		}
	}
	var parts []part
	switch lim := c.Images; {
	case lim == nil && len(req.Images) > 0:
		return nil, berth.Invalidf("images", "contract %s takes no images", c.Name)
	case lim != nil && len(req.Images) > lim.Max:
		return nil, berth.Invalidf("images", "%d images, over contract %s's limit of %d (images.max)", len(req.Images), c.Name, lim.Max)
	case lim != nil && len(req.Images) < lim.Min:
		return nil, berth.Invalidf("images", "%d images; contract %s needs at least %d (images.min)", len(req.Images), c.Name, lim.Min)
	}
	for i, img := range req.Images {
		url, err := c.image(i, img)
		if err != nil {
			return nil, err
		}
		parts = append(parts, part{Type: "image_url", ImageURL: &imageURL{URL: url}})
	}
	system, prompt, err := c.render(inputs, len(req.Images))
	if err != nil {
		return nil, err
	}
	var msgs []message
	if c.system != nil {
		msgs = append(msgs, message{Role: "system", Content: system})
	}
	if len(parts) == 0 {
		return append(msgs, message{Role: "user", Content: prompt}), nil
	}
	return append(msgs, message{Role: "user", Content: append([]part{{Type: "text", Text: prompt}}, parts...)}), nil
}

// inputNames lists the contract's inputs for an error message.
func (c *Contract) inputNames() string {
	if len(c.Inputs) == 0 {
		return "none"
	}
	names := make([]string, len(c.Inputs))
	for i, in := range c.Inputs {
		names[i] = in.Name
	}
	return strings.Join(names, ", ")
}
