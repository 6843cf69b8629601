package berth

import (
	"errors"
	"strings"
	"testing"
)

func TestDecodeYAML(t *testing.T) {
	t.Parallel()
	var ok SubmitRequest
	if err := DecodeYAML([]byte("# a job\ncommand: [python, train.py]\narray: 3\nresources: {gpus: 2}\n"), &ok); err != nil ||
		len(ok.Command) != 2 || ok.Array != 3 || ok.Resources.GPUs != 2 {
		t.Fatalf("DecodeYAML of a good file = %+v, %v", ok, err)
	}
	for _, tt := range []struct {
		doc, field, part string
	}{
		{"command: [unclosed\n", "", "not valid YAML"},
		{"comand: [x]\n", "", `unknown field "comand"`},
		{"command: [x]\narray: many\n", "array", "must be int"},
		{"[1, 2]\n", "", "must be"},
	} {
		var req SubmitRequest
		err := DecodeYAML([]byte(tt.doc), &req)
		var e *Error
		if !errors.As(err, &e) || e.Code != ECodeInvalid || e.Field != tt.field || !strings.Contains(e.Message, tt.part) {
			t.Errorf("DecodeYAML(%q) = %v; want invalid, field %q, saying %q", tt.doc, err, tt.field, tt.part)
		}
	}
	for _, doc := range []string{"", "\n  \n", "# only a comment\n"} {
		var req SubmitRequest
		if err := DecodeYAML([]byte(doc), &req); err != ErrEmptyYAML {
			t.Errorf("DecodeYAML(%q) = %v, want ErrEmptyYAML", doc, err)
		}
	}
}
