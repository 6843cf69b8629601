package agent

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/berth-dev/berth"
)

// ValidModel checks the name of a model an agent starts with: 1-128
// characters, none of them a comma, whitespace or a control character. It
// returns an ECodeInvalid *Error naming field.
func ValidModel(field, name string) error {
	n := utf8.RuneCountInString(name)
	if n < 1 || n > 128 || !utf8.ValidString(name) {
		return berth.Invalidf(field, "%q: a model name must be 1-128 characters", name)
	}
	if strings.ContainsFunc(name, func(r rune) bool { return r == ',' || unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return berth.Invalidf(field, "%q: a model name must have no comma, whitespace or control character", name)
	}
	return nil
}

// warmModels are the models warm on a worker (their weights cached):
// those it started with, those of attempts that succeeded there and those
// it prewarmed.
type warmModels struct {
	cfg    *Config // read only
	log    *slog.Logger
	groups *GroupJournal

	mu      sync.Mutex
	warm    map[string]bool
	warming map[string]bool // the models being prewarmed

	prewarms sync.WaitGroup // running prewarm commands
}

// newWarmModels returns cfg.Models as the warm models, or the error of the
// first that fails ValidModel.
func newWarmModels(cfg *Config) (*warmModels, error) {
	m := &warmModels{cfg: cfg, log: cfg.Log, warm: map[string]bool{}, warming: map[string]bool{}}
	for _, name := range cfg.Models {
		if err := ValidModel("models", name); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		m.warm[name] = true
	}
	return m, nil
}

// list returns the warm models, sorted; nil when there are none.
func (m *warmModels) list() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.warm))
}

// add adds model to the warm models.
func (m *warmModels) add(model string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.warm[model] = true
}

// prewarmLog is the file, in DataDir, where prewarm commands write.
const prewarmLog = "prewarm.log"

// prewarm acts on a hint that jobs for model are coming: unless the model
// is warm or being prewarmed, or the agent has no prewarm command, it runs
// the command as a child process group (with no GPU: it caches weights and
// must not hold GPU memory that jobs are given) for at most PrewarmTimeout,
// and the model is warm once the command exits 0. The command is killed
// when ctx ends.
func (m *warmModels) prewarm(ctx context.Context, model string) {
	if model == "" {
		m.log.Warn("prewarm hint without a model; ignored")
		return
	}
	if m.cfg.Prewarm == "" {
		m.log.Debug("prewarm hint ignored: no prewarm command", "model", model)
		return
	}
	m.mu.Lock()
	switch {
	case m.warm[model]:
		m.mu.Unlock()
		m.log.Debug("prewarm hint ignored: model already warm", "model", model)
		return
	case m.warming[model]:
		m.mu.Unlock()
		m.log.Debug("prewarm hint ignored: model already being prewarmed", "model", model)
		return
	}
	m.warming[model] = true
	m.prewarms.Add(1)
	m.mu.Unlock()
	logPath := filepath.Join(m.cfg.DataDir, prewarmLog)
	id := "prewarm-" + rand.Text() // a journal entry, so that a restarted agent kills it
	command := strings.ReplaceAll(m.cfg.Prewarm, "{model}", berth.ShellQuote(model))
	proc, err := ProcessExecutor{}.Start(ctx, Spec{AttemptID: id, Command: []string{"sh", "-c", command},
		Dir: filepath.Join(m.cfg.DataDir, "prewarm"), LogPath: logPath, Groups: m.groups, MaxRuntime: m.cfg.PrewarmTimeout})
	if err != nil {
		proc = failedProcess("start: " + err.Error())
	}
	m.log.Info("prewarming model", "model", model, "log", logPath)
	go func() {
		defer m.prewarms.Done()
		select {
		case <-proc.Done():
		case <-ctx.Done():
			proc.Kill("", "agent shutting down")
			<-proc.Done()
		}
		ex := proc.Exit()
		ok := ex.State == berth.AttemptSucceeded
		m.mu.Lock()
		delete(m.warming, model)
		if ok {
			m.warm[model] = true
		}
		m.mu.Unlock()
		if ok {
			m.log.Info("model prewarmed", "model", model)
		} else {
			m.log.Warn("prewarm failed", "model", model, "reason", ex.Reason, "log", logPath)
		}
	}()
}
