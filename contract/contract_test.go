package contract

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/berth-dev/berth"
)

// testContract is a small contract: one required input, up to two
// images scaled to 64 pixels, a strict schema.
const testContract = `
name: t
model: m
system: "You extract."
prompt: |
  Extract from {{.Images}} image(s). Hint: {{.Inputs.hint}}
  Schema: {{.Schema}}
inputs:
  - {name: hint, required: true}
  - {name: lang}
images: {max: 2, max_bytes: 64KiB, max_side: 64}
output:
  type: object
  required: [title]
  additionalProperties: false
  properties:
    title: {type: string, minLength: 1}
timeout: 5s
max_tokens: 100
`

func mustParse(t *testing.T, doc string) *Contract {
	t.Helper()
	c, err := Parse("test.yaml", []byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func TestExamplesLoad(t *testing.T) {
	cs, err := LoadDir("../examples/contracts")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"book-extract":   {"title", "author"},
		"book-condition": {"condition_grade", "visible_issues"},
	}
	if len(cs) != len(want) {
		t.Fatalf("loaded %d contracts, want %d", len(cs), len(want))
	}
	for name, fields := range want {
		c := cs[name]
		if c == nil {
			t.Fatalf("no contract %s", name)
		}
		var schema struct {
			Properties map[string]any `json:"properties"`
		}
		if err := json.Unmarshal(c.Output, &schema); err != nil {
			t.Fatal(err)
		}
		for _, f := range fields {
			if schema.Properties[f] == nil {
				t.Errorf("%s: output schema has no %s", name, f)
			}
		}
		if c.Images == nil || c.Images.Min != 1 {
			t.Errorf("%s: images = %+v, want at least one required", name, c.Images)
		}
	}
	// A reply as a model gives it passes book-condition's schema; an
	// unknown grade does not.
	cond := cs["book-condition"]
	if err := cond.Validate(json.RawMessage(`{"condition_grade":"good","visible_issues":["worn corners"]}`)); err != nil {
		t.Errorf("valid book-condition reply refused: %v", err)
	}
	if err := cond.Validate(json.RawMessage(`{"condition_grade":"mint","visible_issues":[]}`)); err == nil {
		t.Error("book-condition accepted the grade mint")
	}
}

func TestParseErrorsNameFileAndField(t *testing.T) {
	cases := []struct{ name, doc, field string }{
		{"unknown field", testContract + "colour: red\n", "colour"},
		{"no name", strings.Replace(testContract, "name: t\n", "", 1), "name"},
		{"bad name", strings.Replace(testContract, "name: t\n", "name: Bad Name\n", 1), "name"},
		{"no model", strings.Replace(testContract, "model: m\n", "", 1), "model"},
		{"template syntax", strings.Replace(testContract, "{{.Images}}", "{{.Images", 1), "prompt"},
		{"undeclared input", strings.Replace(testContract, "{{.Inputs.hint}}", "{{.Inputs.nope}}", 1), "prompt"},
		{"schema", strings.Replace(testContract, "type: object", "type: objekt", 1), "output"},
		{"no schema", testContract[:strings.Index(testContract, "output:")] + "timeout: 5s\n", "output"},
		{"too many images", strings.Replace(testContract, "max: 2,", "max: 1000,", 1), "images.max"},
		{"min over max", strings.Replace(testContract, "max: 2,", "min: 3, max: 2,", 1), "images.min"},
		{"bare size", strings.Replace(testContract, "64KiB", "65536", 1), "images.max_bytes"},
		{"duplicate input", strings.Replace(testContract, "{name: lang}", "{name: hint}", 1), "inputs[1].name"},
		{"bad timeout", strings.Replace(testContract, "timeout: 5s", "timeout: soon", 1), "timeout"},
		{"remote ref", strings.Replace(testContract, "title: {type: string, minLength: 1}", "title: {$ref: 'file:///etc/passwd'}", 1), "output"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("dir/bad.yaml", []byte(tc.doc))
			var be *berth.Error
			if !errors.As(err, &be) || be.Code != berth.ECodeInvalid {
				t.Fatalf("Parse = %v; want an invalid error", err)
			}
			if !strings.HasPrefix(be.Error(), "dir/bad.yaml: field "+tc.field+": ") {
				t.Errorf("error %q does not begin with the file and field %s", be.Error(), tc.field)
			}
			// From the API, the error's field names it.
			if _, err := Parse(OriginAPI, []byte(tc.doc)); !errors.As(err, &be) || be.Field != tc.field {
				t.Errorf("from the API: %v; want field %s", err, tc.field)
			}
		})
	}
}

func TestLoadDirNameClash(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a.yaml", "b.yml"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(testContract), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := LoadDir(dir)
	if err == nil || !strings.Contains(err.Error(), "a.yaml") || !strings.Contains(err.Error(), "b.yml") {
		t.Fatalf("LoadDir of two files defining t = %v; want an error naming both", err)
	}
}

func TestReduce(t *testing.T) {
	cases := []struct{ reply, want string }{
		{"```json\n{\"title\": \"Dune\"}\n```", `{"title":"Dune"}`},
		{"Sure! Here is the JSON:\n{\"a\": {\"b\": [1, 2]}}\nLet me know if you need more.", `{"a":{"b":[1,2]}}`},
		{`{"title": "brace } inside"}`, `{"title":"brace } inside"}`},
	}
	for _, tc := range cases {
		got, err := Reduce(tc.reply)
		if err != nil || string(got) != tc.want {
			t.Errorf("Reduce(%q) = %s, %v; want %s", tc.reply, got, err, tc.want)
		}
	}
	for _, bad := range []string{"no json here", "} backwards {", `{"title": "x",}`, `{"a":1} and {"b":2}`, `{"cut": "off`} {
		if got, err := Reduce(bad); err == nil {
			t.Errorf("Reduce(%q) = %s; want an error", bad, got)
		}
	}
}

// script is a fake Models: each call takes the next reply; a reply with
// status 0 blocks until the call's context ends. It records the request
// bodies.
type script struct {
	mu      sync.Mutex
	replies []reply
	bodies  []map[string]any
}

type reply struct {
	status int
	body   string
}

// completion is a chat completion whose message is content.
func completion(content, finish string) reply {
	b, _ := json.Marshal(map[string]any{
		"id": "c1", "object": "chat.completion",
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish,
			"message": map[string]any{"role": "assistant", "content": content}}},
		"usage": map[string]int{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
	})
	return reply{200, string(b)}
}

func (s *script) ChatCompletion(ctx context.Context, model string, body []byte) (*Reply, error) {
	s.mu.Lock()
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil || req["model"] != model {
		s.mu.Unlock()
		return nil, errors.New("bad request body")
	}
	s.bodies = append(s.bodies, req)
	if len(s.replies) == 0 {
		s.mu.Unlock()
		return nil, errors.New("no reply scripted")
	}
	r := s.replies[0]
	s.replies = s.replies[1:]
	s.mu.Unlock()
	if r.status == 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if r.status < 0 { // the router refused
		return nil, &UpstreamError{Status: -r.status, RetryAfter: "5", Message: r.body}
	}
	return &Reply{Status: r.status, Header: http.Header{"Retry-After": {"7"}}, Body: []byte(r.body)}, nil
}

func TestRun(t *testing.T) {
	good := `{"title":"Dune"}`
	cases := []struct {
		name     string
		replies  []reply
		output   string
		failure  string
		status   int
		attempts int
		raw      string
	}{
		{"fenced JSON", []reply{completion("```json\n"+good+"\n```", "stop")}, good, "", 200, 1, "```json\n" + good + "\n```"},
		{"prose around JSON", []reply{completion("Here you go: "+good+" Hope it helps.", "stop")}, good, "", 200, 1, ""},
		{"invalid JSON", []reply{completion(`{"title": "Dune",}`, "stop")}, "", berth.ContractParseFailed, 502, 1, `{"title": "Dune",}`},
		{"wrong schema, mended on retry", []reply{completion(`{"name":"Dune"}`, "stop"), completion(good, "stop")}, good, "", 200, 2, good},
		{"wrong schema twice", []reply{completion(`{"title":""}`, "stop"), completion(`{"title":3}`, "stop")}, "", berth.ContractSchemaMismatch, 502, 2, `{"title":3}`},
		{"truncated by length, mended", []reply{completion(`{"title": "Du`, "length"), completion(good, "stop")}, good, "", 200, 2, ""},
		{"truncated by length twice", []reply{completion(`{"title": "Du`, "length"), completion(`{"ti`, "length")}, "", berth.ContractParseFailed, 502, 2, `{"ti`},
		{"HTTP 500", []reply{{500, `{"error":{"message":"engine dead"}}`}}, "", berth.ContractUpstreamHTTPError, 502, 1, `{"error":{"message":"engine dead"}}`},
		{"HTTP 503 warming", []reply{{503, `{"error":{"message":"loading weights"}}`}}, "", berth.ContractUpstreamHTTPError, 503, 1, ""},
		{"router: model warming", []reply{{-503, "model m is loading weights"}}, "", berth.ContractUpstreamHTTPError, 503, 1, ""},
		{"router: unknown model", []reply{{-404, "no model m"}}, "", berth.ContractUpstreamHTTPError, 502, 1, ""},
		{"not a completion", []reply{{200, `<html>proxy error</html>`}}, "", berth.ContractInvalidUpstreamJSON, 502, 1, `<html>proxy error</html>`},
		{"no choices", []reply{{200, `{"choices":[]}`}}, "", berth.ContractInvalidUpstreamJSON, 502, 1, ""},
	}
	c := mustParse(t, testContract)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{replies: tc.replies}
			res := c.Run(context.Background(), s, &berth.ContractRequest{Inputs: map[string]string{"hint": "a novel"}})
			if string(res.Output) != tc.output {
				t.Errorf("output = %s, want %s", res.Output, tc.output)
			}
			gotType := ""
			if res.Error != nil {
				gotType = res.Error.Type
				if res.Error.Code != gotType {
					t.Errorf("error code %q, want its type %q", res.Error.Code, gotType)
				}
			}
			if gotType != tc.failure || res.Status() != tc.status || res.Attempts != tc.attempts {
				t.Errorf("error %+v, status %d, attempts %d; want %q, %d, %d", res.Error, res.Status(), res.Attempts, tc.failure, tc.status, tc.attempts)
			}
			if tc.raw != "" && res.Raw != tc.raw {
				t.Errorf("raw = %q, want %q", res.Raw, tc.raw)
			}
			if len(s.bodies) != tc.attempts {
				t.Fatalf("%d requests sent, want %d", len(s.bodies), tc.attempts)
			}
			if tc.attempts == 2 { // the retry carries the first reply and what was wrong with it
				msgs := s.bodies[1]["messages"].([]any)
				last := msgs[len(msgs)-1].(map[string]any)["content"].(string)
				prev := msgs[len(msgs)-2].(map[string]any)
				if prev["role"] != "assistant" || !strings.Contains(last, "Reply again") {
					t.Errorf("retry messages end %v, %q; want the reply, then what was wrong", prev, last)
				}
				if tc.name == "wrong schema, mended on retry" && !strings.Contains(last, "title") {
					t.Errorf("retry message %q does not name the missing property", last)
				}
			}
		})
	}
	t.Run("usage summed over attempts", func(t *testing.T) {
		s := &script{replies: []reply{completion(`{}`, "stop"), completion(good, "stop")}}
		res := c.Run(context.Background(), s, &berth.ContractRequest{Inputs: map[string]string{"hint": "x"}})
		if res.Usage == nil || res.Usage.TotalTokens != 30 {
			t.Errorf("usage = %+v, want 30 tokens in all", res.Usage)
		}
	})
	t.Run("request", func(t *testing.T) {
		s := &script{replies: []reply{completion(good, "stop")}}
		img := pngData(t, 10, 10)
		res := c.Run(context.Background(), s, &berth.ContractRequest{Inputs: map[string]string{"hint": "a novel"}, Images: []string{img}})
		if res.Error != nil {
			t.Fatal(res.Error)
		}
		b := s.bodies[0]
		msgs := b["messages"].([]any)
		if b["max_tokens"] != 100.0 || len(msgs) != 2 || msgs[0].(map[string]any)["content"] != "You extract." {
			t.Fatalf("request = %v", b)
		}
		parts := msgs[1].(map[string]any)["content"].([]any)
		text := parts[0].(map[string]any)["text"].(string)
		if !strings.Contains(text, "Extract from 1 image(s). Hint: a novel") || !strings.Contains(text, `"minLength": 1`) {
			t.Errorf("prompt = %q", text)
		}
		url := parts[1].(map[string]any)["image_url"].(map[string]any)["url"].(string)
		if parts[1].(map[string]any)["type"] != "image_url" || url != "data:image/png;base64,"+img {
			t.Errorf("image part = %v", parts[1])
		}
	})
}

func TestRunTimeout(t *testing.T) {
	c := mustParse(t, strings.Replace(testContract, "timeout: 5s", "timeout: 50ms", 1))
	res := c.Run(context.Background(), &script{replies: []reply{{}}}, &berth.ContractRequest{Inputs: map[string]string{"hint": "x"}})
	if res.Error == nil || res.Error.Type != berth.ContractUpstreamTimeout || res.Status() != http.StatusGatewayTimeout {
		t.Fatalf("result = %+v; want upstream_timeout, 504", res.Error)
	}
}

func TestRunRejectsInput(t *testing.T) {
	c := mustParse(t, testContract)
	img := pngData(t, 4, 4)
	big := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x89}, 70<<10))
	cases := []struct {
		name  string
		req   berth.ContractRequest
		field string
	}{
		{"missing required", berth.ContractRequest{}, "inputs.hint"},
		{"unknown input", berth.ContractRequest{Inputs: map[string]string{"hint": "x", "colour": "red"}}, "inputs.colour"},
		{"too many images", berth.ContractRequest{Inputs: map[string]string{"hint": "x"}, Images: []string{img, img, img}}, "images"},
		{"not base64", berth.ContractRequest{Inputs: map[string]string{"hint": "x"}, Images: []string{"%%%"}}, "images[0]"},
		{"not an image", berth.ContractRequest{Inputs: map[string]string{"hint": "x"}, Images: []string{img, base64.StdEncoding.EncodeToString([]byte("GIF89a hello"))}}, "images[1]"},
		{"too large", berth.ContractRequest{Inputs: map[string]string{"hint": "x"}, Images: []string{big}}, "images[0]"},
		{"data URL not base64", berth.ContractRequest{Inputs: map[string]string{"hint": "x"}, Images: []string{"data:image/png," + img}}, "images[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{}
			res := c.Run(context.Background(), s, &tc.req)
			if res.Error == nil || res.Error.Type != berth.ContractInputRejected || res.Error.Param != tc.field || res.Status() != 400 {
				t.Fatalf("result = %+v; want input_rejected on %s", res.Error, tc.field)
			}
			if len(s.bodies) != 0 {
				t.Error("a rejected request reached the model")
			}
		})
	}
}

func pngData(t *testing.T, w, h int) string {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, checker(w, h)); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// checker is a black and white checkerboard of single pixels: scaled by half,
// every pixel is mid-grey.
func checker(w, h int) image.Image {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			if (x+y)%2 == 0 {
				img.Set(x, y, color.White)
			} else {
				img.Set(x, y, color.Black)
			}
		}
	}
	return img
}

func TestImagesDownscaled(t *testing.T) {
	c := mustParse(t, testContract) // max_side 64
	var jb bytes.Buffer
	if err := jpeg.Encode(&jb, checker(300, 100), nil); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, given, format string
		w, h                int
	}{
		{"png, wide", pngData(t, 256, 128), "png", 64, 32},
		{"png, tall, as data URL", "data:image/png;base64," + pngData(t, 40, 200), "png", 12, 64},
		{"jpeg", base64.StdEncoding.EncodeToString(jb.Bytes()), "jpeg", 64, 21},
		{"small, unchanged", pngData(t, 30, 20), "png", 30, 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, err := c.image(0, tc.given)
			if err != nil {
				t.Fatal(err)
			}
			b64, ok := strings.CutPrefix(url, "data:image/"+tc.format+";base64,")
			if !ok {
				t.Fatalf("url %.40q… is not a %s data URL", url, tc.format)
			}
			raw, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				t.Fatal(err)
			}
			img, format, err := image.Decode(bytes.NewReader(raw))
			if err != nil || format != tc.format {
				t.Fatalf("decoded %s, %v", format, err)
			}
			if b := img.Bounds(); b.Dx() != tc.w || b.Dy() != tc.h {
				t.Errorf("size %dx%d, want %dx%d", b.Dx(), b.Dy(), tc.w, tc.h)
			}
		})
	}
	// A box filter averages a 2x2 checkerboard scaled by half to grey.
	scaled := scale(checker(128, 128), 64)
	r, _, _, _ := scaled.At(10, 10).RGBA()
	if r>>8 < 120 || r>>8 > 135 {
		t.Errorf("a checkerboard scaled by half has red %d at (10,10), want mid-grey", r>>8)
	}
}
