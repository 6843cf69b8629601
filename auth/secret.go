package auth

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/berth-dev/berth"
)

const nonceSize = 12

// Seal encrypts plaintext with AES-256-GCM under the secret-encryption key,
// binding it to owner and name (the additional data is owner, a NUL byte and
// name), and returns the random 12-byte nonce followed by the ciphertext.
// It returns an error when owner or name contains a NUL byte or the system's
// random source fails.
func (k *Keys) Seal(owner, name string, plaintext []byte) ([]byte, error) {
	aead, ad, err := k.aead(owner, name)
	if err != nil {
		return nil, fmt.Errorf("seal secret: %w", err)
	}
	out := make([]byte, nonceSize, nonceSize+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return nil, fmt.Errorf("seal secret: %w", err)
	}
	return aead.Seal(out, out[:nonceSize], plaintext, ad), nil
}

// Open decrypts what Seal returned for the same owner and name. It returns an
// error, which never contains the plaintext, when sealed is too short, was
// sealed for another owner or name or under another key, or was altered.
func (k *Keys) Open(owner, name string, sealed []byte) ([]byte, error) {
	aead, ad, err := k.aead(owner, name)
	if err != nil {
		return nil, fmt.Errorf("open secret: %w", err)
	}
	if len(sealed) < nonceSize+aead.Overhead() {
		return nil, fmt.Errorf("open secret %s of %s: ciphertext too short", name, owner)
	}
	pt, err := aead.Open(nil, sealed[:nonceSize], sealed[nonceSize:], ad)
	if err != nil {
		return nil, fmt.Errorf("open secret %s of %s (wrong key, owner or name, or corrupted): %w", name, owner, err)
	}
	return pt, nil
}

func (k *Keys) aead(owner, name string) (cipher.AEAD, []byte, error) {
	if strings.IndexByte(owner, 0) >= 0 || strings.IndexByte(name, 0) >= 0 {
		return nil, nil, errors.New("owner and name must not contain NUL bytes")
	}
	block, err := aes.NewCipher(k.enc)
	if err != nil {
		return nil, nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, nil, err
	}
	return aead, []byte(owner + "\x00" + name), nil
}

// MaxSecretNameLen is the longest secret name.
const MaxSecretNameLen = 64

var secretNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidSecretName returns nil when name is 1 to 64 characters of
// [A-Za-z_][A-Za-z0-9_]*, else a berth.Invalidf("name", ...) error.
func ValidSecretName(name string) error {
	switch {
	case name == "":
		return berth.Invalidf("name", "secret name is required")
	case len(name) > MaxSecretNameLen:
		return berth.Invalidf("name", "secret name is %d characters, the limit is %d", len(name), MaxSecretNameLen)
	case !secretNameRE.MatchString(name):
		return berth.Invalidf("name", "secret name %q must be letters, digits and underscores, not starting with a digit", name)
	}
	return nil
}

var secretRefRE = regexp.MustCompile(`\{\{SECRET:([A-Za-z_][A-Za-z0-9_]*)\}\}`)

// HasSecretRefs reports, cheaply, whether s may reference a secret: a
// false answer means SecretRefs(s) is empty.
func HasSecretRefs(s string) bool { return strings.Contains(s, "{{SECRET:") }

// SecretRefs returns the names referenced as {{SECRET:NAME}} in s, in order of
// first appearance, without duplicates; nil when there are none. It never
// fails: text that is not a well-formed reference is not one.
func SecretRefs(s string) []string {
	var names []string
	for _, m := range secretRefRE.FindAllStringSubmatch(s, -1) {
		if !slices.Contains(names, m[1]) {
			names = append(names, m[1])
		}
	}
	return names
}

// ExpandSecrets replaces every {{SECRET:NAME}} in s with values[NAME], in one
// pass (a value holding a reference is not expanded again). It returns an
// ECodeInvalid *berth.Error naming the first name missing from values, and
// never any value.
func ExpandSecrets(s string, values map[string]string) (string, error) {
	for _, name := range SecretRefs(s) {
		if _, ok := values[name]; !ok {
			return "", &berth.Error{Code: berth.ECodeInvalid, Message: fmt.Sprintf("secret %s is referenced but not set", name)}
		}
	}
	return secretRefRE.ReplaceAllStringFunc(s, func(ref string) string {
		return values[ref[len("{{SECRET:"):len(ref)-len("}}")]]
	}), nil
}

// Redaction is what replaces a secret value in redacted text.
const Redaction = "***"

// Redactor replaces secret values in text with "***". Every byte covered by
// an occurrence of any value is hidden, overlapping occurrences included;
// each maximal run of hidden bytes becomes one "***". A *Redactor is
// immutable and safe for concurrent use; a nil *Redactor redacts nothing.
type Redactor struct {
	values []string // non-empty, distinct, longest first
	maxLen int
}

// NewRedactor returns a Redactor for values; empty values are ignored. It
// never fails.
func NewRedactor(values []string) *Redactor {
	r := &Redactor{}
	for _, v := range values {
		if v != "" && !slices.Contains(r.values, v) {
			r.values = append(r.values, v)
			r.maxLen = max(r.maxLen, len(v))
		}
	}
	sort.SliceStable(r.values, func(i, j int) bool { return len(r.values[i]) > len(r.values[j]) })
	return r
}

type span struct{ start, end int }

// runs returns the maximal runs of bytes of s covered by some value, sorted.
// Occurrences that merely touch stay separate runs.
func (r *Redactor) runs(s string) []span {
	var spans []span
	for _, v := range r.values {
		for i := 0; i+len(v) <= len(s); {
			j := strings.Index(s[i:], v)
			if j < 0 {
				break
			}
			spans = append(spans, span{i + j, i + j + len(v)})
			i += j + 1
		}
	}
	if len(spans) == 0 {
		return nil
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	out := spans[:1]
	for _, sp := range spans[1:] {
		last := &out[len(out)-1]
		if sp.start < last.end {
			last.end = max(last.end, sp.end)
			continue
		}
		out = append(out, sp)
	}
	return out
}

func redactRuns(b *strings.Builder, s string, runs []span) {
	prev := 0
	for _, sp := range runs {
		b.WriteString(s[prev:sp.start])
		b.WriteString(Redaction)
		prev = sp.end
	}
	b.WriteString(s[prev:])
}

// Redact returns s with every occurrence of every value replaced. It never
// fails.
func (r *Redactor) Redact(s string) string {
	if r == nil || len(r.values) == 0 {
		return s
	}
	runs := r.runs(s)
	if runs == nil {
		return s
	}
	var b strings.Builder
	redactRuns(&b, s, runs)
	return b.String()
}

// Mask overwrites with '*', in place, every byte of output that a value
// covers, keeping its length (so that offsets into the file it was read
// from stay right). It returns how many leading bytes are settled: all of
// them when final (no more output follows), else none from where a value
// may begin that continues past output. A nil Redactor masks nothing. It
// never fails.
func (r *Redactor) Mask(output []byte, final bool) int {
	if r == nil || len(r.values) == 0 {
		return len(output)
	}
	cut := len(output)
	if !final {
		cut = max(0, len(output)-(r.maxLen-1))
	}
	for _, sp := range r.runs(string(output)) {
		for k := sp.start; k < sp.end; k++ {
			output[k] = '*'
		}
		if sp.start < cut && cut < sp.end {
			cut = sp.end // masked whole: settled
		}
	}
	return cut
}
