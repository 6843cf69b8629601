package arbiter

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadCatalogFile reads catalog files as an operator writes them: an
// empty one (or one of comments) is an empty catalog, to be filled through
// the API; a malformed one is refused, naming the file and the field.
func TestLoadCatalogFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, text := range []string{"", "# models come through the API\n"} {
		c, err := LoadCatalog(write("empty.yaml", text))
		if err != nil || len(c.models) != 0 || len(c.pools) != 0 {
			t.Errorf("LoadCatalog of %q = %+v, %v; want an empty catalog", text, c, err)
		}
	}
	good := write("good.yaml", "pools:\n  a100: {labels: {gpu: a100}}\nmodels:\n  llama: {pool: a100, command: [serve]}\n")
	if c, err := LoadCatalog(good); err != nil || c.models["llama"].Pool != "a100" {
		t.Errorf("LoadCatalog of a good file = %+v, %v", c, err)
	}
	for text, part := range map[string]string{
		"models: {llama: {pool: a100, comand: [x]}}\n": `models.llama.comand: unknown field "models.llama.comand"`,
		"models: [1]\n":          "models: must be",
		"pools: {a: [unclosed\n": "not valid YAML",
	} {
		path := write("bad.yaml", text)
		if _, err := LoadCatalog(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), part) {
			t.Errorf("LoadCatalog of %q: %v; want an error naming %s and saying %q", text, err, path, part)
		}
	}
}
