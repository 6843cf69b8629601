package service

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/strict"
)

// LoadDir returns the built-in templates plus the user templates in dir: one
// template per *.yaml or *.yml file (subdirectories are not read), named by
// its name field, else by the file name without extension. An empty dir
// gives the built-in templates only.
//
// It returns an error when dir cannot be read, and, wrapped with the file's
// path, an ECodeInvalid *berth.Error naming the field when a file is not
// valid YAML, has an unknown field or a field of the wrong type, fails
// Validate, reuses the name of a built-in template or of another file's
// template.
func LoadDir(dir string) (map[string]*Template, error) {
	tpls := Builtin()
	if dir == "" {
		return tpls, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read templates: %w", err)
	}
	from := map[string]string{} // template name → file
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		t, err := loadFile(path, strings.TrimSuffix(e.Name(), ext))
		if err == nil {
			switch {
			case from[t.Name] != "":
				err = berth.Invalidf("name", "template %q is also defined in %s", t.Name, from[t.Name])
			case tpls[t.Name] != nil:
				err = berth.Invalidf("name", "%q is a built-in template and cannot be redefined", t.Name)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("template file %s: %w", path, err)
		}
		tpls[t.Name], from[t.Name] = t, path
	}
	return tpls, nil
}

func loadFile(path, name string) (*Template, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t := &Template{}
	if err := strict.DecodeYAML(data, t); err != nil {
		return nil, err
	}
	if t.Name == "" {
		t.Name = name
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}
