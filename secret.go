package berth

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// MaxSecretNameLen is the longest secret name.
const MaxSecretNameLen = 64

var secretNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidSecretName returns nil when name is 1 to 64 characters of
// [A-Za-z_][A-Za-z0-9_]*, else an Invalidf("name", ...) error.
func ValidSecretName(name string) error {
	switch {
	case name == "":
		return Invalidf("name", "secret name is required")
	case len(name) > MaxSecretNameLen:
		return Invalidf("name", "secret name is %d characters, the limit is %d", len(name), MaxSecretNameLen)
	case !secretNameRE.MatchString(name):
		return Invalidf("name", "secret name %q must be letters, digits and underscores, not starting with a digit", name)
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
// ECodeInvalid *Error naming the first name missing from values, and
// never any value.
func ExpandSecrets(s string, values map[string]string) (string, error) {
	for _, name := range SecretRefs(s) {
		if _, ok := values[name]; !ok {
			return "", &Error{Code: ECodeInvalid, Message: fmt.Sprintf("secret %s is referenced but not set", name)}
		}
	}
	return secretRefRE.ReplaceAllStringFunc(s, func(ref string) string {
		return values[ref[len("{{SECRET:"):len(ref)-len("}}")]]
	}), nil
}
