package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Reduce returns the one JSON object in a model's reply: the text from its
// first '{' to its last '}', compacted, so that Markdown fences and
// commentary before or after the object do not matter. A reply with no
// such span, or whose span is not one JSON object, is an error saying why.
func Reduce(reply string) (json.RawMessage, error) {
	first, last := strings.IndexByte(reply, '{'), strings.LastIndexByte(reply, '}')
	if first < 0 || last < first {
		return nil, errors.New("the reply holds no JSON object (no '{' … '}')")
	}
	span := []byte(reply[first : last+1])
	dec := json.NewDecoder(bytes.NewReader(span))
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("the reply's text from its first '{' to its last '}' is not valid JSON: %w", err)
	}
	if dec.InputOffset() != int64(len(span)) {
		return nil, errors.New("the reply's text from its first '{' to its last '}' is more than one JSON object")
	}
	var out bytes.Buffer
	if err := json.Compact(&out, span); err != nil {
		return nil, fmt.Errorf("compact the reply's JSON object: %w", err)
	}
	return out.Bytes(), nil
}

// Validate checks obj, a JSON object, against the contract's output
// schema; its error lists each violation with where it is.
func (c *Contract) Validate(obj json.RawMessage) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(obj))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	err = c.schema.Validate(inst)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		// The first line names the schema's internal URL; the rest are
		// the violations, one per line ("- at '/title': …").
		lines := strings.Split(ve.Error(), "\n")[1:]
		for i, l := range lines {
			lines[i] = strings.TrimPrefix(strings.TrimSpace(l), "- ")
		}
		return errors.New(strings.Join(lines, "; "))
	}
	return err
}
