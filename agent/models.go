package agent

import (
	"context"
	"crypto/rand"
	"maps"
	"path/filepath"
	"slices"
	"strings"
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

// Models returns the models warm on this worker, sorted: those it started
// with, those of attempts that succeeded here and those it prewarmed.
func (a *Agent) Models() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.modelsLocked()
}

// modelsLocked returns the warm models, sorted; nil when there are none.
func (a *Agent) modelsLocked() []string { return slices.Sorted(maps.Keys(a.models)) }

// warm adds model to the warm models.
func (a *Agent) warm(model string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.models[model] = true
}

// prewarmLog is the file, in DataDir, where prewarm commands write.
const prewarmLog = "prewarm.log"

// prewarm acts on a hint that jobs for model are coming: unless the model
// is warm or being prewarmed, or the agent has no prewarm command, it runs
// the command as a child process group (with no GPU: it caches weights and
// must not hold GPU memory that jobs are given) for at most PrewarmTimeout,
// and the model is warm once the command exits 0. The command is killed
// when ctx ends.
func (a *Agent) prewarm(ctx context.Context, model string) {
	if model == "" {
		a.log.Warn("prewarm hint without a model; ignored")
		return
	}
	if a.cfg.Prewarm == "" {
		a.log.Debug("prewarm hint ignored: no prewarm command", "model", model)
		return
	}
	a.mu.Lock()
	switch {
	case a.models[model]:
		a.mu.Unlock()
		a.log.Debug("prewarm hint ignored: model already warm", "model", model)
		return
	case a.warming[model]:
		a.mu.Unlock()
		a.log.Debug("prewarm hint ignored: model already being prewarmed", "model", model)
		return
	}
	a.warming[model] = true
	a.prewarms.Add(1)
	a.mu.Unlock()
	logPath := filepath.Join(a.cfg.DataDir, prewarmLog)
	id := "prewarm-" + rand.Text() // a journal entry, so that a restarted agent kills it
	command := strings.ReplaceAll(a.cfg.Prewarm, "{model}", berth.ShellQuote(model))
	proc, err := ProcessExecutor{}.Start(ctx, Spec{AttemptID: id, Command: []string{"sh", "-c", command},
		Dir: filepath.Join(a.cfg.DataDir, "prewarm"), LogPath: logPath, Groups: a.groups, MaxRuntime: a.cfg.PrewarmTimeout})
	if err != nil {
		proc = failedProcess("start: " + err.Error())
	}
	a.log.Info("prewarming model", "model", model, "log", logPath)
	go func() {
		defer a.prewarms.Done()
		select {
		case <-proc.Done():
		case <-ctx.Done():
			proc.Kill("", "agent shutting down")
			<-proc.Done()
		}
		ex := proc.Exit()
		ok := ex.State == berth.AttemptSucceeded
		a.mu.Lock()
		delete(a.warming, model)
		if ok {
			a.models[model] = true
		}
		a.mu.Unlock()
		if ok {
			a.log.Info("model prewarmed", "model", model)
		} else {
			a.log.Warn("prewarm failed", "model", model, "reason", ex.Reason, "log", logPath)
		}
	}()
}
