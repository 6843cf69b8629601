package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/audit"
	"github.com/berth-dev/berth/auth"
)

// auditCommands are the subcommands of berth audit.
var auditCommands = subcommands{
	name: "audit",
	help: `Usage: berth audit verify|tail|export [flags]

The audit log is a hash chain: each record carries the SHA-256 of the line
before it, and a checkpoint file records the head of the chain every so
often. These commands read the files directly and work with the server
down, or on a copy.

  berth audit verify [--data-dir D | --file F] [--checkpoints C] [--store URL] [--key K]
  berth audit tail [-n N] [-o json] [--data-dir D | --file F]
  berth audit export [--since SEQ] [--data-dir D | --file F]

The log of a data dir is DATA-DIR/audit.log (default data dir .berth) and
its checkpoints DATA-DIR/audit.log.head. Run berth audit SUBCOMMAND -h for
its flags.
`,
	run: map[string]func(ctx context.Context, m *Main, args []string) error{
		"verify": runAuditVerify,
		"tail":   runAuditTail,
		"export": runAuditExport,
	},
}

func runAudit(ctx context.Context, m *Main, args []string) error {
	return auditCommands.dispatch(ctx, m, args)
}

// auditFlags name the log file: --data-dir or --file.
type auditFlags struct {
	name    string // the subcommand
	fs      *flag.FlagSet
	dataDir string
	file    string
}

func addAuditFlags(name string, fs *flag.FlagSet) *auditFlags {
	af := &auditFlags{name: name, fs: fs}
	fs.StringVar(&af.dataDir, "data-dir", ".berth", "the server's data directory; its log is DATA-DIR/audit.log")
	fs.StringVar(&af.file, "file", "", "the audit log file (e.g. a copy), instead of --data-dir")
	return af
}

// logPath checks the flags and returns the log file and the default
// checkpoint file: DATA-DIR/audit.log.head, or F.head if it exists ("" if
// not).
func (af *auditFlags) logPath() (logPath, cpPath string, err error) {
	set := givenFlags(af.fs)
	if af.fs.NArg() > 0 {
		return "", "", berth.Invalidf("args", "audit %s takes no arguments, got %q", af.name, af.fs.Arg(0))
	}
	if set["file"] && set["data-dir"] {
		return "", "", berth.Invalidf("--file", "give --file or --data-dir, not both")
	}
	if set["file"] {
		if af.file == "" {
			return "", "", berth.Invalidf("--file", "must not be empty")
		}
		cp := af.file + ".head"
		if _, err := os.Stat(cp); err != nil {
			cp = ""
		}
		return af.file, cp, nil
	}
	if af.dataDir == "" {
		return "", "", berth.Invalidf("--data-dir", "must not be empty")
	}
	p := filepath.Join(af.dataDir, "audit.log")
	return p, p + ".head", nil
}

func runAuditVerify(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("audit verify", "[--data-dir D | --file F] [--checkpoints C] [--store URL] [--key K]")
	af := addAuditFlags("verify", fs)
	checkpoints := fs.String("checkpoints", "", "the checkpoint file (default: the log's path plus .head)")
	storeSpec := fs.String("store", "", "the server's store, whose audit head the log must reach: postgres://…, a SQLite file path or sqlite://PATH (default DATA-DIR/berth.db if it exists)")
	keyFile := fs.String("key", "", "the server's key file, which signs checkpoints (default DATA-DIR/berth.key if it exists)")
	if err := parse(fs, args); err != nil {
		return err
	}
	logPath, cpPath, err := af.logPath()
	if err != nil {
		return err
	}
	if *checkpoints != "" {
		cpPath = *checkpoints
	}
	key, err := auditKey(af, *keyFile)
	if err != nil {
		return err
	}
	head, storeName, err := storeAuditHead(ctx, af, *storeSpec)
	if err != nil {
		return err
	}
	rep, err := audit.VerifyAgainst(logPath, cpPath, head, key)
	var ce *audit.ChainError
	if errors.As(err, &ce) {
		return &exitError{code: exitFailed, msg: fmt.Sprintf("audit log %s FAILED verification: %v", logPath, ce)}
	}
	if err != nil {
		return err
	}
	if rep.Checkpoints == 0 {
		where := "no checkpoint file"
		if cpPath != "" {
			where = "no checkpoints in " + cpPath
		}
		fmt.Fprintf(m.Stderr, "berth: warning: %s: tail truncation can't be detected, nor an edit to the last records\n", where)
	}
	fmt.Fprintf(m.Stdout, "audit log OK: %d records, head %s, %d checkpoints\n", rep.Records, rep.Head, rep.Checkpoints)
	switch {
	case key == nil:
		fmt.Fprintf(m.Stderr, "berth: warning: no key (--key, or DATA-DIR/berth.key): checkpoint signatures not checked\n")
	case rep.Unsigned > 0:
		fmt.Fprintf(m.Stdout, "checkpoints signed: %d verified, %d unsigned (written before checkpoints were signed)\n", rep.Signed, rep.Unsigned)
	default:
		fmt.Fprintf(m.Stdout, "checkpoints signed: %d verified\n", rep.Signed)
	}
	switch {
	case storeName == "":
		fmt.Fprintf(m.Stderr, "berth: warning: no store (--store, or DATA-DIR/berth.db): the log's end is anchored by checkpoints only\n")
	case head.Seq == 0:
		fmt.Fprintf(m.Stdout, "store %s: no audit head recorded yet: the log's end is anchored by checkpoints only\n", storeName)
	default:
		fmt.Fprintf(m.Stdout, "store %s: audit head seq %d matches: the chain is whole to seq %d; the %d records after it (appended outside the store's transactions) are anchored by checkpoints only\n",
			storeName, head.Seq, head.Seq, rep.Records-head.Seq)
	}
	for _, r := range rep.Repairs {
		fmt.Fprintf(m.Stdout, "repaired: record %d (%s): the %s file was cut back by %s bytes to its last whole line: %s\n",
			r.Seq, r.Time.Format(time.RFC3339), r.File, r.Bytes, r.Reason)
	}
	return nil
}

// auditKey returns the key that signs checkpoints, from file or, with
// --data-dir and no file, from DATA-DIR/berth.key if it exists; nil when
// there is none to read.
func auditKey(af *auditFlags, file string) ([]byte, error) {
	if file == "" {
		if givenFlags(af.fs)["file"] {
			return nil, nil
		}
		file = filepath.Join(af.dataDir, "berth.key")
		if _, err := os.Stat(file); err != nil {
			return nil, nil
		}
	}
	keys, err := auth.LoadKey(file)
	if err != nil {
		return nil, &berth.Error{Code: berth.ECodeInvalid, Field: "--key", Message: "cannot read the key", Err: err}
	}
	return keys.AuditKey(), nil
}

// storeAuditHead returns the audit head of the store spec names (or, with
// --data-dir and no spec, of DATA-DIR/berth.db if it exists) and the
// store's name; the zero head and "" when there is none to read.
func storeAuditHead(ctx context.Context, af *auditFlags, spec string) (audit.Anchor, string, error) {
	if spec == "" {
		if givenFlags(af.fs)["file"] {
			return audit.Anchor{}, "", nil
		}
		spec = filepath.Join(af.dataDir, "berth.db")
		if _, err := os.Stat(spec); err != nil {
			return audit.Anchor{}, "", nil
		}
	}
	st, err := openStore(ctx, &serverConfig{DataDir: af.dataDir, Store: spec})
	if err != nil {
		return audit.Anchor{}, "", &berth.Error{Code: berth.ECodeInvalid, Field: "--store", Message: "cannot open the store", Err: err}
	}
	defer st.Close()
	h, err := st.AuditHead(ctx)
	if err != nil {
		return audit.Anchor{}, "", fmt.Errorf("store audit head: %w", err)
	}
	return audit.Anchor{Seq: h.Seq, Hash: h.Hash}, storeKind(spec), nil
}

func runAuditTail(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("audit tail", "[-n N] [-o json] [--data-dir D | --file F]")
	af := addAuditFlags("tail", fs)
	n := fs.Int("n", 20, "how many records to print, from the end")
	output := fs.String("o", "table", "output: table, or json for the raw lines as a JSON array")
	if err := parse(fs, args); err != nil {
		return err
	}
	logPath, _, err := af.logPath()
	if err != nil {
		return err
	}
	if *n < 1 {
		return berth.Invalidf("-n", "must be at least 1, got %d", *n)
	}
	if *output != "table" && *output != "json" {
		return berth.Invalidf("-o", "must be table or json")
	}
	lines, err := audit.Tail(logPath, *n)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(m.Stdout)
	if *output == "json" {
		// The lines go out byte for byte so their hashes can be checked.
		w.WriteString("[")
		for i, l := range lines {
			if i > 0 {
				w.WriteString(",")
			}
			w.WriteString("\n  ")
			w.Write(l)
		}
		if len(lines) > 0 {
			w.WriteString("\n")
		}
		w.WriteString("]\n")
		return w.Flush()
	}
	t := newTable(w, "SEQ", "TIME", "ACTION", "ACTOR", "TARGET", "FIELDS")
	for i, l := range lines {
		var r audit.Record
		if err := json.Unmarshal(l, &r); err != nil {
			return fmt.Errorf("audit log %s: line %d from the end: %w", logPath, len(lines)-i, err)
		}
		t.row(fmt.Sprint(r.Seq), r.Time.UTC().Format(time.RFC3339), r.Action, orDash(r.Actor), orDash(r.Target), orDash(formatFields(r.Fields)))
	}
	if err := t.flush(); err != nil {
		return err
	}
	return w.Flush()
}

// formatFields writes fields as sorted k=v pairs.
func formatFields(fields map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", k, truncate(fields[k], 40))
	}
	return strings.NewReplacer("\n", `\n`, "\t", `\t`).Replace(b.String())
}

func runAuditExport(ctx context.Context, m *Main, args []string) error {
	fs := m.flagSet("audit export", "[--since SEQ] [--data-dir D | --file F]")
	af := addAuditFlags("export", fs)
	since := fs.Uint64("since", 0, "print only the records after this seq (the last seq you shipped)")
	if err := parse(fs, args); err != nil {
		return err
	}
	logPath, _, err := af.logPath()
	if err != nil {
		return err
	}
	w := bufio.NewWriter(m.Stdout)
	err = audit.Read(logPath, *since, func(_ audit.Record, line []byte) error {
		w.Write(line)
		return w.WriteByte('\n')
	})
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	return err
}
