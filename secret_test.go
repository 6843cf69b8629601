package berth

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestValidSecretName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"A", "_", "HF_TOKEN", "aws_key2", strings.Repeat("x", 64)} {
		if err := ValidSecretName(ok); err != nil {
			t.Errorf("ValidSecretName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "2FA", "HF-TOKEN", "a b", "ключ", "A}}", strings.Repeat("x", 65)} {
		err := ValidSecretName(bad)
		var be *Error
		if !errors.As(err, &be) || be.Code != ECodeInvalid || be.Field != "name" {
			t.Errorf("ValidSecretName(%q) = %v, want invalid name", bad, err)
		}
	}
}

func TestSecretRefsAndExpand(t *testing.T) {
	t.Parallel()
	s := "--token {{SECRET:HF}} --key={{SECRET:AWS_KEY}} again {{SECRET:HF}} {{SECRET:bad-name}} {{ SECRET:X }} {{SECRET:}}"
	if got, want := SecretRefs(s), []string{"HF", "AWS_KEY"}; !slices.Equal(got, want) {
		t.Errorf("SecretRefs = %q, want %q", got, want)
	}
	if got := SecretRefs("no references"); got != nil {
		t.Errorf("SecretRefs without references = %q", got)
	}
	got, err := ExpandSecrets(s, map[string]string{"HF": "hf_123", "AWS_KEY": "{{SECRET:HF}}"})
	if err != nil {
		t.Fatal(err)
	}
	want := "--token hf_123 --key={{SECRET:HF}} again hf_123 {{SECRET:bad-name}} {{ SECRET:X }} {{SECRET:}}"
	if got != want {
		t.Errorf("ExpandSecrets =\n%q, want\n%q", got, want)
	}
	_, err = ExpandSecrets("a {{SECRET:HF}} b {{SECRET:MISSING}}", map[string]string{"HF": "hf_supersecret"})
	if err == nil {
		t.Fatal("unknown secret: want error")
	}
	if !strings.Contains(err.Error(), "MISSING") || strings.Contains(err.Error(), "hf_supersecret") {
		t.Errorf("error %q must name MISSING and no value", err)
	}
	if ErrorCode(err) != ECodeInvalid {
		t.Errorf("error code %s, want %s", ErrorCode(err), ECodeInvalid)
	}
}
