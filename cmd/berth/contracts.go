package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/berth-dev/berth"
)

// contractCommands are the subcommands of berth contract.
var contractCommands = subcommands{
	name: "contract",
	help: `Usage: berth contract run|show|add|rm [flags] ...

An extraction contract (docs/contracts.md) sends text inputs and images to
a model with a prompt and returns the one JSON object the model replied,
validated against the contract's JSON Schema, or a typed error.

  berth contract run NAME [--input KEY=VALUE]... [--image FILE]... [-o json|yaml]
        call it: prints the output object; a failure prints its type, message and
        the model's raw reply, and exits 1 (-o json prints the whole result)
  berth contract show NAME [-o json|yaml]
  berth contract add FILE [--replace]   store a contract document (YAML or JSON); admins
  berth contract rm NAME                 delete a contract stored with add; admins
  berth contracts [-o json|yaml]         list them

Contracts come from the server's --contracts directory or from add; a
file's contract is changed by changing its file.
`,
	run: map[string]func(ctx context.Context, m *Main, args []string) error{
		"run":  runContractRun,
		"show": runContractShow,
		"add":  runContractAdd,
		"rm":   runContractRm,
	},
}

func runContract(ctx context.Context, m *Main, args []string) error {
	return contractCommands.dispatch(ctx, m, args)
}

func runContracts(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("contracts", "[flags]")
	cf := m.addClientFlags(fs, true)
	if err := parseNoArgs(fs, cf, args, "berth contracts"); err != nil {
		return err
	}
	list, err := m.client(cf).Contracts(ctx)
	if err != nil {
		return err
	}
	return printList(m.Stdout, cf.output, list, func() error {
		t := newTable(m.Stdout, "NAME", "MODEL", "INPUTS", "IMAGES", "TIMEOUT", "FROM", "DESCRIPTION")
		for _, c := range list {
			var inputs []string
			for _, in := range c.Inputs {
				name := in.Name
				if in.Required {
					name += "*"
				}
				inputs = append(inputs, name)
			}
			images := "-"
			if c.Images != nil {
				images = fmt.Sprintf("%d-%d", c.Images.Min, c.Images.Max)
			}
			t.row(c.Name, c.Model, orDash(strings.Join(inputs, ",")), images, time.Duration(c.Timeout).String(), c.DefinedIn,
				truncate(c.Description, 60))
		}
		return t.flush()
	})
}

func runContractRun(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("contract run", "[flags] NAME")
	cf := m.addClientFlags(fs, true)
	fs.Lookup("o").Usage = "output: the output object (table, the default), or the whole result (output, error, raw reply,\nattempts, usage) as json or yaml"
	req := &berth.ContractRequest{}
	fs.Func("input", "KEY=VALUE: a text input of the contract (repeatable)", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fmt.Errorf("want KEY=VALUE, not %q", v)
		}
		if _, dup := req.Inputs[k]; dup {
			return fmt.Errorf("input %s given twice", k)
		}
		if req.Inputs == nil {
			req.Inputs = map[string]string{}
		}
		req.Inputs[k] = val
		return nil
	})
	fs.Func("image", "FILE: a PNG or JPEG image sent to the model (repeatable, in order)", func(path string) error {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		mime := http.DetectContentType(data)
		if mime != "image/png" && mime != "image/jpeg" {
			return fmt.Errorf("%s is %s, not a PNG or JPEG image", filepath.Base(path), mime)
		}
		req.Images = append(req.Images, "data:"+mime+";base64,"+base64.StdEncoding.EncodeToString(data))
		return nil
	})
	name, err := parseOneArg(fs, cf, args, "NAME", "give exactly one contract NAME (berth contracts lists them)")
	if err != nil {
		return err
	}
	res, _, err := m.client(cf).RunContract(ctx, name, req)
	if err != nil {
		return err
	}
	whole := cf.output == "json" || cf.output == "yaml"
	if whole {
		if err := printData(m.Stdout, cf.output, res); err != nil {
			return err
		}
	} else if res.Error == nil {
		if err := printJSON(m.Stdout, res.Output); err != nil {
			return err
		}
	}
	if f := res.Error; f != nil {
		code := exitFailed
		if f.Type == berth.ContractInputRejected {
			code = exitUsage
		}
		msg := fmt.Sprintf("contract %s: %s: %s", name, f.Type, f.Message)
		if f.Param != "" {
			msg = fmt.Sprintf("contract %s: %s: %s: %s", name, f.Type, inputFlag(f.Param), f.Message)
		}
		if res.Raw != "" && !whole {
			msg += "\nraw reply (attempt " + fmt.Sprint(res.Attempts) + "):\n" + res.Raw
		}
		return &exitError{code: code, msg: msg}
	}
	return nil
}

// inputFlag names the flag that gave a request's field: inputs.KEY is
// --input KEY=…, images[i] the i-th --image.
func inputFlag(param string) string {
	if k, ok := strings.CutPrefix(param, "inputs."); ok {
		return "--input " + k
	}
	if strings.HasPrefix(param, "images") {
		return "--image" + strings.TrimPrefix(param, "images")
	}
	return param
}

func runContractShow(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("contract show", "[flags] NAME")
	cf := m.addClientFlags(fs, true)
	name, err := parseOneArg(fs, cf, args, "NAME", "give exactly one contract NAME (berth contracts lists them)")
	if err != nil {
		return err
	}
	c, err := m.client(cf).Contract(ctx, name)
	if err != nil {
		return err
	}
	output := cf.output
	if output == "table" || output == "" {
		output = "yaml"
	}
	return printData(m.Stdout, output, c)
}

func runContractAdd(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("contract add", "[flags] FILE")
	cf := m.addClientFlags(fs, false)
	replace := fs.Bool("replace", false, "replace the stored contract of the file's name (without it, a name already stored is refused)")
	path, err := parseOneArg(fs, cf, args, "FILE", "give exactly one contract FILE (YAML or JSON)")
	if err != nil {
		return err
	}
	doc, err := os.ReadFile(path)
	if err != nil {
		return berth.Invalidf("FILE", "%v", err)
	}
	// The name to replace is the document's; the server checks the rest.
	var named struct {
		Name string `yaml:"name"`
	}
	_ = yaml.Unmarshal(doc, &named)
	c, err := m.client(cf).PutContract(ctx, named.Name, doc, *replace)
	if err != nil {
		return err
	}
	verb := "added"
	if *replace {
		verb = "replaced"
	}
	fmt.Fprintf(m.Stdout, "contract %s %s: POST /v1/contracts/%s calls %s\n", c.Name, verb, c.Name, c.Model)
	return nil
}

func runContractRm(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("contract rm", "[flags] NAME")
	cf := m.addClientFlags(fs, false)
	name, err := parseOneArg(fs, cf, args, "NAME", "give exactly one contract NAME (berth contracts lists them)")
	if err != nil {
		return err
	}
	if err := m.client(cf).DeleteContract(ctx, name); err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "contract %s removed\n", name)
	return nil
}
