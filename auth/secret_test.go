package auth

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/berth-dev/berth"
)

func TestSealOpen(t *testing.T) {
	t.Parallel()
	k := testKeys(t, 1)
	plain := []byte("hunter2-very-secret")
	sealed, err := k.Seal("alice", "HF_TOKEN", plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, plain) {
		t.Fatal("sealed bytes contain the plaintext")
	}
	if len(sealed) != 12+len(plain)+16 {
		t.Errorf("sealed length %d, want nonce + plaintext + tag = %d", len(sealed), 12+len(plain)+16)
	}
	got, err := k.Open("alice", "HF_TOKEN", sealed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, plain) {
		t.Fatalf("Open = %q", got)
	}
	again, err := k.Seal("alice", "HF_TOKEN", plain)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(again[:12], sealed[:12]) {
		t.Error("two seals used the same nonce")
	}

	empty, err := k.Seal("alice", "EMPTY", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := k.Open("alice", "EMPTY", empty); err != nil || len(got) != 0 {
		t.Errorf("empty secret round trip: %q, %v", got, err)
	}

	flipped := slices.Clone(sealed)
	flipped[len(flipped)-1] ^= 1
	flippedNonce := slices.Clone(sealed)
	flippedNonce[0] ^= 0x80
	fails := []struct {
		name         string
		keys         *Keys
		owner, name2 string
		sealed       []byte
	}{
		{"wrong owner", k, "bob", "HF_TOKEN", sealed},
		{"wrong name", k, "alice", "OTHER", sealed},
		{"owner/name boundary moved", k, "alice\x00HF", "_TOKEN", sealed},
		{"flipped ciphertext bit", k, "alice", "HF_TOKEN", flipped},
		{"flipped nonce bit", k, "alice", "HF_TOKEN", flippedNonce},
		{"other key", testKeys(t, 2), "alice", "HF_TOKEN", sealed},
		{"truncated", k, "alice", "HF_TOKEN", sealed[:20]},
		{"empty", k, "alice", "HF_TOKEN", nil},
	}
	for _, tt := range fails {
		got, err := tt.keys.Open(tt.owner, tt.name2, tt.sealed)
		if err == nil {
			t.Errorf("%s: opened to %q, want error", tt.name, got)
			continue
		}
		if got != nil {
			t.Errorf("%s: returned bytes with the error", tt.name)
		}
		if strings.Contains(err.Error(), string(plain)) {
			t.Errorf("%s: error %q contains the plaintext", tt.name, err)
		}
	}
	if _, err := k.Seal("a\x00b", "c", plain); err == nil {
		t.Error("Seal must refuse an owner holding NUL")
	}
}

func TestValidSecretName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"A", "_", "HF_TOKEN", "aws_key2", strings.Repeat("x", 64)} {
		if err := ValidSecretName(ok); err != nil {
			t.Errorf("ValidSecretName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "2FA", "HF-TOKEN", "a b", "ключ", "A}}", strings.Repeat("x", 65)} {
		err := ValidSecretName(bad)
		var be *berth.Error
		if !errors.As(err, &be) || be.Code != berth.ECodeInvalid || be.Field != "name" {
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
	if berth.ErrorCode(err) != berth.ECodeInvalid {
		t.Errorf("error code %s, want %s", berth.ErrorCode(err), berth.ECodeInvalid)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	r := NewRedactor([]string{"abc", "", "abcdef", "xyz", "abc", "ab"})
	tests := []struct{ in, want string }{
		{"nothing here", "nothing here"},
		{"key=abcdef;", "key=***;"},
		{"abc abc", "*** ***"},
		{"abcxyz", "******"},  // touching values stay separate
		{"abxyzc", "******c"}, // "ab" and "xyz" touch
		{"zabcdefz", "z***z"}, // longest wins
		{"ab", "***"},         // short values are redacted too
		{"aaab", "aa***"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := r.Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	overlap := NewRedactor([]string{"abcd", "cdef"})
	if got := overlap.Redact("xabcdefx"); got != "x***x" {
		t.Errorf("overlapping values: %q, want every covered byte hidden", got)
	}
	var none *Redactor
	if got := none.Redact("abc"); got != "abc" {
		t.Errorf("nil Redactor changed text: %q", got)
	}
	if got := NewRedactor(nil).Redact("abc"); got != "abc" {
		t.Errorf("empty Redactor changed text: %q", got)
	}
}

type recorder struct {
	bytes.Buffer
	writes int
}

func (w *recorder) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

func TestRedactWriterSplitAcrossWrites(t *testing.T) {
	t.Parallel()
	secrets := []string{"hf_SECRET_TOKEN", "p4ss", "aaaa"}
	r := NewRedactor(secrets)
	input := "token=hf_SECRET_TOKEN pass=p4ss p4sp4ss aaaaaa hf_SECRET_TOKENhf_SECRET_TOKEN end"
	want := r.Redact(input)
	for _, s := range secrets {
		if strings.Contains(want, s) {
			t.Fatalf("Redact leaves %q in %q", s, want)
		}
	}
	// Every way of cutting the input in two, then in three.
	for i := 0; i <= len(input); i++ {
		for j := i; j <= len(input); j += 7 {
			var out recorder
			w := r.Writer(&out)
			for _, part := range []string{input[:i], input[i:j], input[j:]} {
				n, err := w.Write([]byte(part))
				if err != nil || n != len(part) {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if out.String() != want {
				t.Fatalf("split at %d,%d: got %q, want %q", i, j, out.String(), want)
			}
		}
	}
}

func TestRedactWriterByteAtATime(t *testing.T) {
	t.Parallel()
	r := NewRedactor([]string{"s3cr3t-value"})
	var out recorder
	w := r.Writer(&out)
	input := "start s3cr3t-value middle s3cr3t-value"
	for i := range len(input) {
		if _, err := w.Write([]byte{input[i]}); err != nil {
			t.Fatal(err)
		}
	}
	// Text well before the end has been passed on before Close.
	if !strings.HasPrefix(out.String(), "start *** middle") {
		t.Errorf("before Close: %q", out.String())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "start *** middle ***"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Error("Write after Close must fail")
	}
}

func TestRedactWriterHoldsBackBounded(t *testing.T) {
	t.Parallel()
	r := NewRedactor([]string{"0123456789"})
	var out recorder
	w := r.Writer(&out)
	if _, err := w.Write([]byte(strings.Repeat("x", 100) + "01234")); err != nil {
		t.Fatal(err)
	}
	if got := out.Len(); got != 105-9 {
		t.Errorf("passed on %d bytes, want all but the last 9 (longest value - 1) = %d", got, 105-9)
	}
	if _, err := w.Write([]byte("56789")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), strings.Repeat("x", 100)+"***"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

func TestRedactWriterErrorSticks(t *testing.T) {
	t.Parallel()
	boom := errors.New("disk full")
	w := NewRedactor([]string{"ab"}).Writer(failWriter{boom})
	if _, err := w.Write([]byte("hello world")); !errors.Is(err, boom) {
		t.Fatalf("Write error = %v, want %v", err, boom)
	}
	if _, err := w.Write([]byte("more")); !errors.Is(err, boom) {
		t.Errorf("second Write error = %v, want the sticky %v", err, boom)
	}
	if err := w.Close(); !errors.Is(err, boom) {
		t.Errorf("Close error = %v, want %v", err, boom)
	}
}

func TestRedactWriterConcurrent(t *testing.T) {
	t.Parallel()
	r := NewRedactor([]string{"SECRETVALUE"})
	var out bytes.Buffer
	w := r.Writer(&out)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				if _, err := w.Write([]byte("line SECRETVALUE\n")); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "SECRET") || strings.Count(out.String(), "line ***\n") != 200 {
		t.Errorf("concurrent writes: %d redacted lines, secret present: %v",
			strings.Count(out.String(), "line ***\n"), strings.Contains(out.String(), "SECRET"))
	}
}
