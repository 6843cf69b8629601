// Package contract serves extraction contracts (docs/contracts.md): a
// named, declarative request to a model (a prompt template over text
// inputs and images) whose reply must be one JSON object that a JSON
// Schema accepts. A contract is written in YAML, in a file of the
// server's --contracts directory or posted to the API; Run builds the
// chat completion request, sends it through a Models (the gateway's
// router), reduces the reply to one JSON object, validates it, retries
// once when the reply broke the schema or was cut off, and otherwise
// fails with a typed error that keeps the raw reply.
package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"text/template"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/strict"
)

// Spec is a contract as written: a YAML (or JSON) document.
type Spec struct {
	// Name is how the contract is called: POST /v1/contracts/{name}.
	Name string `json:"name"`
	// Description says what the contract extracts; listings show it.
	Description string `json:"description,omitempty"`
	// Model is the model (the OpenAI "model" field) the request goes to.
	Model string `json:"model"`
	// System, when set, is the system message, a template like Prompt.
	System string `json:"system,omitempty"`
	// Prompt is the user message's text: a text/template over the inputs
	// ({{.Inputs.name}}), the output schema as JSON ({{.Schema}}) and the
	// number of images ({{.Images}}).
	Prompt string `json:"prompt"`
	// Inputs are the text fields a request may (or must) give.
	Inputs []berth.ContractInput `json:"inputs,omitempty"`
	// Images, when set, lets a request send images and limits them; nil:
	// the contract takes no images.
	Images *berth.ContractImages `json:"images,omitempty"`
	// Output is the JSON Schema the reply's JSON object must satisfy.
	Output json.RawMessage `json:"output"`
	// Timeout bounds one call to the contract, the retry included;
	// DefaultTimeout when 0.
	Timeout berth.Duration `json:"timeout,omitempty"`
	// MaxTokens, when not 0, is the request's max_tokens.
	MaxTokens int `json:"max_tokens,omitempty"`
	// Temperature, when set, is the request's temperature.
	Temperature *float64 `json:"temperature,omitempty"`
}

// Defaults of a contract's limits.
const (
	DefaultTimeout       = 120 * time.Second
	DefaultMaxImages     = 8
	DefaultMaxImageBytes = 8 << 20
	// MaxImageBytesLimit is the largest max_bytes a contract may set.
	MaxImageBytesLimit = 64 << 20
	// MaxImagesLimit is the largest max a contract may set.
	MaxImagesLimit = 64
)

// Contract is a parsed, validated Spec, ready to run.
type Contract struct {
	Spec
	// Origin says where the contract comes from: its file's path, or
	// "the API" for a stored one.
	Origin string

	system, prompt *template.Template
	schema         *jsonschema.Schema
	schemaText     string // Output, indented: the template's {{.Schema}}
}

var namePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$`)

// Parse reads a contract document (YAML or JSON) strictly and validates
// it: an unknown field, a missing name, model or prompt, a template that
// does not parse or names an input the contract does not declare, a
// schema that does not compile or a limit out of range is an invalid
// *berth.Error. From a file (origin is its path) the error's message
// begins with the path and the field ("dir/x.yaml: field prompt: …");
// from the API (origin OriginAPI) its Field names the field.
func Parse(origin string, data []byte) (*Contract, error) {
	var s Spec
	err := strict.DecodeYAML(data, &s)
	var c *Contract
	if err == nil {
		c, err = compile(s)
	}
	if err != nil {
		if origin == OriginAPI {
			return nil, err
		}
		return nil, inFile(origin, err)
	}
	c.Origin = origin
	return c, nil
}

// inFile returns err, an error of the file path, with its message
// beginning with the path and the field at fault.
func inFile(path string, err error) error {
	var be *berth.Error
	if !errors.As(err, &be) {
		return fmt.Errorf("%s: %w", path, err)
	}
	msg := path + ": " + be.Text()
	if be.Field != "" {
		msg = fmt.Sprintf("%s: field %s: %s", path, be.Field, be.Text())
	}
	return &berth.Error{Code: be.Code, Message: msg}
}

// compile validates s and compiles its templates and schema.
func compile(s Spec) (*Contract, error) {
	switch {
	case s.Name == "":
		return nil, berth.Invalidf("name", "required")
	case !namePattern.MatchString(s.Name):
		return nil, berth.Invalidf("name", "%q must be 1-64 lowercase letters, digits, '.', '_' or '-', beginning and ending with a letter or digit", s.Name)
	case strings.TrimSpace(s.Model) == "":
		return nil, berth.Invalidf("model", "required: the model the contract's requests go to")
	case strings.TrimSpace(s.Prompt) == "":
		return nil, berth.Invalidf("prompt", "required: the user message's template")
	case len(s.Output) == 0 || string(s.Output) == "null":
		return nil, berth.Invalidf("output", "required: the JSON Schema of the reply's JSON object")
	case s.Timeout < 0:
		return nil, berth.Invalidf("timeout", "must not be negative")
	case s.MaxTokens < 0:
		return nil, berth.Invalidf("max_tokens", "must not be negative")
	case s.Temperature != nil && (*s.Temperature < 0 || *s.Temperature > 2):
		return nil, berth.Invalidf("temperature", "must be between 0 and 2")
	}
	if s.Timeout == 0 {
		s.Timeout = berth.Duration(DefaultTimeout)
	}
	seen := map[string]bool{}
	for i, in := range s.Inputs {
		field := fmt.Sprintf("inputs[%d].name", i)
		switch {
		case in.Name == "":
			return nil, berth.Invalidf(field, "required")
		case !inputPattern.MatchString(in.Name):
			return nil, berth.Invalidf(field, "%q must be a letter or '_' followed by letters, digits or '_' (a template names it {{.Inputs.%s}})", in.Name, in.Name)
		case seen[in.Name]:
			return nil, berth.Invalidf(field, "%q is declared twice", in.Name)
		}
		seen[in.Name] = true
	}
	if im := s.Images; im != nil {
		lim := *im
		if lim.Max == 0 {
			lim.Max = DefaultMaxImages
		}
		if lim.MaxBytes == 0 {
			lim.MaxBytes = DefaultMaxImageBytes
		}
		switch {
		case lim.Max < 0 || lim.Max > MaxImagesLimit:
			return nil, berth.Invalidf("images.max", "must be between 1 and %d", MaxImagesLimit)
		case lim.Min < 0 || lim.Min > lim.Max:
			return nil, berth.Invalidf("images.min", "must be between 0 and images.max (%d)", lim.Max)
		case lim.MaxBytes < 0 || lim.MaxBytes > MaxImageBytesLimit:
			return nil, berth.Invalidf("images.max_bytes", "must be between 1B and %s", berth.Bytes(MaxImageBytesLimit))
		case lim.MaxSide < 0 || lim.MaxSide > 16384:
			return nil, berth.Invalidf("images.max_side", "must be between 0 (no downscale) and 16384 pixels")
		}
		s.Images = &lim
	}
	c := &Contract{Spec: s}
	var err error
	if c.schema, c.schemaText, err = compileSchema(s.Output); err != nil {
		return nil, err
	}
	if c.prompt, err = parseTemplate("prompt", s.Prompt); err != nil {
		return nil, err
	}
	if s.System != "" {
		if c.system, err = parseTemplate("system", s.System); err != nil {
			return nil, err
		}
	}
	// Rendered once with every input empty: a template naming an input
	// the contract does not declare fails now, not on a request.
	empty := map[string]string{}
	for _, in := range s.Inputs {
		empty[in.Name] = ""
	}
	if _, _, err := c.render(empty, 0); err != nil {
		return nil, err
	}
	return c, nil
}

var inputPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// parseTemplate parses a template of field; a key missing from a map is
// an error when it runs.
func parseTemplate(field, text string) (*template.Template, error) {
	t, err := template.New(field).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, berth.Invalidf(field, "not a valid template: %v", err)
	}
	return t, nil
}

// noLoader refuses every $ref outside the schema itself: a contract
// posted to the API must not make the server read files or URLs.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("$ref to %s: a contract's schema may refer only within itself", url)
}

// compileSchema compiles raw, a JSON Schema, and returns it with its
// indented text.
func compileSchema(raw json.RawMessage) (*jsonschema.Schema, string, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, "", berth.Invalidf("output", "not JSON: %v", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, "", berth.Invalidf("output", "must be a JSON Schema object (type: object, properties: …)")
	}
	comp := jsonschema.NewCompiler()
	comp.UseLoader(noLoader{})
	const loc = "contract-output.json"
	if err := comp.AddResource(loc, doc); err != nil {
		return nil, "", berth.Invalidf("output", "not a JSON Schema: %v", err)
	}
	sch, err := comp.Compile(loc)
	if err != nil {
		return nil, "", berth.Invalidf("output", "not a valid JSON Schema: %v", err)
	}
	var text bytes.Buffer
	if err := json.Indent(&text, raw, "", "  "); err != nil {
		return nil, "", berth.Invalidf("output", "not JSON: %v", err)
	}
	return sch, text.String(), nil
}

// templateData is what a contract's templates see.
type templateData struct {
	Inputs map[string]string
	Schema string
	Images int
}

// render returns the system and user messages' text for inputs and n
// images.
func (c *Contract) render(inputs map[string]string, n int) (system, prompt string, err error) {
	data := templateData{Inputs: inputs, Schema: c.schemaText, Images: n}
	var b strings.Builder
	if c.system != nil {
		if err := c.system.Execute(&b, data); err != nil {
			return "", "", berth.Invalidf("system", "%v", err)
		}
		system = b.String()
		b.Reset()
	}
	if err := c.prompt.Execute(&b, data); err != nil {
		return "", "", berth.Invalidf("prompt", "%v", err)
	}
	return system, b.String(), nil
}

// Info returns c as listed.
func (c *Contract) Info() *berth.ContractInfo {
	inputs := c.Inputs
	if inputs == nil {
		inputs = []berth.ContractInput{}
	}
	in := "file"
	if c.Origin == OriginAPI {
		in = "api"
	}
	return &berth.ContractInfo{Name: c.Name, Description: c.Description, Model: c.Model, Inputs: inputs, Images: c.Images,
		Output: c.Output, Timeout: c.Timeout, DefinedIn: in}
}

// OriginAPI is the Origin of a contract stored through the API.
const OriginAPI = "the API"
